"""Users log in with their SSH keys (roles/common, metalslurm:users sshKeys, admin, groups) on
the Debian 13 cluster: from this machine, over the cluster network, to the login node, as a
user would; on compute nodes only with a job there (roles/slurm_pam_adopt), admins always; a
user removed from the config is locked out and keeps their home.

The last Debian 13 module (it leaves bob removed: nothing after it needs him).
"""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from infra.ops.configure import run_playbook
from tests.e2e.cluster import BUILD_IMAGE, IMAGE, MARKER, user_key, vendor_dir, wait_for

LOGIN_ADDRESS = "10.78.13.253"
GPU_002 = "10.78.13.12"
NO_JOB = "Access denied by pam_slurm_adopt: you have no active jobs on this node"
OWN_LINE = "# alice own line, outside the managed block"


@pytest.fixture(scope="module")
def cluster(debian13):
    debian13.ready_for_configures()
    return debian13


def ssh_argv(cluster, user: str, command: str, key_of: str | None = None,
             address: str = LOGIN_ADDRESS) -> list[str]:
    return ["ssh", "-i", str(user_key(key_of or user)), "-o", "BatchMode=yes",
            "-o", "IdentitiesOnly=yes", "-o", f"UserKnownHostsFile={cluster.state}/ssh/known_hosts",
            "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=10",
            f"{user}@{address}", "--", command]


def ssh(cluster, user: str, command: str, key_of: str | None = None,
        address: str = LOGIN_ADDRESS) -> subprocess.CompletedProcess[str]:
    """``command`` as ``user`` on the login node (or ``address``), with ``key_of``'s key
    (default theirs)."""
    return subprocess.run(ssh_argv(cluster, user, command, key_of, address),
                          capture_output=True, text=True, timeout=120, check=False)


def test_alice_logs_in_with_her_key_and_submits_from_the_login_node(cluster):
    out = ssh(cluster, "alice", "id -Gn; sbatch --parsable -w gpu-001 -o /dev/null "
                                "--wrap 'id -un > $HOME/ssh-job.txt'")
    assert out.returncode == 0, out.stderr
    groups, job = out.stdout.split("\n", 1)
    assert sorted(groups.split()) == ["alice", "ml"]
    assert cluster.wait_until_done(job.strip().split(";")[0]) == "COMPLETED"
    assert cluster.ctl("cat /home/alice/ssh-job.txt").stdout.strip() == "alice"


# Over alice's own SSH session on the login node: a container step and an MPI step. The
# MPI step on the two static nodes: with gpu-001 still completing the container step, Slurm
# would take an elastic node, whose power-down could then land in the middle of a later
# test's configure (seen in a rehearsal: gpu-004 unreachable).
CONTAINER_STEP = f"srun -w gpu-001 --container-image={IMAGE} cat /etc/metalslurm-e2e-image"
MPI_STEP = ("srun --mpi=pmix -N2 -w gpu-001,gpu-002 --ntasks-per-node=1 python3 -c "
            "'from mpi4py import MPI; "
            "c = MPI.COMM_WORLD; print(c.Get_rank(), c.allreduce(c.Get_rank() + 1))'")


def test_alice_runs_a_container_step_and_an_mpi_step_from_her_ssh_session(cluster):
    if vendor_dir() is None:
        pytest.skip("no mirror of the Enroot/Pyxis artifacts here: no containers")
    cluster.on("gpu-001", BUILD_IMAGE)  # the container module's image, made again if gone
    container = ssh(cluster, "alice", CONTAINER_STEP)
    assert (container.returncode, container.stdout.strip()) == (0, MARKER), container.stderr
    mpi = ssh(cluster, "alice", MPI_STEP)
    assert mpi.returncode == 0, mpi.stderr
    assert sorted(mpi.stdout.split("\n")[:-1]) == ["0 3", "1 3"]


def test_keys_open_only_their_own_account_and_the_admin_flag_gives_the_admin_group(cluster):
    assert ssh(cluster, "alice", "true", key_of="bob").returncode == 255
    assert ssh(cluster, "mallory", "true", key_of="alice").returncode == 255  # no key at all
    dave = ssh(cluster, "dave", "id -Gn")
    assert (dave.returncode, sorted(dave.stdout.split())) == (0, ["dave", "hpcadmin"])


def test_a_compute_node_refuses_a_user_without_a_job_there_and_lets_an_admin_in(cluster):
    refused = ssh(cluster, "alice", "hostname", address=GPU_002)
    assert (refused.returncode, refused.stdout) == (255, "")
    assert NO_JOB in refused.stderr
    admin = ssh(cluster, "dave", "hostname", address=GPU_002)
    assert (admin.returncode, admin.stdout.strip()) == (0, "gpu-002")


def test_a_user_with_a_job_is_adopted_into_it_and_the_shell_ends_with_the_job(cluster):
    job = cluster.submit("alice", "-w gpu-002 --time=5 --wrap 'sleep 300'")
    try:
        wait_for(f"job {job} to run", lambda: cluster.job_field(job, "%T") == "RUNNING",
                 timeout=60)
        inside = ssh(cluster, "alice", "cat /proc/self/cgroup", address=GPU_002)
        assert inside.returncode == 0, inside.stderr
        assert re.search(rf"^\d+:freezer:/slurm_gpu-002/uid_2001/job_{job}/step_extern$",
                         inside.stdout, re.M), inside.stdout
        # A shell left running in the job: counted with it, and gone when it ends.
        session = subprocess.Popen(ssh_argv(cluster, "alice", "exec sleep 1000",
                                            address=GPU_002),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pid = wait_for("the session's sleep", lambda: cluster.on(
            "gpu-002", "pgrep -u alice -n -f '^sleep 1000$'", check=False).stdout.strip(),
            timeout=30)
        assert f"job_{job}/step_extern" in cluster.on("gpu-002", f"cat /proc/{pid}/cgroup").stdout
    finally:
        cluster.ctl(f"scancel {job}")
    wait_for("the adopted session to end with the job", lambda: session.poll() is not None,
             timeout=60)
    assert cluster.on("gpu-002", f"test -e /proc/{pid}", check=False).returncode == 1
    assert ssh(cluster, "alice", "true", address=GPU_002).returncode == 255


HOSTS_LINE = "10.78.13.12\tgpu-002"


def test_accounts_and_files_changed_by_hand_are_repaired_and_nothing_else_runs(cluster):
    """A converged node costs the common and host_firewall roles one read each; each change
    below sends the run through the tasks that repair it, on that node only. (That a
    converged run reaches none of them: test_local_cluster's going-back test.)"""
    cluster.on("gpu-001", "usermod -s /bin/sh alice")
    cluster.on("gpu-002", "gpasswd -d alice ml >/dev/null && chmod 0700 "
                          "/usr/local/sbin/metalslurm-firewall")
    # podman bind-mounts /etc/hosts: written in place, not replaced
    cluster.on("login-001", f"sed 's/^{HOSTS_LINE}$/10.78.13.99\tgpu-002/' /etc/hosts > "
                            "/tmp/hosts && cat /tmp/hosts > /etc/hosts && rm /tmp/hosts && "
                            "chmod 0600 /etc/metalslurm-shared-paths")
    cluster.ctl("systemctl disable -q metalslurm-firewall")
    result = run_playbook(cluster.inventory, out=lambda _line: None)
    assert result.ok, result.failures
    assert sorted(result.changed_tasks) == [
        ("ctl", "Enable the openings' unit"),
        ("gpu-001", "Create the cluster users with the same UID on every node"),
        ("gpu-002", "Create the cluster users with the same UID on every node"),
        ("gpu-002", "Install the program that opens the cluster's traffic in the host's firewall"),
        ("login-001", "List the cluster's shared paths for jobs"),
        ("login-001", "Make every cluster node resolvable by name")]
    assert cluster.on("gpu-001", "getent passwd alice | cut -d: -f7").stdout.strip() == "/bin/bash"
    assert cluster.on("gpu-002", "id -Gn alice; stat -c %a "
                                 "/usr/local/sbin/metalslurm-firewall").stdout.split() == [
        "alice", "ml", "755"]
    assert HOSTS_LINE in cluster.login("cat /etc/hosts").stdout.splitlines()
    assert cluster.login("stat -c %a /etc/metalslurm-shared-paths").stdout.strip() == "644"
    assert cluster.ctl("systemctl is-enabled metalslurm-firewall").stdout.strip() == "enabled"


def test_a_removed_user_is_locked_out_keeps_the_home_and_others_keep_their_own_lines(cluster):
    cluster.ctl(f"echo '{OWN_LINE}' >> /home/alice/.ssh/authorized_keys")
    assert ssh(cluster, "bob", "true").returncode == 0
    users = yaml.safe_load(cluster.inventory.read_text())["all"]["vars"]["metalslurm_users"]
    without_bob = [u for u in users if u["name"] != "bob"]
    result = run_playbook(cluster.inventory, out=lambda _line: None,
                          extra_vars={"metalslurm_users": without_bob})
    assert result.ok, result.failures
    locked = {host for host, task in result.changed_tasks
              if task == "Lock the users removed from the config"}
    assert locked == {"ctl", "gpu-001", "gpu-002", "login-001"}
    refused = wait_for("bob to be refused", lambda: ssh(cluster, "bob", "true").returncode == 255,
                       timeout=30)
    assert refused
    # Expired on day 1 (1970-01-02), UID kept, home and files kept, managed keys gone.
    assert cluster.login("getent shadow bob | cut -d: -f8; id -u bob").stdout.split() == [
        "1", "2002"]
    assert cluster.ctl("stat -c '%U %a' /home/bob").stdout.strip() == "bob 700"
    assert "metalslurm" not in cluster.ctl("cat /home/bob/.ssh/authorized_keys").stdout
    # alice: still in, her own line kept beside the block.
    assert ssh(cluster, "alice", "true").returncode == 0
    text = cluster.ctl("cat /home/alice/.ssh/authorized_keys").stdout
    assert OWN_LINE in text and "BEGIN metalslurm" in text
