"""Tenants are adversaries (docs/reference/security.md): on the Debian 13 cluster, ordinary users
try each attack a cluster user can make, as they would make it (as themselves, on the login
node, in their own jobs, over SSH from outside), and each test asserts the exact refusal and
that nothing the attack aimed at changed owner, mode or content.

The attacks on the acceptance gate's files are in test_accept.py (they need a gate run) and
forged REST tokens in test_rest.py. Leaves the users' homes as it found them (bob's keys
written back by bob himself), so test_users.py, after it, sees the cluster as configured.
"""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest

from infra.ops.configure import run_playbook
from tests.e2e.cluster import ssh_user, wait_for

# Root-only directories on the controller, where the users' homes are made: what a link in
# a home points the configure run at.
TARGETS = ("/var/lib/tenant-target-ssh", "/var/lib/tenant-target-enroot")
REFUSED = ("{user}: {path} is {what}: refused, nothing changed (remove it, or have {user} "
           "remove it, and run again)")
JOB_TMP_BASE = "/var/lib/slurm/jobtmp"


@pytest.fixture(scope="module")
def cluster(debian13):
    debian13.ready_for_configures()
    return debian13


def as_user(cluster, node: str, user: str, script: str,
            check: bool = True) -> subprocess.CompletedProcess[str]:
    """``script`` (shell) as ``user`` on ``node``, from their home, as they would run it."""
    return cluster.on(node, f"sh -c {shlex.quote(script)}", user=user, check=check)


def ssh(cluster, user: str, address: str, command: str) -> subprocess.CompletedProcess[str]:
    return ssh_user(cluster, user, address, command)


def snapshot(cluster, node: str, path: str) -> list[str]:
    """Type, owner, mode and content digest of ``path`` and everything under it."""
    out = cluster.on(node, f"find {path} -xdev -printf '%y %u:%g %m %p\\n' | sort; "
                           f"find {path} -xdev -type f -exec sha256sum {{}} + | sort")
    return out.stdout.splitlines()


# ---- root never follows what a user put in their home ----------------------------------

CREDENTIALS = ".config/enroot/.credentials"
SAVED = "/root/metalslurm-e2e-tenants-saved"  # root's own, on the controller (the homes' host)


def test_links_and_fifos_planted_in_homes_are_refused_and_their_targets_unchanged(cluster):
    """bob's ~/.ssh a link to a root-only directory, his Enroot credentials file a FIFO;
    alice's Enroot directory a link to another: before the fix the configure run made the
    first target bob's (0700, with his authorized_keys in it), blocked for ever on the FIFO
    and made the second alice's."""
    for target in TARGETS:
        cluster.ctl(f"rm -rf {target} && install -d -m 0755 {target} && "
                    f"echo root-only > {target}/secret && chmod 0600 {target}/secret")
    before = {t: snapshot(cluster, "ctl", t) for t in TARGETS}
    bob_keys = cluster.ctl("cat /home/bob/.ssh/authorized_keys").stdout
    # Their Enroot credentials files as the last configure wrote them, put back at the end
    # (the modules after this one hold their configure to exact changes).
    cluster.ctl(f"rm -rf {SAVED} && install -d -m 0700 {SAVED} && "
                f"cp -a /home/bob/{CREDENTIALS} {SAVED}/bob && "
                f"cp -a /home/alice/{CREDENTIALS} {SAVED}/alice")
    as_user(cluster, "login-001", "bob",
            f"rm -rf ~/.ssh && ln -s {TARGETS[0]} ~/.ssh && "
            "rm -f ~/.config/enroot/.credentials && mkfifo ~/.config/enroot/.credentials")
    as_user(cluster, "login-001", "alice",
            f"rm -rf ~/.config/enroot && ln -s {TARGETS[1]} ~/.config/enroot")
    try:
        result = run_playbook(cluster.inventory, out=lambda _line: None)
        # One user's home stops nothing else: the run goes on and says what it refused.
        assert result.ok, result.failures
        assert {
            REFUSED.format(user="bob", path="/home/bob/.ssh",
                           what="a symbolic link, not a directory"),
            REFUSED.format(user="bob", path="/home/bob/.config/enroot/.credentials",
                           what="a FIFO, not a regular file"),
            REFUSED.format(user="alice", path="/home/alice/.config/enroot",
                           what="a symbolic link, not a directory"),
        } <= set(result.warnings), result.warnings
        assert {t: snapshot(cluster, "ctl", t) for t in TARGETS} == before
        assert cluster.ctl("readlink /home/bob/.ssh; stat -c '%F' "
                           "/home/bob/.config/enroot/.credentials").stdout.split("\n")[:2] == [
            TARGETS[0], "fifo"]
    finally:
        # Each user puts their home back as they had it (bob's keys as they were).
        as_user(cluster, "login-001", "bob",
                "rm -f ~/.ssh ~/.config/enroot/.credentials && mkdir -m 0700 ~/.ssh && "
                f"printf %s {shlex.quote(bob_keys)} > ~/.ssh/authorized_keys && "
                "chmod 0600 ~/.ssh/authorized_keys")
        as_user(cluster, "login-001", "alice", "rm -f ~/.config/enroot && "
                                               "mkdir -m 0700 ~/.config/enroot")
        cluster.ctl(f"rm -rf {' '.join(TARGETS)} && cp -a {SAVED}/bob /home/bob/{CREDENTIALS} "
                    f"&& cp -a {SAVED}/alice /home/alice/{CREDENTIALS} && rm -rf {SAVED}")
    assert ssh(cluster, "bob", cluster.address("login-001"), "true").returncode == 0


def test_a_link_planted_where_enroots_directories_go_is_refused_and_its_target_unchanged(
        cluster):
    """Enroot's storage on a local scratch every user can write (an NVMe mounted 1777, as
    many sites have it): alice makes Enroot's data directory a link to a root-only directory
    before the run. Before the fix the run followed it and made the target root's and 1777,
    open to every user."""
    scratch, target = "/var/tmp/tenant-scratch", "/var/lib/tenant-target-enroot-data"
    cluster.on("gpu-001", f"rm -rf {scratch} {target} && install -d -m 1777 {scratch} && "
                          f"install -d -m 0700 {target} && echo root-only > {target}/secret")
    before = snapshot(cluster, "gpu-001", target)
    as_user(cluster, "gpu-001", "alice", f"ln -s {target} {scratch}/data")
    try:
        result = run_playbook(cluster.inventory, limit="gpu-001", tags="configure",
                              extra_vars={"enroot_pyxis_storage_dir": scratch},
                              out=lambda _line: None)
        assert not result.ok
        assert any(f"gpu-001: {scratch}/data: a link, not a directory: refused, nothing "
                   "changed." in " ".join(f.split()) for f in result.failures), result.failures
        assert snapshot(cluster, "gpu-001", target) == before
        assert cluster.on("gpu-001", f"readlink {scratch}/data").stdout.strip() == target
    finally:
        cluster.on("gpu-001", f"rm -rf {scratch} {target}")
    # The stack's own storage directory again: the next run changes nothing.
    again = run_playbook(cluster.inventory, limit="gpu-001", tags="configure",
                         out=lambda _line: None)
    assert (again.ok, again.changed_tasks) == (True, []), (again.failures, again.changed_tasks)


# ---- users reach the login node and their jobs' nodes, never the service hosts ---------

@pytest.mark.parametrize("user", ["alice", "bob"])
def test_a_user_cannot_ssh_to_the_controller_and_is_told_where_to_log_in(cluster, user):
    refused = ssh(cluster, user, cluster.address("ctl"), "hostname")
    assert (refused.returncode, refused.stdout) == (255, "")
    assert ("ctl runs the cluster's services and is for administrators only: log in to "
            "login-001 to submit jobs.") in refused.stderr, refused.stderr
    # The same key opens the login node: the refusal is the host's, not the key's.
    opened = ssh(cluster, user, cluster.address("login-001"), "hostname")
    assert opened.stdout.strip() == "login-001"


def test_an_admin_still_reaches_the_controller(cluster):
    admin = ssh(cluster, "dave", cluster.address("ctl"), "hostname")
    assert (admin.returncode, admin.stdout.strip()) == (0, "ctl")


def test_without_its_pam_module_a_compute_node_refuses_users_rather_than_letting_all_in(
        cluster):
    """A node whose module is gone refuses everyone but the pam_access exemption. (Tried
    with the old '-account' line too: Linux-PAM refused alice there as well, the '-' only
    silencing the log; the line is plain 'required' now so nothing rests on that.)"""
    module = "/usr/lib/x86_64-linux-gnu/security/pam_slurm_adopt.so"  # Debian 13
    cluster.on("gpu-002", f"mv {module} {module}.away")
    try:
        refused = ssh(cluster, "alice", cluster.address("gpu-002"), "hostname")
        assert (refused.returncode, refused.stdout) == (255, "")
        admin = ssh(cluster, "dave", cluster.address("gpu-002"), "hostname")
        assert (admin.returncode, admin.stdout.strip()) == (0, "gpu-002")
    finally:
        cluster.on("gpu-002", f"mv {module}.away {module}")


# ---- a user cannot drain the node they run on ------------------------------------------

FORGED = "NVRM: Xid (PCI:0000:3b:00.0): 79"


def test_a_kernel_message_a_user_words_as_an_xid_drains_no_node(cluster):
    """Linux 5.18 and later log the path of a program run with an empty argv, once a boot:
    alice names one like the driver's Xid message. The checker reads only messages that
    begin with the driver's prefix; before the fix it drained the node for an hour."""
    # execve(2) with argv = {NULL}, through ctypes (Python's os.execve refuses an empty argv).
    script = (f"cp /bin/true '/tmp/{FORGED}' && python3 -c \"import ctypes; "
              "libc = ctypes.CDLL(None); none = (ctypes.c_char_p * 1)(None); "
              f"libc.execve(b'/tmp/{FORGED}', none, none)\"")
    job = cluster.submit("alice", f"-w gpu-001 --time=2 --wrap {shlex.quote(script)}")
    assert cluster.wait_until_done(job) == "COMPLETED"
    logged = cluster.on("gpu-001", f"dmesg | grep -F \"'/tmp/{FORGED}'\" | tail -n 1",
                        check=False).stdout.strip()
    if not logged:
        kernel = cluster.on("gpu-001", "uname -r").stdout.strip()
        pytest.skip(f"kernel {kernel} logged no empty-argv exec now: Linux 5.18 and later do "
                    "so once a boot, and this boot's was used before this run")
    stamp = re.match(r"\[\s*([0-9.]+)\]", logged)
    assert stamp, logged
    age = float(cluster.on("gpu-001", "cut -d' ' -f1 /proc/uptime").stdout) - float(stamp[1])
    if age > 3500:
        pytest.skip(f"the kernel's only empty-argv message is {age:.0f} s old, outside the "
                    "checker's hour: it proves nothing either way")
    checked = cluster.on("gpu-001", "metalslurm-health --json --only gpu_xid", check=False)
    assert '"no critical Xid in the last 3600 s"' in checked.stdout, checked.stdout
    assert cluster.slurm_state("gpu-001") in ("idle", "mixed", "allocated"), (
        cluster.ctl("sinfo -N -o '%N %T %E'").stdout)


# ---- each job has its own /tmp and /dev/shm --------------------------------------------

def test_a_job_sees_neither_another_jobs_tmp_nor_its_shm_and_leaves_nothing(cluster):
    """On by default (job_container/tmpfs); the MPI examples (test_training, test_users)
    show PMIx working inside it."""
    assert "job_container/tmpfs" in cluster.ctl("scontrol show config").stdout
    hold = ("echo alice-note > /tmp/alice-note && echo alice-shm > /dev/shm/alice-shm && "
            "chmod 0644 /tmp/alice-note /dev/shm/alice-shm && sleep 300")
    job = cluster.submit("alice", f"-w gpu-001 -n1 --mem=256M --time=5 --wrap {shlex.quote(hold)}")
    try:
        wait_for(f"job {job} to run", lambda: cluster.job_field(job, "%T") == "RUNNING",
                 timeout=60)
        wait_for("alice's files", lambda: cluster.on(
            "gpu-001", f"ls {JOB_TMP_BASE}/gpu-001/{job}", check=False).returncode == 0,
            timeout=30)
        peek = as_user(cluster, "login-001", "bob",
                       "srun -w gpu-001 -n1 --mem=256M sh -c 'ls -A /tmp /dev/shm; "
                       "cat /tmp/alice-note /dev/shm/alice-shm'", check=False)
        assert peek.returncode != 0
        assert peek.stdout == "/dev/shm:\n\n/tmp:\n", peek.stdout  # bob's own, empty
        assert "cat: /tmp/alice-note: No such file or directory" in peek.stderr, peek.stderr
        # Nor is it in the node's own /tmp, which the checker no longer watches.
        assert cluster.on("gpu-001", "ls -A /tmp /dev/shm | grep -c alice",
                          check=False).stdout.strip() == "0"
    finally:
        cluster.ctl(f"scancel {job}")
    assert cluster.wait_until_done(job) == "CANCELLED by 0"  # root's scancel
    wait_for("alice's job directory to go", lambda: cluster.on(
        "gpu-001", f"test -e {JOB_TMP_BASE}/gpu-001/{job}", check=False).returncode == 1,
        timeout=60)
    assert cluster.on("gpu-001", f"stat -c '%U:%G %a' {JOB_TMP_BASE}").stdout.strip() == (
        "root:root 700")


def test_a_step_reaches_only_the_gpus_it_was_given(cluster):
    """The device cgroup lets the step's own GPU through to the kernel (which, with no
    driver behind the stand-in device node, answers ENXIO) and refuses another's (EPERM)."""
    out = as_user(cluster, "login-001", "alice",
                  "srun -w gpu-001 --gres=gpu:h100:1 sh -c 'echo $CUDA_VISIBLE_DEVICES; "
                  "head -c0 /dev/nvidia0; head -c0 /dev/nvidia5'", check=False)
    assert out.stdout.split() == ["0"], out.stdout
    assert [line.split(": ", 1)[1] for line in out.stderr.splitlines()
            if line.startswith("head:")] == [
        "cannot open '/dev/nvidia0' for reading: No such device or address",
        "cannot open '/dev/nvidia5' for reading: Operation not permitted"], out.stderr


# ---- shared storage carries no set-uid program or device -------------------------------

def test_a_set_uid_program_on_shared_storage_gives_its_owner_nothing(cluster):
    """As if root on some machine that mounts /shared had left a set-uid copy of id there."""
    cluster.ctl("install -m 4755 /usr/bin/id /shared/tenant-suid-id")
    try:
        assert "nosuid" in cluster.on("gpu-001", "findmnt -no OPTIONS /shared").stdout.split(",")
        assert "nodev" in cluster.on("gpu-001", "findmnt -no OPTIONS /shared").stdout.split(",")
        out = as_user(cluster, "gpu-001", "alice", "/shared/tenant-suid-id -u")
        assert out.stdout.strip() == "2001"
    finally:
        cluster.ctl("rm -f /shared/tenant-suid-id")
