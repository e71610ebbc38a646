"""Nodes leaving the cluster: drained before they leave Slurm, their jobs waited for up to a
bound or the run refused naming them, never killed.

One implementation for both places that remove nodes: the controller play's first step
(module ``slurm_leaving_nodes``, every provider: a node the inventory no longer has is
still in slurmctld's config until the controller role rewrites slurm.conf) and the local
provider's ``up`` (infra/providers/local.py), which removes a node's container before any
configure runs. Both run Slurm's own commands on the controller (``run``: argv in, return
code, stdout and stderr out) and share the reason, the bounds and the sentences here.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

# A node leaving the cluster is drained with this reason; one put back in the stack config
# (or the inventory) before it left is resumed by the next run. A node drained with another
# reason (the health check's, the gate's, an operator's) keeps it, and is never resumed.
LEAVING_REASON = "metalslurm: leaving the cluster (no longer in its stack config or inventory)"
# How often a run asks Slurm again while it waits for a leaving node's jobs.
DRAIN_POLL_S = 5.0
# By default a run refuses at once while a leaving node runs a job (--drain-wait SECONDS,
# or the inventory variable metalslurm_drain_wait, waits that long first).
DRAIN_WAIT_S = 0.0
DRAIN_WAIT_MAX_S = 7 * 24 * 3600.0
# The configure drains nothing when more than this share of the nodes Slurm knows would
# leave in one run (a wrong or partial inventory, most likely), unless the inventory says
# a larger share (metalslurm_leaving_max_share; 1: no bound). Runs whose inventory is made
# from the stack config ('local up', byo 'up') set no bound.
LEAVING_MAX_SHARE = 0.5
# sinfo's exit status where it is not installed (a controller never configured).
NOT_INSTALLED = 127

Runner = Callable[[list], tuple[int, str, str]]


class LeavingError(RuntimeError):
    """Nothing was removed: jobs still run on leaving nodes, or Slurm did not answer."""


class LeavingNodesBusy(LeavingError):
    """Jobs still run on (or wait for) nodes that are leaving the cluster."""


@dataclass
class Leaving:
    """What a run found and did: the nodes Slurm knows that are leaving, those it drained
    now (not drained before), and those it resumed (back in the config)."""

    nodes: list = field(default_factory=list)
    drained: list = field(default_factory=list)
    resumed: list = field(default_factory=list)
    asked: bool = True  # False: Slurm was not asked (not installed, or did not answer)
    error: str = ""  # why slurmctld did not answer (empty: not installed)

    @property
    def changed(self) -> bool:
        return bool(self.drained or self.resumed)


@dataclass(frozen=True)
class Words:
    """How a run speaks of where nodes are listed and how it is run again: 'local up' of
    its stack config, the configure of its inventory."""

    source: str = "inventory"
    rerun: str = "the configure"
    wait_hint: str = "--drain-wait SECONDS"


def _are(nodes: list) -> tuple[str, str, str]:
    one = len(nodes) == 1
    return ("is" if one else "are"), ("it" if one else "them"), ",".join(nodes)


def _job(line: str) -> str:
    i, user, state, where = line.split("|", 3)
    return (f"job {i} ({user}, pending for {where})" if state == "PENDING"
            else f"job {i} ({user}, {state.lower()} on {where})")


def refusal(nodes: list, jobs: list, wait_s: float, words: Words = Words()) -> str:
    """The refusal for ``jobs`` (squeue lines ``ID|USER|STATE|NODES``: the nodes it runs on,
    or for a pending job the nodes it asks for) still on the leaving ``nodes`` once
    ``wait_s`` seconds have passed."""
    described = "; ".join(_job(j) for j in jobs)
    are, them, names = _are(nodes)
    waited = f" after a wait of {wait_s:.0f} s" if wait_s > 0 else ""
    return (f"{names} {are} no longer in the {words.source} but "
            f"{'a job still needs' if len(jobs) == 1 else 'jobs still need'} "
            f"{them}: {described}{waited}; nothing was removed. {names} {are} drained "
            f"('{LEAVING_REASON}'), so no new job starts there. Run {words.rerun} again once "
            f"those jobs end, or with {words.wait_hint} to wait for them, or cancel them "
            f"(scancel); to keep {names}, put {them} back in the {words.source} and run "
            f"{words.rerun}, which resumes {them}.")


def unreachable(nodes: list, error: str, words: Words = Words()) -> str:
    """The refusal when Slurm cannot say whether jobs run on the leaving ``nodes``."""
    are, _them, names = _are(nodes)
    return (f"cannot ask Slurm whether jobs run on {names}, which {are} no longer in the "
            f"{words.source}: {' '.join(error.split()) or 'sinfo failed'}; nothing was "
            f"removed. Start slurmctld (or run {words.rerun} with those nodes still in the "
            f"{words.source}, which repairs it), then run {words.rerun} again.")


def too_many(nodes: list, known: int, share: float, words: Words = Words()) -> str:
    """The refusal when more than ``share`` of the ``known`` nodes would leave at once."""
    _are_, _them, names = _are(nodes)
    return (f"{len(nodes)} of the {known} nodes Slurm knows are not in the {words.source} "
            f"({names}): more than {share:.0%} would leave in one run, so nothing was drained "
            f"or removed. Check that this is the cluster's {words.source}; if those nodes are "
            f"to leave, run {words.rerun} again with -e metalslurm_leaving_max_share=1.")


def known_nodes(run: Runner) -> tuple[int, str, dict]:
    """Slurm's nodes (``sinfo``): return code, stderr, {node: (state, reason)}."""
    rc, out, err = run(["sinfo", "--noheader", "--Node", "--format=%N|%T|%E"])
    nodes = {}
    for line in out.splitlines():
        parts = line.split("|", 2)
        if len(parts) == 3:
            nodes[parts[0]] = (parts[1], parts[2])
    return rc, err, nodes


def conf_node_names(run: Runner, text: str) -> list:
    """The node names a slurm.conf's NodeName lines define (hostlists expanded by Slurm's
    own ``scontrol show hostnames``, which needs no slurmctld): the nodes a run must not
    drop unasked while slurmctld cannot say what runs there."""
    expressions = [m for m in re.findall(r"^[ \t]*NodeName=(\S+)", text, re.M | re.I)
                   if m.upper() != "DEFAULT"]
    return _expand(run, expressions)


def _expand(run: Runner, expressions: list) -> list:
    """Node names from hostlist expressions; plain names need no call to Slurm."""
    if not any("[" in e for e in expressions):
        return [n for e in expressions for n in e.split(",") if n]
    rc, out, err = run(["scontrol", "show", "hostnames", ",".join(expressions)])
    if rc != 0:
        raise LeavingError(f"scontrol show hostnames failed: {' '.join(err.split())}; "
                           "nothing was removed")
    return out.split()


def drain_leaving(run: Runner, wanted: Iterable, wait_s: float = DRAIN_WAIT_S, *,
                  candidates: Iterable | None = None,
                  fallback: Callable[[], Iterable] | None = None,
                  max_share: float = 1.0, poll_s: float = DRAIN_POLL_S,
                  words: Words = Words(), dry_run: bool = False,
                  log: Callable[[str], None] = lambda _m: None,
                  sleep: Callable[[float], None] = time.sleep,
                  clock: Callable[[], float] = time.monotonic) -> Leaving:
    """Drain the nodes Slurm knows that are not in ``wanted`` (or, given ``candidates``, the
    ones of those not in ``wanted``: the machines about to go), so no new job starts there;
    wait up to ``wait_s`` for the jobs on them (running, or pending for them) to end; raise
    LeavingNodesBusy naming the jobs left (the nodes stay drained, for the next run). A node
    in ``wanted`` that was drained for leaving is resumed; a node drained for another reason
    keeps that drain. More than ``max_share`` of Slurm's nodes leaving refuses before any
    drain. ``dry_run`` (check mode, or a last look before slurm.conf drops the nodes)
    changes nothing and does not wait; it refuses as the run would when ``wait_s`` is 0 and
    jobs need leaving nodes.

    Where Slurm does not answer, the run refuses if a node leaves: one of ``candidates``,
    else of ``fallback()`` (the nodes the controller's slurm.conf names). With neither it
    goes on, since the run that finds slurmctld down is also the one that repairs it."""
    wanted = set(wanted)
    rc, err, known = known_nodes(run)
    if rc != 0:
        if rc == NOT_INSTALLED:
            return Leaving(nodes=sorted(set(candidates or ()) - wanted), asked=False)
        pool = candidates if candidates is not None else (fallback() if fallback else ())
        leaving = sorted(set(pool) - wanted)
        if leaving:
            raise LeavingError(unreachable(leaving, err, words))
        return Leaving(asked=False, error=" ".join(err.split()) or "sinfo failed")
    reason = {n: r for n, (_state, r) in known.items()}
    back = sorted(n for n in wanted if reason.get(n) == LEAVING_REASON)
    pool = set(known) if candidates is None else set(candidates) & set(known)
    nodes = sorted(pool - wanted)
    if known and len(nodes) > max_share * len(known):
        raise LeavingError(too_many(nodes, len(known), max_share, words))
    drained_before = {n for n, (state, r) in known.items()
                      if "drain" in state.lower() or r == LEAVING_REASON}
    found = Leaving(nodes=nodes, resumed=back,
                    drained=[n for n in nodes if n not in drained_before])
    if dry_run:
        # Waits for nothing: jobs there now are what a run that does not wait refuses on.
        if nodes and wait_s == 0 and (jobs := _jobs_needing(run, nodes)):
            raise LeavingNodesBusy(refusal(nodes, jobs, wait_s, words))
        return found
    if back:
        _scontrol(run, back, "state=RESUME")
        log(f"resuming nodes back in the {words.source}: {', '.join(back)}")
    if not nodes:
        return found
    if found.drained:
        _scontrol(run, found.drained, "state=DRAIN", f"reason={LEAVING_REASON}")
    started = clock()
    while jobs := _jobs_needing(run, nodes):
        waited = clock() - started
        if waited >= wait_s:
            raise LeavingNodesBusy(refusal(nodes, jobs, wait_s, words))
        log(f"waiting for {len(jobs)} job(s) on leaving nodes {', '.join(nodes)} "
            f"({waited:.0f} of {wait_s:.0f} s)")
        sleep(min(poll_s, wait_s - waited))
    return found


def _scontrol(run: Runner, nodes: list, *settings: str) -> None:
    rc, _out, err = run(["scontrol", "update", f"nodename={','.join(nodes)}", *settings])
    if rc != 0:
        raise LeavingError(f"scontrol update nodename={','.join(nodes)} {' '.join(settings)} "
                           f"failed: {' '.join(err.split())}; nothing was removed")


def _squeue(run: Runner, *options: str) -> list:
    rc, out, err = run(["squeue", "--noheader", *options])
    if rc != 0:
        raise LeavingError(f"squeue failed for the leaving nodes: {' '.join(err.split())}; "
                           "nothing was removed")
    return out.split()


def _jobs_needing(run: Runner, nodes: list) -> list:
    """The jobs on the leaving ``nodes`` (any state squeue lists: running, completing,
    suspended, configuring) and the pending jobs that asked for one of them (-w): a pending
    one would fail once its node left slurm.conf. Lines ``ID|USER|STATE|NODES``."""
    jobs = _squeue(run, f"--nodelist={','.join(nodes)}", "--format=%i|%u|%T|%N")
    leaving = set(nodes)
    asked = [line for line in _squeue(run, "--states=PENDING", "--format=%i|%u|%T|%n")
             if line.rsplit("|", 1)[-1] not in ("", "(null)")]
    for line in asked:
        if leaving & set(_expand(run, [line.rsplit("|", 1)[-1]])):
            jobs.append(line)
    return jobs
