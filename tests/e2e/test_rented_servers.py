"""``metalslurm up`` on look-alike rented servers (tests/e2e/rented_servers.py makes them):
Debian 13 machines booted by cloud-init from a NoCloud seed, with a provider's hostname, a
``debian`` sudo user holding the operator's key, root refused by sshd, unattended-upgrades
on, an nftables input policy of drop letting SSH in from the bastion only, and two NICs (the
private address on the second). The byo stack (tests/e2e/stacks/Pulumi.e2e-rented.yaml)
names them by address; the one command runs the pre-flight, configures as ``debian``
through the bastion and verifies, without the Pulumi engine.

First the faults, each refused by the pre-flight with its one line and nothing changed on
any host (no state directory, the hosts as the provider made them): a Debian 12 host, a
private address on no interface (the bastion's NAT sends it to another host), the bastion
down, a key the hosts refuse, a sudo that asks for a password, the apt lock held past
``--lock-wait``. Then the run, with the apt lock held for a few seconds on one host (waited
for), the jobs (two nodes, GPUs, a container, MPI through PMIx), a second run that changes
nothing, a host added while a job runs, and a reboot that keeps the Slurm hostname.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.e2e import rented_servers as rs
from tests.e2e.cluster import (
    BUILD_IMAGE,
    HOLD_APT_LOCK,
    IMAGE,
    MARKER,
    REPO,
    e2e_stack,
    metalslurm,
    wait_for,
)

MACHINES = (rs.Machine(rs.BASTION, *rs.BASTION_ADDRESSES),
            rs.Machine("ctl", "10.79.1.10", "10.79.2.10"),
            rs.Machine("login-001", "10.79.1.12", "10.79.2.12"),
            rs.Machine("gpu-001", "10.79.1.21", "10.79.2.21", compute=True),
            rs.Machine("gpu-002", "10.79.1.22", "10.79.2.22", compute=True),
            rs.Machine("gpu-003", "10.79.1.23", "10.79.2.23", compute=True))
BY_NAME = {m.name: m for m in MACHINES}
HOSTS = ("ctl", "login-001", "gpu-001", "gpu-002")  # in the stack; gpu-003 joins later
STACK = "Pulumi.e2e-rented.yaml"
STATE = REPO / ".metalslurm" / "e2e-rented"  # the stack's state directory
KEY = rs.STATE / "operator" / "id_ed25519"
CHECKS = ("ssh", "privilege", "os", "address", "gpus", "hca", "clock", "disk", "apt lock",
          "firewall", "identity")
SQSH = "/opt/e2e/e2e.sqsh"  # no shared storage here: the image on each compute host's disk


@pytest.fixture(scope="module")
def stack():
    if os.environ.get("METALSLURM_E2E_REUSE") and rs.podman(
            "container", "exists", MACHINES[-1].container, check=False).returncode == 0:
        # Developer shortcut: the machines (and the state) an earlier run left, kept.
        yield e2e_stack(STACK)
        return
    rs.remove_leftovers()
    shutil.rmtree(STATE, ignore_errors=True)
    try:
        rs.start_all(MACHINES, rs.operator_key(KEY))
        yield e2e_stack(STACK)
    finally:
        if not os.environ.get("METALSLURM_E2E_REUSE"):
            rs.remove_leftovers()
            shutil.rmtree(STATE, ignore_errors=True)


# Each run's figures (the configure line and the phases' timings), kept for the benchmarks
# page: a passing test's output is not printed.
TIMINGS = REPO / ".metalslurm" / "e2e-rented-servers-timings.txt"


def up(stack_file, *args: str, key=KEY):
    proc = metalslurm("up", "--stack", str(stack_file), "--ssh-key", str(key), *args,
                      timeout=1800)
    lines = [line for line in proc.stdout.splitlines()
             if line.startswith(("configure ", "timings: ", "preflight: "))]
    with TIMINGS.open("a") as out:
        out.write(f"{time.strftime('%H:%M:%S')} up {' '.join(args)} rc {proc.returncode}: "
                  + " | ".join(lines) + "\n")
    return proc


def table(out: str) -> dict[str, dict[str, str]]:
    """The pre-flight's table as {host: {check: cell}}."""
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("host "))
    starts = [lines[head].index(c if c != "os" else "os ") for c in CHECKS]
    rows = {}
    for line in lines[head + 1:]:
        if not line or line.startswith(("FAIL ", "preflight: ")):
            break
        bounds = [*starts, len(line) + 1]
        rows[line.split()[0]] = {c: line[bounds[i]:bounds[i + 1]].strip()
                                 for i, c in enumerate(CHECKS)}
    return rows


def fails(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("FAIL ")]


def as_provided() -> dict[str, str]:
    """What the run would change first on each host: its hostname, and whether Slurm's
    configuration or the cluster's firewall openings exist."""
    return {h: rs.on(BY_NAME[h], "hostname; ls /etc/slurm 2>&1 | head -1; "
                                 "nft list ruleset | grep -c metalslurm || true").stdout
            for h in HOSTS}


def refused(stack_file, out_lines: list[str] | None, before: dict[str, str], *args: str,
            key=KEY) -> str:
    """Runs up, which must refuse (with ``out_lines`` as its FAIL lines, unless None) having
    written and changed nothing; its output."""
    proc = up(stack_file, *args, key=key)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert out_lines is None or fails(proc.stdout) == out_lines, proc.stdout
    assert "up stopped before changing anything: fix the hosts above and run it again" \
        in proc.stdout
    assert not STATE.exists(), "a refused run wrote the state directory"  # a fresh run's
    assert as_provided() == before
    return proc.stdout


def variant(stack_file: Path, change) -> Path:
    doc = yaml.safe_load(stack_file.read_text())
    change(doc["config"])
    out = rs.STATE / "variants" / stack_file.name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def test_the_hosts_are_as_a_provider_makes_them(stack):
    for m in MACHINES:
        assert rs.interfaces(m) == {"eth0": m.public, "eth1": m.private}
        assert rs.on(m, "ip route show default").stdout.split()[:5] == [
            "default", "via", "10.79.1.1", "dev", "eth0"]
        assert rs.on(m, "hostname").stdout.strip() == m.provider_hostname
    ctl = BY_NAME["ctl"]
    assert rs.on(ctl, "sshd -T | grep -E '^permitrootlogin'").stdout.strip() == \
        "permitrootlogin no"
    assert rs.on(ctl, "systemctl is-enabled apt-daily-upgrade.timer").stdout.strip() == \
        "enabled"
    assert rs.on(ctl, "sudo -l -U debian | tail -1").stdout.strip() == "(ALL) NOPASSWD: ALL"
    # This machine reaches a host only through the bastion.
    direct = operator_ssh("-o", "ProxyJump=none", "debian@10.79.2.10", "true")
    assert (direct.returncode, direct.stderr.strip()) == (
        255, "ssh: connect to host 10.79.2.10 port 22: Connection timed out"), direct.stderr


def operator_ssh(*args: str) -> subprocess.CompletedProcess[str]:
    """ssh from this machine as the operator, with the operator's key."""
    return subprocess.run(["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=3", "-i",
                           str(KEY), *args], capture_output=True, text=True, timeout=30,
                          check=False)


def test_faults_are_refused_before_any_host_changes(stack):
    before = as_provided()
    gpu1, gpu2, bastion = BY_NAME["gpu-001"], BY_NAME["gpu-002"], BY_NAME[rs.BASTION]
    # A Debian 12 host in a debian13 stack.
    rs.on(gpu2, "cp --remove-destination /usr/lib/os-release /etc/os-release.e2e && "
                "sed -i 's/^VERSION_ID=.*/VERSION_ID=\"12\"/; s/^VERSION_CODENAME=.*/"
                "VERSION_CODENAME=bookworm/' /etc/os-release.e2e && "
                "mv /etc/os-release /etc/os-release.orig && mv /etc/os-release.e2e /etc/os-release")
    try:
        refused(stack, ["FAIL gpu-002: runs debian 12; metalslurm:os is debian13 (debian 13): "
                        "reinstall the host with it, or set metalslurm:os to what every host "
                        "runs"], before)
    finally:
        rs.on(gpu2, "mv -f /etc/os-release.orig /etc/os-release")
    # A private address on no interface: the operator gave gpu-002 as 10.79.2.99, an address
    # the provider's NAT (here the bastion's) sends to gpu-002, which has 10.79.2.22.
    rs.on(bastion, "nft add table ip e2e_nat && nft add chain ip e2e_nat out '{ type nat hook "
                   "output priority -100; }' && nft add rule ip e2e_nat out ip daddr 10.79.2.99 "
                   "tcp dport 22 dnat to 10.79.2.22")
    known = (rs.STATE / "known_hosts").read_text()
    kind, blob = rs.host_key(gpu2)
    (rs.STATE / "known_hosts").write_text(known + f"10.79.2.99 {kind} {blob}\n")
    try:
        def nat(config):
            for host in config["metalslurm:byo"]["hosts"]:
                if host["name"] == "gpu-002":
                    host["address"] = "10.79.2.99"
        out = refused(variant(stack, nat), None, before)
        line, = fails(out)
        head = "FAIL gpu-002: has no interface with 10.79.2.99 (it has "
        tail = ("): give the host's private address (metalslurm_address), or add it to the NIC "
                "on the private network")
        assert line.startswith(head) and line.endswith(tail), line
        # the host's addresses, in the order the kernel lists them
        assert set(line[len(head):-len(tail)].split(", ")) == {
            "127.0.0.1/8 on lo", "10.79.1.22/24 on eth0", "10.79.2.22/24 on eth1"}, line
    finally:
        rs.on(bastion, "nft delete table ip e2e_nat")
        (rs.STATE / "known_hosts").write_text(known)
    # The bastion down.
    rs.on(bastion, "systemctl stop ssh.socket ssh.service")
    try:
        proc = up(stack)
        assert proc.returncode == 1
        lines = fails(proc.stdout)
        assert len(lines) == len(HOSTS), proc.stdout
        for host, line in zip(HOSTS, lines, strict=True):
            assert line.startswith(f"FAIL {host}: bastion jump@10.79.1.5: unreachable; ssh: "
                                   "connect to host 10.79.1.5 port 22: Connection refused"), line
        assert {row["ssh"] for row in table(proc.stdout).values()} == {"FAIL bastion unreachable"}
        assert not STATE.exists() and as_provided() == before
    finally:
        rs.on(bastion, "systemctl start ssh.service")
    # A key the hosts refuse (the bastion takes the operator's, from ssh's config).
    other = rs.operator_key(rs.STATE / "other" / "id_ed25519")
    out = refused(stack, [f"FAIL {h}: ssh debian@{BY_NAME[h].private} via jump@10.79.1.5: "
                          "key refused: put the public key of "
                          "ansible_ssh_private_key_file in the user's ~/.ssh/authorized_keys on "
                          "the host, or fix ansible_user" for h in HOSTS], before, key=other)
    assert {row["ssh"] for row in table(out).values()} == {"FAIL key refused"}
    # sudo that asks for a password.
    sudoers = "/etc/sudoers.d/90-cloud-init-users"
    rs.on(gpu1, f"cp {sudoers} /root/sudoers.e2e && echo 'debian ALL=(ALL) ALL' > {sudoers}")
    try:
        out = refused(stack, ["FAIL gpu-001: debian cannot sudo without a password: give it "
                              "with --become-password-file or --ask-become-pass, or allow "
                              "NOPASSWD sudo"], before)
        assert table(out)["gpu-001"]["privilege"] == "FAIL sudo needs a password"
    finally:
        rs.on(gpu1, f"cp /root/sudoers.e2e {sudoers}")
    # The apt lock held past --lock-wait.
    pid = rs.on(BY_NAME["ctl"], HOLD_APT_LOCK.format(seconds=120)).stdout.strip()
    try:
        time.sleep(1)
        refused(stack, [f"FAIL ctl: python3 (pid {pid}) holds /var/lib/dpkg/lock-frontend "
                        "after 2 s: let it finish (unattended-upgrades, cloud-init and "
                        "apt-daily end by themselves), or stop it, then run again"], before,
                "--lock-wait", "2")
    finally:
        rs.on(BY_NAME["ctl"], f"kill {pid}", check=False)


def slurm(command: str, host: str = "login-001", user: str | None = "alice",
          timeout: float = 300):
    """A command on a host from its console (rented_servers.on), as ``user`` (root with None)."""
    if user:
        command = f"cd /home/{user} && runuser -u {user} -- {command}"
    return rs.on(BY_NAME[host], command, timeout=timeout)


def test_up_configures_the_hosts_as_debian_through_the_bastion(stack):
    # unattended-upgrades (say) holds the apt lock for a few seconds: waited for.
    rs.on(BY_NAME["gpu-001"], HOLD_APT_LOCK.format(seconds=6))
    proc = up(stack, "--lock-wait", "120")
    out = proc.stdout
    assert proc.returncode == 0, out[-6000:]
    rows = table(out)
    assert list(rows) == list(HOSTS)
    for host in HOSTS:
        m, compute = BY_NAME[host], host.startswith("gpu-")
        row = rows[host]
        assert (row["ssh"], row["privilege"], row["os"], row["address"],
                row["identity"]) == ("debian via jump@10.79.1.5", "sudo", "debian13",
                                     f"{m.private} on eth1", "unique"), out
        if host == "gpu-001":  # the lock holder ended within --lock-wait: waited for
            assert re.fullmatch(r"free after \d+ s", row["apt lock"]), out
        else:
            assert row["apt lock"] == "free", out
        assert row["gpus"] == ("8 (nvidia-smi)" if compute else "-")
        assert row["firewall"] == "nftables drop: opened by the run (chain input)"
    assert re.search(r"^preflight: 4 host\(s\) fit \(\d+\.\d s\)", out, re.M), out
    assert re.search(r"^configure successful in \d+\.\d s, \d+ changed task\(s\)$", out, re.M)
    inventory = yaml.safe_load((STATE / "inventory.yml").read_text())
    conn = inventory["all"]["vars"]
    assert (conn["ansible_user"], conn["ansible_become"], conn["ansible_ssh_common_args"]) == (
        "debian", True, "-o ProxyJump=jump@10.79.1.5")
    assert conn["ansible_ssh_private_key_file"] == str(KEY.resolve())
    # The hostname is the Slurm name now, and cloud-init was told to leave it (and said so).
    for host in HOSTS:
        assert rs.on(BY_NAME[host], "hostname").stdout.strip() == host
        cfg = yaml.safe_load(rs.on(BY_NAME[host], "cat /etc/cloud/cloud.cfg.d/99-metalslurm.cfg")
                             .stdout)
        assert (cfg["preserve_hostname"], cfg["manage_etc_hosts"]) == (True, False)
    assert ("NOTE: ctl,gpu-[001-002],login-001: cloud-init's hostname and /etc/hosts "
            "management turned off for good (/etc/cloud/cloud.cfg.d/99-metalslurm.cfg: "
            "preserve_hostname, manage_etc_hosts; where the provider's user-data turns "
            "manage_etc_hosts back on, its hosts template has the cluster's names)") in out, out
    # No shared /home: each node has its own, the compute nodes included.
    for host in HOSTS:
        assert rs.on(BY_NAME[host], "stat -c '%U %F' /home/alice").stdout.strip() == \
            "alice directory", host
    # unattended-upgrades (the real one, dry) leaves the daemons' packages alone.
    debug = rs.on(BY_NAME["gpu-001"], "unattended-upgrade --dry-run --debug 2>&1 | "
                                      "grep -m1 '^Initial blacklist'").stdout.split()
    assert {"^slurm", "^munge$", "^libpmix", "^enroot", "^nvidia"} <= set(debug[2:]), debug
    # up's verify ran its srun checks on the compute nodes: on a loaded machine Slurm may
    # still be releasing one (completing), or its backfill have planned one for a check's
    # allocation (plnd), for a moment (seen in CI).
    wait_for("both compute nodes idle after the verify's jobs",
             lambda: slurm("sinfo -h -N -p train -o '%N %t'").stdout.splitlines() == [
                 "gpu-001 idle", "gpu-002 idle"], timeout=60)


def test_jobs_run_across_the_hosts(stack):
    assert sorted(slurm("srun -N2 hostname").stdout.split()) == ["gpu-001", "gpu-002"]
    gpus = slurm("srun -w gpu-002 --gres=gpu:h100:2 sh -c 'echo $CUDA_VISIBLE_DEVICES'")
    assert gpus.stdout.strip() == "0,1"
    # Two NICs: the ranks must talk over the private one (roles/mpi), the other is dropped.
    mpi = slurm("srun -t 2 --mpi=pmix -N2 --ntasks-per-node=2 python3 -c \"from mpi4py import MPI; "
                "c = MPI.COMM_WORLD; print(c.rank, c.size, c.allreduce(c.rank + 1), "
                "MPI.Get_processor_name())\"", timeout=120)
    assert sorted(mpi.stdout.splitlines()) == [
        "0 4 10 gpu-001", "1 4 10 gpu-001", "2 4 10 gpu-002", "3 4 10 gpu-002"], mpi.stderr
    build = BUILD_IMAGE.replace(str(Path(IMAGE).parent), str(Path(SQSH).parent))
    for host in ("gpu-001", "gpu-002"):
        rs.on(BY_NAME[host], build)
    container = slurm(f"srun -N2 --container-image={SQSH} cat /etc/metalslurm-e2e-image")
    assert container.stdout.splitlines() == [MARKER, MARKER]


def test_a_second_run_changes_nothing(stack):
    # verify ran after the first run; the later runs leave it out (the suite's time).
    proc = up(stack, "--no-verify")
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert re.search(r"^configure successful in \d+\.\d s, 0 changed task\(s\)$", proc.stdout,
                     re.M), proc.stdout[-6000:]


def test_maintain_reads_and_locks_as_the_sudo_user_through_the_bastion(stack):
    """'metalslurm maintain --update' connects as the inventory's debian through the bastion
    and becomes root with sudo, as Ansible does: the cluster's lock taken on the controller
    (its holder file root's) and free again, each node's packages read (a script on stdin
    through sudo); whatever the mirror offers is installed node by node, and both nodes end
    idle."""
    proc = metalslurm("maintain", "-i", str(STATE / "inventory.yml"), "--nodes",
                      "gpu-[001-002]", "--update", timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    for node in ("gpu-001", "gpu-002"):
        assert re.search(rf"^{node}: (nothing newer to install|\S+ \S+ -> \S+)", out, re.M), out
    assert re.search(r"^\d updated and returned, 0 failed, \d left alone; \d+ s", out, re.M), out
    ctl = BY_NAME["ctl"]
    who = rs.on(ctl, "stat -c %U /run/metalslurm-maintain.lock.who && "
                     "cat /run/metalslurm-maintain.lock.who").stdout.splitlines()
    assert who[0] == "root" and who[1].endswith(", nodes gpu-[001-002]"), who
    assert rs.on(ctl, "flock --nonblock /run/metalslurm-maintain.lock true",
                 check=False).returncode == 0
    assert slurm("sinfo -h -N -p train -o '%N %t'").stdout.splitlines() == [
        "gpu-001 idle", "gpu-002 idle"]


GO = "/home/alice/e2e-go"  # on gpu-001, the batch host: the job ends once it exists


def test_a_host_added_to_the_stack_joins_while_a_job_runs(stack):
    """Slurm 24.11 takes the longer node list with 'scontrol reconfigure' (slurmctld and each
    slurmd hand over to a new process of their own; module_utils/slurm_versions.py): no
    slurmd is restarted by systemd, and the two-node job running across the change starts
    a new step after it and completes."""
    job = slurm("sbatch --parsable -N2 -w gpu-001,gpu-002 --wrap "
                f"'while [ ! -e {GO} ]; do sleep 1; done; srun hostname'").stdout.strip()
    wait_for("the job to run", lambda: slurm(f"squeue -h -j {job} -o %T").stdout.strip()
             == "RUNNING", timeout=60)
    started = "systemctl show -p ActiveEnterTimestamp slurmd"
    before = {n: rs.on(BY_NAME[n], started).stdout for n in ("gpu-001", "gpu-002")}

    def grow(config):
        config["metalslurm:computePools"][0]["count"] = 3
        config["metalslurm:byo"]["hosts"].append(
            {"name": "gpu-003", "pool": "gpu", "address": BY_NAME["gpu-003"].private})
    shutil.copy(variant(stack, grow), stack)
    proc = up(stack, "--no-verify")
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert table(proc.stdout)["gpu-003"]["address"] == "10.79.2.23 on eth1"
    assert rs.on(BY_NAME["gpu-003"], "hostname").stdout.strip() == "gpu-003"
    assert slurm(f"squeue -h -j {job} -o %T").stdout.strip() == "RUNNING"
    assert slurm("srun -w gpu-003 hostname").stdout.strip() == "gpu-003"
    assert {n: rs.on(BY_NAME[n], started).stdout for n in before} == before
    rs.on(BY_NAME["gpu-001"], f"touch {GO}")
    wait_for("the job to end", lambda: slurm(f"sacct -n -X -j {job} -o State%20").stdout.strip()
             == "COMPLETED", timeout=120)
    # The step it started after the change ran on both nodes.
    assert slurm(f"sacct -n -P -j {job}.0 -o State,NodeList").stdout.strip() == \
        "COMPLETED|gpu-[001-002]"
    assert slurm("sinfo -h -N -p train -o '%N %t'").stdout.splitlines() == [
        "gpu-001 idle", "gpu-002 idle", "gpu-003 idle"]


def test_a_reboot_keeps_the_slurm_hostname_and_the_clusters_names(stack):
    """cloud-init runs again at boot; the provider's user-data turns manage_etc_hosts on,
    which outranks the run's cloud.cfg.d file: /etc/hosts is rewritten from cloud-init's
    template, which the run gave the cluster's names."""
    gpu2 = BY_NAME["gpu-002"]
    rs.podman("restart", "-t", "5", gpu2.container)
    rs.wait_booted(gpu2)
    assert rs.on(gpu2, "hostname").stdout.strip() == "gpu-002"
    hosts = rs.on(gpu2, "cat /etc/hosts").stdout
    assert "# Your system has configured 'manage_etc_hosts' as True." in hosts  # rewritten
    assert rs.on(gpu2, "getent hosts ctl gpu-002").stdout.split() == [
        "10.79.2.10", "ctl", "10.79.2.22", "gpu-002"]
    wait_for("gpu-002 back idle", lambda: slurm("sinfo -h -n gpu-002 -o %t").stdout.strip()
             == "idle", timeout=120)
    assert slurm("srun -w gpu-002 hostname").stdout.strip() == "gpu-002"
