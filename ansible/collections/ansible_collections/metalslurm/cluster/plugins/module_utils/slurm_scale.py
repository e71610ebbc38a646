"""The slurm.conf settings a large cluster needs, chosen by its node count and Slurm release.

Slurm's defaults suit a few dozen nodes. ``SCALE_SETTINGS`` records, for each setting (or
option of SchedulerParameters / SlurmctldParameters) that changes with the size of the
cluster, its value in each size band of ``BANDS``, where the value comes from and why.
``size_tuning`` picks the values for one cluster; the controller role combines them over
its own defaults and under the operator's ``slurm_controller_config`` (the operator wins).

Which release accepts a setting or option is not repeated here: ``slurm_versions.SETTINGS``
holds it (``accepts``), and an option a release does not take is not written for it. An
entry's ``applies_from`` / ``applies_until`` are about the tuning, not acceptance: a release
that takes the setting but does not need it (its default already fits, say).

``DECISIONS`` records the settings that the large-cluster guides name and this table leaves
alone, with the reason, so the next reader does not add them back unexamined.

Sources, as in slurm_versions.py: man pages, NEWS and RELEASE_NOTES of the Slurm releases
the supported operating systems ship (SchedMD/slurm tags slurm-21-08-5-1, slurm-22-05-8-1,
slurm-23-11-4-1, slurm-24-11-5-1); "big_sys.html" is SchedMD's "Large Cluster
Administration Guide" and "high_throughput.html" its "High Throughput Computing
Administration Guide", both as of 24.11.5 (doc/html/*.shtml). Anchor projects' files are
named by repository and path.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.slurm_versions import (
    SlurmVersion,
    accepts,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.slurmconf import (
    slurm_time_seconds,
)

__all__ = ["BANDS", "DECISIONS", "MAX_NODES", "SCALE_SETTINGS", "Band", "Decision", "Derived",
           "ScaleError", "ScaleSetting", "band_of", "size_tuning"]

# slurm.conf(5) of 24.11.5, MaxNodeCount: "The total number of nodes in a system cannot
# exceed 65536."
MAX_NODES = 65536


class ScaleError(ValueError):
    """A node count no Slurm cluster can have."""


@dataclass(frozen=True)
class Band:
    """A range of compute node counts (static and elastic together), both ends included."""

    name: str
    first: int
    last: int

    @property
    def label(self) -> str:
        if self.last == MAX_NODES:
            return f"> {self.first - 1:,}"
        return f"≤ {self.last:,}" if self.first <= 1 else f"{self.first:,}–{self.last:,}"


# small: Slurm's defaults fit (23.11's TreeWidth of 16 reaches 272 nodes in two hops, a job
# ending on every node is 64 epilog messages), and the tests and the local cluster run here:
# nothing changes. medium: past two leaf groups of a GPU fabric, where a job ending on every
# node, a health check round or a burst of submissions outgrows conmgr's 50 connections and
# the scheduler's per-event passes. large: big_sys.html's "clusters containing 1,024 nodes
# or more"; fanout still reaches every node in two hops. xlarge: three hops, up to Slurm's
# limit.
BANDS: tuple[Band, ...] = (
    Band("small", 1, 64),
    Band("medium", 65, 512),
    Band("large", 513, 2048),
    Band("xlarge", 2049, MAX_NODES),
)


@dataclass(frozen=True)
class Context:
    """What a derived value may read."""

    nodes: int
    release: SlurmVersion
    base: Mapping[str, Any]  # the settings before this table's
    overrides: Mapping[str, Any]  # the operator's slurm_controller_config
    tuned: Mapping[str, Any]  # this table's values chosen so far (keys only)
    longest_limit_minutes: int | None  # the longest partition MaxTime; None: unlimited


@dataclass(frozen=True)
class Derived:
    """A value computed for the cluster at hand; ``text`` says how, for the docs."""

    text: str
    compute: Callable[[Context], Any]


@dataclass(frozen=True)
class ScaleSetting:
    """One setting (``option`` None) or one option of a list setting, by size band.

    ``values`` has one entry per band of BANDS: None (not written), True (a flag option
    such as bf_continue), a number, or a Derived. A derived value of None is not written.
    """

    setting: str
    option: str | None
    values: tuple[Any, Any, Any, Any]
    source: str
    why: str
    applies_from: str | None = None
    applies_until: str | None = None
    applies_reason: str = ""

    @property
    def name(self) -> str:
        return self.setting if self.option is None else f"{self.setting} {self.option}"

    def applies_to(self, release: SlurmVersion) -> bool:
        if self.applies_from and release < SlurmVersion.parse(self.applies_from):
            return False
        return not (self.applies_until and release >= SlurmVersion.parse(self.applies_until))


@dataclass(frozen=True)
class Decision:
    """A setting the guides name that this table does not write, and why."""

    setting: str
    reason: str
    source: str


def _effective(ctx: Context, key: str, default: Any) -> Any:
    """The value slurmctld will run with: the operator's, else this table's, else the base."""
    for layer in (ctx.overrides, ctx.tuned, ctx.base):
        if layer.get(key) is not None:
            return layer[key]
    return default


def _option(value: Any, name: str) -> str | None:
    """The value of option ``name=`` in a list setting (a list, or a comma-joined string)."""
    items = value if isinstance(value, (list, tuple)) else str(value or "").split(",")
    for item in items:
        key, _, rest = str(item).strip().partition("=")
        if key.lower() == name.lower() and rest:
            return rest
    return None


def _unkillable_step_timeout(ctx: Context) -> int:
    return max(60, 5 * int(_effective(ctx, "MessageTimeout", 10)))


def _max_rpc_cnt_conmgr(ctx: Context) -> int:
    threads = _option(_effective(ctx, "SlurmctldParameters", []), "conmgr_threads")
    return max(10, int(threads or 64) // 2)


def _bf_window(ctx: Context) -> int | None:
    longest = 43200 if ctx.longest_limit_minutes is None else ctx.longest_limit_minutes
    window = min(43200, longest)
    return window if window > 1440 else None


def _bf_resolution(ctx: Context) -> int | None:
    window = _bf_window(ctx)
    if window is None:
        return None
    return min(3600, max(60, math.ceil(window * 60 / 1440)))


UNKILLABLE = Derived("5 × MessageTimeout (at least 60)", _unkillable_step_timeout)
RPC_CNT_CONMGR = Derived("half of conmgr_threads (Slurm's 64 unless the operator sets it): 32",
                         _max_rpc_cnt_conmgr)
BF_WINDOW = Derived("the longest partition MaxTime in minutes (UNLIMITED: 43200, the most "
                    "Slurm takes); not written when 1440 (Slurm's default) covers it", _bf_window)
BF_RESOLUTION = Derived("bf_window × 60 / 1440 seconds (Slurm's default 1,440 time slots), "
                        "60 to 3600; with bf_window only", _bf_resolution)

_MAN_2411 = "slurm.conf(5) of 24.11.5"
_HTC = "high_throughput.html (24.11.5), 'SchedulerParameters'"
_SOPERATOR = ("nebius/soperator internal/render/common/configmap.go (PR #2763 'Tune "
              "slurm.conf': ~90 RPC/s, 7 s RPC latency on a large cluster before)")

SCALE_SETTINGS: tuple[ScaleSetting, ...] = (
    ScaleSetting(
        "TreeWidth", None, (None, 23, 46, 41),
        "slurm.conf(5) of 22.05.8, TreeWidth: 'the square root of the number of nodes ... for "
        "systems having no more than 2500 nodes or the cube root for larger systems'; "
        "big_sys.html (24.11.5) 'Other': cube root; slurm.conf(5) of 24.11.5: 'on bigger "
        "systems this value can be increased to avoid long timeouts and retransmissions in "
        "case of unresponsive nodes'",
        "fanout reaches every node of the band in two hops (the square root of 512 and of "
        "2,048, rounded up), and in three up to Slurm's 65,536 nodes (their cube root); with "
        "elastic nodes this replaces the 65533 that turned fanout off",
        applies_from="23.11",
        applies_reason="before 23.11 the default is 50 (NEWS § 23.11.0rc1 'Change TreeWidth "
                       "default from 50 to 16'), which reaches 2,550 nodes in two hops, and "
                       "CLOUD nodes need fanout off (TreeWidth=65533: elastic_computing.shtml "
                       "of 22.05.8, 'slurmd daemons are not aware of the network addresses of "
                       "other nodes in the cloud'); 23.11 made fanout work for them (RELEASE_"
                       "NOTES 23.11 'Enable fanout for dynamic and unaddresable cloud nodes', "
                       "SchedMD/slurm commits 027835d3c2 and 2f05647904, which removed that "
                       "advice)"),
    ScaleSetting(
        "MessageTimeout", None, (None, 30, 60, 60),
        "high_throughput.html 'MessageTimeout': the default 10 s 'might need to be increased "
        "somewhat'; GoogleCloudPlatform/slurm-gcp etc/slurm.conf.tpl, aws/aws-parallelcluster-"
        "cookbook slurm.conf.erb and nebius/soperator api/v1/slurmcluster_types.go all write 60",
        "a busy slurmctld answers in seconds, not milliseconds: clients and slurmd then fail "
        "with 'Socket timed out' rather than wait; the anchors' 60 from 513 nodes on"),
    ScaleSetting(
        "UnkillableStepTimeout", None, (None, UNKILLABLE, UNKILLABLE, UNKILLABLE),
        "slurm.conf(5) of 23.11.4 and 24.11.5: 'Ensure that UnkillableStepTimeout is at least "
        "5 times larger than MessageTimeout, otherwise it can lead to unexpected draining of "
        "nodes'; the default is 60 before 24.05 (NEWS § 24.05.0rc1)",
        "follows MessageTimeout (the operator's too), so a longer MessageTimeout does not drain "
        "nodes on 21.08 to 23.11, where the default stays 60"),
    ScaleSetting(
        "MaxJobCount", None, (None, 20000, 50000, 100000),
        "high_throughput.html 'MaxJobCount' (default 10,000); slurm.conf(5) of 24.11.5: "
        "'Performance can suffer with more than a few hundred thousand jobs'; nebius/soperator "
        "api/v1/slurmcluster_types.go writes 20000",
        "pending, running and for MinJobAge (300 s) finished jobs all count: at 10,000 a burst "
        "of short jobs on a few hundred nodes is refused; slurmctld must restart to change it"),
    ScaleSetting(
        "SchedulerParameters", "bf_continue", (None, True, True, True),
        f"{_HTC} (its sample set); {_MAN_2411}; GoogleCloudPlatform/slurm-gcp scripts/conf.py; "
        f"{_SOPERATOR}",
        "backfill goes on with its job list after yielding its locks, instead of starting "
        "again from the top whenever a job or node changed, which on a large cluster is always"),
    ScaleSetting(
        "SchedulerParameters", "bf_interval", (None, None, 60, 120),
        f"{_HTC}: 'bf_interval to 30 seconds or more will limit the overhead' (sample: 300); "
        f"{_MAN_2411} bf_max_time: defaults to bf_interval",
        "a plan over 513 to 65,536 nodes takes longer than Slurm's 30 s: passes half (a quarter) "
        "as often, each allowed as long (soperator's bf_max_time=60)"),
    ScaleSetting(
        "SchedulerParameters", "bf_max_job_test", (None, 1000, 1000, 1000),
        f"{_SOPERATOR}: bf_max_job_test=1000; {_MAN_2411}: default 500",
        "one pass can consider a pending job for each node of a 512-node cluster and more; "
        "bf_max_job_user keeps one user from filling it"),
    ScaleSetting(
        "SchedulerParameters", "bf_max_job_user", (None, 100, 100, 100),
        f"{_MAN_2411} bf_max_job_user: 'Set bf_max_job_test to a value much higher than "
        f"bf_max_job_user'; {_HTC} names it",
        "a user's job array of thousands takes at most a tenth of a backfill pass: the other "
        "users' jobs are still planned"),
    ScaleSetting(
        "SchedulerParameters", "bf_window", (None, BF_WINDOW, BF_WINDOW, BF_WINDOW),
        f"{_MAN_2411} bf_window: 'A value at least as long as the highest allowed time limit "
        "is generally advisable to prevent job starvation' (default 1440 minutes, at most "
        "43200)",
        "jobs of a partition whose MaxTime is longer than a day (train: 7 days, priority: 30 "
        "in the local stack) are otherwise never given a reservation past tomorrow"),
    ScaleSetting(
        "SchedulerParameters", "bf_resolution", (None, BF_RESOLUTION, BF_RESOLUTION,
                                                 BF_RESOLUTION),
        f"{_MAN_2411} bf_window: 'if the value of bf_window is increased, then it is generally "
        f"advisable to also increase bf_resolution' (default 60 s, at most 3600); {_HTC} "
        "sample: 600",
        "the plan keeps Slurm's default number of time slots per node, so a longer window "
        "costs no more per pass"),
    ScaleSetting(
        "SchedulerParameters", "partition_job_depth", (None, 500, 500, 500),
        f"{_HTC} sample set: partition_job_depth=500; {_MAN_2411}: default 0 (no limit)",
        "the main scheduler's full pass (every sched_interval, 60 s) holds the job lock over at "
        "most 500 jobs per partition, not over a queue of tens of thousands"),
    ScaleSetting(
        "SchedulerParameters", "sched_min_interval", (None, None, 2000000, 2000000),
        f"{_HTC}: 'if sched_min_interval=2000000 (microseconds) and 100 jobs are submitted "
        "within a 2 second time window, then the scheduling logic will be executed one time "
        f"rather than 100 times'; sample set: 2000000; {_MAN_2411}: default 2 microseconds",
        "every job end and submission triggers a pass: on hundreds of nodes that is a pass "
        "after every event, each taking the job lock; a GPU job loses at most 2 s. "
        + "Left out up to 512 nodes: in the scale lab (docs/lab/scale-lab.md, 3,000 one-node "
        "jobs on 128 and 512 simulated nodes) it and defer_batch made the burst 35 % and 42 % "
        "slower (main cycle 10 to 377 ms), and without both a 1,000-job burst at 128 nodes ran "
        "in 48.9 s instead of 57.2 s; at 1,024 nodes the burst was 2 % faster and slurmctld "
        "used 9 % less CPU"),
    ScaleSetting(
        "SchedulerParameters", "defer_batch", (None, None, True, True),
        f"{_HTC} 'defer_batch'; {_SOPERATOR}; NEWS § 23.02.0rc1",
        "sbatch returns without a scheduling attempt per job (the next pass takes them "
        "together); salloc and srun still start at once. Not written before 23.02, which "
        "would read it as 'defer' (slurm_versions.py). Left out up to 512 nodes with "
        "sched_min_interval: measured in the scale lab (see sched_min_interval)"),
    ScaleSetting(
        "SchedulerParameters", "max_rpc_cnt", (None, 150, 150, 150),
        f"{_MAN_2411} bf_max_time NOTE: 'max_rpc_cnt needs to be below 256 (the default RPC "
        "thread limit). Running around the middle (150) may give you good results'; max_rpc_"
        f"cnt: 'a value of 10 or higher is recommended'; {_SOPERATOR}: max_rpc_cnt=100",
        "the schedulers yield to waiting RPCs (squeue, sbatch, node messages) once this many "
        "are being served, instead of holding the locks through a burst",
        applies_until="24.11",
        applies_reason="24.11 serves RPCs from conmgr's thread pool: the count compared is "
                       "bounded by conmgr_threads (next entry)"),
    ScaleSetting(
        "SchedulerParameters", "max_rpc_cnt", (None, RPC_CNT_CONMGR, RPC_CNT_CONMGR,
                                               RPC_CNT_CONMGR),
        "RELEASE_NOTES 24.11 'Changed incoming RPC handling to dedicated thread pool ... "
        "conmgr_threads: Defaults to 64'; controller.c of 24.11.5 counts an RPC in "
        "server_thread_count only while a conmgr thread serves it (rpc_queue, which would "
        "queue it, is off by default); the 'around the middle' rule of the previous entry",
        "a max_rpc_cnt at or above conmgr_threads never triggers on 24.11 (soperator's 100 "
        "with conmgr_threads=32 would not): half the pool",
        applies_from="24.11",
        applies_reason="before 24.11 the ceiling is 256 server threads (previous entry)"),
    ScaleSetting(
        "SlurmctldParameters", "conmgr_max_connections", (None, 1024, 2048, 2048),
        "high_throughput.html (24.11.5) 'SlurmctldParameters': 'should at least be the number "
        "of hardware CPU threads available but less than sysctl net.nf_conntrack_max and sysctl "
        "net.core.somaxconn'; nebius/soperator configmap.go (PR #2503): max(1024, "
        "nextPow2(2 × nodes)); controller.c of 24.11.5: default 50",
        "a job ending on every node sends that many epilog messages at once; 50 connections "
        "leave the rest waiting in the kernel's backlog. soperator's formula up to 1,024 nodes, "
        "then held below Linux's default somaxconn (4096) that the guide says it must stay "
        "under"),
)

DECISIONS: tuple[Decision, ...] = (
    Decision("HealthCheckNodeState",
             "ANY,CYCLE at every size, written by module_utils/health.py (its one owner), not "
             "here: CYCLE runs the checker on a slice of the nodes at a time over "
             "HealthCheckInterval instead of on all at once, the burst soperator PR #2763 "
             "measured (~90 RPC/s when all checks started together)",
             "slurm.conf(5) of 21.08.5 and 24.11.5, HealthCheckNodeState CYCLE: 'Rather than "
             "running the health check program on all nodes at the same time, cycle through "
             "running on all compute nodes through the course of the HealthCheckInterval'"),
    Decision("MaxNodeCount",
             "not written: it makes room for nodes that are not in slurm.conf (dynamic nodes "
             "registering with slurmd -Z, nodes made with scontrol) and is ignored when below "
             "the slurm.conf count; this project lists every elastic node in slurm.conf as "
             "State=CLOUD, so they are counted already",
             "slurm.conf(5) of 22.05.8 and 24.11.5, MaxNodeCount (absent from 21.08.5's); "
             "dynamic_nodes.shtml"),
    Decision("SlurmctldParameters conmgr_threads",
             "Slurm's 64: the guide asks for 2 to 4 times the controller's hardware threads, "
             "which 64 is for a 16- to 32-thread controller; max_rpc_cnt follows an operator's "
             "value",
             "high_throughput.html (24.11.5) 'SlurmctldParameters'; RELEASE_NOTES 24.11"),
    Decision("SchedulerParameters default_queue_depth",
             "Slurm's 100: with sched_min_interval and partition_job_depth bounding the passes, "
             "the guide's own sample set leaves it",
             "high_throughput.html (24.11.5): 'The default value of default_queue_depth is 100 "
             "(jobs), which should be fine in most cases'"),
    Decision("SchedulerParameters batch_sched_delay",
             "Slurm's 3 s: defer_batch already gathers submissions; the guide's 20 is for "
             "hundreds of short jobs a second and would hold every batch job up to 20 s",
             "high_throughput.html (24.11.5) 'SchedulerParameters'; slurm.conf(5) of 24.11.5"),
    Decision("SlurmctldPort (a range)",
             "one port: the guide suggests 2 to 10 for bursts past SOMAXCONN, and "
             "aws-parallelcluster uses 6820-6829, but a range up from this project's 6817 "
             "runs into slurmd's 6818, slurmdbd's 6819 and slurmrestd's 6820 on a controller "
             "that also runs them; moving the port changes every node's --conf-server",
             "high_throughput.html (24.11.5) 'SlurmctldPort'; aws/aws-parallelcluster-cookbook "
             "CHANGELOG 2.9.0 'Assign a range of 10 ports to Slurmctld'"),
    Decision("MinJobAge",
             "the project's 300 (Slurm's default) at every size: MaxJobCount grows with the "
             "cluster instead, so finished jobs stay visible to squeue for five minutes",
             "high_throughput.html (24.11.5) 'MinJobAge'; big_sys.html 'Timers'"),
)


def band_of(nodes: int) -> Band:
    """The size band of a cluster of ``nodes`` compute nodes."""
    if nodes > MAX_NODES:
        raise ScaleError(f"{nodes:,} compute nodes: a Slurm cluster holds at most "
                         f"{MAX_NODES:,} (slurm.conf(5), MaxNodeCount)")
    for band in BANDS:
        if nodes <= band.last:
            return band
    raise AssertionError("unreachable: the last band ends at MAX_NODES")


def _longest_limit_minutes(partitions: Iterable[Mapping[str, Any]]) -> int | None:
    """The longest MaxTime of the partitions, in minutes; None when one is unlimited."""
    longest = 0
    for record in partitions:
        limit = {str(k).lower(): v for k, v in record.items()}.get("maxtime")
        seconds = slurm_time_seconds(str(limit)) if limit is not None else None
        if seconds is None:  # UNLIMITED, or no MaxTime (Slurm's default: UNLIMITED)
            return None
        longest = max(longest, math.ceil(seconds / 60))
    return longest


def _merge_option(current: Any, option: str, text: str) -> list[Any]:
    """A list setting's options with ``text`` added, replacing an option of the same name."""
    items = list(current) if isinstance(current, (list, tuple)) else [
        part.strip() for part in str(current or "").split(",") if part.strip()]
    kept = [item for item in items
            if str(item).split("=", 1)[0].strip().lower() != option.lower()]
    return [*kept, text]


def size_tuning(nodes: int, release: SlurmVersion | str, base: Mapping[str, Any],
                overrides: Mapping[str, Any] | None = None,
                partitions: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The slurm.conf settings SCALE_SETTINGS chooses for ``nodes`` compute nodes on Slurm
    ``release``, to combine over ``base`` (the role's settings) and under ``overrides`` (the
    operator's). A list setting comes back whole: ``base``'s options plus this table's.
    Nothing for a small cluster (its release is not even read)."""
    band = band_of(int(nodes))
    if band is BANDS[0]:
        return {}
    index = BANDS.index(band)
    version = release if isinstance(release, SlurmVersion) else SlurmVersion.parse(release)
    tuned: dict[str, Any] = {}
    ctx = Context(int(nodes), version, base, overrides or {}, tuned,
                  _longest_limit_minutes(partitions))
    for entry in SCALE_SETTINGS:
        value = entry.values[index]
        if isinstance(value, Derived):
            value = value.compute(ctx)
        if value is None or not entry.applies_to(version):
            continue
        if entry.option is None:
            if accepts("slurm.conf", entry.setting, None, version):
                tuned[entry.setting] = value
            continue
        text = entry.option if value is True else f"{entry.option}={value}"
        if accepts("slurm.conf", entry.setting, text, version):
            current = tuned.get(entry.setting, base.get(entry.setting))
            tuned[entry.setting] = _merge_option(current, entry.option, text)
    return tuned
