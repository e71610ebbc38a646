"""metalslurm preflight's parsers and checks, fed with recorded outputs (the e2e module
tests/e2e/test_preflight.py runs it against the local cluster)."""

from __future__ import annotations

import subprocess

import pytest

from infra.ops import preflight
from infra.ops.preflight import Host, Report
from tests.paths import REPO

PCI = REPO / "tests" / "fixtures" / "pci"
# /proc/locks with dpkg's frontend lock held by pid 812 (inode 131 on 254:1, major and minor
# in hex there), a waiter on it, and an unrelated lock.
PROC_LOCKS = """1: POSIX  ADVISORY  WRITE 812 fe:01:131 0 EOF
1: -> POSIX  ADVISORY  WRITE 900 fe:01:131 0 EOF
2: FLOCK  ADVISORY  WRITE 455 00:1a:77 0 EOF"""


def host(**over) -> Host:
    base = {"name": "gpu-001", "address": "10.0.0.11", "target": "debian@203.0.113.5",
            "user": "debian", "become": True, "options": [], "groups": ("all", "slurm_compute"),
            "gpu_count": 8}
    return Host(**{**base, **over})


def probe(**over) -> dict:
    facts = {"sudo": "nopasswd", "os": "debian:13", "addr": ["lo 127.0.0.1/8",
             "eno1 203.0.113.5/24", "ens2f0 10.0.0.11/24"], "smi": "none",
             "lspci": (PCI / "dgx-h100-lspci.txt").read_text(), "hca": "8",
             "df": ["/ 52428800", "/var 20971520"], "nft": "", "unit": []}
    return {**facts, **over}


def checked(facts: dict, privileged: bool = True, **host_over) -> Report:
    report = Report(host(**host_over))
    preflight.check_host(report, facts, "debian13", "10.0.0.0/24", privileged)
    return report


@pytest.mark.parametrize(("stderr", "via", "what"), [
    ("@@@@\r\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\r\n", False,
     "host key changed"),
    ("Host key verification failed.\r\n", False, "host key unknown"),
    ("debian@10.0.0.11: Permission denied (publickey).\r\n", True, "key refused"),
    ("channel 0: open failed: connect failed: No route to host\r\n"
     "stdio forwarding failed\r\nConnection closed by UNKNOWN port 65535\r\n", True,
     "unreachable from the bastion"),
    ("kex_exchange_identification: Connection closed by remote host\r\n"
     "Connection closed by UNKNOWN port 65535\r\n", True, "unreachable from the bastion"),
    ("ssh: connect to host 10.0.0.99 port 22: Connection timed out\r\n", False, "unreachable"),
    ("ssh: connect to host 10.0.0.99 port 22: Connection refused\r\n", False, "unreachable"),
    ("kex_exchange_identification: banner line contains invalid characters\r\n", False,
     "ssh failed"),
])
def test_ssh_failures_are_told_apart(stderr, via, what):
    found, fix = preflight.classify_ssh(stderr, via)
    assert found == what
    assert fix


def test_a_fit_host_passes_every_check():
    report = checked(probe())
    assert {c: str(v) for c, v in report.cells.items()} == {
        "privilege": "sudo", "os": "debian13", "address": "10.0.0.11 on ens2f0",
        "gpus": "8 (lspci)", "hca": "8", "disk": "/ 50G /var 20G", "firewall": "none"}
    assert report.problems == []


def test_the_private_address_on_a_second_nic_is_named_even_with_the_default_route_elsewhere():
    assert str(checked(probe()).cells["address"]) == "10.0.0.11 on ens2f0"


def test_each_failure_names_the_host_what_was_found_and_what_to_do():
    report = checked(probe(sudo="no", os="ubuntu:24.04", addr=["eno1 203.0.113.5/24"],
                           smi="7", df=["/ 4194304"]), privileged=False)
    assert report.problems == [
        "gpu-001: debian cannot sudo without a password: give it with --become-password-file "
        "or --ask-become-pass, or allow NOPASSWD sudo",
        "gpu-001: runs ubuntu 24.04; metalslurm:os is debian13 (debian 13): reinstall the host "
        "with it, or set metalslurm:os to what every host runs",
        "gpu-001: has no interface with 10.0.0.11 (it has 203.0.113.5/24 on eno1): give the "
        "host's private address (metalslurm_address), or add it to the NIC on the private "
        "network",
        "gpu-001: nvidia-smi shows 7 NVIDIA GPU(s); its pool's gpuCount is 8: fix the pool's "
        "gpuCount, or replace the host",
        "gpu-001: / has 4.0 GiB free, below 10 GiB (the packages (Slurm, MariaDB, OpenMPI, "
        "the NVIDIA driver and its DKMS build, Enroot) take about 4 GiB and apt keeps their "
        "archives while installing): free space or grow the filesystem; /var has 4.0 GiB "
        "free, below 5 GiB (slurmctld's state, the accounting database, Prometheus's data "
        "and the journal grow under /var): free space or grow the filesystem"]
    assert str(report.cells["firewall"]) == "not read (no privilege)"


def test_a_user_without_become_is_refused_even_with_sudo():
    report = checked(probe(), become=False)
    assert report.problems[0] == ("gpu-001: connects as debian without become: set "
                                  "ansible_become: true (sudo), or connect as root")


def test_gpus_are_counted_on_the_pci_bus_with_the_nvidia_roles_parser():
    assert str(checked(probe(lspci=(PCI / "h100-pcie-lspci.txt").read_text()),
                       gpu_count=2).cells["gpus"]) == "2 (lspci)"
    assert str(checked(probe(lspci="")).cells["gpus"]) == "FAIL 0 of 8 (lspci)"
    # A node that is not a compute node is not asked for GPUs.
    assert checked(probe(), groups=("all", "login")).cells["gpus"].status == "skip"


def test_the_local_providers_fake_gpus_are_not_counted():
    report = Report(host())
    preflight.check_host(report, probe(lspci=""), "debian13", "10.0.0.0/24", True, local=True)
    assert str(report.cells["gpus"]) == "fake (local)"


def test_the_apt_lock_holder_is_named_and_a_waiter_is_not():
    facts = preflight.parse_probe(
        "lockfile=/var/lib/dpkg/lock-frontend 254:1:131\nlockfile=/var/lib/dpkg/lock 254:1:130\n"
        f"==locks\n{PROC_LOCKS}\n==end\ncomm=812 unattended-upgr\ncomm=900 apt-get\n"
        "comm=455 cron\n")
    assert preflight.lock_holders(facts) == [
        "unattended-upgr (pid 812) holds /var/lib/dpkg/lock-frontend"]
    assert preflight.lock_holders(preflight.parse_probe("==locks\n==end\n")) == []


DROPPING = ("table inet filter {\n\tchain input {\n\t\ttype filter hook input priority "
            "filter; policy drop;\n\t\tct state established accept\n\t\ttcp dport 22 accept"
            "\n\t}\n}")


@pytest.mark.parametrize(("facts", "open_firewall", "refused", "opened"), [
    ({"nft": DROPPING}, True, [], ["input"]),
    # The host keeps its firewall itself (host_firewall_enabled: false).
    ({"nft": DROPPING}, False, ["nftables chain input drops input, no rule names 10.0.0.0/24 "
                                "or 6817, and host_firewall_enabled is false"], []),
    ({"nft": DROPPING.replace("policy drop;", "policy drop;\n\t\tip saddr 10.0.0.0/24 accept")},
     False, [], []),
    ({"nft": DROPPING.replace("policy drop", "policy accept")}, True, [], []),
    # A bridge's input hook is not the host's: not opened, not counted.
    ({"nft": DROPPING.replace("table inet", "table bridge")}, True, [], []),
    ({"ufw_enabled": "yes", "ufw": "Status: active\n22/tcp ALLOW Anywhere"}, True,
     ["ufw is enabled and allows neither 10.0.0.0/24 nor 6817"], []),
    ({"ufw_enabled": "yes", "ufw": "Status: active\nAnywhere ALLOW 10.0.0.0/24"}, True, [], []),
    # Ubuntu: ufw's unit is active while ufw itself is off.
    ({"unit": ["ufw active"], "ufw": "Status: inactive"}, True, [], []),
    ({"unit": ["firewalld active"]}, True, ["firewalld is active (its zones are not read here)"],
     []),
    # firewalld the operator keeps (openFirewall false): not refused (check_host warns).
    ({"unit": ["firewalld active"]}, False, [], []),
])
def test_a_firewall_that_would_block_the_cluster_is_found(facts, open_firewall, refused, opened):
    assert preflight.firewall_findings(facts, "10.0.0.0/24", open_firewall) == (refused, opened)


def test_a_firewalld_the_operator_keeps_is_a_warning_not_a_refusal():
    """The advice the refusal below gives (openFirewall: false) is taken: the table says
    the host's firewalld is the operator's, whose zones the pre-flight does not read."""
    report = Report(host(name="gpu-001", open_firewall=False))
    preflight.check_host(report, {"sudo": "root", "unit": ["firewalld active"]}, "debian13",
                         "10.0.0.0/24", privileged=True)
    assert str(report.cells["firewall"]) == "WARN firewalld, kept by you (zones not read)"
    assert not any("firewall" in p for p in report.problems), report.problems


def test_a_firewall_the_roles_cannot_open_is_refused_with_the_ports_to_open_by_hand():
    report = Report(host(name="gpu-001"))
    preflight.check_host(report, {"sudo": "root", "unit": ["firewalld active"]}, "debian13",
                         "10.0.0.0/24", privileged=True)
    assert str(report.cells["firewall"]) == "FAIL blocks"
    assert report.problems[-1] == (
        "gpu-001: firewalld is active (its zones are not read here): the roles open nftables "
        "only; stop it, or let in by hand SSH 22/tcp, slurmctld 6817/tcp, slurmd and sackd "
        "6818/tcp, slurmdbd 6819/tcp, srun 61001-64000/tcp, NFS 2049/tcp from the private "
        "network; the exporters (9100, 9341, 9400/tcp) from the monitoring host; any port "
        "between compute nodes (10.0.0.0/24), and set openFirewall: false for the host "
        "(metalslurm:byo.hosts; host_firewall_enabled: false in an inventory)")


def test_clocks_are_compared_with_the_controllers_and_cloned_identities_found():
    reports = []
    for name, offset, mid in (("ctl", 100.0, "a"), ("gpu-001", 101.5, "b"),
                              ("gpu-002", 100.0 - 75, "a"), ("gpu-003", 103.0, "c")):
        r = Report(host(name=name))
        r.facts = {"clock_offset": offset, "machine_id": mid, "hostkey": [f"key-{name}"]}
        reports.append(r)
    preflight.compare_hosts(reports, "ctl")
    assert [str(r.cells["clock"]) for r in reports] == [
        "reference", "+1.5 s", "FAIL -75.0 s", "WARN +3.0 s"]
    assert [str(r.cells["identity"]) for r in reports] == [
        "FAIL /etc/machine-id = gpu-002", "unique", "FAIL /etc/machine-id = ctl", "unique"]
    assert "gpu-002: its clock is -75 s from ctl's, beyond 60 s" in reports[2].problems[0]


def test_inventory_variables_merge_as_ansibles_and_a_bastion_is_found():
    document = {"all": {
        "vars": {"ansible_user": "root", "metalslurm_os": "debian13",
                 "ansible_ssh_common_args":
                     "-o ProxyJump=ops@198.51.100.7 -o StrictHostKeyChecking=yes"},
        "hosts": {"ctl": {"ansible_host": "10.0.0.10", "ansible_user": "debian"},
                  "gpu-001": {"ansible_host": "10.0.0.11", "metalslurm_gpu_count": 8,
                              "metalslurm_node_state": "cloud"}},
        "children": {"slurm_controller": {"hosts": {"ctl": None}},
                     "slurm_compute": {"vars": {"ansible_become": True},
                                       "hosts": {"gpu-001": None}}}}}
    ctl, gpu = preflight.hosts_from_inventory(document)
    assert (ctl.target, ctl.become, ctl.groups) == ("debian@10.0.0.10", False,
                                                   ("all", "slurm_controller"))
    assert (gpu.target, gpu.become, gpu.gpu_count, gpu.elastic) == ("root@10.0.0.11", True, 8,
                                                                    True)
    assert ctl.bastion == "ops@198.51.100.7"
    assert "-o" in ctl.options and "ProxyJump=ops@198.51.100.7" in ctl.options
    # The bastion is reached as ssh reaches a ProxyJump host: with -F only, not the
    # destination's -o and -i.
    assert preflight._jump_options([*ctl.options, "-F", "/etc/ms.cfg"]) == [
        "-o", "BatchMode=yes", "-o", "ConnectTimeout=15", "-F", "/etc/ms.cfg"]
    assert preflight._jump(["-J", "a@b"]) == "a@b"


def test_the_table_has_a_row_per_host_and_a_column_per_check():
    report = checked(probe())
    report.cells["ssh"] = preflight.Cell("ok", "debian")
    lines = preflight.format_table([report])
    assert lines[0].split() == ["host", "ssh", "privilege", "os", "address", "gpus", "hca",
                                "clock", "disk", "apt", "lock", "firewall", "identity"]
    assert lines[1].split()[:5] == ["gpu-001", "debian", "sudo", "debian13", "10.0.0.11"]


@pytest.mark.parametrize(("stderr", "wait", "tries"), [
    ("ssh: connect to host 10.0.0.11 port 22: Connection refused\r\n", 60, 3),  # booting
    ("ssh: connect to host 10.0.0.11 port 22: Connection refused\r\n", 0, 1),   # by hand
    ("debian@10.0.0.11: Permission denied (publickey).\r\n", 60, 1),  # waiting cures nothing
    ("Host key verification failed.\r\n", 60, 1),
])
def test_a_host_still_booting_is_tried_again_up_to_the_wait(monkeypatch, stderr, wait, tries):
    monkeypatch.setattr(preflight, "SSH_POLL_S", 0.0)
    answers = [subprocess.CompletedProcess([], 255, "", stderr)] * 2 + [
        subprocess.CompletedProcess([], 0, "", "")]
    calls = []

    def attempt():
        calls.append(1)
        return answers[len(calls) - 1]

    proc = preflight._retry_while_booting(attempt, False, wait)
    assert len(calls) == tries
    assert proc.returncode == (0 if tries == 3 else 255)


def test_a_host_that_never_comes_up_fails_once_the_wait_is_over(monkeypatch):
    monkeypatch.setattr(preflight, "SSH_POLL_S", 0.01)
    refused = subprocess.CompletedProcess([], 255, "", "ssh: connect to host 10.0.0.11 port "
                                          "22: No route to host\r\n")
    calls = []
    proc = preflight._retry_while_booting(lambda: calls.append(1) or refused, True, 0.05)
    assert proc is refused and 2 <= len(calls) <= 10


def test_an_empty_answer_to_the_sudo_prompt_is_no_password_and_spaces_are_kept(monkeypatch):
    """-K answered with nothing: no password (Ansible would refuse an empty one); a
    password's own spaces reach ansible-playbook as typed."""
    import getpass

    monkeypatch.setattr(getpass, "getpass", lambda _prompt: "")
    assert preflight.become_password(None, ask_become_pass=True) is None
    monkeypatch.setattr(getpass, "getpass", lambda _prompt: " pw with spaces ")
    assert preflight.become_password(None, ask_become_pass=True) == " pw with spaces "
    assert preflight.become_password(None, ask_become_pass=False) is None
