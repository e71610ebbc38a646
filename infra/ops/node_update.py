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
driver or kernel package without ``--reboot`` (it loads only at boot), and DCGM or its
exporter moving alone. Left out and named (:func:`without_pinned`): DCGM past a version the
inventory pins (``metalslurm_gpu.dcgm_version``), which the next configure would put back.
A half-done install dpkg reports (``dpkg --audit``) is finished first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Read on the node (as root): the apt lists again, then one line a package looked at,
# 'installed|PACKAGE|VERSION', and one a package to update,
# 'newer|PACKAGE|SOURCE|INSTALLED|CANDIDATE|HELD|PAST', PAST 'yes' where a Slurm package's
# candidate is a newer build than $1 (slurmctld's installed version on the controller; ''
# unknown); 'broken|...' where dpkg has a half-done install. A package installed for a
# foreign architecture too keeps its qualifier (libfoo:i386); the native one is named bare.
PLAN_SCRIPT = r"""
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive LC_ALL=C
controller=${1:-}
apt-get -qq -o Acquire::Retries=3 update >/dev/null
audit=$(dpkg --audit 2>&1 || true)
if [ -n "$audit" ]; then
    printf 'broken|%s\n' "$(printf '%s' "$audit" | tr -s '\n' ' ' | cut -c1-300)"
fi
# The patterns unattended-upgrades leaves alone (Python regular expressions matched at the
# start of a name; the roles' common_unattended_upgrades_held), as awk's, one a line.
kept=$(apt-config dump Unattended-Upgrade::Package-Blacklist |
       sed -n 's/^Unattended-Upgrade::Package-Blacklist:: "\(.*\)";$/\1/p' |
       sed 's/^[^^]/^&/')
dpkg-query --show \
    --showformat='${db:Status-Abbrev}|${binary:Package}|${source:Package}|${Version}\n' |
awk -F'|' -v OFS='|' -v kept="$kept" -v native=":$(dpkg --print-architecture)" '
    BEGIN { n = split(kept, pattern, "\n") }
    $1 !~ /^[ih]i/ { next }
    {
        if (substr($2, length($2) - length(native) + 1) == native)
            $2 = substr($2, 1, length($2) - length(native))
        name = $2; sub(/:.*/, "", name)
    }
    $1 ~ /^hi/ || $3 == "munge" || $3 == "slurm-wlm" { print; next }
    { for (i = 1; i <= n; i++) if (pattern[i] != "" && name ~ pattern[i]) { print; next } }' |
while IFS='|' read -r status package source version; do
    printf 'installed|%s|%s\n' "$package" "$version"
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

# Finish a half-done install first (an interrupted run, a failed maintainer script), then
# install the given PACKAGE=VERSION words: nothing removed (apt stops instead), held packages
# held again and packages apt installed as dependencies marked so again, whatever happens;
# the node's own configuration files kept. Fails while dpkg still reports a half-done install.
APPLY_SCRIPT = r"""
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive LC_ALL=C
dpkg --force-confdef --force-confold --configure -a
if [ "$#" -gt 0 ]; then
    names=()
    for word in "$@"; do names+=("${word%%=*}"); done
    held=$(apt-mark showhold)
    auto=$(apt-mark showauto "${names[@]}")
    restore() {
        if [ -n "$held" ]; then apt-mark hold $held >/dev/null; fi
        if [ -n "$auto" ]; then apt-mark auto $auto >/dev/null; fi
    }
    trap restore EXIT
    apt-get install -y -qq --no-remove --allow-change-held-packages --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@" >/dev/null
fi
audit=$(dpkg --audit 2>&1 || true)
if [ -n "$audit" ]; then
    echo "dpkg --audit still reports a half-done install: $audit" >&2
    exit 1
fi
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
_DCGM = "datacenter-gpu-manager-4-"
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


@dataclass(frozen=True)
class Plan:
    """What a node's apt sources offer, as its plan script read them."""

    newer: tuple[Newer, ...] = ()
    installed: Mapping[str, str] = field(default_factory=dict)  # every package looked at
    broken: str = ""  # dpkg --audit's words where an install was left half-done
    kept: tuple[str, ...] = ()  # newer builds left out: the inventory pins the package

    @property
    def work(self) -> bool:
        """Something to install or to finish."""
        return bool(self.newer or self.broken)


def parse_plan(text: str) -> Plan:
    """The plan script's lines (anything else, apt's chatter, is ignored)."""
    newer, installed, broken = [], {}, ""
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) == 7 and fields[0] == "newer":
            newer.append(Newer(fields[1], fields[2], fields[3], fields[4], fields[5] == "yes",
                               fields[6] == "yes"))
        elif len(fields) == 3 and fields[0] == "installed":
            installed[fields[1]] = fields[2]
        elif fields[0] == "broken":
            broken = line.partition("|")[2].strip()
    return Plan(tuple(newer), installed, broken)


def pinned_packages(all_vars: Mapping[str, Any]) -> dict[str, str]:
    """The packages whose version the inventory pins outside apt's preferences, each with
    the setting that pins it: DCGM and its exporter (metalslurm_gpu)."""
    gpu = all_vars.get("metalslurm_gpu") or {}
    pins = {}
    if isinstance(gpu, Mapping) and gpu.get("dcgm_version"):
        pins[_DCGM] = "metalslurm_gpu.dcgm_version"
    if isinstance(gpu, Mapping) and gpu.get("dcgm_exporter_version"):
        pins[_DCGM_EXPORTER] = "metalslurm_gpu.dcgm_exporter_version"
    return pins


def _dcgm_part(package: str) -> str | None:
    """DCGM (_DCGM) or its exporter (_DCGM_EXPORTER) for one of their packages, else None."""
    if package.startswith(_DCGM_EXPORTER):
        return _DCGM_EXPORTER
    return _DCGM if package.startswith(_DCGM) else None


def without_pinned(plan: Plan, pins: Mapping[str, str]) -> Plan:
    """``plan`` less the packages the inventory pins (the next configure would put them
    back), each named in ``kept``."""
    kept = [n for n in plan.newer if _dcgm_part(n.package) in pins]
    return Plan(tuple(n for n in plan.newer if n not in kept), plan.installed, plan.broken,
                tuple(f"{n.package} kept at {n.installed}, which "
                      f"{pins[str(_dcgm_part(n.package))]} pins ({n.candidate} offered)"
                      for n in kept))


def plan_problems(node: str, plan: Plan, *, reboot: bool, controller_slurm: str) -> list[str]:
    """Why ``plan`` cannot be installed on ``node`` (each with what to do); [] when it can."""
    problems = []
    past = [n for n in plan.newer if n.slurm and (n.past_controller or not controller_slurm)]
    if past:
        where = (f"slurmctld's {controller_slurm}" if controller_slurm else
                 "slurmctld's build, which dpkg on the controller does not know")
        problems.append(f"{node}: {', '.join(n.describe() for n in past)} would be newer than "
                        f"{where}: upgrade the controller first ('metalslurm configure "
                        "--upgrade-slurm --limit' its hosts), or run 'configure "
                        "--upgrade-slurm' for the whole cluster")
    boot = [n for n in plan.newer if n.needs_reboot]
    if boot and not reboot:
        problems.append(f"{node}: {', '.join(n.describe() for n in boot)} takes effect only "
                        "at boot: give --reboot as well")
    # An exporter release is built against one DCGM release (the NVIDIA role holds them
    # together): where both are installed, they move together or not at all.
    parts = {_dcgm_part(p) for p in plan.installed} - {None}
    moving = {_dcgm_part(n.package) for n in plan.newer} - {None}
    if len(parts) == 2 and len(moving) == 1:
        (alone,) = moving
        problems.append(f"{node}: only {'the DCGM exporter' if alone == _DCGM_EXPORTER else 'DCGM'}"
                        " would move, and DCGM and its exporter move together: have the apt "
                        "sources offer both, or pin both in the stack config's metalslurm:gpu")
    return problems


def install_words(plan: Plan) -> list[str]:
    """apt-get's PACKAGE=VERSION words for ``plan``."""
    return [f"{n.package}={n.candidate}" for n in plan.newer]
