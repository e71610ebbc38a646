"""Stand-ins for ``metalslurm maintain``'s tests (tests/unit/test_maintain*.py): a slurmctld
that keeps node states as Slurm does through ``scontrol reboot ASAP nextstate=DOWN`` (a busy
node is drained with its reboot pending until its jobs end, then the reboot is issued, and
one poll later it registers DOWN with a later boot time and Slurm's ": reboot complete"),
the nodes' health checker, and an inventory."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import yaml

from infra.ops import maintain as m

SHOW = m.SHOW_NODES + " "
REBOOT_RE = re.compile(r'^now=\$\(date \+%s\) && scontrol reboot ASAP nextstate=DOWN '
                       r'reason="metalslurm-maintain: reboot requested at \$now( after its '
                       r'update)?" (\S+) && echo "\$now"$')


@dataclass
class FakeNode:
    states: set[str]
    boot: int = 1000
    reason: str = ""
    job_ends: int = 0  # the tick its jobs end; busy before


@dataclass
class FakeSlurm:
    nodes: dict[str, FakeNode]
    tick: int = 0
    commands: list[str] = field(default_factory=list)
    timeout_on: set[str] = field(default_factory=set)  # nodes that never come back
    unreachable: set[str] = field(default_factory=set)  # resumed, never answer a ping
    cancel_keeps_drain: bool = False  # 'scontrol cancel_reboot' lifts the ASAP drain or not

    def clock(self) -> float:
        return 2000.0 + self.tick

    def sleep(self, _seconds: float) -> None:
        self.tick += 1
        for name, node in self.nodes.items():
            if "NOT_RESPONDING" in node.states and name not in self.unreachable:
                node.states.discard("NOT_RESPONDING")  # slurmctld's ping reached it
            if node.job_ends and self.tick >= node.job_ends:
                node.job_ends = 0
                node.states -= {"ALLOCATED"}
                node.states.add("IDLE")
            if "REBOOT_ISSUED" in node.states:
                if name in self.timeout_on:
                    node.states = {"DOWN"}
                    node.reason += " : reboot timed out"
                else:
                    node.states = {"DOWN"}
                    node.boot = int(self.clock())
                    node.reason += " : reboot complete"
            elif "REBOOT_REQUESTED" in node.states and "ALLOCATED" not in node.states:
                node.states = {"DOWN", "REBOOT_ISSUED"}
                node.reason += " : reboot issued"

    def run(self, command: str, check: bool = True, timeout: float = 120,
            stdin: str | None = None) -> SimpleNamespace:
        self.commands.append(command)
        # The controller's shell reads the command: a bare '|' would make it a pipeline.
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        assert "|" not in list(lexer), f"a pipe in {command!r}"
        if command.startswith(SHOW.strip()):
            words = shlex.split(command[len(SHOW):])
            names = words[0].split(",") if words else list(self.nodes)
            return SimpleNamespace(returncode=0, stdout=self.show(names), stderr="")
        reboot = REBOOT_RE.match(command)
        words = shlex.split(command)
        if reboot:
            now = int(self.clock())
            node = self.nodes[reboot[2]]
            node.states |= {"DRAIN", "REBOOT_REQUESTED"}
            node.reason = f"metalslurm-maintain: reboot requested at {now}{reboot[1] or ''}"
            return SimpleNamespace(returncode=0, stdout=f"{now}\n", stderr="")
        if words[:2] == ["scontrol", "cancel_reboot"]:
            node = self.nodes[words[2]]
            if "REBOOT_ISSUED" in node.states:
                return SimpleNamespace(returncode=1, stdout="", stderr=(
                    f"slurm_update error: Reboot has already been sent to {words[2]}"))
            node.states.discard("REBOOT_REQUESTED")
            if not self.cancel_keeps_drain:
                node.states.discard("DRAIN")
            return SimpleNamespace(returncode=0, stdout="", stderr="")
        if words[0] == "squeue":
            name = re.search(r"--nodelist=(\S+)", command)[1]
            busy = self.nodes[name].states & {"ALLOCATED"}
            return SimpleNamespace(returncode=0, stdout="17|alice|1:02:03\n" if busy else "",
                                   stderr="")
        if words[:2] == ["scontrol", "update"]:
            options = dict(w.split("=", 1) for w in words[2:])
            node = self.nodes[options["nodename"]]
            if options["state"] == "resume" and not node.states & {"DOWN", "DRAIN"}:
                # slurmctld's answer, as Remote.run raises it with check.
                error = "slurm_update error: Invalid node state specified"
                if check:
                    raise RuntimeError(f"on ctl: {command!r} failed (1): {error}")
                return SimpleNamespace(returncode=1, stdout="", stderr=error)
            if options["state"] == "resume" and "DOWN" in node.states:
                # A resumed DOWN node is not responding until slurmctld pings it.
                node.states, node.reason = {"IDLE", "NOT_RESPONDING"}, ""
            elif options["state"] == "resume":
                node.states.discard("DRAIN")
                node.reason = ""
            else:
                node.states.add("DRAIN")
                node.reason = options["reason"]
        else:
            raise AssertionError(f"unexpected command {command!r}")
        return SimpleNamespace(returncode=0, stdout="", stderr="")

    def show(self, names: list[str]) -> str:
        """As 'scontrol --oneliner show node' prints them (SLURM_TIME_FORMAT=%s)."""
        return "".join(
            f"NodeName={name} Arch=x86_64 CoresPerSocket=1 State={'+'.join(sorted(node.states))}"
            f" ThreadsPerCore=1 BootTime={node.boot} SlurmdStartTime={node.boot} CapWatts=n/a"
            + (f" Reason={node.reason} [root@{int(self.clock())}]" if node.reason else "")
            + "\n" for name, node in ((n, self.nodes[n]) for n in names))


class FakeNodeShell:
    """The node's health checker as Slurm runs it: a failing node drains itself (with its
    own reason, in the stand-in slurmctld) and exits 1."""

    def __init__(self, healthy: dict[str, bool], slurm: FakeSlurm | None = None,
                 exit_status: int | None = None, returned: frozenset[str] = frozenset()
                 ) -> None:
        self.healthy, self.slurm, self.exit_status, self.ran = healthy, slurm, exit_status, []
        # Nodes that slurmctld (or an admin) returns to service while their check runs.
        self.returned = returned

    def __call__(self, name: str) -> FakeNodeShell:
        self.current = name
        return self

    def run(self, command: str, check: bool = True, timeout: float = 120,
            stdin: str | None = None) -> SimpleNamespace:
        self.ran.append((self.current, command))
        if self.exit_status is not None:
            return SimpleNamespace(returncode=self.exit_status, stdout="",
                                   stderr="metalslurm-health: bad config")
        if self.current in self.returned:
            node = self.slurm.nodes[self.current]
            node.states, node.reason = {"IDLE"}, ""
        if self.healthy.get(self.current, True):
            return SimpleNamespace(returncode=0, stdout="ok gpus\n", stderr="")
        reason = "metalslurm-health: gpus: 7 of 8 GPUs (GPU 3 missing)"
        node = self.slurm.nodes[self.current]
        node.states.add("DRAIN")
        node.reason = reason
        return SimpleNamespace(returncode=1, stdout=f"fail gpus 7 of 8\nnode {self.current}: "
                               f"drain: {reason}\n", stderr="")


def runner(slurm: FakeSlurm, shell: FakeNodeShell, batch: int = 1, gate: bool = False,
           health: str | None = "/usr/local/sbin/metalslurm-health",
           max_wait: float | None = None) -> tuple[m.Maintain, list]:
    lines: list[str] = []
    tick = lambda: float(slurm.tick)  # noqa: E731
    settings = m.Settings(batch, health, gate, max_wait=max_wait)
    return m.Maintain(slurm, shell, settings, log=lines.append, poll=0,
                      clock=slurm.clock, monotonic=tick, sleep=slurm.sleep), lines


def changes(slurm: FakeSlurm) -> list[str]:
    """The commands that change a node: 'reboot NODE' for a reboot request."""
    return [f"reboot {REBOOT_RE.match(c)[2]}" if REBOOT_RE.match(c) else c
            for c in slurm.commands if not c.startswith(SHOW.strip())]


def write_inventory(tmp_path: Path, **all_vars: object) -> Path:
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump({"all": {
        "vars": {"metalslurm_cluster_name": "c", **all_vars},
        "hosts": {"ctl": {"ansible_host": "10.0.0.10"}, "gpu-001": {"ansible_host": "10.0.0.11"}},
        "children": {"slurm_controller": {"hosts": {"ctl": None}},
                     "slurm_compute": {"hosts": {"gpu-001": None}}}}}))
    return path
