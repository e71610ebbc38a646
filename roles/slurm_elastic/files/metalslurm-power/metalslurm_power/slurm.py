"""The few scontrol calls the power programs make, and a parser for ``scontrol -o show node``.

Output formats (Slurm 22.05 and 24.11): ``scontrol show hostnames LIST`` prints one name per
line; ``scontrol -o show node`` prints one ``Key=Value ...`` line per node, ``State=`` being the
base state joined with its flags by ``+`` (``IDLE+CLOUD+POWERED_DOWN``,
``DOWN+CLOUD+POWERED_DOWN+NOT_RESPONDING``). Recorded samples: tests/fixtures/slurm/.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .eventlog import EventLog

_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:]*)=")


@dataclass(frozen=True)
class NodeState:
    name: str
    base: str
    flags: frozenset[str] = field(default_factory=frozenset)
    reason: str = ""
    addr: str = ""

    @property
    def powered_down(self) -> bool:
        return "POWERED_DOWN" in self.flags

    @property
    def powering_up(self) -> bool:
        return "POWERING_UP" in self.flags

    @property
    def powering_down(self) -> bool:
        """Being powered down, or a power down requested (``POWER_DOWN``, shown as ``!``)."""
        return "POWERING_DOWN" in self.flags or "POWER_DOWN" in self.flags

    @property
    def down(self) -> bool:
        return self.base == "DOWN"

    @property
    def state(self) -> str:
        return "+".join([self.base, *sorted(self.flags)])


def parse_show_node(text: str) -> dict[str, NodeState]:
    """Parse ``scontrol -o show node`` output (one line per node)."""
    nodes: dict[str, NodeState] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("NodeName="):
            continue
        matches = list(_KEY.finditer(line))
        fields: dict[str, str] = {}
        for i, match in enumerate(matches):
            end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
            fields[match.group(1)] = line[match.end():end].strip()
        base, *flags = (fields.get("State") or "UNKNOWN").split("+")
        name = fields["NodeName"]
        nodes[name] = NodeState(name=name, base=base.rstrip("*"), flags=frozenset(flags),
                                reason=fields.get("Reason", ""), addr=fields.get("NodeAddr", ""))
    return nodes


class SlurmError(Exception):
    pass


class Slurm:
    """scontrol, from ``bin_dir`` (empty: from PATH). Updates are skipped and logged in dry run."""

    def __init__(self, log: EventLog, bin_dir: str = "/usr/bin", dry_run: bool = False,
                 timeout: float = 60.0) -> None:
        self.log = log
        self.scontrol = os.path.join(bin_dir, "scontrol") if bin_dir else "scontrol"
        self.dry_run = dry_run
        self.timeout = timeout

    def _run(self, args: Sequence[str]) -> str:
        try:
            proc = subprocess.run([self.scontrol, *args], capture_output=True, text=True,
                                  timeout=self.timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SlurmError(f"scontrol {' '.join(args)}: {exc}") from exc
        if proc.returncode != 0:
            raise SlurmError(f"scontrol {' '.join(args)}: exit {proc.returncode}: "
                             f"{(proc.stderr or proc.stdout).strip()}")
        return proc.stdout

    def expand(self, hostlist: str) -> list[str]:
        """``gpu-[001-003],cpu-1`` -> names, in Slurm's order; an empty list expands to []."""
        if not hostlist.strip():
            return []
        return [n for n in self._run(["show", "hostnames", hostlist]).split() if n]

    def show_nodes(self, nodes: Iterable[str] | None = None) -> dict[str, NodeState]:
        wanted = list(nodes) if nodes is not None else None
        if wanted == []:
            return {}
        # One call for all nodes: a node unknown to Slurm makes a per-name call fail.
        states = parse_show_node(self._run(["-o", "show", "node"]))
        return states if wanted is None else {n: states[n] for n in wanted if n in states}

    def update(self, nodes: Sequence[str], **settings: str) -> bool:
        """``scontrol update nodename=A,B key=value ...``; False (logged) when it failed."""
        if not nodes:
            return True
        args = ["update", f"nodename={','.join(nodes)}"]
        args += [f"{key}={value}" for key, value in settings.items()]
        if self.dry_run:
            self.log.event("scontrol_update", phase="slurm", nodes=list(nodes),
                           args=args[1:], ok=True, skipped="dry run")
            return True
        try:
            self._run(args)
        except SlurmError as exc:
            self.log.event("scontrol_update", phase="slurm", nodes=list(nodes), args=args[1:],
                           ok=False, error=str(exc))
            return False
        self.log.event("scontrol_update", phase="slurm", nodes=list(nodes), args=args[1:], ok=True)
        return True
