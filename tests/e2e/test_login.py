"""The login node of the Debian 13 cluster (roles/slurm_login): Slurm 24.11's sackd keeps the
client configuration there (configless, pushed by slurmctld on every change), there is no
slurmd and the node is no Slurm node, and a user's job submitted there runs as them.

The other modules submit from the login node too (LocalStack.submit and .login): the
container steps (srun --container-image), the example job scripts with the MPI one, the
REST API, which runs there.
"""

from __future__ import annotations

import time

import pytest

from tests.e2e.cluster import wait_for

LOGIN = "login-001"
CONF = "/run/slurm/conf/slurm.conf"


@pytest.fixture(scope="module")
def cluster(debian13):
    debian13.ready_for_configures()
    assert debian13.submit_host == LOGIN
    return debian13


def test_the_login_node_runs_sackd_and_no_slurmd_and_is_no_slurm_node(cluster):
    assert cluster.login("ps -o user:16=,args= -C sackd").stdout.split() == [
        "slurm", "/usr/sbin/sackd", "--systemd", "--conf-server", "ctl:6817"]
    assert cluster.login("systemctl is-active slurmd", check=False).stdout.strip() in (
        "inactive", "unknown")
    assert cluster.login("test -e /etc/slurm/slurm.conf", check=False).returncode == 1
    assert cluster.login(f"cat {CONF}").stdout == cluster.ctl("cat /etc/slurm/slurm.conf").stdout
    nodes = cluster.login("sinfo --noheader --Node --format=%N").stdout.split()
    assert LOGIN not in nodes and {"gpu-001", "gpu-002"} <= set(nodes)


def test_alices_job_submitted_on_the_login_node_runs_as_her_on_a_compute_node(cluster):
    cluster.ctl("rm -f /home/alice/login-job.txt")
    job = cluster.submit("alice", "-w gpu-001 --wrap "
                         "'{ id -un; id -u; hostname; } > /home/alice/login-job.txt'")
    assert cluster.wait_until_done(job) == "COMPLETED"
    assert cluster.ctl("cat /home/alice/login-job.txt").stdout.split() == [
        "alice", "2001", "gpu-001"]
    [row] = cluster.sacct_rows(job, "User,Account,SubmitLine")
    assert row[:2] == ["alice", "team-a"] and row[2].startswith("sbatch ")


def test_a_change_on_the_controller_reaches_the_login_node_without_a_configure(cluster):
    """slurmctld pushes a reconfigured slurm.conf to sackd (registered at its start); the
    controller's file is put back byte for byte afterwards."""
    mark = f"# e2e sackd push {time.time_ns()}"
    original = cluster.ctl("sha256sum /etc/slurm/slurm.conf").stdout.split()[0]
    cluster.ctl(f"echo '{mark}' >> /etc/slurm/slurm.conf && scontrol reconfigure")
    try:
        wait_for("the change to reach the login node",
                 lambda: mark in cluster.login(f"cat {CONF}").stdout, timeout=60)
    finally:
        cluster.ctl(f"sed -i '/^{mark}$/d' /etc/slurm/slurm.conf && scontrol reconfigure")
    assert cluster.ctl("sha256sum /etc/slurm/slurm.conf").stdout.split()[0] == original
    wait_for("the login node's copy to be the controller's again",
             lambda: mark not in cluster.login(f"cat {CONF}").stdout, timeout=60)
    assert cluster.login("sinfo --noheader --format=%P", check=False).returncode == 0
