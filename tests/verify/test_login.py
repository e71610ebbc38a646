"""Login nodes (roles/slurm_login): no slurmd and no place in slurm.conf, the client
configuration kept current from the controller (sackd's configless copy on Slurm 23.11 and
later, the controller's files copied on older releases), and a job submitted from there
runs on a compute node."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROLE_DEFAULTS = Path(__file__).resolve().parents[2] / "roles/slurm_login/defaults/main.yml"
SRUN_TIMEOUT = 120


@pytest.fixture(autouse=True)
def _only_on_login_nodes(request: pytest.FixtureRequest, cluster) -> None:
    if not cluster.hosts_in("login"):
        pytest.skip("this inventory has no login nodes (the controller is the submit host)")
    if "host" in request.fixturenames:
        name = str(request.getfixturevalue("host").backend.host)
        if "login" not in cluster.groups_of(name):
            pytest.skip(f"{name} is not a login node")


def _defaults() -> dict:
    return yaml.safe_load(ROLE_DEFAULTS.read_text())


def _has_sackd(host) -> bool:
    version = host.check_output("dpkg-query --showformat='${Version}' --show slurm-client")
    release = tuple(int(p) for p in version.split(".")[:2])
    since = tuple(int(p) for p in str(_defaults()["slurm_login_sackd_since"]).split("."))
    return release >= since


def test_a_login_node_runs_no_slurmd_and_is_no_slurm_node(host, host_name, controller):
    assert not host.service("slurmd").is_running
    assert not host.package("slurmd").is_installed
    nodes = controller.check_output("sinfo --noheader --Node --format=%N").split()
    assert host_name not in nodes


def test_the_client_configuration_is_the_controllers(host, controller):
    """sackd's copy (and no /etc/slurm/slurm.conf to shadow it), or the copied files."""
    wanted = controller.file("/etc/slurm/slurm.conf").content_string
    if _has_sackd(host):
        assert host.service("sackd").is_running and host.service("sackd").is_enabled
        assert host.file("/run/slurm/conf/slurm.conf").content_string == wanted
        assert not host.file("/etc/slurm/slurm.conf").exists
    else:
        for name in _defaults()["slurm_login_synced_files"]:
            theirs = controller.file(f"/etc/slurm/{name}")
            mine = host.file(f"/etc/slurm/{name}")
            assert mine.exists == theirs.exists, name
            if theirs.exists:
                assert mine.content_string == theirs.content_string, name


def test_a_job_submitted_here_runs_on_a_compute_node(host, cluster):
    node = cluster.job_nodes[0]
    out = host.check_output(f"timeout {SRUN_TIMEOUT} srun --nodes=1 --nodelist={node} "
                            "--ntasks=1 hostname")
    assert out.split() == [node]


def test_users_can_build_mpi_programs_and_environments_here(host):
    for tool in ("mpicc", "gcc", "make", "git"):
        assert host.exists(tool), tool
    assert host.run("python3 -m venv --help").rc == 0
