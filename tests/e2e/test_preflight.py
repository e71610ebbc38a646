"""metalslurm preflight against the Debian 13 cluster's nodes, as rented servers come: a sudo
user behind a bastion (the controller stands in for one), a sudo that wants a password, a
host that is down, a key the host refuses, a host key that changed, another OS, an address
on no interface, the apt lock held, a host firewall that drops by default (which the run
opens: said, not failed), a cloned machine-id, a GPU count the PCI bus does not show (a
STAND-IN lspci replaying a fixture).

Each fault is made on a node for the test and undone after it; preflight itself changes
nothing (the last test checks that the nodes' files it could have touched are as before).
"""

from __future__ import annotations

import subprocess
import time

import pytest
import yaml

from infra.ops.configure import run_playbook
from tests.e2e.cluster import APT_GET, HOLD_APT_LOCK, REPO, metalslurm

NODES = ("ctl", "gpu-001", "gpu-002", "login-001")
DEPLOY = "msdeploy"  # the rented server's sudo user, made for these tests
STAND_IN_LSPCI = "/usr/local/bin/lspci"


@pytest.fixture(scope="module")
def cluster(debian13):
    assert debian13.up.returncode == 0, debian13.up.stdout[-3000:]
    return debian13


@pytest.fixture(scope="module")
def inventory(cluster):
    return yaml.safe_load(cluster.inventory.read_text())


def variant(tmp_path, inventory, name: str = "inventory.yml", all_vars: dict | None = None,
            hosts: dict | None = None):
    doc = yaml.safe_load(yaml.safe_dump(inventory))
    doc["all"]["vars"].update(all_vars or {})
    for host, values in (hosts or {}).items():
        doc["all"]["hosts"][host].update(values)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def preflight(path, *args: str) -> tuple[int, dict[str, dict[str, str]], list[str], str]:
    """rc, the table as {host: {check: cell}}, the FAIL lines, all output."""
    proc = metalslurm("preflight", "-i", str(path), "--lock-wait", "0", *args, timeout=300)
    lines = proc.stdout.splitlines()
    header = lines[0]
    starts = [header.index(col) for col in ("ssh", "privilege", "os ", "address", "gpus", "hca",
                                            "clock", "disk", "apt lock", "firewall",
                                            "identity")]
    checks = ["ssh", "privilege", "os", "address", "gpus", "hca", "clock", "disk", "apt lock",
              "firewall", "identity"]
    table = {}
    for line in lines[1:]:
        if line.startswith(("FAIL ", "preflight: ")):
            break
        bounds = [*starts, len(line) + 1]
        table[line.split()[0]] = {c: line[bounds[i]:bounds[i + 1]].strip()
                                  for i, c in enumerate(checks)}
    fails = [line for line in lines if line.startswith("FAIL ")]
    return proc.returncode, table, fails, proc.stdout + proc.stderr


def test_every_node_of_the_cluster_is_fit(cluster):
    rc, table, fails, out = preflight(cluster.inventory)
    assert rc == 0, out
    assert fails == []
    addresses = {"ctl": "10.78.13.10", "gpu-001": "10.78.13.11", "gpu-002": "10.78.13.12",
                 "login-001": "10.78.13.253"}
    for node in NODES:
        row = table[node]
        assert (row["ssh"], row["privilege"], row["os"], row["address"], row["apt lock"],
                row["firewall"], row["identity"]) == (
            "root", "root", "debian13", f"{addresses[node]} on eth0", "free", "none", "unique")
    assert table["ctl"]["clock"] == "reference"
    assert table["gpu-001"]["gpus"] == "fake (local)"
    # Elastic nodes may be powered off: Slurm checks them when it resumes them.
    assert table["gpu-003"]["ssh"] == "elastic: checked when Slurm resumes it"
    assert out.rstrip().splitlines()[-1].startswith("preflight: 4 host(s) fit (")


@pytest.fixture
def deploy_user(cluster):
    """A sudo user on login-001 with the cluster's key, as a rented server comes (compute
    nodes let in only users with a job there)."""
    key = (cluster.state / "ssh" / "id_ed25519.pub").read_text().strip()
    cluster.on("login-001", f"useradd -m -u 3999 -s /bin/bash {DEPLOY} && "
                          f"install -d -m 700 -o {DEPLOY} -g {DEPLOY} /home/{DEPLOY}/.ssh && "
                          f"echo '{key}' > /home/{DEPLOY}/.ssh/authorized_keys && "
                          f"chown {DEPLOY}: /home/{DEPLOY}/.ssh/authorized_keys && "
                          f"echo '{DEPLOY} ALL=(ALL) NOPASSWD: ALL' > /etc/sudoers.d/{DEPLOY} && "
                          f"chmod 440 /etc/sudoers.d/{DEPLOY}")
    yield DEPLOY
    cluster.on("login-001", f"rm -f /etc/sudoers.d/{DEPLOY}; userdel -r {DEPLOY} 2>/dev/null",
               check=False)


def ssh_config(cluster, tmp_path):
    """An ssh config for every host (the bastion included: ssh gives a ProxyJump host only
    -F, not the destination's -o and -i)."""
    keys = cluster.state / "ssh"
    path = tmp_path / "ssh_config"
    path.write_text(f"Host *\n  IdentityFile {keys}/id_ed25519\n  IdentitiesOnly yes\n"
                    f"  UserKnownHostsFile {keys}/known_hosts\n  StrictHostKeyChecking yes\n")
    return path


def test_a_sudo_user_through_a_bastion_with_and_without_a_password(cluster, inventory,
                                                                   tmp_path, deploy_user):
    via = f"-F {ssh_config(cluster, tmp_path)} -o ProxyJump=root@10.78.13.10"
    path = variant(tmp_path, inventory, hosts={"login-001": {
        "ansible_user": DEPLOY, "ansible_become": True, "ansible_ssh_common_args": via}})
    rc, table, fails, out = preflight(path)
    assert rc == 0, out
    assert (table["login-001"]["ssh"], table["login-001"]["privilege"],
            table["login-001"]["firewall"]) == (f"{DEPLOY} via root@10.78.13.10", "sudo", "none")
    # sudo that asks for a password: refused without one, fit with the right one.
    cluster.on("login-001", f"echo '{DEPLOY}:rented-pw-1' | chpasswd && "
                          f"echo '{DEPLOY} ALL=(ALL) ALL' > /etc/sudoers.d/{DEPLOY}")
    rc, table, fails, out = preflight(path)
    assert rc == 1, out
    assert fails == [f"FAIL login-001: {DEPLOY} cannot sudo without a password: give it with "
                     "--become-password-file or --ask-become-pass, or allow NOPASSWD sudo"]
    assert table["login-001"]["firewall"] == "not read (no privilege)"
    secret = tmp_path / "become-password"
    secret.write_text("rented-pw-1\n")
    rc, table, fails, out = preflight(path, "--become-password-file", str(secret))
    assert rc == 0, out
    assert (table["login-001"]["privilege"], table["login-001"]["firewall"]) == (
        "sudo (password)", "none")
    assert "rented-pw-1" not in out
    # configure as that user, through the bastion, with the same password file: every role
    # of the login node under sudo with a password (Mitogen), converged.
    proc = metalslurm("configure", "-i", str(path), "--limit", "login-001",
                      "--become-password-file", str(secret), timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:]
    row = next(line.split() for line in proc.stdout.splitlines()
               if line.startswith("login-001 "))
    assert row[1:] == [row[1], "0", "0", "0"], proc.stdout[-3000:]
    assert "rented-pw-1" not in proc.stdout + proc.stderr
    wrong = tmp_path / "wrong-password"
    wrong.write_text("not-the-password\n")
    proc = metalslurm("configure", "-i", str(path), "--limit", "login-001",
                      "--become-password-file", str(wrong), timeout=900)
    assert proc.returncode != 0
    assert "not-the-password" not in proc.stdout + proc.stderr
    # A user without become is refused even though it could sudo.
    path = variant(tmp_path, inventory, "nobecome.yml", hosts={"login-001": {
        "ansible_user": DEPLOY, "ansible_become": False}})
    rc, _table, fails, out = preflight(path)
    assert fails == [f"FAIL login-001: connects as {DEPLOY} without become: set "
                     "ansible_become: true (sudo), or connect as root"], out


def test_ssh_failures_are_told_apart(cluster, inventory, tmp_path):
    config = ssh_config(cluster, tmp_path)
    # The bastion down: every host behind it says so, not that it is down itself.
    down = variant(tmp_path, inventory, "down.yml", all_vars={
        "ansible_ssh_common_args": f"-F {config} -o ProxyJump=root@10.78.13.250"})
    rc, table, fails, out = preflight(down)
    assert rc == 1
    assert {table[n]["ssh"] for n in NODES} == {"FAIL bastion unreachable"}, out
    assert fails[0].startswith("FAIL ctl: bastion root@10.78.13.250: unreachable; ssh: "
                               "connect to host 10.78.13.250 port 22: No route to host")
    # The bastion up, one host not answering behind it (the controller, standing in for
    # the bastion, is reached directly).
    behind = variant(tmp_path, inventory, "behind.yml",
                     all_vars={"ansible_ssh_common_args": f"-F {config} "
                               "-o ProxyJump=root@10.78.13.10"},
                     hosts={"gpu-002": {"ansible_host": "10.78.13.250"},
                            "ctl": {"ansible_ssh_common_args": f"-F {config}"}})
    rc, table, fails, out = preflight(behind)
    assert table["gpu-002"]["ssh"] == "FAIL unreachable from the bastion", out
    assert (table["gpu-001"]["ssh"], table["ctl"]["ssh"]) == ("root via root@10.78.13.10",
                                                             "root")
    # A key the host refuses, and a host key that is not the one known.
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)],
                   check=True)
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)],
                   check=True)
    known = tmp_path / "known_hosts"
    known.write_text("10.78.13.12 " + " ".join(
        (tmp_path / "other.pub").read_text().split()[:2]) + "\n")
    faults = variant(tmp_path, inventory, "faults.yml", hosts={
        "gpu-001": {"ansible_ssh_private_key_file": str(stranger),
                    "ansible_ssh_common_args": inventory["all"]["vars"]["ansible_ssh_common_args"]
                    + " -o IdentitiesOnly=yes"},
        "gpu-002": {"ansible_ssh_common_args": f"-o UserKnownHostsFile={known} "
                                               "-o StrictHostKeyChecking=yes"}})
    rc, table, fails, out = preflight(faults)
    assert (table["gpu-001"]["ssh"], table["gpu-002"]["ssh"]) == (
        "FAIL key refused", "FAIL host key changed"), out
    assert table["ctl"]["ssh"] == "root"


def test_configure_hands_nothing_to_a_node_whose_host_key_is_not_the_known_one(
        cluster, inventory, tmp_path):
    """The configure checks host keys as ansible.cfg says, as the pre-flight does: gpu-002's
    known key is another machine's, so it is unreachable and nothing runs there (under
    ansible-runner, which turned host key checking off, it was configured)."""
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)],
                   check=True)
    address = inventory["all"]["hosts"]["gpu-002"]["ansible_host"]
    known = tmp_path / "known_hosts"
    known.write_text(f"{address} " + " ".join((tmp_path / "other.pub").read_text().split()[:2])
                     + "\n")
    swapped = variant(tmp_path, inventory, "swapped.yml", hosts={
        "gpu-002": {"ansible_ssh_common_args": f"-o UserKnownHostsFile={known}"}})
    result = run_playbook(swapped, limit="gpu-002", out=lambda _line: None)
    assert not result.ok
    # Only the powered-down probe, which asks the controller, ran for gpu-002.
    assert result.stats.get("dark") == {"gpu-002": 1}, result.stats
    assert result.changed_tasks == [] and result.stats.get("changed", {}) == {}
    assert any(f.startswith("gpu-002: unreachable: ") and "host key" in f.lower()
               for f in result.failures), result.failures


def test_a_host_still_booting_is_waited_for(cluster):
    """--ssh-wait (what 'pulumi up' gives machines it has just created): gpu-002's sshd is
    stopped and a systemd timer on the node starts it again 8 s later."""
    cluster.on("gpu-002", "systemctl stop ssh.socket ssh.service && systemd-run -q "
                          "--on-active=8 --unit=ms-preflight-ssh-back systemctl start ssh.service")
    try:
        started = time.monotonic()
        rc, table, fails, out = preflight(cluster.inventory, "--ssh-wait", "90")
        waited = time.monotonic() - started
    finally:
        cluster.on("gpu-002", "systemctl start ssh.service", check=False)
    assert (rc, fails) == (0, []), out
    assert table["gpu-002"]["ssh"] == "root"
    assert waited > 8


def test_another_os_and_an_address_on_no_interface_are_refused(cluster, inventory, tmp_path):
    path = variant(tmp_path, inventory, all_vars={"metalslurm_os": "debian12"},
                   hosts={"gpu-001": {"metalslurm_address": "10.78.13.99"}})
    rc, table, fails, out = preflight(path)
    assert rc == 1
    assert {table[n]["os"] for n in NODES} == {"FAIL debian 13"}, out
    assert table["gpu-001"]["address"] == "FAIL 10.78.13.99 not here"
    assert ("FAIL gpu-001: has no interface with 10.78.13.99 (it has 127.0.0.1/8 on lo, "
            "10.78.13.11/24 on eth0): give the host's private address (metalslurm_address), "
            "or add it to the NIC on the private network") in fails
    assert ("FAIL ctl: runs debian 13; metalslurm:os is debian12 (debian 12): reinstall the "
            "host with it, or set metalslurm:os to what every host runs") in fails




def test_the_apt_lock_holder_is_named_and_waited_for(cluster):
    pid = cluster.on("gpu-002", HOLD_APT_LOCK.format(seconds=120)).stdout.strip()
    try:
        time.sleep(1)
        rc, table, fails, out = preflight(cluster.inventory)
        assert rc == 1
        assert table["gpu-002"]["apt lock"] == "FAIL python3", out
        assert fails == [f"FAIL gpu-002: python3 (pid {pid}) holds /var/lib/dpkg/lock-frontend "
                         "after 0 s: let it finish (unattended-upgrades, cloud-init and "
                         "apt-daily end by themselves), or stop it, then run again"]
    finally:
        cluster.on("gpu-002", f"kill {pid}", check=False)
    # A holder that ends within --lock-wait is waited for.
    cluster.on("gpu-002", HOLD_APT_LOCK.format(seconds=4))
    time.sleep(1)
    proc = metalslurm("preflight", "-i", str(cluster.inventory), "--lock-wait", "60",
                      timeout=300)
    assert proc.returncode == 0, proc.stdout


def test_a_firewall_a_cloned_machine_id_and_missing_gpus_are_found(cluster):
    ctl_id = cluster.ctl("cat /etc/machine-id").stdout.strip()
    own_id = cluster.on("gpu-002", "cat /etc/machine-id").stdout.strip()
    lspci = (REPO / "tests" / "fixtures" / "pci" / "h100-pcie-lspci.txt").read_text()
    had_nft = cluster.on("gpu-002", "dpkg-query -W -f '${Status}' nftables 2>/dev/null",
                         check=False).stdout.endswith(" installed")
    cluster.on("gpu-002", f"{APT_GET} install -y -qq nftables "
                          ">/dev/null && nft add table inet msfw && nft add chain inet msfw "
                          "input '{ type filter hook input priority 10; policy drop; }' && "
                          "nft add rule inet msfw input ip saddr 10.78.0.0/16 accept && "
                          "nft add rule inet msfw input ct state established,related accept")
    cluster.on("gpu-002", f"echo {ctl_id} > /etc/machine-id")
    cluster.on("gpu-001", f"cat > {STAND_IN_LSPCI} <<'EOF'\n#!/bin/sh\n# STAND-IN lspci "
                          f"(metalslurm e2e): replays a PCI fixture\ncat <<'PCI'\n{lspci}PCI\n"
                          f"EOF\nchmod 755 {STAND_IN_LSPCI}")
    try:
        rc, table, fails, out = preflight(cluster.inventory)
    finally:
        purge = "" if had_nft else (f"{APT_GET} purge -y -qq "
                                    "nftables >/dev/null; ")
        cluster.on("gpu-002", f"nft delete table inet msfw; {purge}"
                              f"echo {own_id} > /etc/machine-id", check=False)
        cluster.on("gpu-001", f"rm -f {STAND_IN_LSPCI}", check=False)
    assert rc == 1, out
    # Not a failure: the run opens the cluster's ports in it (roles/host_firewall).
    assert table["gpu-002"]["firewall"] == "nftables drop: opened by the run (chain input)"
    assert not [f for f in fails if "firewall" in f or "nftables" in f]
    assert (table["ctl"]["identity"], table["gpu-002"]["identity"]) == (
        "FAIL /etc/machine-id = gpu-002", "FAIL /etc/machine-id = ctl")
    assert table["gpu-001"]["gpus"] == "FAIL 2 of 8 (lspci)"
    assert ("FAIL gpu-001: lspci shows 2 NVIDIA GPU(s); its pool's gpuCount is 8: fix the "
            "pool's gpuCount, or replace the host") in fails
    # Put back: the cluster is fit again.
    rc, _table, fails, out = preflight(cluster.inventory)
    assert (rc, fails) == (0, []), out


def test_preflight_changes_nothing_on_a_host(cluster):
    def state() -> str:
        return cluster.on("gpu-001", "find /etc /var/lib/dpkg /root -xdev -newer /proc/1 "
                                     "-printf '%p %T@\\n' 2>/dev/null | sort | md5sum").stdout

    before = state()
    rc, _table, _fails, out = preflight(cluster.inventory)
    assert rc == 0, out
    assert state() == before
