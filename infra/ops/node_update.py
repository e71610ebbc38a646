"""What ``metalslurm maintain --update`` installs on a compute node, and how.

The packages are those a plain upgrade must not touch under running jobs: the ones the
roles keep from unattended-upgrades (``common_unattended_upgrades_held``: Slurm, munge, PMIx,
Enroot, the NVIDIA stack), read from the node's own apt configuration; the node's held
ones (the NVIDIA role holds the driver's and DCGM's; an operator's ``apt-mark hold`` counts
too); and every package of munge's and Slurm's source. Each is installed whose candidate in
the node's apt sources, read again (``apt-get update``), is a newer build than the installed
one (``dpkg --compare-versions``). The apt sources decide the target, as for a configure: the
NVIDIA role pins the driver to its branch or exact version there, so the driver moves only
within what the inventory asks for. Nothing else on the node is upgraded.

Refused before any node is drained (:func:`plan_problems`): a Slurm package newer than the
controller's slurmctld (SchedMD's order: slurmctld first, ``configure --upgrade-slurm``), a
driver or kernel package without ``--reboot`` (it loads only at boot), and DCGM past a
version the inventory pins (``metalslurm_gpu.dcgm_version``), which the next configure would
put back.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Read on the node (as root): the apt lists again, then one line a package to update,
# 'newer|PACKAGE|SOURCE|INSTALLED|CANDIDATE|HELD|PAST', PAST 'yes' where a Slurm package's
# candidate is a newer build than $1 (slurmctld's installed version on the controller; ''
# unknown).
PLAN_SCRIPT = r"""
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive LC_ALL=C
controller=${1:-}
apt-get -qq -o Acquire::Retries=3 update >/dev/null
# The patterns unattended-upgrades leaves alone (Python regular expressions matched at the
# start of a name; the roles' common_unattended_upgrades_held), as awk's, one a line.
kept=$(apt-config dump Unattended-Upgrade::Package-Blacklist |
       sed -n 's/^Unattended-Upgrade::Package-Blacklist:: "\(.*\)";$/\1/p' |
       sed 's/^[^^]/^&/')
dpkg-query --show --showformat='${db:Status-Abbrev}|${Package}|${source:Package}|${Version}\n' |
awk -F'|' -v kept="$kept" '
    BEGIN { n = split(kept, pattern, "\n") }
    $1 !~ /^[ih]i/ { next }
    $1 ~ /^hi/ || $3 == "munge" || $3 == "slurm-wlm" { print; next }
    { for (i = 1; i <= n; i++) if (pattern[i] != "" && $2 ~ pattern[i]) { print; next } }' |
while IFS='|' read -r status package source version; do
    case $status in hi*) held=yes ;; *) held=no ;; esac
    candidate=$(apt-cache policy "$package" | sed -n 's/^  Candidate: //p')
    case $candidate in ''|'(none)') continue ;; esac
    dpkg --compare-versions "$candidate" gt "$version" || continue
    past=no
    if [ "$source" = slurm-wlm ] && [ -n "$controller" ] &&
        dpkg --compare-versions "$candidate" gt "$controller"; then
        past=yes
    fi
    printf 'newer|%s|%s|%s|%s|%s|%s\n' "$package" "$source" "$version" "$candidate" \
        "$held" "$past"
done
"""

# Install the given PACKAGE=VERSION words: held packages stay held, packages apt installed
# as dependencies stay marked so, the node's own configuration files are kept.
APPLY_SCRIPT = r"""
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive LC_ALL=C
names=()
for word in "$@"; do names+=("${word%%=*}"); done
held=$(apt-mark showhold)
auto=$(apt-mark showauto "${names[@]}")
apt-get install -y -qq --allow-change-held-packages --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@" >/dev/null
if [ -n "$held" ]; then apt-mark hold $held >/dev/null; fi
if [ -n "$auto" ]; then apt-mark auto $auto >/dev/null; fi
"""

# After an update without a reboot: munge first (slurmd authenticates through it), DCGM's
# services where they run, then slurmd on the new build.
RESTART_SCRIPT = r"""
set -euo pipefail
for unit in munge nvidia-dcgm nvidia-dcgm-exporter; do
    if systemctl is-active --quiet "$unit.service"; then systemctl restart "$unit.service"; fi
done
systemctl restart slurmd.service
"""

# The controller's Slurm build (slurmctld's package); '' where dpkg does not know it.
CONTROLLER_SLURM = "dpkg-query --show --showformat='${Version}' slurmctld"

# Packages that take effect only at boot: the kernel, and the NVIDIA driver's kernel
# modules, firmware and the user-space libraries and tools that must match them (Debian's
# and Ubuntu's names, every branch). DCGM, NCCL, the container toolkit and
# libnvidia-container do not.
_REBOOT_RE = re.compile(r"^(linux-image-|firmware-nvidia|cuda-drivers|libcuda|"
                        r"nvidia-(?!container)|libnvidia-(?!container))|-dkms(-|$)")
_DCGM_EXPORTER = "datacenter-gpu-manager-exporter"


@dataclass(frozen=True)
class Newer:
    """One package the node's apt sources offer a newer build of."""

    package: str
    source: str
    installed: str
    candidate: str
    held: bool
    past_controller: bool  # newer than slurmctld's build on the controller

    @property
    def slurm(self) -> bool:
        return self.source == "slurm-wlm"

    @property
    def needs_reboot(self) -> bool:
        return bool(_REBOOT_RE.search(self.package))

    def describe(self) -> str:
        return f"{self.package} {self.installed} -> {self.candidate}"


def parse_plan(text: str) -> list[Newer]:
    """The plan script's lines (anything else, apt's chatter, is ignored)."""
    plan = []
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) == 7 and fields[0] == "newer":
            plan.append(Newer(fields[1], fields[2], fields[3], fields[4], fields[5] == "yes",
                              fields[6] == "yes"))
    return plan


def pinned_packages(all_vars: Mapping[str, Any]) -> dict[str, str]:
    """The packages whose version the inventory pins outside apt's preferences, each with
    the setting that pins it: DCGM and its exporter (metalslurm_gpu)."""
    gpu = all_vars.get("metalslurm_gpu") or {}
    pins = {}
    if isinstance(gpu, Mapping) and gpu.get("dcgm_version"):
        pins["datacenter-gpu-manager-4-"] = "metalslurm_gpu.dcgm_version"
    if isinstance(gpu, Mapping) and gpu.get("dcgm_exporter_version"):
        pins[_DCGM_EXPORTER] = "metalslurm_gpu.dcgm_exporter_version"
    return pins


def plan_problems(node: str, plan: Sequence[Newer], *, reboot: bool, controller_slurm: str,
                  pins: Mapping[str, str]) -> list[str]:
    """Why ``plan`` cannot be installed on ``node`` (each with what to do); [] when it can."""
    problems = []
    past = [n for n in plan if n.slurm and (n.past_controller or not controller_slurm)]
    if past:
        where = (f"slurmctld's {controller_slurm}" if controller_slurm else
                 "slurmctld's build, which dpkg on the controller does not know")
        problems.append(f"{node}: {', '.join(n.describe() for n in past)} would be newer than "
                        f"{where}: upgrade the controller first ('metalslurm configure "
                        "--upgrade-slurm --limit' its hosts), or run 'configure "
                        "--upgrade-slurm' for the whole cluster")
    boot = [n for n in plan if n.needs_reboot]
    if boot and not reboot:
        problems.append(f"{node}: {', '.join(n.describe() for n in boot)} takes effect only "
                        "at boot: give --reboot as well")
    for newer in plan:
        setting = next((s for prefix, s in pins.items() if newer.package.startswith(prefix)
                        and not (prefix != _DCGM_EXPORTER
                                 and newer.package.startswith(_DCGM_EXPORTER))), None)
        if setting:
            problems.append(f"{node}: {newer.describe()} would replace the version {setting} "
                            "pins (the next configure would put it back): change the pin in "
                            "the stack config and run 'metalslurm configure'")
    return problems


def install_words(plan: Sequence[Newer]) -> list[str]:
    """apt-get's PACKAGE=VERSION words for ``plan``."""
    return [f"{n.package}={n.candidate}" for n in plan]
