"""Which Slurm release accepts each setting the roles write, and what to write instead.

The roles render slurm.conf, cgroup.conf and gres.conf from data. The supported operating
systems ship different Slurm releases (``DISTRO_SLURM``: Ubuntu 22.04 has 21.08, Debian 12
22.05, Ubuntu 24.04 23.11, Debian 13 24.11), and a setting one release needs is unknown,
defunct or ignored in another. ``SETTINGS`` records, for every setting the roles write (and
every option value where a setting takes a list of options or a choice of plugins), the
first release that accepts it, the release that removed it, what to write instead outside
that range, and where each fact comes from. ``check_settings`` applies that table to one
file's (or one record's) settings before they are rendered.

Sources named in ``SETTINGS`` and ``DISTRO_SLURM``:

- "NEWS § X": the heading "* Changes in Slurm X" of SchedMD's NEWS file as shipped in the
  Slurm 24.11.5 source (Debian 13's slurm-wlm_24.11.5.orig.tar.gz), which carries the
  history back to Slurm 2.1.
- "RELEASE_NOTES X": SchedMD's RELEASE_NOTES of release X: 22.05 and 24.11 from the Debian
  12 and 13 sources; 21.08 at SchedMD/slurm commit 7fd207733791, 15.08 (draft of December
  2014) at commit 000729e63fd9, 2.0 at commit fd690b6c6e17.
- man pages "of 22.05.8" / "of 24.11.5": doc/man/man5 of the Debian 12 and 13 sources;
  "of 15.08": slurm.conf(5) "December 2014, slurm.conf 15.08" at SchedMD/slurm commit
  000729e63fd9.
- "cgroup.c of 21.08.2": src/common/cgroup.c at SchedMD/slurm commit 7fd207733791, whose
  NEWS heads with "Changes in Slurm 21.08.2".

A ``since`` of "≤21.08" means the setting is older than 21.08 but its first release was not
confirmed: its source says what shows it was there (documented or parsed before and after
21.08); 21.08's own man pages were not read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.operating_systems import (
    OPERATING_SYSTEMS,
)

__all__ = [
    "DISTRO_SLURM",
    "DROP",
    "KINDS",
    "LIST_SETTINGS",
    "MIN_SUPPORTED",
    "RECONFIGURE_TAKES_NODES",
    "SETTINGS",
    "DistroSlurm",
    "Setting",
    "SlurmVersion",
    "SlurmVersionError",
    "accepts",
    "check_settings",
    "distro_slurm",
    "reconfigure_takes_nodes",
]


class SlurmVersionError(ValueError):
    """Settings (or a Slurm version) the controller's Slurm cannot take: one sentence each."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


_VERSION_RE = re.compile(r"(?<![\d.])(\d{1,2})\.(\d{1,2})(?:\.(\d+))?(?!\d)")


@dataclass(frozen=True, order=True)
class SlurmVersion:
    """A Slurm release (``22.05``); compares by major and minor only, the patch is kept."""

    major: int
    minor: int
    patch: int | None = field(default=None, compare=False)

    @classmethod
    def parse(cls, text: str) -> SlurmVersion:
        """Read the version from what ``dpkg`` or ``slurmctld -V`` prints.

        ``"21.08.5"``, ``"22.05.8-4+deb12u3"``, ``"24.11.5-1+b1"``, ``"slurm-wlm 22.05.8"``,
        ``"slurm 23.11.4"`` and ``"23.11"`` all work; the first ``NN.NN[.N]`` counts.
        """
        match = _VERSION_RE.search(str(text))
        if not match or int(match[2]) > 12:
            raise SlurmVersionError([
                f"cannot read a Slurm version from {text!r}: expected what dpkg or "
                "'slurmctld -V' prints, such as '22.05.8-4' or 'slurm 23.11.4'"])
        patch = int(match[3]) if match[3] is not None else None
        return cls(int(match[1]), int(match[2]), patch)

    @property
    def release(self) -> str:
        """``"22.05"``; releases before 14.03 were numbered ``"2.6"``."""
        if self.major < 14:
            return f"{self.major}.{self.minor}"
        return f"{self.major}.{self.minor:02d}"

    def __str__(self) -> str:
        return self.release if self.patch is None else f"{self.release}.{self.patch}"


def _version(text: str) -> SlurmVersion:
    """A table version: ``"23.11"``, or ``"≤21.08"`` read as its upper bound."""
    return SlurmVersion.parse(text.removeprefix("≤"))


# The oldest release metalslurm supports: Ubuntu 22.04's.
MIN_SUPPORTED = SlurmVersion(21, 8)

# The first release whose 'scontrol reconfigure' hands each daemon over to a new process
# that reads slurm.conf afresh ("Relinquishing control to new slurmctld process", the same
# in every slurmd): a node added to (or removed from) slurm.conf takes effect with that
# reconfigure, with no slurmd restarted by systemd, and a job running across the change
# still starts new steps. Seen here on 24.11.5 (tests/e2e/test_rented_servers.py, where a
# running two-node job's second srun completes after a host joined). Earlier releases
# read the node list at start only, and a restarted slurmd refuses the new steps of a job
# that started before it ("Job prolog failed"): there the node list is a restart setting
# (roles/slurm_controller, the restart record).
RECONFIGURE_TAKES_NODES = SlurmVersion(24, 11)

# ``adapt`` value: leave the setting (or the option value) out.
DROP = "(leave out)"
# What the checks below return for a setting or option value that is left out.
_OMIT = object()

# What check_settings checks: one configuration file's settings, or one record of slurm.conf
# (NodeName, PartitionName), gres.conf or topology.conf, or the slurmd command line.
KINDS = ("cgroup.conf", "gres.conf", "node", "partition", "slurm.conf", "slurmd",
         "topology.conf")


@dataclass(frozen=True)
class Setting:
    """When Slurm accepts one setting, or one option value of a setting.

    Outside ``since`` (inclusive) .. ``until`` (exclusive) the setting is adapted to
    ``adapt`` (a replacement value, or DROP), with ``reason`` as the note; without ``adapt``
    it is refused, with ``remedy`` telling what to do. ``maximum`` bounds numeric values on
    every release. ``caveat`` is noted when the setting is written for a release older than
    ``caveat_before``: that release accepts it, but it works only under a condition of the
    nodes that this check cannot see.
    """

    kind: str
    setting: str
    value: str | None
    since: str
    source: str
    until: str | None = None
    adapt: str | None = None
    reason: str = ""
    remedy: str = ""
    maximum: int | None = None
    caveat: str = ""
    caveat_before: str | None = None

    def accepted_by(self, version: SlurmVersion) -> bool:
        if version < _version(self.since):
            return False
        return self.until is None or version < _version(self.until)


# Evidence shared by the settings older than 21.08.
_SLURM_CONF_OLD = ("≤ 21.08: documented in slurm.conf(5) of 15.08 (SchedMD/slurm commit "
                   "000729e63fd9), of 22.05.8 and of 24.11.5")
_SLURM_CONF_NEWER = ("≤ 21.08: documented in slurm.conf(5) of 22.05.8 and of 24.11.5; "
                     "not in 15.08's")
_CGROUP_CONF_OLD = "≤ 21.08: parsed by cgroup.c of 21.08.2; cgroup.conf(5) of 22.05.8 and 24.11.5"
_GRES_CONF_OLD = ("≤ 21.08: documented in gres.conf(5) of 22.05.8 and of 24.11.5; NEWS § "
                  "2.2.0.pre6 adds Gres= and gres.conf")
_TOPOLOGY_CONF_OLD = ("≤ 21.08: topology/tree in slurm.conf(5) of 15.08; topology.conf(5) of "
                      "22.05.8 and 24.11.5")

# Sorted by kind, setting, value (case-insensitive); a setting's own entry comes first.
SETTINGS: tuple[Setting, ...] = (
    # cgroup.conf
    Setting("cgroup.conf", "CgroupPlugin", None, "21.08",
            "21.08: parsed by cgroup.c of 21.08.2 (a file written in 2021, so new in 21.08); "
            "NEWS § 21.08.0 'Fix error codes in cgroup/v1'"),
    Setting("cgroup.conf", "CgroupPlugin", "autodetect", "21.08",
            "21.08: cgroup.c of 21.08.2 accepts 'autodetect' (default there: cgroup/v1); "
            "cgroup.conf(5) of 22.05.8 makes it the default",
            caveat="Slurm 21.08 has no cgroup/v2 plugin (RELEASE_NOTES 22.05 'Added support "
                   "for Cgroup Version 2'), so autodetect works only on nodes booted with the "
                   "cgroup v1 hierarchy (systemd.unified_cgroup_hierarchy=0)",
            caveat_before="22.05"),
    Setting("cgroup.conf", "CgroupPlugin", "cgroup/v1", "21.08",
            "21.08: the default in cgroup.c of 21.08.2; NEWS § 21.08.0 'Fix error codes in "
            "cgroup/v1'"),
    Setting("cgroup.conf", "CgroupPlugin", "cgroup/v2", "22.05",
            "RELEASE_NOTES 22.05, HIGHLIGHTS: 'Added support for Cgroup Version 2'; "
            "cgroup.conf(5) of 22.05.8",
            remedy="upgrade Slurm, or write CgroupPlugin=autodetect and boot the nodes with "
                   "the cgroup v1 hierarchy"),
    Setting("cgroup.conf", "ConstrainCores", None, "≤21.08", _CGROUP_CONF_OLD),
    Setting("cgroup.conf", "ConstrainDevices", None, "≤21.08", _CGROUP_CONF_OLD),
    Setting("cgroup.conf", "ConstrainRAMSpace", None, "≤21.08", _CGROUP_CONF_OLD),
    # gres.conf
    Setting("gres.conf", "AutoDetect", None, "≤21.08",
            "≤ 21.08: NEWS § 19.05.3 'gres.conf's AutoDetect=nvml'; gres.conf(5) of 22.05.8 "
            "and 24.11.5 (both: 'AutoDetect cannot be used with cloud nodes')"),
    Setting("gres.conf", "AutoDetect", "nvidia", "24.11",
            "gres.conf(5) of 24.11.5: 'nvidia ... Added in Slurm 24.11'; absent from 22.05.8's",
            remedy="upgrade Slurm, or write AutoDetect=nvml (needs Slurm built with NVML) or "
                   "list the GPUs' File= in gres.conf"),
    Setting("gres.conf", "AutoDetect", "nvml", "≤21.08",
            "≤ 21.08: NEWS § 19.05.3 'gres.conf's AutoDetect=nvml'; gres.conf(5) of 22.05.8 "
            "and 24.11.5"),
    Setting("gres.conf", "AutoDetect", "off", "≤21.08",
            "≤ 21.08: NEWS § 20.11.0rc1 'Add Autodetect option to NodeName line in gres.conf "
            "to override the global Autodetect option'; gres.conf(5) of 22.05.8 and 24.11.5"),
    Setting("gres.conf", "Cores", None, "≤21.08", _GRES_CONF_OLD),
    Setting("gres.conf", "File", None, "≤21.08", _GRES_CONF_OLD),
    Setting("gres.conf", "Name", None, "≤21.08", _GRES_CONF_OLD),
    Setting("gres.conf", "NodeName", None, "≤21.08", _GRES_CONF_OLD),
    Setting("gres.conf", "Type", None, "≤21.08",
            "≤ 21.08: NEWS § 14.11.2 'GRES configured with \"Type\"'; gres.conf(5) of 22.05.8 "
            "and 24.11.5"),
    # slurm.conf NodeName records
    Setting("node", "CoresPerSocket", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("node", "CPUs", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("node", "Gres", None, "≤21.08",
            "≤ 21.08: NEWS § 2.2.0.pre6 'Added node configuration parameter of Gres='; "
            "slurm.conf(5) of 15.08, 22.05.8 and 24.11.5"),
    Setting("node", "NodeName", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("node", "RealMemory", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("node", "Sockets", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("node", "State", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("node", "State", "CLOUD", "≤21.08", _SLURM_CONF_OLD),
    Setting("node", "State", "UNKNOWN", "≤21.08", _SLURM_CONF_OLD),
    Setting("node", "ThreadsPerCore", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("node", "Weight", None, "≤21.08", _SLURM_CONF_OLD),
    # slurm.conf PartitionName records
    Setting("partition", "Default", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("partition", "DefaultTime", None, "2.0",
            "RELEASE_NOTES 2.0 (SchedMD/slurm commit fd690b6c6e17): 'DefaultTime has been "
            "added'; slurm.conf(5) of 15.08, 22.05.8 and 24.11.5"),
    Setting("partition", "MaxNodes", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("partition", "MaxTime", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("partition", "Nodes", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("partition", "PartitionName", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("partition", "PriorityJobFactor", None, "16.05",
            "NEWS § 16.05.0pre2 'Split partition's \"Priority\" field into \"PriorityTier\" "
            "... plus \"PriorityJobFactor\"'; slurm.conf(5) of 22.05.8 and 24.11.5: 'may not "
            "exceed 65533'",
            maximum=65533, remedy="write 65533 or less"),
    Setting("partition", "PriorityTier", None, "16.05",
            "NEWS § 16.05.0pre2 'Split partition's \"Priority\" field into \"PriorityTier\"'; "
            "slurm.conf(5) of 22.05.8 and 24.11.5: 'may not exceed 65533'",
            maximum=65533, remedy="write 65533 or less"),
    Setting("partition", "QOS", None, "15.08",
            "RELEASE_NOTES 15.08 (SchedMD/slurm commit 000729e63fd9): 'A partition can now "
            "have a QOS attached'; slurm.conf(5) of 22.05.8 and 24.11.5"),
    Setting("partition", "State", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("partition", "State", "UP", "≤21.08", _SLURM_CONF_OLD),
    # slurm.conf
    Setting("slurm.conf", "AccountingStorageEnforce", None, "≤21.08",
            _SLURM_CONF_OLD + "; RELEASE_NOTES 21.08: an invalid value stops slurmctld"),
    Setting("slurm.conf", "AccountingStorageEnforce", "associations", "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "AccountingStorageEnforce", "limits", "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "AccountingStorageEnforce", "qos", "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "AccountingStorageEnforce", "safe", "2.5",
            "NEWS § 2.5.0-rc1 'Add AccountingStorageEnforce=safe option'; slurm.conf(5) of "
            "15.08, 22.05.8 and 24.11.5"),
    Setting("slurm.conf", "AccountingStorageHost", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "AccountingStoragePort", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "AccountingStorageTRES", None, "15.08",
            "NEWS § 15.08.0 'Add AccountingStorageTRES to scontrol show config' (TRES are new "
            "in 15.08); slurm.conf(5) of 22.05.8 and 24.11.5"),
    Setting("slurm.conf", "AccountingStorageTRES", "gres/gpu", "≤21.08",
            "≤ 21.08: slurm.conf(5) of 22.05.8 and 24.11.5 (AccountingStorageTRES examples "
            "with gres/gpu)"),
    Setting("slurm.conf", "AccountingStorageTRES", "gres/gpu:*", "≤21.08",
            "≤ 21.08: slurm.conf(5) of 22.05.8 and 24.11.5 (typed GRES as gres/gpu:<type>)"),
    Setting("slurm.conf", "AccountingStorageType", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "AccountingStorageType", "accounting_storage/slurmdbd", "≤21.08",
            _SLURM_CONF_OLD),
    Setting("slurm.conf", "AuthAltParameters", None, "≤21.08", _SLURM_CONF_NEWER),
    Setting("slurm.conf", "AuthAltParameters", "max_token_lifespan=*", "22.05",
            "slurm.conf(5) of 22.05.8 and of 24.11.5; not in 21.08's NEWS or RELEASE_NOTES "
            "(REST is refused on 21.08 anyway: no packaged JWT plugin, module_utils/rest.py)",
            remedy="set metalslurm:rest maxTokenLifespan to 0 (no bound), or run Slurm 22.05 "
            "or newer"),
    Setting("slurm.conf", "AuthAltTypes", None, "≤21.08", _SLURM_CONF_NEWER),
    Setting("slurm.conf", "AuthAltTypes", "auth/jwt", "≤21.08",
            _SLURM_CONF_NEWER + "; NEWS § 20.02.0pre1 'Add auth/jwt plugin'"),
    Setting("slurm.conf", "AuthType", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "AuthType", "auth/munge", "≤21.08",
            _SLURM_CONF_OLD + "; RELEASE_NOTES 2.0: 'The default AuthType is now auth/munge'"),
    Setting("slurm.conf", "ClusterName", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "CredType", None, "19.05",
            "NEWS § 19.05.0pre2 'Change CryptoType option to CredType, and rename crypto/munge "
            "plugin to cred/munge'"),
    Setting("slurm.conf", "CredType", "cred/munge", "19.05",
            "NEWS § 19.05.0pre2 'Change CryptoType option to CredType, and rename crypto/munge "
            "plugin to cred/munge'"),
    Setting("slurm.conf", "DefMemPerCPU", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "GresTypes", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "InactiveLimit", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "JobAcctGatherFrequency", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "JobAcctGatherType", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "JobAcctGatherType", "jobacct_gather/cgroup", "2.4",
            "NEWS § 2.4.0.rc1 'Added jobacct_gather/cgroup plugin'; slurm.conf(5) of 15.08, "
            "22.05.8 and 24.11.5"),
    Setting("slurm.conf", "JobCompType", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "JobCompType", "jobcomp/none", "≤21.08",
            "≤ 21.08: slurm.conf(5) of 15.08 and 22.05.8 (the default there); 24.11.5 ships no "
            "jobcomp/none plugin but its read_config.c reads any value containing 'none' as "
            "unset"),
    Setting("slurm.conf", "KillWait", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "MaxJobCount", None, "≤21.08",
            _SLURM_CONF_OLD + "; 'A restart of slurmctld is required' in 22.05.8's"),
    Setting("slurm.conf", "MessageTimeout", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "MinJobAge", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "MpiDefault", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "MpiDefault", "none", "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "PreemptMode", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "PreemptMode", "REQUEUE", "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "PreemptType", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "PreemptType", "preempt/partition_prio", "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "PriorityDecayHalfLife", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "PriorityMaxAge", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "PriorityType", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "PriorityType", "priority/multifactor", "2.0",
            "RELEASE_NOTES 2.0 (SchedMD/slurm commit fd690b6c6e17): '\"priority/multifactor\" "
            "is a new plugin'; slurm.conf(5) of 15.08, 22.05.8 and 24.11.5"),
    Setting("slurm.conf", "PriorityWeightAge", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "PriorityWeightFairshare", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "PriorityWeightJobSize", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "PriorityWeightPartition", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "PriorityWeightQOS", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "PrivateData", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "PrivateData", "cloud", "14.11",
            "NEWS § 14.11.0rc2 'Add PrivateData value of \"cloud\"'; NEWS § 23.02.0rc1 'Change "
            "cloud nodes to show by default. PrivateData=cloud is no longer needed.'; "
            "read_config.c of 24.11.5 no longer reads it",
            until="23.02", adapt=DROP,
            reason="Slurm 23.02 and newer show powered-down cloud nodes by default"),
    Setting("slurm.conf", "ProctrackType", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "ProctrackType", "proctrack/cgroup", "≤21.08",
            _SLURM_CONF_OLD + "; NEWS § 2.2.0.pre2 'Add proctrack/cgroup plugin'"),
    Setting("slurm.conf", "PropagateResourceLimitsExcept", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "PropagateResourceLimitsExcept", "MEMLOCK", "≤21.08",
            _SLURM_CONF_OLD),
    Setting("slurm.conf", "ResumeFailProgram", None, "18.08",
            "NEWS § 18.08.0pre2 'Add ResumeFailProgram slurm.conf option'; slurm.conf(5) of "
            "22.05.8 and 24.11.5"),
    Setting("slurm.conf", "ResumeProgram", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "ResumeRate", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "ResumeTimeout", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "ReturnToService", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "ReturnToService", "2", "≤21.08",
            _SLURM_CONF_OLD + "; NEWS § 2.1.10 'Get ReturnToService=2 working for front-end "
            "configurations'"),
    Setting("slurm.conf", "SchedulerParameters", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "SchedulerParameters", "bf_continue", "2.6",
            "NEWS § 2.6.0pre2 'Added new SchedulerParameters configuration parameter of "
            "\"bf_continue\"'; slurm.conf(5) of 15.08, 21.08.5 and 24.11.5"),
    Setting("slurm.conf", "SchedulerParameters", "bf_interval=*", "2.6",
            "NEWS § 2.6.0rc1 'Deprecate the SchedulerParameters value of \"interval\" use "
            "\"bf_interval\" instead'; slurm.conf(5) of 15.08, 21.08.5 and 24.11.5"),
    Setting("slurm.conf", "SchedulerParameters", "bf_max_job_test=*", "≤21.08",
            "≤ 21.08: slurm.conf(5) of 15.08, of 21.08.5 (SchedMD/slurm tag slurm-21-08-5-1) "
            "and of 24.11.5 (default 500 in the last two)"),
    Setting("slurm.conf", "SchedulerParameters", "bf_max_job_user=*", "2.4",
            "NEWS § 2.4.0.rc1 'Add support for new SchedulerParameters of bf_max_job_user'; "
            "slurm.conf(5) of 15.08, 21.08.5 and 24.11.5"),
    Setting("slurm.conf", "SchedulerParameters", "bf_resolution=*", "2.4",
            "NEWS § 2.4.0 '... changed to \"bf_resolution=\"'; slurm.conf(5) of 15.08, "
            "21.08.5 and 24.11.5"),
    Setting("slurm.conf", "SchedulerParameters", "bf_window=*", "2.2",
            "NEWS § 2.2.0.pre12 'Add SchedulerParameters option of bf_window'; slurm.conf(5) "
            "of 15.08, 21.08.5 and 24.11.5"),
    Setting("slurm.conf", "SchedulerParameters", "defer_batch", "23.02",
            "NEWS § 23.02.0rc1 'Add new \"defer_batch\" option to SchedulerParameters to only "
            "defer scheduling for batch jobs'; not in slurm.conf(5) of 22.05.8; job_mgr.c of "
            "22.05.8 looks for 'defer' as a substring, so an older slurmctld reads defer_batch "
            "as defer (every job, salloc and srun too)",
            remedy="upgrade Slurm to 23.02 or newer, or write 'defer' if salloc and srun may "
                   "wait for the scheduler too"),
    Setting("slurm.conf", "SchedulerParameters", "max_rpc_cnt=*", "2.6",
            "NEWS § 2.6.8 'Added new SchedulerParameters option of max_rpc_cnt'; slurm.conf(5) "
            "of 15.08, 21.08.5 and 24.11.5"),
    Setting("slurm.conf", "SchedulerParameters", "partition_job_depth=*", "14.03",
            "NEWS § 14.03.0pre6 'Added SchedulerParameters option of partition_job_depth'; "
            "slurm.conf(5) of 15.08, 21.08.5 and 24.11.5"),
    Setting("slurm.conf", "SchedulerParameters", "sched_min_interval=*", "14.11",
            "NEWS § 14.11.7 'Add SchedulerParameters option of sched_min_interval'; "
            "slurm.conf(5) of 21.08.5 and 24.11.5"),
    Setting("slurm.conf", "SchedulerType", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "SchedulerType", "sched/backfill", "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "SelectType", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "SelectType", "select/cons_tres", "19.05",
            "NEWS § 18.08.0 'Remove the development snapshot of select/cons_tres plugin' and "
            "§ 18.08.1 '...cons_tres work in 19.05'; NEWS § 19.05.0pre2 uses it; "
            "slurm.conf(5) of 22.05.8 and 24.11.5"),
    Setting("slurm.conf", "SelectTypeParameters", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "SelectTypeParameters", "CR_Core_Memory", "≤21.08",
            _SLURM_CONF_OLD + "; RELEASE_NOTES 21.08: 'Make SelectTypeParameters=CR_Core_Memory "
            "default for cons_tres and cons_res'"),
    Setting("slurm.conf", "SlurmctldHost", None, "18.08",
            "NEWS § 18.08.0pre2 '\"ControlMachine\", \"ControlAddr\" ... replaced by an ordered "
            "list of \"SlurmctldHost\" records ... \"SlurmctldHost=head(12.34.56.78)\"'"),
    Setting("slurm.conf", "SlurmctldLogFile", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "SlurmctldParameters", None, "≤21.08",
            _SLURM_CONF_NEWER + "; NEWS § 20.02.4 'SlurmctldParameters=max_dbd_msg_action'"),
    Setting("slurm.conf", "SlurmctldParameters", "cloud_reg_addrs", "20.11",
            "NEWS § 20.11.0rc1 'SlurmctldParameters=cloud_reg_addrs - Cloud nodes "
            "automatically get NodeAddr and NodeHostname set from slurmd registration'; NEWS "
            "§ 23.11.0rc1 'Remove cloud_reg_addrs and make it default behavior'; read_config.c "
            "of 24.11.5 logs it as defunct",
            until="23.11", adapt=DROP,
            reason="Slurm 23.11 removed the option and takes a cloud node's NodeAddr and "
                   "NodeHostname from its registration by default",
            remedy="upgrade Slurm or remove the elastic nodes"),
    Setting("slurm.conf", "SlurmctldParameters", "conmgr_max_connections=*", "24.11",
            "RELEASE_NOTES 24.11 'Added connection related parameters to slurm.conf under "
            "SlurmctldParameters: conmgr_max_connections ...'; slurm.conf(5) of 24.11.5 "
            "(default 50, as controller.c of 24.11.5; the RELEASE_NOTES say 150); not in "
            "slurm.conf(5) of 24.05.0",
            remedy="upgrade Slurm to 24.11 or newer (older releases handle RPCs without "
                   "conmgr's thread pool), or leave the option out"),
    Setting("slurm.conf", "SlurmctldParameters", "conmgr_threads=*", "24.11",
            "RELEASE_NOTES 24.11 'conmgr_threads: Defaults to 64 threads for slurmctld'; "
            "slurm.conf(5) of 24.11.5; not in slurm.conf(5) of 24.05.0",
            remedy="upgrade Slurm to 24.11 or newer (older releases handle RPCs without "
                   "conmgr's thread pool), or leave the option out"),
    Setting("slurm.conf", "SlurmctldParameters", "enable_configless", "20.02",
            "configless_slurm.shtml of 24.11.5: 'built in by default starting with Slurm "
            "20.02' and 'SlurmctldParameters=enable_configless'; slurm.conf(5) of 22.05.8"),
    Setting("slurm.conf", "SlurmctldParameters", "idle_on_node_suspend", "19.05",
            "NEWS § 19.05.0rc1 'Add idle_on_node_suspend SlurmctldParameter to make nodes idle "
            "regardless of state when suspended'; slurm.conf(5) of 22.05.8 and 24.11.5"),
    Setting("slurm.conf", "SlurmctldPidFile", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "SlurmctldPort", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "SlurmctldTimeout", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "SlurmdLogFile", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "SlurmdPidFile", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "SlurmdPort", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "SlurmdSpoolDir", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "SlurmdTimeout", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "SlurmdUser", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "SlurmUser", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "StateSaveLocation", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "SuspendExcNodes", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "SuspendProgram", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "SuspendRate", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "SuspendTime", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "SuspendTimeout", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "TaskPlugin", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "TaskPlugin", "task/affinity", "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "TaskPlugin", "task/cgroup", "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "TopologyPlugin", None, "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "TopologyPlugin", "topology/block", "23.11",
            "NEWS § 23.11.4 'topology/block - Restrict the number of last-level blocks' (the "
            "first NEWS entry naming it); no topology/block in the 22.05.8 source nor in NEWS "
            "of 23.02; slurm.conf(5) of 24.11.5",
            remedy="upgrade Slurm or write TopologyPlugin=topology/tree"),
    Setting("slurm.conf", "TopologyPlugin", "topology/tree", "≤21.08", _SLURM_CONF_OLD),
    Setting("slurm.conf", "TreeWidth", None, "≤21.08",
            _SLURM_CONF_OLD + "; 'The value may not exceed 65533' in all three; NEWS § "
            "23.11.0rc1 'Change TreeWidth default from 50 to 16'",
            maximum=65533, remedy="write 65533 or less"),
    Setting("slurm.conf", "UnkillableStepTimeout", None, "≤21.08",
            _SLURM_CONF_OLD + "; the NOTE 'at least 5 times larger than MessageTimeout' from "
            "23.11.4's; NEWS § 24.05.0rc1 'Changed the default value for UnkillableStepTimeout "
            "to 60 seconds or five times the value of MessageTimeout, whichever is greater'"),
    Setting("slurm.conf", "WaitTime", None, "≤21.08", _SLURM_CONF_OLD),
    # slurmd command line (roles/slurm_compute/templates/etc/default/slurmd.j2)
    Setting("slurmd", "--conf-server", None, "20.02",
            "configless_slurm.shtml of 24.11.5: configless is 'built in by default starting "
            "with Slurm 20.02' (slurmd --conf-server); RELEASE_NOTES 21.08: several "
            "comma-separated controllers"),
    # topology.conf
    Setting("topology.conf", "BlockLevels", None, "23.11",
            "NEWS § 24.05.0rc1 'topology/block - Replaced the BlockLevels with BlockSizes in "
            "topology.conf' (so 23.11's topology/block read BlockLevels)",
            until="24.05", remedy="write BlockSizes instead (Slurm 24.05 and newer)"),
    Setting("topology.conf", "BlockName", None, "23.11",
            "comes with topology/block: NEWS § 23.11.4; topology.conf(5) of 24.11.5",
            remedy="upgrade Slurm or describe the fabric with SwitchName records "
                   "(TopologyPlugin=topology/tree)"),
    Setting("topology.conf", "BlockSizes", None, "24.05",
            "NEWS § 24.05.0rc1 'topology/block - Replaced the BlockLevels with BlockSizes in "
            "topology.conf'; topology.conf(5) of 24.11.5",
            remedy="upgrade Slurm to 24.05 or newer, or leave BlockSizes out (23.11 reads "
                   "BlockLevels)"),
    Setting("topology.conf", "Nodes", None, "≤21.08", _TOPOLOGY_CONF_OLD),
    Setting("topology.conf", "Switches", None, "≤21.08", _TOPOLOGY_CONF_OLD),
    Setting("topology.conf", "SwitchName", None, "≤21.08", _TOPOLOGY_CONF_OLD),
)

# Settings whose string value is a comma-separated list of options (a list value is always
# read item by item).
LIST_SETTINGS = frozenset({
    ("slurm.conf", "accountingstorageenforce"),
    ("slurm.conf", "authaltparameters"),
    ("slurm.conf", "accountingstoragetres"),
    ("slurm.conf", "preemptmode"),
    ("slurm.conf", "privatedata"),
    ("slurm.conf", "propagateresourcelimitsexcept"),
    ("slurm.conf", "schedulerparameters"),
    ("slurm.conf", "selecttypeparameters"),
    ("slurm.conf", "slurmctldparameters"),
    ("slurm.conf", "taskplugin"),
})

# The first key of each record kind: it names the record in messages.
_RECORD_KEYS: dict[str, tuple[str, ...]] = {
    "gres.conf": ("NodeName",), "node": ("NodeName",), "partition": ("PartitionName",),
    "topology.conf": ("SwitchName", "BlockName")}
_LABELS = {"node": "slurm.conf", "partition": "slurm.conf", "slurmd": "slurmd"}


@dataclass(frozen=True)
class DistroSlurm:
    """The Slurm a supported operating system ships (package slurmctld / slurm-client)."""

    distribution: str  # ansible_distribution, lower case
    version: str  # Debian: major version; Ubuntu: release (ansible_distribution_version)
    package_version: str
    source: str

    @property
    def key(self) -> str:
        return f"{self.distribution}{self.version}"

    @property
    def slurm(self) -> SlurmVersion:
        return SlurmVersion.parse(self.package_version)


# The Slurm each supported OS ships (module_utils/operating_systems.py owns the list and the
# package versions, with where each was read).
DISTRO_SLURM: tuple[DistroSlurm, ...] = tuple(
    DistroSlurm(o.distribution, o.version, o.slurm_package, o.slurm_source)
    for o in OPERATING_SYSTEMS)


def distro_slurm(distribution: str, version: str) -> DistroSlurm:
    """The entry for ``ansible_distribution`` and its version (Debian: "12" or "12.5")."""
    name = distribution.lower()
    for entry in DISTRO_SLURM:
        major = version.split(".")[0] if name == "debian" else version
        if entry.distribution == name and entry.version == major:
            return entry
    known = ", ".join(entry.key for entry in DISTRO_SLURM)
    raise ValueError(f"no Slurm release recorded for {distribution} {version} "
                     f"(recorded: {known})")


def _index() -> dict[tuple[str, str], list[Setting]]:
    index: dict[tuple[str, str], list[Setting]] = {}
    for entry in SETTINGS:
        index.setdefault((entry.kind, entry.setting.lower()), []).append(entry)
    return index


_INDEX = _index()


def _setting_entry(kind: str, key: str) -> Setting | None:
    entries = _INDEX.get((kind, key.lower()), [])
    return next((e for e in entries if e.value is None), None)


def _value_entry(kind: str, key: str, item: Any) -> Setting | None:
    text = _text(item).lower()
    for entry in _INDEX.get((kind, key.lower()), []):
        if entry.value is None:
            continue
        wanted = entry.value.lower()
        if text == wanted or (wanted.endswith("*") and text.startswith(wanted[:-1])):
            return entry
    return None


def accepts(kind: str, setting: str, value: Any, version: SlurmVersion | str) -> bool:
    """Whether Slurm ``version`` takes ``setting`` (and ``value``, one option of it) as written.

    For code that chooses what to write (module_utils/slurm_scale.py), so that a release
    gets only what the table says it accepts; what is not in the table counts as accepted.
    """
    release = version if isinstance(version, SlurmVersion) else SlurmVersion.parse(version)
    entries = [_setting_entry(kind, setting)]
    if value is not None:
        entries.append(_value_entry(kind, setting, value))
    return all(entry is None or entry.accepted_by(release) for entry in entries)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "YES" if value else "NO"
    return str(value).strip()


@dataclass
class _Outcome:
    """What checking one kind of settings found."""

    where: str
    version: SlurmVersion
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _subject(entry: Setting, key: str, item: Any, listed: bool, where: str) -> str:
    if entry.value is None:
        return f"{where} {key}"
    if listed:
        return f"{where} {key} option {_text(item)}"
    return f"{where} {key}={_text(item)}"


def _apply(entry: Setting, subject: str, item: Any, out: _Outcome) -> Any:
    """The item as this release takes it: itself, a replacement or _OMIT; None if refused."""
    version = out.version
    if entry.caveat and entry.caveat_before and version < _version(entry.caveat_before):
        out.notes.append(f"{subject} on Slurm {version.release}: {entry.caveat}")
    if entry.accepted_by(version):
        return item
    if entry.adapt == DROP:
        out.notes.append(f"{subject} left out for Slurm {version.release}: {entry.reason}")
        return _OMIT
    if entry.adapt is not None:
        out.notes.append(f"{subject} written as {entry.adapt} for Slurm {version.release}: "
                         f"{entry.reason}")
        return entry.adapt
    remedy = entry.remedy or f"upgrade Slurm or leave {entry.setting} out"
    if version < _version(entry.since):
        out.problems.append(f"{subject} needs Slurm {entry.since.removeprefix('≤')} or newer; "
                            f"this controller runs Slurm {version.release}: {remedy}")
    else:
        out.problems.append(f"{subject} was removed in Slurm {entry.until}; this controller "
                            f"runs Slurm {version.release}: {remedy}")
    return None


def _check_maximum(entry: Setting, key: str, value: Any, out: _Outcome) -> None:
    if entry.maximum is None or isinstance(value, bool):
        return
    try:
        number = int(str(value).strip())
    except ValueError:
        return
    if number > entry.maximum:
        out.problems.append(f"{out.where} {key}={number} is above {entry.maximum}, the most "
                            f"Slurm accepts: {entry.remedy or 'write a smaller value'}")


def _items(kind: str, key: str, value: Any) -> list[Any] | None:
    """The options of a list-valued setting, or None for a single value."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str) and (kind, key.lower()) in LIST_SETTINGS:
        return [part.strip() for part in value.split(",") if part.strip()]
    return None


def _check_items(kind: str, key: str, value: Any, items: list[Any], out: _Outcome) -> Any:
    kept: list[Any] = []
    for item in items:
        entry = _value_entry(kind, key, item)
        if entry is None:
            kept.append(item)
            continue
        result = _apply(entry, _subject(entry, key, item, True, out.where), item, out)
        if result is not _OMIT and result is not None:
            kept.append(result)
    if not kept:
        out.notes.append(f"{out.where} {key} left out: none of its options apply to Slurm "
                         f"{out.version.release}")
        return _OMIT
    if isinstance(value, str):
        return ",".join(_text(item) for item in kept)
    return type(value)(kept) if isinstance(value, tuple) else kept


def _check_value(kind: str, key: str, value: Any, out: _Outcome) -> Any:
    """One setting as this release takes it (_OMIT to leave it out)."""
    entry = _setting_entry(kind, key)
    if entry is None or value is None:
        return value
    if _apply(entry, _subject(entry, key, value, False, out.where), value, out) is _OMIT:
        return _OMIT
    _check_maximum(entry, key, value, out)
    items = _items(kind, key, value)
    if items is not None:
        return _check_items(kind, key, value, items, out)
    value_entry = _value_entry(kind, key, value)
    if value_entry is None:
        return value
    result = _apply(value_entry, _subject(value_entry, key, value, False, out.where), value,
                    out)
    return value if result is None else result


def _where(kind: str, settings: Mapping[str, Any]) -> str:
    label = _LABELS.get(kind, kind)
    lowered = {str(key).lower(): value for key, value in settings.items()}
    for name in _RECORD_KEYS.get(kind, ()):
        if name.lower() in lowered:
            return f"{label} {name}={_text(lowered[name.lower()])}"
    return label


def _require_supported(version: SlurmVersion) -> None:
    if version < MIN_SUPPORTED:
        raise SlurmVersionError([
            f"Slurm {version.release} is older than {MIN_SUPPORTED.release}, the oldest "
            f"release metalslurm supports (Ubuntu 22.04's): upgrade Slurm to "
            f"{MIN_SUPPORTED.release} or newer"])


def check_settings(kind: str, settings: Mapping[str, Any],
                   version: SlurmVersion | str) -> tuple[dict[str, Any], list[str]]:
    """``settings`` as Slurm ``version`` takes them, and a note for each adaptation.

    ``kind`` is one of KINDS. Values may be strings, lists (option lists such as
    SlurmctldParameters are comma-joined when rendered), numbers or booleans. Settings and
    option values not in SETTINGS pass through untouched, without a note. Raises
    SlurmVersionError naming every setting the release cannot take, or the release itself
    when it is older than MIN_SUPPORTED.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown kind of Slurm settings {kind!r}: expected one of "
                         f"{', '.join(KINDS)}")
    release = version if isinstance(version, SlurmVersion) else SlurmVersion.parse(version)
    _require_supported(release)
    out = _Outcome(_where(kind, settings), release)
    adapted: dict[str, Any] = {}
    for key, value in settings.items():
        result = _check_value(kind, str(key), value, out)
        if result is not _OMIT:
            adapted[key] = result
    if out.problems:
        raise SlurmVersionError(out.problems)
    return adapted, out.notes


def reconfigure_takes_nodes(version: SlurmVersion | str) -> bool:
    """Whether Slurm ``version`` applies a changed node list with 'scontrol reconfigure'
    (RECONFIGURE_TAKES_NODES) rather than a restart of slurmctld and every slurmd."""
    if isinstance(version, str):
        version = SlurmVersion.parse(version)
    return version >= RECONFIGURE_TAKES_NODES
