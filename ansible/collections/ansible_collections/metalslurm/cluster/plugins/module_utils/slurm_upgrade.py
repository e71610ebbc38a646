"""Which Slurm releases can run together, and which jump Slurm can make, checked on every
Slurm host before a configure changes any.

A configure installs each host's Slurm packages from the host's apt sources and keeps the
release already installed (``state: present``): a new node gets whatever its sources offer,
and an existing host keeps its release until someone upgrades it. Both can break a running
cluster, and SchedMD's upgrade guide (slurm.schedmd.com/upgrades.html) says how:

- **The window.** A daemon reads the state files and messages of its own major release and
  of the two before it; from 24.11 on, of the three before it ("Compatibility Window";
  RELEASE_NOTES of 22.05: "can be upgraded from version 20.11 or 21.08"; of 24.11: "from
  version 23.02, 23.11 or 24.05"). A jump past it loses slurmctld's state (the queue, the
  running jobs) and slurmdbd's conversion of the database.
- **The order.** slurmdbd is upgraded first, then slurmctld, then slurmd and the client
  commands: slurmdbd's release is at least slurmctld's, and slurmctld's at least every
  slurmd's and client's, each older one inside the newer one's window.

``release_problems`` applies both to what each host runs (or would install) and to what its
apt sources offer: a host whose sources offer a release beyond the window (a Debian 12
cluster, 22.05, whose sources were pointed at Debian 13, 24.11) is refused, since an
``apt upgrade`` there would make that jump (unattended-upgrades does not: the common role
keeps Slurm off its list).

With ``upgrade`` (``metalslurm configure --upgrade-slurm``) a host whose apt sources offer a
newer build of its Slurm packages is upgraded to it, inside the window, and the order is
checked on the releases the hosts will run afterwards; ``upgrades`` names each host's
packages and versions (site.yml upgrades them slurmdbd's host first, then slurmctld's, then
the rest).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from ansible_collections.metalslurm.cluster.plugins.module_utils.slurm_versions import (
    RECONFIGURE_TAKES_NODES,
    SlurmVersion,
    SlurmVersionError,
)

__all__ = [
    "DAEMON_ORDER",
    "MAJOR_RELEASES",
    "SLURMD_BOOT_TIME_SINCE",
    "SOURCE_PACKAGE",
    "WIDER_WINDOW_SINCE",
    "HostSlurm",
    "jump_problem",
    "read_host",
    "release_problems",
    "releases_between",
    "upgrades",
    "upgrade_path",
    "window",
]

# SchedMD's major releases, oldest first: the headings "* Changes in Slurm X" of the NEWS
# file of 24.11.5 (Debian 13's source) up to 24.11; 25.05, 25.11 and 26.05 from the upgrade
# guide's release table and Debian forky's 26.05.5. A release after the last one here
# cannot be checked and is refused until this table knows it.
MAJOR_RELEASES: tuple[SlurmVersion, ...] = tuple(
    SlurmVersion(major, minor) for major, minor in (
        (20, 2), (20, 11), (21, 8), (22, 5), (23, 2), (23, 11), (24, 5), (24, 11),
        (25, 5), (25, 11), (26, 5)))

# The first release that reads the state of three releases before it (two before that).
WIDER_WINDOW_SINCE = SlurmVersion(24, 11)

# The first release whose 'slurmd -b' (Slurm's test switch: report a boot) takes the boot
# time from SLURMD_BOOT_TIME, so that slurmd restarted within one boot keeps it (read in
# 24.11's slurmd.c; 22.05's '-b' counts every slurmd start as a boot, and releases between
# were not read). The local provider's node containers report Slurm's reboots with it
# (docs/lab/reboot-stand-in.md).
SLURMD_BOOT_TIME_SINCE = SlurmVersion(24, 11)

# SchedMD's upgrade order: a daemon earlier here is upgraded first and runs the newer release.
DAEMON_ORDER = ("slurmdbd", "slurmctld", "slurmd", "client")

# Every Debian and Ubuntu package of Slurm comes from this source package, at one version.
SOURCE_PACKAGE = "slurm-wlm"

_LISTED = 8  # hosts named in one sentence before "and N more"


def window(release: SlurmVersion) -> int:
    """How many major releases before ``release`` it takes state and messages from."""
    return 3 if release >= WIDER_WINDOW_SINCE else 2


def _known(release: SlurmVersion) -> bool:
    return SlurmVersion(release.major, release.minor) in MAJOR_RELEASES


def _index(release: SlurmVersion) -> int:
    """The release's place in MAJOR_RELEASES; an unknown one is refused."""
    if not _known(release):
        known = ", ".join(r.release for r in MAJOR_RELEASES)
        if release < MAJOR_RELEASES[0]:
            raise SlurmVersionError([
                f"Slurm {release.release} is older than any release metalslurm knows "
                f"({known}): upgrade it by hand to {MAJOR_RELEASES[0].release} or later first"])
        raise SlurmVersionError([
            f"Slurm {release.release} is not a major release metalslurm knows ({known}), so "
            "its upgrade window cannot be checked: use a metalslurm that knows it, or "
            "point the host's apt sources at a release listed here"])
    return MAJOR_RELEASES.index(SlurmVersion(release.major, release.minor))


def _checkable(release: SlurmVersion) -> bool:
    """Known, or older than every known release (whose every jump is beyond the window)."""
    return _known(release) or release < MAJOR_RELEASES[0]


def releases_between(old: SlurmVersion, new: SlurmVersion) -> tuple[SlurmVersion, ...]:
    """The major releases after ``old`` and before ``new`` (both known releases)."""
    low, high = sorted((_index(old), _index(new)))
    return MAJOR_RELEASES[low + 1:high]


def upgrade_path(old: SlurmVersion, new: SlurmVersion) -> tuple[SlurmVersion, ...]:
    """The fewest releases to upgrade through from ``old`` to ``new`` (``new`` included),
    each jump inside the window of the release it lands on."""
    path: list[SlurmVersion] = []
    here, goal = _index(old), _index(new)
    while here < goal:
        here = max(i for i in range(here + 1, goal + 1)
                   if i - here <= window(MAJOR_RELEASES[i]))
        path.append(MAJOR_RELEASES[here])
    return tuple(path)


def jump_problem(old: SlurmVersion, new: SlurmVersion) -> str | None:
    """Why Slurm cannot go from ``old`` to ``new`` in one step, or None when it can."""
    if old.release == new.release:
        return None
    goal = _index(new)
    if not _checkable(old):
        _index(old)  # newer than the table: refused
    if new < old:
        return (f"Slurm cannot go back from {old.release} to {new.release}: the older "
                "release cannot read the state the newer one wrote")
    takes = MAJOR_RELEASES[max(0, goal - window(new)):goal]
    if not _known(old):
        return (f"Slurm {new.release} takes the state of {_words(takes)} only, and "
                f"{old.release} is older than any release metalslurm knows; upgrade it by "
                f"hand to {MAJOR_RELEASES[0].release} or later first")
    if goal - _index(old) <= window(new):
        return None
    return (f"Slurm {new.release} takes the state of {_words(takes)} only "
            f"({window(new)} releases back), so {old.release} to {new.release} skips "
            f"{_words(releases_between(old, new))}; upgrade through "
            f"{' then '.join(r.release for r in upgrade_path(old, new))}")


def _words(releases: Sequence[SlurmVersion]) -> str:
    names = [r.release for r in releases]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _hosts(hosts: Sequence[str]) -> str:
    names = sorted(hosts)
    if len(names) > _LISTED:
        return f"{', '.join(names[:_LISTED])} and {len(names) - _LISTED} more"
    return ", ".join(names)


@dataclass(frozen=True)
class HostSlurm:
    """One host's Slurm: the daemons it runs here (DAEMON_ORDER), the release installed
    (None: no Slurm package yet), the one its apt sources offer (None: none offered), every
    installed Slurm package with its version (the libraries, whose names carry their
    release, left out), whether any of them is held (``apt-mark hold``); ``newer``: each
    installed Slurm package (libraries too) whose apt candidate is a newer build, with that
    build's version; ``upgrading``: this run upgrades them (``--upgrade-slurm``)."""

    host: str
    daemons: tuple[str, ...]
    installed: SlurmVersion | None
    offered: SlurmVersion | None
    packages: tuple[tuple[str, str], ...] = ()
    held: bool = False
    newer: tuple[tuple[str, str], ...] = ()
    upgrading: bool = False

    @property
    def target(self) -> SlurmVersion | None:
        """The release of the newest build the apt sources offer over an installed one."""
        return max((SlurmVersion.parse(v) for _p, v in self.newer), default=None)

    @property
    def runs(self) -> SlurmVersion | None:
        """The release the host runs after this configure: a configure keeps an installed
        release (unless it upgrades it) and installs the offered one where none is."""
        if self.upgrading:
            return self.target
        return self.installed or self.offered

    @property
    def daemon(self) -> str:
        """The daemon that comes first in the upgrade order."""
        return min(self.daemons, key=DAEMON_ORDER.index)


def read_host(host: str, daemons: Iterable[str], text: str) -> HostSlurm:
    """A host's Slurm from what ``roles/slurm_common/vars/main.yml``'s
    ``__slurm_common_release_read`` prints there: lines ``installed|STATUS|PACKAGE|SOURCE|
    VERSION`` (dpkg-query), ``offered|VERSION`` (the candidate ``apt-cache policy`` names;
    empty or ``(none)`` when the sources have none) and ``newer|PACKAGE|VERSION`` (an
    installed package whose candidate is a newer build, by ``dpkg --compare-versions``).

    Library packages (``libslurm38`` of 22.05, ``libslurm42`` of 24.11) are left out: an
    upgrade installs the new one beside the old, which stays until ``apt autoremove``."""
    daemons = tuple(sorted(set(daemons), key=DAEMON_ORDER.index))
    packages: dict[str, str] = {}
    held = False
    offered = None
    newer: dict[str, str] = {}
    for line in str(text).splitlines():
        fields = line.strip().split("|")
        if fields[0] == "installed" and len(fields) == 5:
            _tag, status, package, source, version = fields
            if status.strip()[1:2] == "i" and source.strip() == SOURCE_PACKAGE \
                    and not package.startswith("lib"):
                packages[package] = version
                held = held or status.strip()[:1] == "h"
        elif fields[0] == "offered" and len(fields) == 2 and fields[1] not in ("", "(none)"):
            offered = SlurmVersion.parse(fields[1])
        elif fields[0] == "newer" and len(fields) == 3 and fields[1] and fields[2]:
            SlurmVersion.parse(fields[2])  # one that cannot be read is refused here
            newer[fields[1]] = fields[2]
    releases = {SlurmVersion.parse(v) for v in packages.values()}
    installed = max(releases) if releases else None
    return HostSlurm(host, daemons, installed, offered, tuple(sorted(packages.items())), held,
                     tuple(sorted(newer.items())) if installed else ())


def upgrades(hosts: Iterable[HostSlurm]) -> dict[str, list[str]]:
    """``{host: ["PACKAGE=VERSION", ...]}``: what ``--upgrade-slurm`` installs on each host
    with a newer build offered (after ``release_problems(..., upgrade=True)`` found none)."""
    return {h.host: [f"{p}={v}" for p, v in h.newer] for h in hosts if h.newer}


def _group(found: Mapping[str, list[str]]) -> list[str]:
    return [text.format(hosts=_hosts(hosts)) for text, hosts in found.items()]


def release_problems(hosts: Iterable[HostSlurm],
                     upgrade: bool = False) -> tuple[list[str], list[str]]:
    """(problems, notes) for the cluster's hosts: a problem refuses the configure (each a
    sentence naming hosts, releases and what to do); a note is said and the run goes on.
    With ``upgrade``, a host offered a newer build is judged by the release it upgrades to."""
    found: dict[str, list[str]] = {}
    notes: dict[str, list[str]] = {}
    checked = []
    for h in hosts:
        try:
            for release in (h.installed, h.offered, h.target):
                if release and not _checkable(release):
                    _index(release)
        except SlurmVersionError as exc:
            found.setdefault(f"{{hosts}}: {exc}", []).append(h.host)
            continue
        checked.append(h)
        versions = sorted({v for _p, v in h.packages})
        # With --upgrade-slurm a half-done upgrade is finished: every package goes to the
        # newest build offered.
        if len({SlurmVersion.parse(v) for v in versions}) > 1 and not (upgrade and h.newer):
            listed = ", ".join(f"{p} {v}" for p, v in h.packages)
            found.setdefault(
                f"{{hosts}}: Slurm's packages are at different releases ({listed}), a "
                "half-done upgrade: finish it with 'metalslurm configure --upgrade-slurm' "
                "(or by hand with apt in SchedMD's order: slurmdbd, slurmctld, then slurmd "
                "and the clients), or undo it, then run again", []
            ).append(h.host)
        if upgrade and h.newer:
            h = replace(h, upgrading=True)
            checked[-1] = h
            _upgrade_problems(h, found, notes)
        elif h.installed and h.offered and h.offered > h.installed:
            why = jump_problem(h.installed, h.offered)
            offer = (f"{{hosts}}: the apt sources offer Slurm {h.offered} over the installed "
                     f"{h.installed}")
            if why and h.held:
                notes.setdefault(
                    f"{offer}, a jump Slurm cannot make ({why}); the packages are held "
                    "(apt-mark hold), so apt leaves them: keep them held until you upgrade "
                    "in steps (docs/how-to/day-2.md)", []).append(h.host)
            elif why:
                found.setdefault(
                    f"{offer}, a jump Slurm cannot make: {why}. Point the apt sources "
                    f"back at the release that ships {h.installed.release}, hold the "
                    "Slurm packages (apt-mark hold), or upgrade in steps "
                    "(docs/how-to/day-2.md): an 'apt upgrade' there would make that jump "
                    "(unattended-upgrades leaves Slurm alone)", []).append(h.host)
            else:
                notes.setdefault(
                    f"{offer}; this run keeps {h.installed} (upgrade in SchedMD's order: "
                    "docs/how-to/day-2.md)", []).append(h.host)
    try:
        _order_problems(checked, found)
    except SlurmVersionError as exc:
        found.setdefault(f"{{hosts}}: {exc}", []).extend(
            h.host for h in checked if "slurmctld" in h.daemons)
    return _group(found), _group(notes)


def _upgrade_problems(h: HostSlurm, found: dict[str, list[str]],
                      notes: dict[str, list[str]]) -> None:
    """An upgrade to the newer build the host's sources offer: inside the window, not held."""
    target, installed = h.target, h.installed
    if target is None or installed is None:  # read_host keeps 'newer' only where installed
        return
    oldest = min(SlurmVersion.parse(v) for _p, v in h.packages)
    builds = sorted({v for _p, v in h.newer})
    offer = (f"{{hosts}}: the apt sources offer Slurm {' and '.join(builds)} over the "
             f"installed {', '.join(sorted({v for _p, v in h.packages}))}")
    if h.held:
        found.setdefault(
            f"{offer}, and Slurm's packages are held (apt-mark hold), so --upgrade-slurm "
            "cannot install them: 'apt-mark unhold' them there, or run without "
            "--upgrade-slurm", []).append(h.host)
    elif why := jump_problem(oldest, target):
        found.setdefault(
            f"{offer}, a jump Slurm cannot make: {why}. Point the apt sources at a release "
            f"inside {oldest.release}'s window first, or run without --upgrade-slurm "
            "(docs/how-to/day-2.md)", []).append(h.host)
    else:
        notes.setdefault(
            f"{offer}; this run upgrades them, slurmdbd's host first, then slurmctld's, then "
            "the nodes and login nodes", []).append(h.host)
        if "slurmd" in h.daemons and installed < RECONFIGURE_TAKES_NODES:
            # The same limit as a node list change there (slurm_versions.py).
            notes.setdefault(
                f"{{hosts}}: slurmd {installed.release} restarted on the new build refuses "
                "new steps of the jobs running across the restart ('Job prolog failed'; "
                "their running steps finish): drain these nodes first where that matters",
                []).append(h.host)


def _verb(h: HostSlurm) -> str:
    if h.upgrading:
        return "would upgrade to"
    return "runs" if h.installed else "would install"


def _order_problems(hosts: list[HostSlurm], found: dict[str, list[str]]) -> None:
    """Each daemon's release against the one before it in the upgrade order."""
    ranked = [(h, h.runs) for h in hosts if h.runs and h.daemons]
    controllers = [(h, r) for h, r in ranked if "slurmctld" in h.daemons]
    if not controllers:
        return
    ctl, ctld = min(controllers, key=lambda hr: hr[1])
    if len({r.release for _h, r in controllers}) > 1:
        listed = ", ".join(f"{h.host} {r}" for h, r in controllers)
        found.setdefault(
            f"{{hosts}}: the slurmctld hosts would run different Slurm releases ({listed}); "
            "they share slurmctld's state and run one release: upgrade them together",
            []).extend(h.host for h, _r in controllers)
    for dbd, release in ranked:
        if "slurmdbd" not in dbd.daemons:
            continue
        if release < ctld:
            found.setdefault(
                f"{{hosts}}: slurmdbd {_verb(dbd)} Slurm {release}, older than slurmctld's "
                f"{ctld} on {ctl.host}: slurmdbd is upgraded first and runs the newest "
                "release (SchedMD's order); upgrade slurmdbd's host, or point its apt "
                f"sources at the release that ships {ctld.release}", []).append(dbd.host)
        elif why := jump_problem(ctld, release):
            found.setdefault(
                f"{{hosts}}: slurmdbd {_verb(dbd)} Slurm {release}, which cannot talk to "
                f"slurmctld's {ctld} on {ctl.host}: {why}; upgrade slurmctld's host inside "
                f"slurmdbd's window, or point slurmdbd's apt sources at the release that "
                f"ships {ctld.release}", []).append(dbd.host)
    for h, release in ranked:
        if h.daemon in ("slurmdbd", "slurmctld"):
            continue
        what = "slurmd" if h.daemon == "slurmd" else "slurm-client"
        if release > ctld:
            found.setdefault(
                f"{{hosts}}: {what} {_verb(h)} Slurm {release}, newer than slurmctld's "
                f"{ctld} on {ctl.host}, which cannot read a newer release's messages: "
                "upgrade slurmdbd and slurmctld first, or point these hosts' apt sources at "
                f"the release that ships {ctld.release}", []).append(h.host)
        elif why := jump_problem(release, ctld):
            found.setdefault(
                f"{{hosts}}: {what} {_verb(h)} Slurm {release}, too old for slurmctld's "
                f"{ctld} on {ctl.host}: {why}", []).append(h.host)
