"""``metalslurm preflight``: is every host of an inventory fit to become a cluster node?

Read only: one SSH connection per host, as Ansible would make it (the inventory's
``ansible_host``, ``ansible_port``, ``ansible_user``, ``ansible_ssh_private_key_file`` and
``ansible_ssh_common_args``, with a bastion's ``ProxyJump``), all hosts at once, two
commands on it (what any user may read, then the firewall's rules with the configured
privilege). The result is one table, host by check, and one line per failure naming the
host, what was found and what to do. Nothing is changed on any host, whatever it finds.

The checks and their thresholds are here (one owner); docs/how-to/rented-servers.md says
why each exists. The GPU count reads ``lspci`` with the NVIDIA role's own parser.
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
import shlex
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils import firewall, slurm_leaving
from ansible_collections.metalslurm.cluster.plugins.module_utils.operating_systems import (
    by_id,
    by_release,
)

from infra.accept.remote import ssh_options
from infra.ops.configure import PASSWORD_MAX_BYTES
from infra.ops.inventory_file import load_inventory
from infra.ops.output import say
from infra.stack.inputs import InputError, read_text_argument

REPO = Path(__file__).resolve().parents[2]
CHECKS = ("ssh", "privilege", "os", "address", "gpus", "hca", "clock", "disk", "apt lock",
          "firewall", "identity")
SSH_TIMEOUT_S = 15
# Clock offset from the controller. munge refuses a credential older than its TTL (300 s)
# and from the future; Slurm's time limits, accounting and TLS drift with it; the roles
# start chrony, which slews slowly, so a large offset is fixed before, not by, the run.
CLOCK_WARN_S = 2.0
CLOCK_FAIL_S = 60.0
# Free space the roles need (GiB), and why.
DISK_FLOORS_GIB = {
    "/": (10, "the packages (Slurm, MariaDB, OpenMPI, the NVIDIA driver and its DKMS build, "
               "Enroot) take about 4 GiB and apt keeps their archives while installing"),
    "/var": (5, "slurmctld's state, the accounting database, Prometheus's data and the "
                "journal grow under /var"),
}
LOCK_FILES = ("/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock", "/var/lib/apt/lists/lock",
              "/var/cache/apt/archives/lock")
LOCK_WAIT_S = 120.0
LOCK_WAIT_MAX_S = 3600.0
LOCK_POLL_S = 2.0
# How long an unreachable host (or bastion) is tried again: 0 by hand (it fails at once);
# after 'pulumi up' creates machines, their sshd comes up minutes later
# (infra/pulumi/configure.py passes its own).
SSH_WAIT_S = 0.0
SSH_WAIT_MAX_S = 3600.0
SSH_POLL_S = 5.0
# ssh's failures that waiting may cure (a machine still booting), as classify_ssh names them.
WAITABLE = ("unreachable", "unreachable from the bastion")
# The part any user may run: one key=value per line, lspci's and /proc/locks' lines
# between markers.
PROBE = r"""
echo "uid=$(id -u)"
if [ "$(id -u)" = 0 ]; then echo sudo=root
elif sudo -n true 2>/dev/null; then echo sudo=nopasswd
else echo sudo=no; fi
. /etc/os-release 2>/dev/null && echo "os=$ID:$VERSION_ID"
ip -o -4 addr show 2>/dev/null | while read -r _n dev _f addr _rest; do echo "addr=$dev $addr"; done
echo "==lspci"; lspci -nn -D 2>/dev/null; echo "==end"
if command -v nvidia-smi >/dev/null 2>&1; then
  echo "smi=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')"
else echo smi=none; fi
echo "hca=$(ls /sys/class/infiniband 2>/dev/null | wc -l)"
df -P -k / /var 2>/dev/null | while read -r _d _t _u avail _p mnt; do echo "df=$mnt $avail"; done
echo "machine_id=$(cat /etc/machine-id 2>/dev/null)"
for k in /etc/ssh/ssh_host_*_key.pub; do [ -r "$k" ] && echo "hostkey=$(cut -d' ' -f2 "$k")"; done
for f in LOCK_FILES; do
  [ -e "$f" ] && echo "lockfile=$f $(stat -L -c '%Hd:%Ld:%i' "$f" 2>/dev/null)"
done
echo "==locks"; cat /proc/locks 2>/dev/null; echo "==end"
for p in $(awk '{print ($2 == "->") ? $6 : $5}' /proc/locks 2>/dev/null | sort -u); do
  echo "comm=$p $(cat /proc/$p/comm 2>/dev/null)"
done
for s in ufw firewalld nftables; do echo "unit=$s $(systemctl is-active $s 2>/dev/null)"; done
grep -qs '^ENABLED=yes' /etc/ufw/ufw.conf && echo ufw_enabled=yes
echo "clock=$(date +%s.%N)"
""".replace("LOCK_FILES", " ".join(LOCK_FILES))
# The part that needs root: the firewall's rules.
PRIVILEGED = r"""
echo "==nft"; nft list ruleset 2>/dev/null; echo "==end"
echo "==ufw"; ufw status 2>/dev/null; echo "==end"
"""


class PreflightError(RuntimeError):
    """The preflight could not run at all (not a host's failure)."""


@dataclass
class Cell:
    status: str  # ok | warn | fail | skip
    text: str

    def __str__(self) -> str:
        mark = {"ok": "", "warn": "WARN ", "fail": "FAIL ", "skip": ""}[self.status]
        return f"{mark}{self.text}"


@dataclass
class Host:
    """An inventory host as preflight reaches it."""

    name: str
    address: str  # the private address (metalslurm_address)
    target: str  # user@host that ssh connects to
    user: str
    become: bool
    options: list[str]  # ssh's options, ProxyJump included
    groups: tuple[str, ...] = ()
    gpu_count: int = 0
    elastic: bool = False
    bastion: str | None = None
    # The run opens an nftables firewall (roles/host_firewall) unless the host turns it off.
    open_firewall: bool = True


@dataclass
class Report:
    host: Host
    cells: dict[str, Cell] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def put(self, check: str, status: str, text: str, problem: str | None = None) -> None:
        self.cells[check] = Cell(status, text)
        if status == "fail":
            self.problems.append(f"{self.host.name}: {problem or text}")

    @property
    def failed(self) -> bool:
        return any(c.status == "fail" for c in self.cells.values())


# -- the inventory ---------------------------------------------------------------------


def _walk_groups(document: Mapping[Any, Any]) -> dict[str, tuple[list[str], dict[str, Any]]]:
    """host -> (its groups, its variables), as Ansible merges them: the groups' variables,
    parents before children, then the host's own (wherever it is listed)."""
    groups: dict[str, list[str]] = {}
    layers: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    own: dict[str, dict[str, Any]] = {}

    def walk(name: str, data: Any, chain: list[tuple[str, int, dict[str, Any]]],
             depth: int) -> None:
        if not isinstance(data, Mapping) or depth > 50:
            return
        chain = [*chain, (name, depth, dict(data.get("vars") or {}))]
        for host, host_vars in (data.get("hosts") or {}).items():
            host = str(host)
            seen = groups.setdefault(host, [])
            seen += [g for g, _d, _v in chain if g not in seen]
            layers.setdefault(host, []).extend((d, v) for _g, d, v in chain)
            own.setdefault(host, {}).update(host_vars or {})
        for child, child_data in (data.get("children") or {}).items():
            walk(str(child), child_data, chain, depth + 1)

    for name, data in document.items():
        walk(str(name), data, [], 0)
    found = {}
    for host, host_groups in groups.items():
        merged: dict[str, Any] = {}
        for _depth, group_vars in sorted(layers[host], key=lambda layer: layer[0]):
            merged.update(group_vars)
        found[host] = (host_groups, {**merged, **own[host]})
    return found


def _jump(options: Sequence[str]) -> str | None:
    """The ProxyJump destination in ssh options (-J X or -o ProxyJump=X), if any."""
    for i, opt in enumerate(options):
        if opt == "-J" and i + 1 < len(options):
            return options[i + 1]
        value = opt[2:] if opt.startswith("-o") and len(opt) > 2 else (
            options[i + 1] if opt == "-o" and i + 1 < len(options) else "")
        if value.lower().startswith("proxyjump="):
            return value.split("=", 1)[1]
    return None


def _jump_options(options: Sequence[str]) -> list[str]:
    """The options ssh gives the connection to a ProxyJump host: its config file (-F) only,
    not the -o, -i or -p given for the destination (so the operator's ~/.ssh/config, or the
    -F file, says how to reach the bastion)."""
    out = ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={SSH_TIMEOUT_S}"]
    for i, opt in enumerate(options):
        if opt == "-F" and i + 1 < len(options):
            out += ["-F", options[i + 1]]
        elif opt.startswith("-F") and len(opt) > 2:
            out.append(opt)
    return out


def hosts_from_inventory(document: Mapping[Any, Any]) -> list[Host]:
    """Every host of the inventory, in file order, with how to reach it."""
    hosts = []
    for name, (groups, hv) in _walk_groups(document).items():
        user = str(hv.get("ansible_user") or "root")
        options = ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={SSH_TIMEOUT_S}",
                   *ssh_options(hv)]
        options += shlex.split(str(hv.get("ansible_ssh_extra_args") or ""))
        address = str(hv.get("ansible_host") or name)
        hosts.append(Host(
            name=name, address=str(hv.get("metalslurm_address") or address),
            target=f"{user}@{address}", user=user,
            become=bool(hv.get("ansible_become")), options=options, groups=tuple(groups),
            gpu_count=int(hv.get("metalslurm_gpu_count") or 0),
            elastic=hv.get("metalslurm_node_state") == "cloud", bastion=_jump(options),
            open_firewall=str(hv.get("host_firewall_enabled", True)).lower()
            not in ("false", "no", "0")))
    return hosts


# -- SSH -------------------------------------------------------------------------------


def classify_ssh(stderr: str, via_bastion: bool) -> tuple[str, str]:
    """(what ssh's failure was, what to do), from its stderr."""
    text = stderr.replace("\r", "")
    last = next((line for line in reversed(text.splitlines()) if line.strip()), "no message")
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in text:
        return ("host key changed", "if the server was reinstalled, remove its old key "
                "(ssh-keygen -R ADDRESS -f KNOWN_HOSTS) and accept the new one; otherwise "
                "do not connect")
    if "Host key verification failed" in text or "No ED25519 host key is known" in text \
            or "host key for" in text.lower() and "not known" in text.lower():
        return ("host key unknown", "add the host's key to the known_hosts file the "
                "inventory's ssh options name (ssh-keyscan, checked against the provider's "
                "console)")
    if "Permission denied" in text:
        return ("key refused", "put the public key of ansible_ssh_private_key_file in the "
                "user's ~/.ssh/authorized_keys on the host, or fix ansible_user")
    # Through a reachable bastion (checked first), a connection the bastion could not
    # forward closes before the SSH banner: ssh names its peer "UNKNOWN port 65535".
    if via_bastion and any(s in text for s in ("stdio forwarding failed", "open failed",
                                               "UNKNOWN port 65535",
                                               "kex_exchange_identification")):
        return ("unreachable from the bastion", "check the host's private address and that "
                "the bastion's network reaches it (security list, route, the host is up)")
    if any(s in text for s in ("Connection timed out", "No route to host", "Connection refused",
                               "Network is unreachable", "Could not resolve hostname",
                               "Operation timed out", "Connection closed")):
        return ("unreachable", f"{last.strip()}: check the address, that the host is up "
                "and that sshd listens there")
    return ("ssh failed", last.strip())


class Ssh:
    """One multiplexed connection per host for the probe's commands."""

    def __init__(self, control_dir: str) -> None:
        self.control_dir = control_dir

    def argv(self, host: Host, options: Sequence[str] | None = None,
             target: str | None = None) -> list[str]:
        """ssh's command line for ``host`` (or, with ``options`` and ``target``, a one-off
        connection that leaves no master behind: the bastion's)."""
        if options is not None:
            return ["ssh", *options, "-o", "ControlMaster=no", target or host.target, "--"]
        return ["ssh", *host.options, "-o", "ControlMaster=auto",
                "-o", f"ControlPath={self.control_dir}/%C", "-o", "ControlPersist=30",
                target or host.target, "--"]

    def run(self, argv: list[str], command: str, stdin: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run([*argv, command], capture_output=True, text=True,
                                  input=stdin, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(argv, 255, "", "Operation timed out")

    def close(self, host: Host) -> None:
        argv = self.argv(host)
        subprocess.run([*argv[:-2], "-O", "exit", argv[-2]], capture_output=True, check=False,
                       timeout=20)


# -- parsing the probe ----------------------------------------------------------------


def parse_probe(text: str) -> dict[str, Any]:
    """The probe's output: single values, lists (addr, df, hostkey, lockfile, comm, unit)
    and blocks (lspci, locks, nft, ufw)."""
    facts: dict[str, Any] = {"addr": [], "df": [], "hostkey": [], "lockfile": [], "comm": [],
                             "unit": []}
    block: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        if block is not None:
            if line == "==end":
                facts[block] = "\n".join(lines)
                block, lines = None, []
            else:
                lines.append(line)
            continue
        if line.startswith("==") and len(line) > 2:
            block = line[2:]
            continue
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if isinstance(facts.get(key), list):
            facts[key].append(value)
        else:
            facts[key] = value
    return facts


def _blocks(text: str) -> dict[str, Any]:
    """The blocks (nft, ufw) of the privileged command's output."""
    return {k: v for k, v in parse_probe(text).items() if isinstance(v, str)}


@cache
def _nvidia_pci() -> Any:
    """The NVIDIA role's lspci parser (its module is the one owner of what counts)."""
    path = REPO / "ansible" / "roles" / "nvidia_gpu" / "library" / "nvidia_pci.py"
    spec = importlib.util.spec_from_file_location("metalslurm_nvidia_pci", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lock_holders(facts: Mapping[str, Any]) -> list[str]:
    """'PROGRAM (pid N) holds FILE' for each apt/dpkg lock file a process holds."""
    inodes = {}
    for entry in facts.get("lockfile", []):
        path, _, ident = entry.partition(" ")
        parts = ident.split(":")
        if len(parts) == 3 and all(p.isdigit() for p in parts):
            inodes[(int(parts[0]), int(parts[1]), int(parts[2]))] = path
    comm = {}
    for entry in facts.get("comm", []):
        pid, _, name = entry.partition(" ")
        comm[pid] = name.strip() or "?"
    held = []
    for line in str(facts.get("locks", "")).splitlines():
        fields = line.split()
        if len(fields) > 1 and fields[1] == "->":
            continue  # a process waiting for the lock, not holding it
        if len(fields) < 6:
            continue
        pid, ident = fields[4], fields[5].split(":")
        try:
            key = (int(ident[0], 16), int(ident[1], 16), int(ident[2]))
        except (IndexError, ValueError):
            continue
        if key in inodes:
            held.append(f"{comm.get(pid, '?')} (pid {pid}) holds {inodes[key]}")
    return sorted(set(held))


def firewall_findings(facts: Mapping[str, Any], cidr_or_address: str,
                      open_firewall: bool = True) -> tuple[list[str], list[str]]:
    """What an active host firewall would do to the cluster's traffic: what the roles cannot
    open (ufw, firewalld: they rewrite the rules behind the run's back; a chain the host
    keeps itself, host_firewall_enabled false, that names neither the private network nor
    6817), and the ip/inet nftables input chains with a drop policy the host_firewall role
    opens."""
    refused, opened = [], []
    units = dict(u.split(" ", 1) for u in facts.get("unit", []) if " " in u)
    ufw = str(facts.get("ufw", ""))
    # ufw's unit is active on Ubuntu whether ufw is on or not: its own switch says.
    if ((facts.get("ufw_enabled") == "yes" or "Status: active" in ufw)
            and cidr_or_address not in ufw and "6817" not in ufw):
        refused.append(f"ufw is enabled and allows neither {cidr_or_address} nor 6817")
    if units.get("firewalld") == "active" and open_firewall:
        # Kept by the operator (host_firewall_enabled false): the table says so (a warning).
        refused.append("firewalld is active (its zones are not read here)")
    nft = str(facts.get("nft", ""))
    table = chain = None
    for line in nft.splitlines():
        m = re.match(r"\s*table (\S+) (\S+)", line)
        if m:
            table = m.group(1)
        m = re.match(r"\s*chain (\S+)", line)
        if m:
            chain = m.group(1)
        if "hook input" in line and "policy drop" in line and table in ("ip", "inet"):
            if open_firewall:
                opened.append(str(chain))
            elif cidr_or_address not in nft and "6817" not in nft:
                refused.append(f"nftables chain {chain} drops input, no rule names "
                               f"{cidr_or_address} or 6817, and host_firewall_enabled is false")
    return refused, opened


# -- the checks -----------------------------------------------------------------------


def check_host(report: Report, facts: Mapping[str, Any], os_name: str, cidr: str,
               privileged: bool, local: bool = False) -> None:
    """Every check but ssh, clock and identity (which compare hosts) on one host's facts."""
    _privilege(report, facts, privileged)
    _os(report, facts, os_name)
    _address(report, facts)
    _gpus(report, facts, local)
    hcas = str(facts.get("hca", "0"))
    hcas = hcas if hcas.isdigit() else "0"
    if "slurm_compute" not in report.host.groups:
        report.put("hca", "skip", hcas)
    else:
        report.put("hca", "ok" if hcas != "0" else "warn",
                   hcas if hcas != "0" else "none (NCCL uses TCP)")
    _disk(report, facts)
    if not privileged and facts.get("sudo") != "root":
        report.put("firewall", "skip", "not read (no privilege)")
    else:
        refused, opened = firewall_findings(facts, cidr, report.host.open_firewall)
        if refused:
            keep = ("" if not report.host.open_firewall else
                    ", and set openFirewall: false for the host (metalslurm:byo.hosts; "
                    "host_firewall_enabled: false in an inventory)")
            report.put("firewall", "fail", "blocks", f"{'; '.join(refused)}: the roles open "
                       f"nftables only; stop it, or let in by hand {firewall.summary()} "
                       f"({cidr}){keep}")
        elif not report.host.open_firewall and any(
                u == "firewalld active" for u in facts.get("unit", [])):
            report.put("firewall", "warn", "firewalld, kept by you (zones not read)")
        elif opened:
            report.put("firewall", "ok", "nftables drop: opened by the run (chain "
                       f"{', '.join(opened)})")
        else:
            report.put("firewall", "ok", "allows" if str(facts.get("nft", "")).strip()
                       else "none")


def _privilege(report: Report, facts: Mapping[str, Any], privileged: bool) -> None:
    host, sudo = report.host, facts.get("sudo", "no")
    if sudo == "root":
        report.put("privilege", "ok", "root")
    elif not host.become:
        report.put("privilege", "fail", f"{host.user}, no become",
                   f"connects as {host.user} without become: set ansible_become: true "
                   "(sudo), or connect as root")
    elif sudo == "nopasswd":
        report.put("privilege", "ok", "sudo")
    elif privileged:
        report.put("privilege", "ok", "sudo (password)")
    else:
        report.put("privilege", "fail", "sudo needs a password",
                   f"{host.user} cannot sudo without a password: give it with "
                   "--become-password-file or --ask-become-pass, or allow NOPASSWD sudo")


def _os(report: Report, facts: Mapping[str, Any], os_name: str) -> None:
    want = by_id(os_name)
    distribution, _, version = str(facts.get("os", "")).partition(":")
    found = by_release(distribution, version) if distribution else None
    if found is not None and found.id == want.id:
        report.put("os", "ok", want.id)
        return
    shown = f"{distribution} {version}".strip() or "no /etc/os-release"
    report.put("os", "fail", shown, f"runs {shown}; metalslurm:os is {want.id} "
               f"({want.distribution} {want.version}): reinstall the host with it, or set "
               "metalslurm:os to what every host runs")


def _address(report: Report, facts: Mapping[str, Any]) -> None:
    address = report.host.address
    interfaces = [a.split(" ", 1) for a in facts.get("addr", []) if " " in a]
    on = [dev for dev, addr in interfaces if addr.split("/")[0] == address]
    if on:
        report.put("address", "ok", f"{address} on {on[0]}")
        return
    listed = ", ".join(f"{addr} on {dev}" for dev, addr in interfaces) or "none"
    report.put("address", "fail", f"{address} not here",
               f"has no interface with {address} (it has {listed}): give the host's private "
               "address (metalslurm_address), or add it to the NIC on the private network")


def _gpus(report: Report, facts: Mapping[str, Any], local: bool) -> None:
    host = report.host
    if "slurm_compute" not in host.groups or not host.gpu_count:
        report.put("gpus", "skip", "-")
        return
    smi = str(facts.get("smi", "none"))
    pci = _nvidia_pci().parse_lspci(str(facts.get("lspci", "")))["gpus"]
    seen = int(smi) if smi.isdigit() else len(pci)
    how = "nvidia-smi" if smi.isdigit() else "lspci"
    if local and not seen:
        report.put("gpus", "skip", "fake (local)")
    elif seen == host.gpu_count:
        report.put("gpus", "ok", f"{seen} ({how})")
    else:
        report.put("gpus", "fail", f"{seen} of {host.gpu_count} ({how})",
                   f"{how} shows {seen} NVIDIA GPU(s); its pool's gpuCount is "
                   f"{host.gpu_count}: fix the pool's gpuCount, or replace the host")


def _disk(report: Report, facts: Mapping[str, Any]) -> None:
    avail = {}
    for entry in facts.get("df", []):
        mount, _, kib = entry.partition(" ")
        if kib.isdigit():
            avail[mount] = int(kib) / 2**20
    short = []
    for path, (floor, why) in DISK_FLOORS_GIB.items():
        gib = next((avail[m] for m in sorted(avail, key=len, reverse=True)
                    if path == m or path.startswith(m.rstrip("/") + "/")), None)
        if gib is not None and gib < floor:
            short.append((path, gib, floor, why))
    if short:
        report.put("disk", "fail", ", ".join(f"{p} {g:.1f} GiB" for p, g, _f, _w in short),
                   "; ".join(f"{p} has {g:.1f} GiB free, below {f} GiB ({w}): free space "
                             "or grow the filesystem" for p, g, f, w in short))
    else:
        report.put("disk", "ok", " ".join(f"{m} {g:.0f}G" for m, g in avail.items()) or "?")


def compare_hosts(reports: Sequence[Report], controller: str | None) -> None:
    """Checks between hosts: clock offset from the controller, duplicated machine-id and
    SSH host keys (cloned images)."""
    live = [r for r in reports if r.facts]
    ref = next((r for r in live if r.host.name == controller), live[0] if live else None)
    for r in live:
        if ref is None or "clock_offset" not in r.facts:
            continue
        offset = r.facts["clock_offset"] - ref.facts["clock_offset"]
        text = f"{offset:+.1f} s" if r is not ref else "reference"
        if abs(offset) > CLOCK_FAIL_S:
            r.put("clock", "fail", text, f"its clock is {offset:+.0f} s from "
                  f"{ref.host.name}'s, beyond {CLOCK_FAIL_S:.0f} s (munge refuses credentials "
                  "beyond its 300 s TTL): set the time (chronyc makestep) and start chrony")
        else:
            r.put("clock", "warn" if abs(offset) > CLOCK_WARN_S else "ok", text)
    for key, what in (("machine_id", "/etc/machine-id"), ("hostkey", "an SSH host key")):
        owners: dict[str, list[str]] = {}
        for r in live:
            values = r.facts.get(key) or []
            for value in ([values] if isinstance(values, str) else values):
                if value:
                    owners.setdefault(value, []).append(r.host.name)
        dup = {v: sorted(set(h)) for v, h in owners.items() if len(set(h)) > 1}
        for r in live:
            shared = sorted({h for hs in dup.values() if r.host.name in hs for h in hs}
                            - {r.host.name})
            if shared:
                fix = ("systemd-machine-id-setup after emptying /etc/machine-id"
                       if key == "machine_id" else
                       "remove /etc/ssh/ssh_host_* and run ssh-keygen -A, then restart sshd")
                r.put("identity", "fail", f"{what} = {', '.join(shared)}",
                      f"shares {what} with {', '.join(shared)} (a cloned image): {fix}")
        for r in live:
            r.cells.setdefault("identity", Cell("ok", "unique"))


# -- the run --------------------------------------------------------------------------


def _retry_while_booting(attempt: Callable[[], subprocess.CompletedProcess[str]],
                         via_bastion: bool, ssh_wait: float) -> subprocess.CompletedProcess[str]:
    """``attempt()`` again every SSH_POLL_S while it fails the way a booting machine does,
    for up to ``ssh_wait`` seconds; the last try."""
    deadline = time.monotonic() + ssh_wait
    proc = attempt()
    while (proc.returncode == 255 and time.monotonic() < deadline
           and classify_ssh(proc.stderr, via_bastion)[0] in WAITABLE):
        time.sleep(SSH_POLL_S)
        proc = attempt()
    return proc


def _probe_host(ssh: Ssh, host: Host, password: str | None, bastion_problem: str | None,
                lock_wait: float, os_name: str, cidr: str, local: bool,
                ssh_wait: float = SSH_WAIT_S) -> Report:
    report = Report(host)
    if host.elastic:
        for check in CHECKS:
            report.put(check, "skip", "-")
        report.cells["ssh"] = Cell("skip", "elastic: checked when Slurm resumes it")
        return report
    if bastion_problem:
        report.put("ssh", "fail", "bastion unreachable", f"bastion {host.bastion}: "
                   f"{bastion_problem}")
        return report
    ready = None
    if ssh_wait > 0:  # wait for sshd first, so that the probe's clock is read at once
        ready = _retry_while_booting(lambda: ssh.run(ssh.argv(host), "true"),
                                     host.bastion is not None, ssh_wait)
    started = time.time()
    proc = ready if ready is not None and ready.returncode != 0 else \
        ssh.run(ssh.argv(host), PROBE)
    ended = time.time()
    if proc.returncode == 255:
        what, fix = classify_ssh(proc.stderr, host.bastion is not None)
        report.put("ssh", "fail", what, f"ssh {host.target}"
                   f"{' via ' + host.bastion if host.bastion else ''}: {what}: {fix}")
        return report
    facts = parse_probe(proc.stdout)
    report.put("ssh", "ok", host.user + (f" via {host.bastion}" if host.bastion else ""))
    with contextlib.suppress(ValueError):
        facts["clock_offset"] = float(facts.get("clock", "")) - (started + ended) / 2
    sudo = facts.get("sudo")
    privileged = sudo == "root"
    if sudo != "root" and host.become:
        if sudo == "nopasswd":
            priv = ssh.run(ssh.argv(host), "sudo -n sh -c " + shlex.quote(PRIVILEGED))
            privileged = priv.returncode == 0
        elif password is not None:
            priv = ssh.run(ssh.argv(host), "sudo -S -p '' sh -c " + shlex.quote(PRIVILEGED),
                           stdin=password + "\n")
            privileged = priv.returncode == 0
        else:
            priv = None
        if priv is not None and priv.returncode == 0:
            facts.update(_blocks(priv.stdout))
    elif sudo == "root":
        facts.update(_blocks(ssh.run(ssh.argv(host), PRIVILEGED).stdout))
    report.facts = facts
    check_host(report, facts, os_name, cidr, privileged, local)
    holders = lock_holders(facts)
    held_at_first = bool(holders)
    started = time.monotonic()
    deadline = started + lock_wait
    while holders and time.monotonic() < deadline:
        time.sleep(LOCK_POLL_S)
        again = ssh.run(ssh.argv(host), PROBE)
        if again.returncode != 0:
            break
        holders = lock_holders(parse_probe(again.stdout))
    if holders:
        report.put("apt lock", "fail", holders[0].split(" (")[0],
                   f"{'; '.join(holders)} after {lock_wait:.0f} s: let it finish "
                   "(unattended-upgrades, cloud-init and apt-daily end by themselves), or "
                   "stop it, then run again")
    else:
        report.put("apt lock", "ok", f"free after {time.monotonic() - started:.0f} s"
                   if held_at_first else "free")
    return report


def run(document: Mapping[str, Any], *, password: str | None = None,
        lock_wait: float = LOCK_WAIT_S, ssh_wait: float = SSH_WAIT_S) -> list[Report]:
    """Probe every host of an inventory document; the reports in inventory order."""
    all_vars = (document.get("all") or {}).get("vars") or {}
    os_name = str(all_vars.get("metalslurm_os") or "")
    try:
        by_id(os_name)
    except KeyError as exc:
        raise PreflightError(f"the inventory's metalslurm_os: {exc.args[0]}") from None
    cidr = str(all_vars.get("metalslurm_private_cidr") or "")
    # The local provider's nodes have fake GPUs (device files, no PCI device).
    local = all_vars.get("metalslurm_provider") == "local"
    hosts = hosts_from_inventory(document)
    groups = _walk_groups(document)
    controller = next((h for h, (g, _v) in groups.items() if "slurm_controller" in g), None)
    with tempfile.TemporaryDirectory(prefix="mspf-") as control:
        ssh = Ssh(control)
        bastions: dict[str, str | None] = {}
        for host in hosts:
            if host.bastion and host.bastion not in bastions and not host.elastic:
                argv = ssh.argv(host, _jump_options(host.options), host.bastion)
                proc = _retry_while_booting(
                    partial(ssh.run, argv, "true", timeout=SSH_TIMEOUT_S + 10),
                    False, ssh_wait)
                bastions[host.bastion] = (None if proc.returncode == 0 else
                                          "; ".join(classify_ssh(proc.stderr, False)))
        with ThreadPoolExecutor(max_workers=min(32, max(1, len(hosts)))) as pool:
            reports = list(pool.map(
                lambda h: _probe_host(ssh, h, password, bastions.get(h.bastion or ""),
                                      lock_wait, os_name, cidr, local, ssh_wait), hosts))
        with ThreadPoolExecutor(max_workers=min(32, max(1, len(hosts)))) as pool:
            list(pool.map(ssh.close, [r.host for r in reports if r.facts]))
    compare_hosts(reports, controller)
    return reports


def format_table(reports: Sequence[Report]) -> list[str]:
    rows = [["host", *CHECKS]]
    for r in reports:
        rows.append([r.host.name, *(str(r.cells.get(c, Cell("skip", "-"))) for c in CHECKS)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in rows]


def become_password(become_password_file: Path | None, ask_become_pass: bool) -> str | None:
    """The sudo password from --become-password-file (its first line) or -K, else None."""
    if become_password_file is not None:
        password = read_text_argument(become_password_file, "--become-password-file",
                                      "a file holding the sudo password on its first line"
                                      ).splitlines()[0]
        if not password:
            raise InputError("--become-password-file", "has an empty first line; give a "
                             "file holding the sudo password on its first line",
                             become_password_file)
        if len(password.encode()) > PASSWORD_MAX_BYTES:
            raise InputError("--become-password-file", f"has a first line longer than "
                             f"{PASSWORD_MAX_BYTES} bytes, which no sudo password is; give a "
                             "file holding the sudo password on its first line",
                             become_password_file)
        return password
    if ask_become_pass:
        import getpass

        answer = getpass.getpass("sudo password: ")
        if len(answer.encode()) > PASSWORD_MAX_BYTES:
            raise InputError("-K", f"was answered with more than {PASSWORD_MAX_BYTES} bytes, "
                             "which no sudo password is; type the sudo password")
        return answer or None  # an empty answer is no password (a sudo that needs none)
    return None


def checked_wait(value: float | None, default: float, maximum: float, option: str,
                 what: str) -> float:
    """A --*-wait option, or its default; an InputError outside 0..maximum (NaN too)."""
    value = default if value is None else value
    if not 0 <= value <= maximum:
        raise InputError(option, f"is {value}; give the seconds to wait for {what}, from 0 "
                         f"(do not wait) to {maximum:.0f}")
    return value


def checked_drain_wait(drain_wait: float | None) -> float:
    """--drain-wait (the jobs on nodes leaving the cluster), or its default."""
    return checked_wait(drain_wait, slurm_leaving.DRAIN_WAIT_S, slurm_leaving.DRAIN_WAIT_MAX_S,
                        "--drain-wait", "the jobs on nodes leaving the cluster")


def checked_lock_wait(lock_wait: float | None) -> float:
    """--lock-wait, or its default."""
    return checked_wait(lock_wait, LOCK_WAIT_S, LOCK_WAIT_MAX_S, "--lock-wait", "apt's lock")


def checked_ssh_wait(ssh_wait: float | None) -> float:
    """--ssh-wait, or its default."""
    return checked_wait(ssh_wait, SSH_WAIT_S, SSH_WAIT_MAX_S, "--ssh-wait",
                        "an unreachable host's sshd")


def check(document: Mapping[str, Any], *, password: str | None, lock_wait: float,
          source: tuple[str, str | Path], out: Callable[[str], None] = say,
          ssh_wait: float = SSH_WAIT_S) -> bool:
    """Preflight an inventory document, print the table and the failures; True when every
    host is fit. ``source`` is the (argument, value) a bad inventory is blamed on."""
    started = time.monotonic()
    try:
        reports = run(document, password=password, lock_wait=lock_wait, ssh_wait=ssh_wait)
    except PreflightError as exc:
        raise InputError(source[0], f"{exc}; fix the inventory", source[1]) from None
    for line in format_table(reports):
        out(line)
    problems = [p for r in reports for p in r.problems]
    for problem in problems:
        out(f"FAIL {problem}")
    hosts = len([r for r in reports if not r.host.elastic])
    if problems:
        out(f"preflight: {len({p.split(':')[0] for p in problems})} of {hosts} host(s) unfit "
            f"({time.monotonic() - started:.1f} s); nothing was changed on any host")
        return False
    out(f"preflight: {hosts} host(s) fit ({time.monotonic() - started:.1f} s)")
    return True


def preflight(inventory: Path, *, become_password_file: Path | None = None,
              ask_become_pass: bool = False, lock_wait: float | None = None,
              ssh_wait: float | None = None, out: Callable[[str], None] = say) -> int:
    """``metalslurm preflight -i INVENTORY``: 0 when every host passes, 1 otherwise."""
    document = load_inventory(inventory, "--inventory")
    lock_wait = checked_lock_wait(lock_wait)
    ssh_wait = checked_ssh_wait(ssh_wait)
    password = become_password(become_password_file, ask_become_pass)
    fit = check(document, password=password, lock_wait=lock_wait,
                source=("--inventory", inventory), out=out, ssh_wait=ssh_wait)
    return 0 if fit else 1
