"""Which daemons the verify suite expects where: read from ansible/site.yml, checked against
fixture inventories with the shapes the local cluster cannot run here (an NFS server node;
an external accounting database)."""

import re
from pathlib import Path

import pytest

from infra.playbook import ROLE_SERVICES, expected_services, play_roles

REPO = Path(__file__).resolve().parents[2]
INVENTORIES = REPO / "tests" / "fixtures" / "inventory"


def test_a_cluster_with_an_nfs_server_node():
    """The NFS server gets munge too (site.yml's first play covers nfs_server), and runs
    nfsd; the compute nodes, elastic ones included, run munge and slurmd."""
    assert expected_services(INVENTORIES / "nfs-server.yml") == {
        "ctl": ["mariadb", "munge", "slurmctld", "slurmdbd"],
        "nfs": ["munge", "nfs-server"],
        "gpu-001": ["munge", "slurmd"],
        "gpu-002": ["munge", "slurmd"],
        "gpu-003": ["munge", "slurmd"],
    }


def test_an_external_accounting_database_runs_no_mariadb_here():
    assert expected_services(INVENTORIES / "external-db.yml") == {
        "ctl": ["munge", "slurmctld", "slurmdbd"],
        "gpu-001": ["munge", "slurmd"],
        "gpu-002": ["munge", "slurmd"],
        "gpu-003": ["munge", "slurmd"],
    }


def test_every_role_of_the_playbook_is_read():
    roles = {pr.role for pr in play_roles()}
    assert {"cluster_validate", "common", "munge", "nfs_server", "nfs_client", "slurmdbd",
            "slurm_elastic", "slurm_controller", "slurm_accounting", "slurm_compute"} == roles


@pytest.mark.parametrize(("role", "service"), [(r, s) for r, services in ROLE_SERVICES.items()
                                                for s, _c in services])
def test_each_service_in_the_map_is_one_its_role_keeps_running(role, service):
    tasks = "\n".join(p.read_text() for p in (REPO / "roles" / role / "tasks").glob("*.yml"))
    started = re.findall(r"name: ([\w.-]+)\n\s+state: (?:started|\"\{\{)", tasks)
    assert service in started, f"roles/{role}/tasks start {started}, not {service}"
