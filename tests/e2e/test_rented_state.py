"""The Debian 13 cluster's nodes given what rented servers come with, then configured again.

- A host firewall as a provider's image ships it: nftables, an input chain whose policy is
  drop and that lets in SSH only (real nftables, in every node). Before the run it blocks
  the cluster; the run puts the cluster's openings at the top of that chain and no more
  (roles/host_firewall); they survive nftables' restarts and reloads; a ruleset reloaded by
  hand is repaired by the next run, which changes nothing else; verify's reachability check
  fails while the port is shut.
- cloud-init's and needrestart's configuration directories (STAND-INs: the directories
  alone, made here; the files the roles write into them are read by needrestart's own
  language, Perl, here, and by cloud-init in the look-alike servers' module), and
  unattended-upgrades' settings as apt reads them.

Everything made for the test is undone after it (the firewall, the directories, the files).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from infra.ops.configure import run_playbook
from tests.e2e.cluster import APT_GET, REPO, wait_for

NODES = ("ctl", "gpu-001", "gpu-002", "login-001")
# As a provider's image ships it: SSH in, the rest dropped.
RENTED_RULESET = """#!/usr/sbin/nft -f
flush ruleset
table inet filter {
	chain input {
		type filter hook input priority filter; policy drop;
		iif lo accept
		ct state established,related accept
		tcp dport 22 accept
	}
}
"""
OPEN_TASK = "Put the cluster's openings at the top of the host's input chains"
CLOUD_CFG = "/etc/cloud/cloud.cfg.d/99-metalslurm.cfg"
NEEDRESTART = "/etc/needrestart/conf.d/metalslurm.conf"
DROP_IN = "/etc/systemd/system/nftables.service.d/metalslurm-firewall.conf"
REPAIR_TIMER = "metalslurm-firewall-repair.timer"
START_REPAIR_TASK = "Start the timer that puts back openings a ruleset loaded by hand took out"
REREGISTER = "Have slurmd register again now that slurmctld reaches it"
# The name of the job that crosses the opened firewall (its sacct record is read by name).
TRAFFIC_JOB = "rented-state-traffic"


def reach(cluster, node: str, address: str, port: int) -> bool:
    return cluster.on(node, f"timeout 3 bash -c 'exec 3<>/dev/tcp/{address}/{port}'",
                      check=False).returncode == 0


def ours(cluster, node: str) -> list[str]:
    """The comments of the input chain's rules, in order (ours begin with 'metalslurm')."""
    out = cluster.on(node, "nft -j list chain inet filter input").stdout
    return [item["rule"].get("comment", "-") for item in json.loads(out)["nftables"]
            if "rule" in item]


def verify_network(cluster) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REPO / ".venv/bin/pytest"), "-q", "-p", "no:cacheprovider", "--hosts=ansible://all",
         f"--ansible-inventory={cluster.inventory}", "tests/verify/test_network.py"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def cluster(debian13):
    debian13.ready_for_configures()
    saved = {}
    for node in NODES:
        had = debian13.on(node, "dpkg-query -W -f '${Status}' nftables 2>/dev/null",
                          check=False).stdout.endswith(" installed")
        active = debian13.on(node, "systemctl is-active nftables", check=False).stdout.strip()
        saved[node] = (had, active == "active",
                       debian13.on(node, "cat /etc/nftables.conf 2>/dev/null",
                                   check=False).stdout)
    # A setup that fails half-way restores too: a node left with the rented ruleset (SSH
    # only) would fail the modules after this one on the shared cluster.
    try:
        for node in NODES:
            # As a server comes: without what an earlier run of the role left (the run puts
            # it back; the teardown leaves it, as a configured cluster has it).
            debian13.on(node, "systemctl disable -q metalslurm-firewall 2>/dev/null; "
                              f"systemctl disable -q --now {REPAIR_TIMER} 2>/dev/null; rm -f "
                              f"{DROP_IN} /etc/systemd/system/metalslurm-firewall.service "
                              f"/etc/systemd/system/{REPAIR_TIMER} "
                              "/etc/systemd/system/metalslurm-firewall-repair.service "
                              "/usr/local/sbin/metalslurm-firewall /etc/metalslurm-firewall.json; "
                              "systemctl daemon-reload")
            debian13.on(node, f"{APT_GET} install -y -qq nftables >/dev/null && cat > "
                              f"/etc/nftables.conf <<'EOF'\n{RENTED_RULESET}EOF\n"
                              "systemctl restart nftables")
        debian13.on("login-001", "mkdir -p /etc/cloud/cloud.cfg.d")
        debian13.on("gpu-001", "mkdir -p /etc/needrestart/conf.d")
        yield debian13
    finally:
        for node, (had, active, conf) in saved.items():
            restore = (f"cat > /etc/nftables.conf <<'EOF'\n{conf}EOF\n" if conf
                       else "rm -f /etc/nftables.conf; ")
            restore += ("systemctl restart nftables" if active else "systemctl stop nftables; "
                        "nft delete table inet filter 2>/dev/null; true")
            if not had:
                restore += f"; {APT_GET} purge -y -qq nftables >/dev/null"
            debian13.on(node, restore, check=False)
        debian13.on("login-001", f"rm -f {CLOUD_CFG}; rmdir /etc/cloud/cloud.cfg.d /etc/cloud",
                    check=False)
        debian13.on("gpu-001", f"rm -f {NEEDRESTART}; rmdir /etc/needrestart/conf.d "
                               "/etc/needrestart", check=False)


def test_the_rented_firewall_shuts_the_cluster_out(cluster):
    # slurmctld cannot reach slurmd, nor a login node slurmctld: the stand-in is a real one.
    assert not reach(cluster, "ctl", "10.78.13.11", 6818)
    assert not reach(cluster, "login-001", "10.78.13.10", 6817)
    assert reach(cluster, "login-001", "10.78.13.10", 22)


def test_a_run_opens_exactly_the_cluster_s_traffic(cluster):
    result = run_playbook(cluster.inventory, out=lambda _line: None)
    assert result.ok, result.failures
    assert sorted(h for h, task in result.changed_tasks if task == OPEN_TASK) == sorted(NODES)
    # Where slurmd runs, it registers again at once (slurmctld could not reach it).
    assert sorted(h for h, task in result.changed_tasks if task == REREGISTER) == [
        "gpu-001", "gpu-002"]
    assert ("login-001: cloud-init's hostname and /etc/hosts management turned off for "
            f"good ({CLOUD_CFG}: preserve_hostname, manage_etc_hosts; where the provider's "
            "user-data turns manage_etc_hosts back on, its hosts template has the cluster's "
            "names)") in result.notes
    assert [c.split(":")[0][:10] + c.split(":", 1)[1] for c in ours(cluster, "gpu-001")[:4]] == [
        "metalslurm replies to this host's own connections",
        "metalslurm ssh slurmd srun from the private network",
        "metalslurm exporters from the monitoring host",
        "metalslurm job traffic between compute nodes (MPI, NCCL, PMIx)"]
    # The host's own rules stay, after the cluster's.
    assert ours(cluster, "gpu-001")[4:] == ["-", "-", "-"]
    # The cluster works: a job across both nodes (srun's ports, slurmd's, the steps'), and
    # accounting from the login node (slurmdbd's port).
    out = cluster.login(f"srun -N2 -w gpu-001,gpu-002 --time=1 --job-name={TRAFFIC_JOB} "
                        "hostname | sort", user="alice")
    assert out.stdout.split() == ["gpu-001", "gpu-002"]
    # The job's end reaches slurmdbd a moment after srun returns (slurmctld's agent queue):
    # its record is read until it has ended, then exactly.

    def recorded() -> list[str]:
        return cluster.login(f"sacct -n -X -u alice -S now-10minutes --name={TRAFFIC_JOB} "
                             "--format=State", user="alice").stdout.split()

    wait_for(f"job {TRAFFIC_JOB}'s end in slurmdbd, read from the login node",
             lambda: recorded() not in ([], ["RUNNING"], ["COMPLETING"]), timeout=60)
    assert recorded() == ["COMPLETED"]
    # Exactly: node_exporter on the controller answers the monitoring host (the controller
    # itself), not the login node; the controller's slurmdbd, not a compute node's 6819.
    assert not reach(cluster, "login-001", "10.78.13.10", 9100)
    assert reach(cluster, "ctl", "10.78.13.10", 9100)
    assert not reach(cluster, "gpu-001", "10.78.13.12", 9341)


def test_the_openings_survive_nftables_restarts_and_reloads(cluster):
    for action in ("restart", "reload"):
        cluster.on("gpu-001", f"systemctl {action} nftables")
        assert [c.split(" ")[0] for c in ours(cluster, "gpu-001")] == \
            ["metalslurm"] * 4 + ["-"] * 3, action
        assert reach(cluster, "ctl", "10.78.13.11", 6818), action


def test_a_ruleset_reloaded_by_hand_fails_verify_and_the_next_run_repairs_it(cluster):
    passed = verify_network(cluster)
    assert passed.returncode == 0, passed.stdout[-3000:]
    # The DCGM host engine's guard is there only while a (stand-in) NVIDIA driver is
    # installed (test_gpu_driver's and test_tenants' runs); the reload flushes it too.
    guard = "nft list table inet metalslurm_dcgm_guard"
    had_guard = cluster.on("gpu-002", guard, check=False).returncode == 0
    # The repair timer stopped first: it would put the openings back within its interval
    # (the next test), before verify looks; and a repair the timer has just started, which
    # would put them back after the reload (seen in a rehearsal), waited for.
    cluster.on("gpu-002", f"systemctl stop {REPAIR_TIMER} && "
                          f"systemctl stop {REPAIR_TIMER.replace('.timer', '.service')}")
    cluster.on("gpu-002", "nft -f /etc/nftables.conf")  # behind systemd's back
    failed = verify_network(cluster)
    assert failed.returncode == 1
    assert "assert ['gpu-002 10.78.13.12:6818'] == []" in failed.stdout
    # The next run on that node (limited: the whole cluster's converged runs are the other
    # modules' to check) repairs exactly that, and starts the timer again.
    result = run_playbook(cluster.inventory, limit="gpu-002", tags="configure,service",
                          out=lambda _line: None)
    assert result.ok, result.failures
    # The guard, where there was one, is put back too (roles/nvidia_gpu); slurmd, which
    # slurmctld could not reach, registers again at once (the handler) instead of at the
    # controller's next ping.
    assert sorted(result.changed_tasks) == sorted(
        [("gpu-002", START_REPAIR_TASK), ("gpu-002", OPEN_TASK), ("gpu-002", REREGISTER)]
        + ([("gpu-002", "Apply a changed or missing guard now")] if had_guard else []))
    assert cluster.on("gpu-002", f"systemctl is-active {REPAIR_TIMER}").stdout.strip() == "active"
    assert reach(cluster, "ctl", "10.78.13.12", 6818)
    assert (cluster.on("gpu-002", guard, check=False).returncode == 0) == had_guard


def test_a_ruleset_reloaded_by_hand_is_repaired_by_the_timer_within_its_interval(cluster):
    """Between runs: metalslurm-firewall-repair.timer (every 60 s, the role's default) puts
    the openings back and says so in the journal; the host's own rules stay after them."""
    interval = cluster.on("gpu-001", f"systemctl show -P TimersMonotonic {REPAIR_TIMER}").stdout
    assert "OnUnitActiveUSec=1min" in interval, interval
    since = cluster.on("gpu-001", "date '+%Y-%m-%d %H:%M:%S'").stdout.strip()
    # Behind systemd's back; the chain read in the same breath (the timer may fire any time).
    loaded = cluster.on("gpu-001", "nft -f /etc/nftables.conf && "
                                   "nft -j list chain inet filter input").stdout
    assert [item["rule"].get("comment", "-") for item in json.loads(loaded)["nftables"]
            if "rule" in item] == ["-", "-", "-"]
    wait_for("the timer to put the openings back",
             lambda: reach(cluster, "ctl", cluster.address("gpu-001"), 6818), timeout=90)
    assert [c.split(" ")[0] for c in ours(cluster, "gpu-001")] == ["metalslurm"] * 4 + ["-"] * 3
    journal = cluster.on("gpu-001", "journalctl -q -o cat -u metalslurm-firewall-repair "
                                    f"--since '{since}'").stdout
    assert "opened the cluster's traffic in inet filter input" in journal, journal


def test_ufw_is_refused_with_the_ports_to_open_by_hand(cluster):
    # A STAND-IN ufw: its own switch, /etc/ufw/ufw.conf's ENABLED=yes, which the role reads
    # (ufw itself is not installed in the nodes; on Ubuntu its unit is active even while it
    # is off, so the unit is not asked).
    cluster.on("gpu-002", "mkdir -p /etc/ufw && echo ENABLED=yes > /etc/ufw/ufw.conf")
    try:
        result = run_playbook(cluster.inventory, limit="gpu-002", tags="configure",
                              out=lambda _line: None)
    finally:
        cluster.on("gpu-002", "rm -rf /etc/ufw", check=False)
    assert not result.ok
    assert result.failures == [
        "gpu-002: Refuse a firewall this role cannot open (ufw, firewalld, iptables): gpu-002: "
        "ufw is enabled: their rules are rewritten by the tool that owns them: open them "
        "there, or stop it; let in by hand SSH 22/tcp, slurmctld 6817/tcp, slurmd and sackd "
        "6818/tcp, slurmdbd 6819/tcp, srun 61001-64000/tcp, NFS 2049/tcp from the private "
        "network; the exporters (9100, 9341, 9400/tcp) from the monitoring host; any port "
        "between compute nodes (10.78.13.0/24), and set host_firewall_enabled to false for "
        "this host"]


def test_unattended_upgrades_and_needrestart_leave_the_cluster_s_packages_alone(cluster):
    held = cluster.on("gpu-002", "apt-config dump Unattended-Upgrade").stdout.splitlines()
    assert 'Unattended-Upgrade::Package-Blacklist:: "^slurm";' in held
    assert 'Unattended-Upgrade::Package-Blacklist:: "^nvidia";' in held
    assert 'Unattended-Upgrade::Automatic-Reboot "false";' in held
    kept = cluster.on("gpu-001", "perl -e 'our %nrconf; do \"" + NEEDRESTART + "\"; die $@ if $@; "
                      "for my $u (qw(slurmd.service munge.service ssh.service)) { "
                      "my ($k) = grep { $u =~ $_ } keys %{$nrconf{override_rc}}; "
                      "print \"$u \", (defined $k ? $nrconf{override_rc}{$k} : \"restart\"), "
                      "\"\\n\" }'").stdout
    assert kept.splitlines() == ["slurmd.service 0", "munge.service 0", "ssh.service restart"]
    # Only where the program is: no needrestart on the controller, no cloud-init on gpu-001.
    assert cluster.ctl(f"test -e {NEEDRESTART}", check=False).returncode == 1
    assert cluster.on("gpu-001", f"test -e {CLOUD_CFG}", check=False).returncode == 1
