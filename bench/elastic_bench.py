"""What the elastic-node benchmarks (bench_resume, bench_launch) share: the CLI, the
controller's shell, a node's Slurm state, waiting on a probe and powering a node down."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOG = "/var/log/slurm/metalslurm-power.log"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "infra.cli", *args], cwd=REPO,
                          capture_output=True, text=True, check=False)


def ctl(cluster: str, command: str) -> str:
    """``command`` on the controller (its container is not a compute node's: podman exec
    works there)."""
    return subprocess.run(["podman", "exec", f"{cluster}-ctl", "sh", "-c", command],
                          capture_output=True, text=True, check=True).stdout.strip()


def node_state(cluster: str, node: str) -> str:
    return ctl(cluster, f"sinfo --noheader --Node --nodes={node} --format=%T | head -1")


def wait(what: str, probe: Callable[[], object], timeout: float = 180.0,
         every: float = 0.1) -> float:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if probe():
            return time.time()
        time.sleep(every)
    raise SystemExit(f"timed out waiting for {what}")


def power_down(cluster: str, node: str, gone: Callable[[], bool] = lambda: True) -> None:
    """The node powered down (forced if it is up), and ``gone`` true."""
    if not node_state(cluster, node).endswith("~"):
        ctl(cluster, f"scontrol update nodename={node} state=POWER_DOWN_FORCE reason=bench")
    wait("the node to power down", lambda: node_state(cluster, node) == "idle~" and gone(),
         timeout=400.0, every=0.5)


@contextmanager
def fresh_cluster(stack: Path, keep: bool = False) -> Iterator[None]:
    """The stack's cluster brought up anew (no verify) for the rounds, and down after them
    unless ``keep``; a failed ``up`` ends the benchmark with its output."""
    cli("local", "down", "--stack", str(stack))
    up = cli("local", "up", "--stack", str(stack), "--no-verify")
    if up.returncode != 0:
        print(up.stdout[-3000:])
        raise SystemExit(1)
    try:
        yield
    finally:
        if not keep:
            cli("local", "down", "--stack", str(stack))
