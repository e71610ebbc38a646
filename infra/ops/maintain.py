"""``metalslurm maintain --reboot`` / ``--update``: rolling reboots and package updates of
compute nodes without killing a job (``--update``'s packages: :mod:`infra.ops.node_update`).

Each node is rebooted by Slurm itself (``scontrol reboot ASAP nextstate=DOWN``): it takes
no new job, its running jobs end as they would, slurmd runs the RebootProgram
(slurm_controller's ``slurm_controller_reboot_program``) and the node registers again DOWN.
This command then runs the node's health checker over SSH, as Slurm runs it, and returns the
node to service (``state=RESUME``) only when it passes; a failing node is drained by the
checker itself, with its own reason (it returns the node once it passes), and where the
acceptance gate is on a rebooted node is drained into it instead ('metalslurm accept' tests
it and returns it).

At most ``batch`` nodes are out of service at once, idle nodes first, so that one busy node
does not hold back the others. Every step is one Slurm command whose effect Slurm keeps: a
run stopped half-way (Ctrl-C, a lost connection) leaves each node drained with its reboot
still pending, or DOWN with this command's reason, and the next run with the same nodes
takes each one up where it was.

With ``max_wait`` a node whose jobs still run that long after its reboot was asked for is
not rebooted: its request is called off (``scontrol cancel_reboot``), its drain lifted, and
the report names the jobs; the node goes on running them as if nothing had happened.

With ``update`` each node is drained by this command (its reason, with the time), waits
for its jobs, gets its packages, and then its reboot as above or munge and slurmd restarted
and the same way back. One run at a time holds the cluster's lock (:func:`controller_lock`).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import shlex
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.cluster_defaults import (
    ACCEPT_REASON_PREFIX,
    cluster_defaults,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.health import (
    health_settings,
)

from infra.accept.remote import RemoteError, Shell, read_retried
from infra.ops.node_update import (
    APPLY_SCRIPT,
    CONTROLLER_SLURM,
    PLAN_SCRIPT,
    RESTART_SCRIPT,
    Plan,
    install_words,
    parse_plan,
    pinned_packages,
    plan_problems,
    without_pinned,
)

# The reason this command gives Slurm. Slurm appends its own steps to it (": reboot issued",
# ": reboot complete"); the request's time in it lets a later run tell a node rebooted since.
REASON_PREFIX = "metalslurm-maintain:"
_REQUESTED_RE = re.compile(re.escape(REASON_PREFIX) + r" reboot requested at (\d+)")
# --update drains a node with this reason (and its time) until its packages are installed.
_UPDATE_RE = re.compile(re.escape(REASON_PREFIX) + r" update requested at (\d+)")
# --update --reboot: the reboot's reason says the packages are in (an earlier run's reboot
# taken up without it was a --reboot run's: this run does not update that node).
AFTER_UPDATE = " after its update"
POLL_SECONDS = 2.0
# A failed read is tried again this many times, POLL_SECONDS apart: two minutes, about a
# slurmctld restart or a backup controller's takeover (SlurmctldTimeout 120 s).
READ_TRIES = 60
# A resumed node is pinged at once (slurmctld's ping_nodes_now); this bounds the wait.
PING_WAIT_SECONDS = 120
# Node states that mean jobs still run there.
BUSY = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})
PENDING_REBOOT = frozenset({"REBOOT_REQUESTED", "REBOOT_ISSUED"})
# Node states in which a node is not rebooted: another's drain, down or failing node keeps
# its state (the final resume would lift it), a node that does not answer cannot reboot,
# and Slurm ignores a reboot of a powered-down (elastic) node.
OTHERS = (("DRAIN", "drained"), ("DOWN", "down"), ("FAIL", "failing"),
          ("NOT_RESPONDING", "not responding"), ("INVALID_REG", "registered with bad hardware"),
          ("POWERED_DOWN", "powered down"), ("POWERING_DOWN", "powering down"),
          ("POWERING_UP", "powering up"), ("POWER_DOWN", "powering down"))
# Reads: slurmctld's view of nodes in the one text form 22.05 and 24.11 both print
# (22.05 has no 'scontrol --json'), with times as seconds since the epoch.
SHOW_NODES = "SLURM_TIME_FORMAT=%s scontrol --oneliner show node"


class MaintainError(RuntimeError):
    """The run cannot go on (the message says what to do; a run again picks up)."""


@dataclass(frozen=True)
class NodeView:
    """One node as slurmctld sees it."""

    name: str
    states: frozenset[str]  # upper case: IDLE, DOWN, DRAIN, REBOOT_REQUESTED, ...
    boot_time: int  # seconds since the epoch
    reason: str

    @property
    def busy(self) -> bool:
        return bool(self.states & BUSY)

    @property
    def requested_at(self) -> int | None:
        """When this command asked for the node's reboot (from the reason), if it did."""
        match = _REQUESTED_RE.match(self.reason)
        return int(match[1]) if match else None

    def rebooted_since(self, requested: int) -> bool:
        """Back from a reboot asked for at ``requested`` (the controller's clock): registered
        with a later boot time, no reboot pending, not timed out. The reason may be another's
        by then: the health checker run by slurmd at boot puts its own when it fails."""
        return (self.boot_time >= requested and not self.states & PENDING_REBOOT
                and "reboot timed out" not in self.reason)

    @property
    def update_requested_at(self) -> int | None:
        """When a --update run drained the node for its packages (still drained), if one did."""
        match = _UPDATE_RE.match(self.reason)
        return int(match[1]) if match and "DRAIN" in self.states else None

    @property
    def taken_up(self) -> bool:
        """A reboot this command asked for in an earlier run, still under way or back DOWN
        (a node since resumed, whose reason Slurm may keep, is not one)."""
        return self.requested_at is not None and bool(
            self.states & PENDING_REBOOT or "DOWN" in self.states)

    def describe(self) -> str:
        return "+".join(sorted(self.states)) or "UNKNOWN"


_FIELD_RE = {key: re.compile(rf"(?:^| ){key}=(\S*)") for key in ("NodeName", "State", "BootTime")}
_REASON_RE = re.compile(r" Reason=(.*?)(?: \[[^\]@]*@[^\]]*\])?$")


def _epoch(value: str) -> int:
    """A time of scontrol's: seconds (SLURM_TIME_FORMAT=%s), or ISO 8601 where a release
    ignores the format; 0 for None or Unknown."""
    if value.isdigit():
        return int(value)
    try:
        return int(datetime.fromisoformat(value).timestamp())
    except ValueError:
        return 0


def parse_nodes(text: str) -> dict[str, NodeView]:
    """``scontrol --oneliner show node``: one line a node, ``Reason=`` last with its
    ``[user@time]`` (22.05 and 24.11 alike; tests/fixtures/slurm/exporter)."""
    views = {}
    for line in text.splitlines():
        fields = {key: rx.search(line) for key, rx in _FIELD_RE.items()}
        if not fields["NodeName"] or not fields["State"]:
            continue
        reason = _REASON_RE.search(line)
        name = fields["NodeName"][1]
        views[name] = NodeView(
            name, frozenset(w for w in fields["State"][1].upper().split("+") if w),
            _epoch(fields["BootTime"][1]) if fields["BootTime"] else 0,
            reason[1] if reason else "")
    return views


@dataclass
class Progress:
    """One node's way through the run (monotonic seconds)."""

    node: str
    requested: int  # the epoch second in its reason
    asked_at: float = 0.0  # when this run asked for (or took up) its reboot
    out_since: float | None = None  # when it stopped running jobs (reboot issued)
    back_at: float | None = None
    outcome: str = ""  # "back in service", "handed to the gate", or why it failed
    resumed: bool = False  # resumed, waiting for slurmctld to reach it
    resumed_at: float | None = None
    ok: bool = False
    called_off: bool = False  # its jobs ran past max_wait: not rebooted, back in service
    updating: bool = False  # --update: drained, its packages not yet installed
    updated: bool = False  # --update: its packages installed by this run
    said: str = ""  # the last phase reported


@dataclass
class MaintainResult:
    done: list[Progress] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def failed(self) -> list[Progress]:
        return [p for p in self.done if not p.ok and not p.called_off]

    @property
    def called_off(self) -> list[Progress]:
        return [p for p in self.done if p.called_off]


@dataclass(frozen=True)
class Settings:
    batch: int
    health_program: str | None  # None: the inventory turned the health checker off
    gate: bool
    elastic: frozenset[str] = frozenset()  # cloud nodes: each resume boots them anew
    max_wait: float | None = None  # seconds a node may wait for its jobs; None: no bound
    reboot: bool = True
    update: bool = False  # install newer builds of held, munge and Slurm packages first
    pins: Mapping[str, str] = field(default_factory=dict)  # node_update.pinned_packages


def settings_from_inventory(all_vars: Mapping[str, Any], batch: int,
                            elastic: Iterable[str] = (),
                            max_wait: float | None = None, *, reboot: bool = True,
                            update: bool = False) -> Settings:
    from infra.stack.accept import settings_from_inventory as gate_settings
    from infra.stack.inputs import InputError

    try:
        health = health_settings(all_vars.get("metalslurm_health") or {})
    except ValueError as exc:
        raise InputError("--inventory", f"its metalslurm_health is not valid ({exc}); fix it "
                         "as 'metalslurm configure' would need") from None
    return Settings(batch=batch,
                    health_program=(cluster_defaults()["health_program"]
                                    if health["enabled"] else None),
                    gate=gate_settings(all_vars, None).gate, elastic=frozenset(elastic),
                    max_wait=max_wait, reboot=reboot, update=update,
                    pins=pinned_packages(all_vars))


class Maintain:
    def __init__(self, controller: Shell, node_shell: Callable[[str], Shell], settings: Settings,
                 log: Callable[[str], None] = print, poll: float = POLL_SECONDS,
                 clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.controller, self.node_shell, self.settings = controller, node_shell, settings
        self.log, self.poll, self.clock = log, poll, clock
        self.monotonic, self.sleep = monotonic, sleep
        self.controller_slurm = ""  # slurmctld's build (--update), read once a run

    # ---- Slurm, on the controller ------------------------------------------------------

    def read(self, nodes: Iterable[str]) -> dict[str, NodeView]:
        """The nodes as slurmctld sees them (none named: every node); a failed read
        (slurmctld restarting, an SSH hiccup) is tried again and then stops the run, never
        taken for an answer."""
        names = ",".join(nodes)
        command = SHOW_NODES + (f" {shlex.quote(names)}" if names else "")
        try:
            return parse_nodes(read_retried(self.controller, command, READ_TRIES,
                                            lambda: self.sleep(self.poll)))
        except RemoteError as exc:
            raise MaintainError(f"scontrol failed {READ_TRIES} times on the controller "
                                f"({exc}); run 'metalslurm maintain' again with the same nodes "
                                "once Slurm answers: it takes each node up where it was"
                                ) from None

    def scontrol(self, arguments: str) -> str:
        return str(self.controller.run(f"scontrol {arguments}").stdout)

    def resume(self, name: str) -> None:
        """Return the node to service. slurmctld refuses to resume a node that is neither
        down nor drained: one already back (returned by slurmctld itself, an admin or
        another program between this command's read and its resume; seen in a rehearsal
        right after a reboot) is left as it is; any other failure stops the run."""
        try:
            self.scontrol(f"update nodename={shlex.quote(name)} state=resume")
        except RuntimeError:
            view = self.read([name]).get(name)
            if view is None or view.states & {"DOWN", "DRAIN"}:
                raise

    # ---- the run -----------------------------------------------------------------------

    def run(self, nodes: Sequence[str]) -> MaintainResult:
        start = self.monotonic()
        result = MaintainResult()
        views = self.read(())
        unknown = [n for n in nodes if n not in views]
        if unknown:
            raise MaintainError(f"Slurm does not know {', '.join(unknown)}; give nodes "
                                "'sinfo' lists")
        queue = list(nodes)
        if self.settings.update:
            current = self.check_updates([n for n in queue if not self.left_alone(views[n])],
                                         views)
            for name in queue[:]:
                if name not in current and not self.left_alone(views[name]):
                    queue.remove(name)
                    result.skipped[name] = "nothing newer to install: left in service"
                    self.log(f"{name}: {result.skipped[name]}")
        active: dict[str, Progress] = {}
        first = True  # the first round uses the first read
        try:
            while queue or active:
                if queue and len(active) < self.settings.batch and not first:
                    views.update(self.read(queue))  # the waiting nodes as they are now
                while queue and len(active) < self.settings.batch:
                    # Nodes an earlier run asked for first (out of service already), then
                    # idle ones, so that one busy node does not hold back the others; the
                    # given order within each kind (sort is stable).
                    queue.sort(key=lambda n: (not self.under_way(views[n]), views[n].busy))
                    name = queue.pop(0)
                    why = self.left_alone(views[name])
                    if why:
                        result.skipped[name] = why
                        self.log(f"{name}: {why}")
                        continue
                    active[name] = self.request(views[name])
                if not active:
                    break
                self.sleep(self.poll)
                first = False
                views.update(self.read(active))
                for name in list(active):
                    if self.advance(active[name], views.get(name)):
                        result.done.append(active.pop(name))
        except (MaintainError, RemoteError, KeyboardInterrupt):
            if active:
                self.log("stopped with " + ", ".join(
                    f"{n} ({p.said or ('update pending' if p.updating else 'reboot requested')})"
                    for n, p in active.items())
                    + " under way: Slurm keeps each where it is; the same command again goes "
                    "on with them")
            raise
        result.seconds = self.monotonic() - start
        return result

    def check_updates(self, nodes: Sequence[str], views: Mapping[str, NodeView]) -> set[str]:
        """--update, before any node is drained: what each node would install, every
        node's problem named at once (MaintainError); the nodes the run goes on with (all
        of them with --reboot; otherwise those with something to install, or drained for it
        by an earlier run)."""
        self.controller_slurm = str(self.controller.run(CONTROLLER_SLURM, check=False).stdout
                                    or "").strip()
        problems, going_on = [], set()
        for name in nodes:
            if views[name].taken_up:  # rebooting for an earlier run: looked at next time
                going_on.add(name)
                continue
            try:
                plan = self.plan(name)
            except MaintainError as exc:
                problems.append(str(exc))
                continue
            problems += plan_problems(name, plan, reboot=self.settings.reboot,
                                      controller_slurm=self.controller_slurm)
            if plan.work or self.settings.reboot or views[name].update_requested_at is not None:
                going_on.add(name)
            self.say_plan(name, plan)
        if problems:
            raise MaintainError("refused, and nothing changed by this run: "
                                + "; ".join(problems))
        return going_on

    def say_plan(self, name: str, plan: Plan) -> None:
        for kept in plan.kept:
            self.log(f"{name}: {kept}")
        if plan.broken:
            self.log(f"{name}: dpkg reports a half-done install, finished first: {plan.broken}")
        self.log(f"{name}: " + ("; ".join(n.describe() for n in plan.newer) if plan.newer
                                else "nothing newer to install"))

    def plan(self, name: str) -> Plan:
        """What ``name``'s apt sources offer newer builds of (its lists read again), less
        the packages the inventory pins."""
        try:
            proc = self.node_shell(name).run(f"bash -s -- {shlex.quote(self.controller_slurm)}",
                                             check=False, timeout=600, stdin=PLAN_SCRIPT)
        except RuntimeError as exc:
            raise MaintainError(f"{name}: could not read what to update ({exc})") from None
        if proc.returncode != 0:
            said = (proc.stderr or proc.stdout or "").strip()[-300:]
            raise MaintainError(f"{name}: could not read what to update (exit status "
                                f"{proc.returncode}: {said})")
        return without_pinned(parse_plan(proc.stdout or ""), self.settings.pins)

    def under_way(self, view: NodeView) -> bool:
        """Out of service for an earlier run of this command (its reboot, or its update)."""
        return view.taken_up or (self.settings.update and view.update_requested_at is not None)

    def left_alone(self, view: NodeView) -> str:
        """Why a node is not rebooted (updated), or ""."""
        if self.under_way(view):
            return ""
        if view.name in self.settings.elastic or "CLOUD" in view.states:
            return ("an elastic node (each resume boots it anew; 'scontrol power_down' it "
                    "instead): left alone")
        if view.states & PENDING_REBOOT:
            return "has a reboot pending that this command did not ask for: left alone"
        if view.busy and self.settings.max_wait == 0:
            return "runs jobs and --max-wait is 0: left alone"
        for state, words in OTHERS:
            if state in view.states:
                return (f"{words} ({view.describe()}, {view.reason or 'no reason'}): left "
                        "alone; return it to service or give another node")
        return ""

    def request(self, view: NodeView) -> Progress:
        """Ask Slurm for the node's reboot (with --update, its drain), or take up the request
        of an earlier run. The request's time is the controller's clock, which the node's
        boot time is compared with (the operator's machine may be set otherwise)."""
        waits = " (it waits for its jobs to end; it takes no new one)" if view.busy else ""
        if view.taken_up:
            self.log(f"{view.name}: its reboot was asked for by an earlier run "
                     f"({view.describe().lower()}): taken up" + (
                         "; that run did not update it: run --update again after this one"
                         if self.settings.update and AFTER_UPDATE not in view.reason else ""))
            progress = Progress(view.name, int(view.requested_at or 0))
        elif self.settings.update and view.update_requested_at is not None:
            self.log(f"{view.name}: drained for its update by an earlier run "
                     f"({view.describe().lower()}): taken up")
            progress = Progress(view.name, view.update_requested_at, updating=True)
        elif self.settings.update:
            progress = Progress(view.name, self.on_controller(
                f"scontrol update nodename={shlex.quote(view.name)} state=drain "
                f'reason="{REASON_PREFIX} update requested at $now"'), updating=True)
            self.log(f"{view.name}: drained for its update{waits}")
        else:
            progress = Progress(view.name, self.ask_reboot(view.name))
            self.log(f"{view.name}: reboot requested{waits}")
        progress.asked_at = self.monotonic()
        if not view.busy:
            progress.out_since = progress.asked_at
        return progress

    def on_controller(self, command: str) -> int:
        """Run ``command`` with ``$now`` set to the controller's clock; that time."""
        out = str(self.controller.run(f'now=$(date +%s) && {command} && echo "$now"').stdout
                  ).strip()
        return int(out) if out.isdigit() else int(self.clock())

    def ask_reboot(self, name: str, after: str = "") -> int:
        return self.on_controller(f'scontrol reboot ASAP nextstate=DOWN reason="{REASON_PREFIX}'
                                  f' reboot requested at $now{after}" {shlex.quote(name)}')

    def say(self, progress: Progress, phase: str) -> None:
        if progress.said != phase:
            progress.said = phase
            self.log(f"{progress.node}: {phase}")

    def advance(self, progress: Progress, view: NodeView | None) -> bool:
        """One look at a node in the run; True once it is done with (back or failed)."""
        name = progress.node
        if view is None:
            return self.fail(progress, "Slurm no longer knows it (removed from slurm.conf?)")
        if progress.updating:
            return self.advance_update(progress, view)
        if progress.resumed:
            # A resumed DOWN node is marked not responding until slurmctld's next ping.
            if "NOT_RESPONDING" in view.states:
                if self.monotonic() - (progress.resumed_at or 0.0) <= PING_WAIT_SECONDS:
                    self.say(progress, "resumed; waiting for slurmctld to reach it")
                    return False
                return self.fail(progress, f"resumed, but slurmctld has not reached its slurmd "
                                 f"in {PING_WAIT_SECONDS} s ({view.describe()})")
            progress.back_at = self.monotonic()
            progress.ok = True
            out = progress.back_at - (progress.out_since or progress.back_at)
            self.log(f"{name}: {progress.outcome} ({out:.0f} s out of service)")
            return True
        if "reboot timed out" in view.reason:
            return self.fail(progress, f"did not register within ResumeTimeout after its reboot "
                             f"({view.reason}); it stays DOWN: look at its console")
        if view.rebooted_since(progress.requested):
            if progress.out_since is None:
                progress.out_since = self.monotonic()
            self.say(progress, f"registered again {self.monotonic() - progress.out_since:.0f} "
                     "s after its reboot was issued")
            return self.return_to_service(progress, view)
        if not view.states & PENDING_REBOOT:
            return self.fail(progress, f"its reboot was called off by someone else "
                             f"({view.describe()}, {view.reason or 'no reason'}); left as it is")
        if view.busy:
            if "REBOOT_ISSUED" not in view.states and self.past_max_wait(progress):
                return self.call_off(progress)
            self.say(progress, "waiting for its jobs to end (drained, reboot pending)")
            return False
        if progress.out_since is None:
            progress.out_since = self.monotonic()
        self.say(progress, "rebooting")
        return False

    def past_max_wait(self, progress: Progress) -> bool:
        """Whether the node has waited for its jobs as long as --max-wait allows."""
        limit = self.settings.max_wait
        return limit is not None and self.monotonic() - progress.asked_at >= limit

    def advance_update(self, progress: Progress, view: NodeView) -> bool:
        """--update: a drained node waits for its jobs, then gets its packages; then its
        reboot (--reboot) or its daemons restarted and the way back to service."""
        name = progress.node
        if view.update_requested_at is None:
            return self.fail(progress, f"its drain was lifted or replaced by someone else "
                             f"({view.describe()}, {view.reason or 'no reason'}); not updated, "
                             "left as it is")
        if view.busy:
            if self.past_max_wait(progress):
                return self.call_off_update(progress)
            self.say(progress, "waiting for its jobs to end (drained, update pending)")
            return False
        if progress.out_since is None:
            progress.out_since = self.monotonic()
        self.say(progress, "installing its updates")
        try:
            installed = self.update(name)
        except MaintainError as exc:
            return self.fail(progress, f"not updated: {exc}; it stays drained (this command's "
                             "reason): fix that and run the same command again")
        self.log(f"{name}: " + ("installed " + "; ".join(n.describe() for n in installed.newer)
                                if installed.newer else "nothing newer to install")
                 + ("; dpkg's half-done install finished" if installed.broken else ""))
        progress.updating, progress.updated = False, True
        if self.drained_for_update(progress) is None:
            return True
        if self.settings.reboot:
            progress.requested = self.ask_reboot(name, AFTER_UPDATE)
            self.say(progress, "reboot requested")
            return False
        try:
            self.node_shell(name).run("bash -s", timeout=300, stdin=RESTART_SCRIPT)
        except RuntimeError as exc:
            return self.fail(progress, f"its daemons did not restart after the update ({exc}); "
                             "it stays drained: look at munge and slurmd there, then resume it")
        self.say(progress, "munge and slurmd restarted on the new build")
        return self.return_to_service(progress, view)

    def drained_for_update(self, progress: Progress) -> NodeView | None:
        """The node as it is now, if it still has this command's drain (someone may have
        drained or resumed it meanwhile, and theirs is kept); None once reported."""
        now = self.read([progress.node]).get(progress.node)
        if now is not None and now.update_requested_at is not None:
            return now
        self.fail(progress, "drained, resumed or removed by someone else while it was updated ("
                  + (f"{now.describe()}, {now.reason or 'no reason'}" if now else "gone")
                  + "); its packages are installed, the node is left as it is")
        return None

    def update(self, name: str) -> Plan:
        """Install what ``name``'s sources offer now, checked again as before the run."""
        plan = self.plan(name)
        problems = plan_problems(name, plan, reboot=self.settings.reboot,
                                 controller_slurm=self.controller_slurm)
        if problems:
            raise MaintainError("; ".join(problems))
        for kept in plan.kept:
            self.log(f"{name}: {kept}")
        if plan.work:
            words = " ".join(shlex.quote(w) for w in install_words(plan))
            try:
                proc = self.node_shell(name).run(f"bash -s -- {words}", check=False,
                                                 timeout=1800, stdin=APPLY_SCRIPT)
            except RuntimeError as exc:
                raise MaintainError(f"apt-get install did not end ({exc})") from None
            if proc.returncode != 0:
                raise MaintainError(f"apt-get install failed (exit status {proc.returncode}: "
                                    f"{(proc.stderr or proc.stdout or '').strip()[-300:]})")
        return plan

    def call_off_update(self, progress: Progress) -> bool:
        """The node's jobs ran past max_wait: its drain lifted, not updated."""
        name = progress.node
        jobs = self.jobs_on(name)
        if self.drained_for_update(progress) is None:
            return True
        self.resume(name)
        progress.called_off = True
        progress.outcome = (f"NOT updated: {jobs or 'its jobs'} still ran after --max-wait "
                            f"{self.settings.max_wait:.0f} s; its drain was lifted and it is "
                            "back in service")
        self.log(f"{name}: {progress.outcome}")
        return True

    def fail(self, progress: Progress, outcome: str) -> bool:
        progress.outcome = outcome
        self.log(f"{progress.node}: FAILED: {outcome}")
        return True

    def call_off(self, progress: Progress) -> bool:
        """The node's jobs ran past max_wait: its reboot called off and its drain lifted, so
        it goes on as it was. True when done with it; False when the reboot went ahead
        (its jobs ended meanwhile: Slurm had issued it)."""
        name, limit = progress.node, self.settings.max_wait
        jobs = self.jobs_on(name)
        self.controller.run(f"scontrol cancel_reboot {shlex.quote(name)}", check=False)
        view = self.read([name]).get(name)
        if view is None or view.states & PENDING_REBOOT or view.rebooted_since(
                progress.requested):
            return False  # issued before the call-off reached slurmctld: it goes on
        if "DRAIN" not in view.states:
            left = "back in service"  # Slurm lifted the request's drain with it
        elif view.reason.startswith(REASON_PREFIX):
            self.resume(name)
            left = "back in service"
        else:  # drained by another meanwhile: theirs to lift
            left = f"left {view.describe().lower()} ({view.reason or 'no reason'})"
        progress.called_off = True
        progress.outcome = (f"NOT rebooted: {jobs or 'its jobs'} still ran after --max-wait "
                            f"{limit:.0f} s; its reboot was called off and it is {left}")
        self.log(f"{name}: {progress.outcome}")
        return True

    def jobs_on(self, name: str) -> str:
        """The jobs running on a node, for a report ("" when squeue cannot say)."""
        proc = self.controller.run(f"squeue --noheader --nodelist={shlex.quote(name)} "
                                   "--format='%i|%u|%L'", check=False)
        jobs = [line.split("|") for line in (proc.stdout or "").split() if line.count("|") == 2]
        return ", ".join(f"job {i} ({user}, {left} left)" for i, user, left in jobs)

    def return_to_service(self, progress: Progress, view: NodeView) -> bool:
        """Health check, then the gate or service; True when done with the node (a resumed
        one is done once slurmctld reaches it)."""
        name = progress.node
        rebooted = not (progress.updated and not self.settings.reboot)
        failing = self.health_problem(name)
        if failing:
            return self.fail(progress, f"failed its health check after the "
                             f"{'reboot' if rebooted else 'update'}: {failing}")
        if self.settings.health_program is not None:
            self.log(f"{name}: health check passed")
        if not rebooted:
            # The check took a while: the node must still have this command's drain.
            now = self.drained_for_update(progress)
            if now is None:
                return True
            view = now
        if self.settings.gate:
            reason = (f"{ACCEPT_REASON_PREFIX} {'rebooted' if rebooted else 'updated'} by "
                      "metalslurm maintain")
            # DOWN and drained: the gate resumes it into its reservation for its tests.
            self.scontrol(f"update nodename={shlex.quote(name)} state=drain "
                          f"reason={shlex.quote(reason)}")
            progress.outcome = "handed to the acceptance gate (run 'metalslurm accept')"
            progress.back_at, progress.ok = self.monotonic(), True
            self.log(f"{name}: {progress.outcome}")
            return True
        if view.states & {"DOWN", "DRAIN"}:  # not when someone resumed it already
            self.resume(name)
        progress.outcome, progress.resumed = "back in service", True
        progress.resumed_at = self.monotonic()
        return False

    def health_problem(self, name: str) -> str:
        """Run the node's health checker as Slurm does (HealthCheckProgram): a failing node
        is drained by the checker itself, with its own reason, and returned by it once it
        passes. "" when it passes or the inventory turned it off; otherwise what failed."""
        program = self.settings.health_program
        if program is None:
            return ""
        try:
            proc = self.node_shell(name).run(shlex.quote(program), check=False, timeout=300)
        except RuntimeError as exc:
            return (f"the health checker could not be run over SSH ({exc}); the node stays "
                    "out of service: run it by hand, then resume the node")
        if proc.returncode == 0:
            return ""
        said = [line for line in (proc.stdout or "").splitlines()
                if line.startswith(f"node {name}: drain")]
        if proc.returncode == 1 and said:
            reason = said[-1].split(": ", 2)[-1]
            return f"drained by the checker ({reason}); it returns the node once it passes"
        return (f"{program} ended with exit status {proc.returncode} "
                f"({(proc.stderr or proc.stdout or '').strip()[-200:]}); the node stays out of "
                "service: run it by hand, then resume the node")


# ---- the command -------------------------------------------------------------------------


_BATCH_RE = re.compile(r"^([0-9]+)(%?)$")


def checked_batch(value: str | int, nodes: int = 1) -> int:
    """``--batch``: a number of nodes (1 or more), or a share of the ``nodes`` given
    (``25%``: a quarter of them, rounded down, at least 1)."""
    from infra.stack.inputs import InputError

    match = _BATCH_RE.match(str(value).strip())
    number = int(match[1]) if match else 0
    if not match or number < 1 or (match[2] and number > 100):
        raise InputError("--batch", "give the number of nodes out of service at once (1 or "
                         "more), or a share of the nodes given (1% to 100%)", str(value))
    return max(1, nodes * number // 100) if match[2] else number


def checked_max_wait(value: float | None) -> float | None:
    from ansible_collections.metalslurm.cluster.plugins.module_utils.slurm_leaving import (
        DRAIN_WAIT_MAX_S,
    )

    from infra.ops.preflight import checked_wait

    if value is None:
        return None
    return checked_wait(value, 0.0, DRAIN_WAIT_MAX_S, "--max-wait",
                        "a node's running jobs before its reboot is called off")


# One run at a time on a cluster: a lock on the controller (root's /run, not a directory
# users can write), held by a process the run keeps open over SSH; it goes with the run's
# connection, however the run ends. Its holder is written beside it.
LOCK = "/run/metalslurm-maintain.lock"
LOCK_BUSY = 75


@contextlib.contextmanager
def controller_lock(controller: Any, who: str, lock: str = LOCK) -> Iterator[None]:
    """Hold the cluster's lock for the block (one run of 'metalslurm maintain', 'backup' or
    'restore' at a time); MaintainError naming the holder when another run has it."""
    holder = shlex.quote(f"{lock}.who")
    proc = controller.start(
        f"exec flock --nonblock --conflict-exit-code {LOCK_BUSY} {shlex.quote(lock)} sh -c "
        f"'printf \"%s\\n\" \"$1\" > {holder} && echo held && exec cat >/dev/null' sh "
        + shlex.quote(who))
    try:
        said = proc.stdout.readline().strip() if proc.stdout else ""
        if said != "held":
            code = proc.wait(timeout=60)
            if code == LOCK_BUSY:
                held_by = controller.run(f"cat {holder}", check=False).stdout.strip()
                raise MaintainError("another metalslurm run (maintain, backup or restore) holds "
                                    f"the cluster's lock ({held_by or 'its holder unknown'}; "
                                    f"{lock} on the controller): wait for it to end, then run "
                                    "this again")
            error = (proc.stderr.read() if proc.stderr else "").strip()[-300:]
            raise MaintainError(f"could not take the cluster's lock on the controller (exit "
                                f"status {code}: {error or 'no message'})")
        yield
    finally:
        if proc.stdin:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_maintain(inventory: Any, *, nodes: str, reboot: bool, batch: str | int,
                 log: Callable[[str], None], max_wait: float | None = None,
                 update: bool = False) -> int:
    """Reboot (``reboot``) and/or update (``update``) the inventory's compute nodes
    ``nodes`` (a hostlist) in batches of ``batch``; every input checked before anything runs
    on a node. Exit status 1 when a node failed or its jobs ran past ``max_wait``."""
    from infra.accept.remote import Remote
    from infra.ops.inventory_file import (
        INVENTORY_FILE,
        group_hosts,
        hosts_in_group,
        load_inventory,
    )
    from infra.stack.inputs import InputError, parse_hostlist

    if inventory is None:
        raise InputError("--inventory", f"is required: give {INVENTORY_FILE}")
    document = load_inventory(inventory, "--inventory")
    if not reboot and not update:
        raise InputError("--reboot/--update", "one is required: give --reboot (rolling "
                         "reboots), --update (package updates) or both")
    checked_batch(batch)
    max_wait = checked_max_wait(max_wait)
    root = document.get("all") or {}
    all_vars = root.get("vars") or {}
    hosts = root.get("hosts") or {}
    compute = group_hosts(document, "slurm_compute")
    requested = parse_hostlist(nodes, "--nodes")
    unknown = [n for n in requested if n not in compute]
    if unknown:
        raise InputError("--nodes", f"names {', '.join(unknown)}, not compute nodes of the "
                         f"inventory ({', '.join(compute) or 'none'}); give compute nodes",
                         nodes)
    elastic = [n for n in compute
               if (hosts.get(n) or {}).get("metalslurm_node_state") == "cloud"]
    settings = settings_from_inventory(all_vars, checked_batch(batch, len(requested)), elastic,
                                       max_wait, reboot=reboot, update=update)
    controller_name = hosts_in_group(inventory, "slurm_controller")[0]

    def host_vars(name: str) -> dict[str, Any]:
        return {**all_vars, **(hosts.get(name) or {})}

    controller = Remote(controller_name, host_vars(controller_name))
    shells: dict[str, Remote] = {}

    def node_shell(name: str) -> Remote:
        if name not in shells:
            shells[name] = Remote(name, host_vars(name))
        return shells[name]

    who = (f"{getpass.getuser()}@{socket.gethostname()} pid {os.getpid()}, started "
           f"{datetime.now().astimezone():%Y-%m-%d %H:%M:%S %Z}, nodes {nodes}")
    try:
        with controller_lock(controller, who):
            result = Maintain(controller, node_shell, settings, log=log).run(requested)
    finally:
        for shell in [controller, *shells.values()]:
            shell.close()
    back = [p for p in result.done if p.ok and p.resumed]
    gated = [p for p in result.done if p.ok and not p.resumed]
    outs = [p.back_at - p.out_since for p in result.done
            if p.ok and p.back_at is not None and p.out_since is not None]
    done = {(True, False): "rebooted", (False, True): "updated",
            (True, True): "updated and rebooted"}[(reboot, update)]
    log(f"{len(back)} {done} and returned, "
        + (f"{len(gated)} {done} and handed to the acceptance gate, " if gated else "")
        + (f"{len(result.called_off)} not {done} (jobs past --max-wait), "
           if result.called_off else "")
        + f"{len(result.failed)} failed, {len(result.skipped)} left alone; "
        f"{result.seconds:.0f} s"
        + (f"; out of service {min(outs):.0f}-{max(outs):.0f} s a node (waiting for jobs not "
           "counted)" if outs else ""))
    return 1 if result.failed or result.called_off else 0
