"""Where Slurm puts jobs, checked job by job against topology.conf.

Each case is submitted on its own (``--exclusive``, a long ``sleep``) and kept running while
the next one is placed, so later cases meet a partly filled cluster. A job's nodes come from
``scontrol show job``; the leaf switches (tree) or blocks (block) they span are compared with
what the topology promises, given the nodes still free when the job was placed:

- tree, ``--switches=1``: one leaf switch, always;
- tree, any other job: no more leaves than the fewest that hold it (the free leaves taken
  largest first);
- block (topology.conf(5) of 24.11: the base block is the smallest block, and a job larger
  than it gets an aligned segment of 2, 4, 8 ... blocks): a job no larger than the base block
  inside one block, a larger one inside one aligned segment of the fewest blocks that hold it
  (blocks numbered in topology.conf's order; segment k covers blocks k*s to k*s+s-1).

A job that has not started after ``wait`` seconds is a failed case (its reason is kept).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ansible_collections.metalslurm.cluster.plugins.module_utils.slurmconf import (
    expand_hostlist,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.topology_conf import (
    parse_topology_conf,
)

from bench.scale.lab import Lab, LabError

_NODELIST = re.compile(r"(?<![A-Za-z])NodeList=(\S+)")
_STATE = re.compile(r"(?<![A-Za-z])JobState=(\S+)")


@dataclass(frozen=True)
class Case:
    label: str
    nodes: int
    switches: bool = False    # ask for --switches=1


@dataclass(frozen=True)
class Placement:
    case: Case
    job: str
    nodes: tuple[str, ...]
    spanned: tuple[str, ...]   # leaves (tree) or blocks (block) holding the job's nodes
    most: int                  # the most it may span (tree: the fewest that hold it)
    ok: bool
    why: str = ""              # a job that did not start: its state and reason

    def line(self) -> str:
        if self.why:
            return f"{self.case.label}: {self.why}: NOT AS INTENDED"
        verdict = "ok" if self.ok else "NOT AS INTENDED"
        return (f"{self.case.label}: {len(self.nodes)} nodes on {len(self.spanned)} "
                f"(at most {self.most}: {', '.join(self.spanned)}): {verdict}")


def leaf_groups(topology_conf: str) -> dict[str, tuple[str, ...]]:
    """Leaf switch (tree) or block (block) -> its nodes, from topology.conf's text."""
    groups: dict[str, tuple[str, ...]] = {}
    for line in topology_conf.splitlines():
        line = line.split("#", 1)[0].strip()
        m = re.match(r"BlockName=(\S+)\s+Nodes=(\S+)", line)
        if m:
            groups[m.group(1)] = tuple(expand_hostlist(m.group(2)))
    if groups:
        return groups
    topology = parse_topology_conf(topology_conf)
    return {s.name: tuple(s.nodes) for s in topology.switches if s.nodes}


def fewest_groups(free: Mapping[str, int], nodes: int) -> int:
    """The fewest groups whose free nodes hold ``nodes``, largest first (0: none can)."""
    total = 0
    for count, size in enumerate(sorted(free.values(), reverse=True), start=1):
        total += size
        if total >= nodes:
            return count
    return 0


def segment_blocks(base: int, nodes: int) -> int:
    """The blocks of the smallest aligned segment (1, 2, 4 ...) that holds ``nodes``."""
    size = 1
    while size * base < nodes:
        size *= 2
    return size


def judge(case: Case, job_nodes: Sequence[str], groups: Mapping[str, Sequence[str]],
          free: Mapping[str, int], plugin: str) -> tuple[tuple[str, ...], int, bool]:
    """The groups a job spans, the most it may span, and whether it is as intended."""
    group_of = {n: g for g, members in groups.items() for n in members}
    unknown = [n for n in job_nodes if n not in group_of]
    if unknown:
        raise LabError(f"{case.label}: nodes {unknown[:3]} are in no group of topology.conf")
    order = list(groups)
    spanned = tuple(sorted({group_of[n] for n in job_nodes}, key=order.index))
    if plugin == "block":
        size = segment_blocks(min(len(m) for m in groups.values()), case.nodes)
        segments = {order.index(g) // size for g in spanned}
        fits = len(segments) == 1
        most = min(size, len(spanned)) if fits else size
    else:
        most = 1 if case.switches else fewest_groups(free, case.nodes)
        fits = len(spanned) <= most
    return spanned, most, len(job_nodes) == case.nodes and fits


def run_cases(lab: Lab, topology_conf: str, plugin: str, cases: Sequence[Case],
              partition: str = "train", wait: float = 60) -> list[Placement]:
    """Place ``cases`` one after another on an idle lab; every job is cancelled at the end."""
    groups = leaf_groups(topology_conf)
    free = {g: len(m) for g, m in groups.items()}
    placed: list[Placement] = []
    jobs: list[str] = []
    try:
        for case in cases:
            switches = " --switches=1" if case.switches and plugin == "tree" else ""
            job = lab.sh(f"sbatch --parsable -p {partition} --exclusive -N {case.nodes}"
                         f"{switches} -J placement -o /dev/null --wrap 'sleep 3600'").strip()
            if not job.isdigit():
                raise LabError(f"{case.label}: sbatch gave no job id ({job!r})")
            jobs.append(job)
            show, why = _running(lab, job, wait)
            if why:
                placed.append(Placement(case, job, (), (), 0, False, why))
                continue
            nodes = tuple(expand_hostlist(_NODELIST.search(show).group(1)))  # type: ignore[union-attr]
            spanned, most, ok = judge(case, nodes, groups, free, plugin)
            placed.append(Placement(case, job, nodes, spanned, most, ok))
            for g, members in groups.items():
                free[g] -= len(set(members) & set(nodes))
    finally:
        if jobs:
            lab.sh("scancel " + " ".join(jobs), check=False)
            lab.sh("for i in $(seq 60); do [ -z \"$(squeue -h -o %i)\" ] && break; "
                   "sleep 0.5; done", check=False)
    return placed


def _running(lab: Lab, job: str, wait: float) -> tuple[str, str]:
    """``scontrol show job`` once the job runs, or why it did not within ``wait``."""
    deadline = time.monotonic() + wait
    while True:
        show = lab.sh(f"scontrol show job -o {job}")
        state = _STATE.search(show)
        if state and state.group(1) == "RUNNING":
            return show, ""
        if time.monotonic() > deadline:
            reason = re.search(r"(?<![A-Za-z])Reason=(\S+)", show)
            return show, (f"not running after {wait:.0f} s ({state.group(1) if state else '?'}"
                          f", {reason.group(1) if reason else '?'})")
        time.sleep(0.3)


def cases_for(groups: Mapping[str, Sequence[str]], total: int, plugin: str = "tree"
              ) -> list[Case]:
    """Cases for a cluster whose largest leaf group (tree) or smallest block (block) holds U
    nodes: a unit's worth and two halves (--switches=1 on a tree), then jobs of 2.5, 1.5 and
    6.2 units (block: 2 and 4 blocks' worth less a few nodes), each only while it fits in
    what is left."""
    sizes = [len(m) for m in groups.values()]
    if plugin == "block":
        unit = min(sizes)
        wanted = [Case(f"one block ({unit})", unit), Case(f"half a block ({unit // 2})", unit // 2),
                  Case(f"another half ({unit // 2})", unit // 2),
                  Case(f"4 blocks less 3 ({unit * 4 - 3})", unit * 4 - 3),
                  Case(f"2 blocks less 1 ({unit * 2 - 1})", unit * 2 - 1)]
    else:
        unit = max(sizes)
        wanted = [Case(f"one unit ({unit}) --switches=1", unit, True),
                  Case(f"half a unit ({unit // 2}) --switches=1", unit // 2, True),
                  Case(f"another half ({unit // 2}) --switches=1", unit // 2, True),
                  Case(f"2.5 units ({unit * 5 // 2})", unit * 5 // 2),
                  Case(f"1.5 units ({unit * 3 // 2})", unit * 3 // 2),
                  Case(f"6.2 units ({unit * 31 // 5})", unit * 31 // 5)]
    out, used = [], 0
    for case in wanted:
        if used + case.nodes <= total:
            out.append(case)
            used += case.nodes
    return out
