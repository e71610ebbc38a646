"""Which daemons the verify suite expects where: read from ansible/site.yml, checked against
fixture inventories with the shapes the local cluster cannot run here (an NFS server node;
an external accounting database)."""

import re
from pathlib import Path

from infra.ops.playbook import ROLE_SERVICES, expected_services, play_roles

REPO = Path(__file__).resolve().parents[2]
INVENTORIES = REPO / "tests" / "fixtures" / "inventory"


def test_a_cluster_with_an_nfs_server_node():
    """The NFS server gets munge and node_exporter too (site.yml's first play covers
    nfs_server), and runs nfsd; the compute nodes, elastic ones included, run munge, slurmd
    and node_exporter; the controller the Slurm exporter, and Prometheus and Alertmanager
    (the monitoring host by default) and slurmrestd (the REST API is on by default)."""
    assert expected_services(INVENTORIES / "nfs-server.yml") == {
        "ctl": ["mariadb", "metalslurm-slurm-exporter", "munge", "prometheus",
                "prometheus-alertmanager", "prometheus-node-exporter", "slurmctld", "slurmdbd",
                "slurmrestd"],
        "nfs": ["munge", "nfs-server", "prometheus-node-exporter"],
        "gpu-001": ["munge", "prometheus-node-exporter", "slurmd"],
        "gpu-002": ["munge", "prometheus-node-exporter", "slurmd"],
        "gpu-003": ["munge", "prometheus-node-exporter", "slurmd"],
    }


def test_monitoring_goes_where_the_inventory_says_or_nowhere(tmp_path):
    """metalslurm_monitoring.host moves Prometheus and Alertmanager; enabled: false removes
    every monitoring daemon."""
    import yaml

    inventory = yaml.safe_load((INVENTORIES / "nfs-server.yml").read_text())
    inventory["all"]["vars"]["metalslurm_monitoring"] = {"host": "nfs"}
    (tmp_path / "moved.yml").write_text(yaml.safe_dump(inventory))
    moved = expected_services(tmp_path / "moved.yml")
    assert (moved["ctl"], moved["nfs"]) == (
        ["mariadb", "metalslurm-slurm-exporter", "munge", "prometheus-node-exporter",
         "slurmctld", "slurmdbd", "slurmrestd"],
        ["munge", "nfs-server", "prometheus", "prometheus-alertmanager",
         "prometheus-node-exporter"])
    inventory["all"]["vars"]["metalslurm_monitoring"] = {"enabled": False}
    (tmp_path / "off.yml").write_text(yaml.safe_dump(inventory))
    assert expected_services(tmp_path / "off.yml")["gpu-001"] == ["munge", "slurmd"]


def test_the_rest_api_runs_on_the_controller_unless_turned_off(tmp_path):
    import yaml

    inventory = yaml.safe_load((INVENTORIES / "nfs-server.yml").read_text())
    inventory["all"]["vars"]["metalslurm_rest"] = {"enabled": False}
    (tmp_path / "off.yml").write_text(yaml.safe_dump(inventory))
    services = expected_services(tmp_path / "off.yml")
    assert "slurmrestd" not in services["ctl"]
    assert not any("slurmrestd" in units for units in services.values())


def _with_login_nodes(tmp_path, os_name: str, logins: list[str]) -> dict:
    import yaml

    inventory = yaml.safe_load((INVENTORIES / "nfs-server.yml").read_text())
    inventory["all"]["vars"]["metalslurm_os"] = os_name
    for i, name in enumerate(logins):
        inventory["all"]["hosts"][name] = {"ansible_host": f"10.20.0.{30 + i}",
                                           "metalslurm_address": f"10.20.0.{30 + i}"}
    inventory["all"]["children"]["login"] = {"hosts": dict.fromkeys(logins)}
    path = tmp_path / f"{os_name}.yml"
    path.write_text(yaml.safe_dump(inventory))
    return expected_services(path)


def test_login_nodes_run_sackd_where_the_release_has_it_and_the_first_serves_rest(tmp_path):
    """No slurmd on a login node; sackd on 23.11 and later; slurmrestd moves from the
    controller to the first login node."""
    services = _with_login_nodes(tmp_path, "debian13", ["login-001", "login-002"])
    assert services["login-001"] == ["munge", "prometheus-node-exporter", "sackd",
                                     "slurmrestd"]
    assert services["login-002"] == ["munge", "prometheus-node-exporter", "sackd"]
    assert "slurmrestd" not in services["ctl"]
    older = _with_login_nodes(tmp_path, "debian12", ["login-001"])
    assert older["login-001"] == ["munge", "prometheus-node-exporter", "slurmrestd"]


def test_sackd_is_left_out_where_the_oss_slurm_is_older_than_23_11():
    """The OS table's releases against the role's slurm_login_sackd_since: Debian 12's 22.05
    and Ubuntu 22.04's 21.08 have no sackd."""
    condition = dict(ROLE_SERVICES["slurm_login"])["sackd"]
    assert condition.endswith("not in ['debian12', 'ubuntu22.04']")


def test_an_external_accounting_database_runs_no_mariadb_here():
    node = ["munge", "prometheus-node-exporter", "slurmd"]
    assert expected_services(INVENTORIES / "external-db.yml") == {
        "ctl": ["metalslurm-slurm-exporter", "munge", "prometheus", "prometheus-alertmanager",
                "prometheus-node-exporter", "slurmctld", "slurmdbd", "slurmrestd"],
        "gpu-001": node, "gpu-002": node, "gpu-003": node,
    }


def test_every_role_of_the_playbook_is_read():
    roles = {pr.role for pr in play_roles()}
    assert {"cluster_validate", "common", "munge", "nfs_server", "nfs_client", "slurmdbd",
            "slurm_common",
            "slurm_elastic", "enroot_pyxis", "slurm_topology", "slurm_controller",
            "slurm_accounting", "nvidia_gpu", "nccl_ib", "slurm_health", "slurm_compute",
            "mpi", "monitoring_node", "slurm_exporter", "monitoring", "slurm_rest",
            "slurm_login", "slurm_pam_adopt", "nccl_tests", "infra_access",
            "host_firewall", "slurm_backup_controller"} == roles


# Daemons roles keep running that the verify suite does not place through ROLE_SERVICES,
# and why: chrony runs only on hosts that keep their own time (not in containers); the
# reconciler is a timer, checked by the elastic e2e tests; the join's path unit runs only
# on a controller with launch-terminate nodes, whose joins tests/e2e/test_launched_nodes.py
# runs.
# The DCGM guard runs with the NVIDIA driver's services (real GPUs only; test_gpu_driver.py
# and tests/verify/test_gpu.py check it where the driver runs).
# slurm_common's upgrade.yml (configure --upgrade-slurm) starts slurmdbd and slurmctld again
# in SchedMD's order after it stopped them; their own roles keep them running and are placed.
# The backup controller's restart requests are a path unit, which tests/e2e/test_failover.py
# sees at work (a second takeover).
NOT_PLACED = {("common", "chrony"), ("slurm_elastic", "metalslurm-power-reconcile.timer"),
              ("slurm_elastic", "metalslurm-join.path"), ("nvidia_gpu", "metalslurm-dcgm-guard"),
              ("slurm_backup_controller", "metalslurm-slurmctld-standby.path"),
              ("slurm_common", "slurmdbd"), ("slurm_common", "slurmctld")}


def services_roles_keep_running() -> set[tuple[str, str]]:
    """(role, unit) for every task of a role that keeps a named unit started."""
    found = set()
    for tasks in (REPO / "roles").glob("*/tasks/*.yml"):
        for name, state in re.findall(r"^\s+name: ([\w.-]+)\n\s+state: (.*)$",
                                      tasks.read_text(), re.M):
            if "started" in state:
                found.add((tasks.parent.parent.name, name))
    return found


def test_every_daemon_a_role_keeps_running_is_placed_and_the_other_way_round():
    placed = {(role, service) for role, services in ROLE_SERVICES.items()
              for service, _condition in services}
    assert services_roles_keep_running() == placed | NOT_PLACED
