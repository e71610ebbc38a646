"""What each program does, once its hostlist is expanded: resume, suspend, resume-fail, reconcile.

Slurm states used (same names in Slurm 22.05 and 24.11, see scontrol(1) and power_save.html;
the transitions below were recorded on Slurm 24.11.5, tests/fixtures/slurm/README.md):
- a node whose power-on failed (``MIXED+CLOUD+NOT_RESPONDING+POWERING_UP``, its job CONFIGURING):
  ``scontrol update nodename=N state=POWER_DOWN_FORCE reason="metalslurm: ..."``. slurmctld
  requeues the job at once, marks the node ``IDLE+CLOUD+POWERING_DOWN`` (``idle%``), runs
  SuspendProgram, and after SuspendTimeout the node is ``IDLE+CLOUD+POWERED_DOWN`` (``idle~``):
  back in the pool, never left DOWN. (AWS ParallelCluster uses power_down_force the same way.)
- ``state=DOWN`` first would be wrong: ``DOWN`` + ``POWER_DOWN_FORCE`` stays ``DOWN+POWER_DOWN``
  (``down!``) without calling SuspendProgram until someone runs ``state=RESUME``. If a node is
  found DOWN (an older Slurm, an admin, slurmctld's ResumeTimeout), ``state=RESUME`` is what
  lets the power down proceed / puts a powered-down node back as ``idle~``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from . import statefile
from .config import PowerConfig
from .drivers import NodeResult, PowerDriver, make_driver
from .drivers.base import OFF, ON
from .eventlog import EventLog
from .slurm import NodeState, Slurm

REASON_PREFIX = "metalslurm:"
# Reasons slurmctld itself gives a cloud node it could not resume; reconcile only returns DOWN
# nodes with one of these (or its own) so a node an admin set DOWN stays DOWN.
SLURM_RESUME_REASONS = ("ResumeTimeout reached", "Not responding", "Node unexpectedly rebooted")


def batches(items: Sequence[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield list(items[start:start + size])


@dataclass
class Context:
    config: PowerConfig
    log: EventLog
    slurm: Slurm
    dry_run: bool
    driver_factory: Callable[[str, dict[str, dict], dict[str, dict[str, str]]], PowerDriver] = \
        make_driver
    _drivers: dict[str, PowerDriver] = field(default_factory=dict)
    sleep: Callable[[float], None] = time.sleep
    # Given a reconcile's summary (the program in the foreground prints it).
    summary: Callable[[dict[str, object]], None] | None = None

    def driver(self, name: str) -> PowerDriver:
        if name not in self._drivers:
            params = {n: p for n, p in self.config.nodes.items() if p["driver"] == name}
            creds = {n: c for n, c in self.config.credentials.items()
                     if n == "default" or n in params}
            self._drivers[name] = self.driver_factory(name, params, creds)
        return self._drivers[name]


def group_by_driver(ctx: Context, nodes: Iterable[str]) -> tuple[dict[str, list[str]], list[str]]:
    groups: dict[str, list[str]] = {}
    unknown: list[str] = []
    for node in nodes:
        driver = ctx.config.driver_of(node)
        if driver is None:
            unknown.append(node)
        else:
            groups.setdefault(driver, []).append(node)
    return groups, unknown


def call_driver(ctx: Context, action: str, nodes: Sequence[str],
                force: bool = False) -> dict[str, NodeResult]:
    """Call ``action`` (power_on / power_off / status) per driver and batch; log every node."""
    results: dict[str, NodeResult] = {}
    groups, unknown = group_by_driver(ctx, nodes)
    for node in unknown:
        results[node] = NodeResult.failed(node, "node has no entry in the power config")
        ctx.log.event(action, node=node, phase="driver", ok=False, error=results[node].error)
    mutating = action != "status"

    def run_batch(driver_name: str, number: int, batch: list[str]) -> None:
        if mutating and ctx.dry_run:
            for node in batch:
                results[node] = NodeResult(node=node, ok=True)
                ctx.log.event(action, node=node, driver=driver_name, phase="driver",
                              ok=True, skipped="dry run")
            return
        ctx.log.event("driver_start", driver=driver_name, phase="driver", action=action,
                      batch=number, nodes=batch)
        start = time.monotonic()
        try:
            driver = ctx.driver(driver_name)
            if action == "power_on":
                batch_results = driver.power_on(batch)
            elif action == "power_off":
                batch_results = driver.power_off(batch, force=force)
            else:
                batch_results = driver.status(batch)
        except Exception as exc:  # e.g. the driver's library is not installed
            batch_results = {n: NodeResult.failed(n, exc) for n in batch}
        duration = round(time.monotonic() - start, 3)
        ctx.log.event("driver_end", driver=driver_name, phase="driver", action=action,
                      batch=number, duration_s=duration)
        for node in batch:
            result = batch_results.get(node) or NodeResult.failed(node, "driver gave no result")
            results[node] = result
            ctx.log.event(action, node=node, driver=driver_name, phase="driver",
                          ok=result.ok, power=result.power if result.ok else None,
                          address=result.address, error=result.error, duration_s=duration)

    work = [(name, number, batch) for name, group in groups.items()
            for number, batch in enumerate(batches(group, ctx.config.batch_size), start=1)]
    if mutating or ctx.config.status_batches <= 1 or len(work) <= 1:
        # Power actions one batch after another: a batch is as many machines as may draw
        # their power-on current at once.
        for item in work:
            run_batch(*item)
    else:
        # Reading the power state changes nothing: several batches at a time (a reconcile
        # of a thousand nodes, one BMC call each, would otherwise outlast its timer).
        for name in {name for name, _, _ in work}:
            with contextlib.suppress(Exception):  # a failure is each batch's result, below
                ctx.driver(name)  # made once, before the threads share it
        with ThreadPoolExecutor(max_workers=ctx.config.status_batches) as pool:
            list(pool.map(lambda item: run_batch(*item), work))
    return results


def record_resume(ctx: Context, nodes: Sequence[str]) -> None:
    if ctx.dry_run:
        return
    now = time.time()
    with statefile.changed(ctx.config.state_file) as state:
        for node in nodes:
            state["resume_started"][node] = now


def _state_times(ctx: Context, name: str) -> dict[str, float]:
    return {k: float(v) for k, v in statefile.read(ctx.config.state_file)[name].items()}


def resume_started(ctx: Context) -> dict[str, float]:
    return _state_times(ctx, "resume_started")


def note_machines_on(ctx: Context, checked: Iterable[str], on: dict[str, float]) -> None:
    """Remember since when each checked node's machine is on while Slurm holds it powered
    down (``on``); forget the checked nodes that are not (any more)."""
    if ctx.dry_run:
        return
    with statefile.changed(ctx.config.state_file) as state:
        seen = state["on_while_powered_down"]
        for node in checked:
            seen.pop(node, None)
        seen.update(on)


def return_to_pool(ctx: Context, nodes: Sequence[str], reason: str,
                   wait: bool = True) -> list[str]:
    """Bring failed nodes back as ``idle~`` (powered down, available). Returns the nodes still
    not powered down when ``settle_timeout`` ran out (the reconciler finishes those)."""
    if not nodes:
        return []
    reason = f"{REASON_PREFIX} {reason}"[:200].replace('"', "'")
    states = ctx.slurm.show_nodes(nodes)
    down = [n for n in nodes if n in states and states[n].down]
    force = [n for n in nodes if n in states and n not in down
             and not states[n].powered_down and not states[n].powering_down]
    ctx.log.event("return_to_pool", phase="slurm", nodes=list(nodes), reason=reason,
                  states={n: states[n].state for n in nodes if n in states})
    ctx.slurm.update(force, state="POWER_DOWN_FORCE", reason=reason)
    # DOWN blocks the power down (DOWN+POWER_DOWN) or keeps a powered-down node out of the pool.
    ctx.slurm.update(down, state="RESUME")
    ctx.slurm.update([n for n in down if not states[n].powered_down
                      and not states[n].powering_down], state="POWER_DOWN_FORCE", reason=reason)
    if ctx.dry_run or not wait:
        return list(nodes)
    pending = {n for n in nodes if n in states}
    deadline = time.monotonic() + ctx.config.settle_timeout
    while True:
        states = ctx.slurm.show_nodes(sorted(pending))
        done = [n for n, s in states.items() if s.powered_down and not s.down
                and "POWERING_DOWN" not in s.flags]
        for node in done:
            ctx.log.event("back_in_pool", node=node, phase="slurm", ok=True,
                          state=states[node].state)
        stuck_down = [n for n, s in states.items() if s.down and
                      (s.powered_down or "POWER_DOWN" in s.flags)]
        ctx.slurm.update(stuck_down, state="RESUME")
        pending = {n for n in pending if n in states} - set(done)
        if not pending or time.monotonic() >= deadline:
            break
        ctx.sleep(ctx.config.poll_interval)
    for node in sorted(pending):
        ctx.log.event("back_in_pool", node=node, phase="slurm", ok=False,
                      error=f"not powered down after {ctx.config.settle_timeout:.0f}s; "
                            "the reconciler will finish it")
    return sorted(pending)


def power_on(ctx: Context, nodes: Sequence[str]) -> dict[str, NodeResult]:
    """Power on ``nodes``, trying the ones that failed again, ``power_on_attempts`` calls in
    all, ``power_on_retry_delay`` apart (a node missing from the config is not retried)."""
    results = call_driver(ctx, "power_on", nodes)
    for attempt in range(2, ctx.config.power_on_attempts + 1):
        failed = [n for n in nodes if not results[n].ok and ctx.config.driver_of(n)]
        if not failed:
            break
        ctx.log.event("power_on_retry", phase="driver", nodes=failed, attempt=attempt,
                      of=ctx.config.power_on_attempts, after_s=ctx.config.power_on_retry_delay,
                      errors=sorted({results[n].error or "" for n in failed}))
        ctx.sleep(ctx.config.power_on_retry_delay)
        results.update(call_driver(ctx, "power_on", failed))
    return results


def request_join(ctx: Context, nodes: Sequence[str]) -> dict[str, str]:
    """Ask the controller's join service (metalslurm-join, root) to configure machines made
    anew: one empty file per node in the requests directory, which only root and
    SlurmUser can write. The service takes only nodes the power config has in
    launch-terminate mode. Returns the nodes that could not be asked, and why: nothing
    would configure their machines."""
    requests = ctx.config.join_requests
    failed = {}
    for node in nodes:
        if ctx.dry_run:
            ctx.log.event("join_request", node=node, phase="join", ok=False, skipped="dry run")
            continue
        try:
            if requests is None:
                raise OSError("the power config has no join requests directory")
            (requests / node).touch()
            ctx.log.event("join_request", node=node, phase="join", ok=True)
        except OSError as exc:
            failed[node] = f"no join asked for: {exc}"
            ctx.log.event("join_request", node=node, phase="join", ok=False, error=str(exc))
    return failed


def resume(ctx: Context, nodes: Sequence[str]) -> int:
    record_resume(ctx, nodes)
    results = power_on(ctx, nodes)
    for node in nodes:
        result = results[node]
        if result.ok and result.address:
            ctx.slurm.update([node], nodeaddr=result.address, nodehostname=node)
    unasked = request_join(ctx, [n for n in nodes if results[n].ok and ctx.config.launched(n)])
    failed = [n for n in nodes if not results[n].ok or n in unasked]
    if failed:
        # A machine that half-started must not keep billing.
        call_driver(ctx, "power_off", [n for n in failed if ctx.config.driver_of(n)], force=True)
        errors = sorted({unasked.get(n) or results[n].error or "" for n in failed})
        return_to_pool(ctx, failed, "power on failed: " + "; ".join(errors))
    return 1 if failed else 0


def suspend(ctx: Context, nodes: Sequence[str]) -> int:
    results = call_driver(ctx, "power_off", nodes)
    # A failed power off leaves a machine on that Slurm thinks is off: reconcile retries it.
    return 0 if all(r.ok for r in results.values()) else 1


def resume_fail(ctx: Context, nodes: Sequence[str]) -> int:
    results = call_driver(ctx, "power_off", nodes, force=True)
    return_to_pool(ctx, list(nodes), "resume failed (ResumeFailProgram)")
    return 0 if all(r.ok for r in results.values()) else 1


@dataclass(frozen=True)
class Decision:
    node: str
    # "power_off" (orphan) | "wait" (on while powered down, within orphan_after)
    # | "return" (stuck/failed resume) | "resume" (DOWN~ → idle~)
    action: str
    why: str


def _orphan(node: str, state: str, on_since: dict[str, float], now: float,
            orphan_after: float) -> Decision:
    """A machine on while Slurm holds its node powered down: someone may have started it by
    hand, and its slurmd registers within a boot; stop it only after ``orphan_after``."""
    age = now - on_since.get(node, now)
    if age >= orphan_after:
        return Decision(node, "power_off", f"machine on while Slurm has it {state} "
                        f"for {age:.0f}s (orphan_after {orphan_after:.0f}s)")
    return Decision(node, "wait", f"machine on while Slurm has it {state} for {age:.0f}s; "
                    f"stopped after {orphan_after:.0f}s unless its slurmd registers")


def decide(states: dict[str, NodeState], power: dict[str, NodeResult],
           started: dict[str, float], now: float, stuck_after: float,
           on_since: dict[str, float] | None = None,
           orphan_after: float = 0.0) -> list[Decision]:
    """Reconcile decisions, from Slurm's view and the machines' power state (pure function).
    ``on_since``: when each node's machine was first seen on while powered down."""
    on_since = on_since or {}
    decisions: list[Decision] = []
    for node in sorted(states):
        s = states[node]
        p = power.get(node)
        machine_on = p is not None and p.ok and p.power == ON
        machine_off = p is not None and p.ok and p.power == OFF
        ours = s.reason.startswith(REASON_PREFIX) or s.reason.startswith(SLURM_RESUME_REASONS)
        if s.powering_up:
            # Without a recorded start, the resume may be under way this very second; a node
            # that never powers up is slurmctld's (ResumeTimeout), then ours (DOWN below).
            age = now - started[node] if node in started else 0.0
            if machine_off and age > stuck_after:
                decisions.append(Decision(node, "return",
                                          f"powering up for {age:.0f}s, machine off"))
            continue
        if s.powering_down:
            continue
        if s.powered_down and s.down and ours:
            decisions.append(Decision(node, "resume", f"DOWN and powered down ({s.reason})"))
            if machine_on:
                decisions.append(_orphan(node, s.state, on_since, now, orphan_after))
            continue
        if s.powered_down and machine_on:
            decisions.append(_orphan(node, s.state, on_since, now, orphan_after))
            continue
        if s.down and "CLOUD" in s.flags and ours:
            decisions.append(Decision(node, "return", f"DOWN after a failed resume ({s.reason})"))
    return decisions


def reconcile(ctx: Context, nodes: Sequence[str]) -> int:
    states = ctx.slurm.show_nodes(nodes)
    for node in sorted(set(nodes) - set(states)):
        ctx.log.event("reconcile_skip", node=node, phase="reconcile",
                      error="node unknown to Slurm")
    power = call_driver(ctx, "status", sorted(states))
    now = time.time()
    on_since = _state_times(ctx, "on_while_powered_down")
    decisions = decide(states, power, resume_started(ctx), now, ctx.config.stuck_after,
                       on_since, ctx.config.orphan_after)
    note_machines_on(ctx, states, {d.node: on_since.get(d.node, now) for d in decisions
                                   if d.action == "wait"})
    for d in decisions:
        ctx.log.event("reconcile_decision", node=d.node, phase="reconcile", action=d.action,
                      why=d.why, state=states[d.node].state, power=power[d.node].power)
    orphans = [d.node for d in decisions if d.action == "power_off"]
    off_failed: list[str] = []
    if orphans:
        # Look again right before switching off: a resume may have started meanwhile.
        fresh = ctx.slurm.show_nodes(orphans)
        orphans = [n for n in orphans if n in fresh and fresh[n].powered_down
                   and not fresh[n].powering_up]
        results = call_driver(ctx, "power_off", orphans, force=True)
        off_failed = [n for n in orphans if not results[n].ok]
    to_resume = [d.node for d in decisions if d.action == "resume"]
    ctx.slurm.update(to_resume, state="RESUME")
    stuck = [d.node for d in decisions if d.action == "return"]
    if stuck:
        call_driver(ctx, "power_off", stuck, force=True)
        return_to_pool(ctx, stuck, "reconcile: stuck powering up or DOWN after a failed resume")
    powered_off = [n for n in orphans if n not in off_failed]
    ctx.log.event("reconcile_summary", phase="reconcile", checked=len(states),
                  orphans=orphans, powered_off=powered_off, power_off_failed=off_failed,
                  returned=stuck, resumed=to_resume)
    if ctx.summary is not None:
        ctx.summary({"checked": len(states), "powered_off": powered_off,
                     "power_off_failed": off_failed, "returned": stuck, "resumed": to_resume})
    # A machine left on is tried again at the next reconcile; the caller is told (the
    # playbook fails rather than say the machines are off).
    return 1 if off_failed else 0
