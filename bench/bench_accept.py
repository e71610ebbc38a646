"""The acceptance gate's orchestration overhead on a running local cluster, against the 30 s a
node target.

Runs ``metalslurm accept --nodes NODES`` ``--rounds`` times with the STAND-IN tools
(tests/fixtures/accept/standin, put on the cluster's shared storage as the e2e test does), a
degraded HCA port on the last node when ``--degrade`` is given (the run then needs two rounds
of pairs), and measures in the same run:

- the gate's wall time (the command, from start to its report);
- the tests' own time: how long at least one of its jobs ran, the union of the start-to-end
  intervals Slurm accounted for the jobs named metalslurm-accept-* (to the second);
- overhead = wall - the tests' own time, per node tested, and its ratio to 30 s.

With ``--baseline DIR`` (a checkout of an earlier commit: ``git worktree add DIR 783cb0f``),
each round runs that tree's gate and this one's, in alternating order, on the same cluster,
and the last line is the ratio of their median wall times (this tree / the baseline): what
a change to the gate costs, measured in one run.

    .venv/bin/python -m bench.bench_accept [--stack FILE] [--nodes gpu-001,gpu-002]
        [--rounds 3] [--degrade] [--baseline DIR]

The stack is the e2e one by default (its cluster must be up: metalslurm local up --stack ...).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

from infra.providers.local import container_name
from infra.stack.config import load_stack_file
from tests import accept_standins

REPO = Path(__file__).resolve().parents[1]
TARGET_SECONDS_PER_NODE = 30.0
SETTINGS = {"path": ["/shared/bench-accept/bin"], "hcas": ["mlx5_0", "mlx5_1"],
            "gpudirect": False,
            "timeouts": {"dcgm": 60, "nccl": 60, "ib_write_bw": 20}}


def on_controller(container: str, command: str) -> str:
    return subprocess.run(["podman", "exec", container, "sh", "-c", command], check=True,
                          capture_output=True, text=True).stdout


def jobs_running_time(container: str, since: str) -> float:
    """Seconds during which at least one of the gate's jobs ran (the union of their
    start-to-end intervals, as Slurm accounted them, to the second)."""
    out = on_controller(container, "SLURM_TIME_FORMAT=%s sacct --allusers --allocations "
                        f"--noheader --parsable2 --starttime={since} "
                        "--name=metalslurm-accept-node,metalslurm-accept-pair "
                        "--format=Start,End")
    spans = sorted((int(a), int(b)) for a, b in (line.split("|") for line in out.splitlines())
                   if a.isdigit() and b.isdigit())
    total, end = 0, 0
    for start, stop in spans:
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return float(total)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_accept")
    parser.add_argument("--stack", type=Path,
                        default=REPO / ".metalslurm/e2e-stacks/Pulumi.e2e-debian13.yaml")
    parser.add_argument("--nodes", default="gpu-001,gpu-002")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--degrade", action="store_true")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="an earlier checkout whose gate to time against this one's")
    args = parser.parse_args(argv)
    if args.baseline is not None and not (args.baseline / "infra" / "cli.py").is_file():
        parser.error(f"--baseline: {args.baseline} is not a metalslurm checkout (no infra/cli.py): "
                     "make one with 'git worktree add DIR COMMIT'")
    cfg = load_stack_file(args.stack)
    state = REPO / ".metalslurm" / args.stack.name.removeprefix("Pulumi.").removesuffix(".yaml")
    inventory = state / "inventory.yml"
    if not inventory.exists():
        sys.exit(f"no inventory at {inventory}: bring the cluster up first "
                 f"(metalslurm local up --stack {args.stack})")
    ctl = container_name(cfg.cluster_name, cfg.controller_name)
    shared = state / "shared" / "shared"
    tools, knobs = shared / "bench-accept" / "bin", shared / "metalslurm-accept-standin"
    accept_standins.install(tools, knobs)
    nodes = args.nodes.split(",")
    if args.degrade:
        (knobs / nodes[-1]).write_text(json.dumps({"ib": {"mlx5_1": 0.5}}))
    doc = yaml.safe_load(inventory.read_text())
    doc["all"]["vars"]["metalslurm_accept"] = SETTINGS
    bench_inventory = state / "inventory-bench-accept.yml"
    bench_inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    trees = {"this": REPO} if args.baseline is None else {"this": REPO, "base": args.baseline}
    print(f"{'run':>3} {'tree':>4} {'wall s':>7} {'tests s':>8} {'overhead s':>10} "
          f"{'per node s':>10} {'/ 30 s':>7}")
    per_node: list[float] = []
    walls: dict[str, list[float]] = {name: [] for name in trees}
    try:
        for run in range(1, args.rounds + 1):
            order = list(trees) if run % 2 else list(reversed(trees))
            for name in order:
                wall, tests = gate_run(trees[name], ctl, bench_inventory, args.nodes, state)
                walls[name].append(wall)
                overhead = wall - tests
                if name == "this":
                    per_node.append(overhead / len(nodes))
                print(f"{run:>3} {name:>4} {wall:>7.1f} {tests:>8.0f} {overhead:>10.1f} "
                      f"{overhead / len(nodes):>10.1f} "
                      f"{overhead / len(nodes) / TARGET_SECONDS_PER_NODE:>7.3f}")
    finally:
        shutil.rmtree(shared / "bench-accept", ignore_errors=True)
        shutil.rmtree(knobs, ignore_errors=True)
        bench_inventory.unlink(missing_ok=True)
    median = statistics.median(per_node)
    print(f"median overhead {median:.1f} s a node: {median / TARGET_SECONDS_PER_NODE:.3f} of "
          f"the {TARGET_SECONDS_PER_NODE:.0f} s target")
    if "base" in walls:
        this, base = statistics.median(walls["this"]), statistics.median(walls["base"])
        print(f"median wall {this:.1f} s against the baseline's {base:.1f} s: "
              f"ratio {this / base:.3f}")
    return 0


def gate_run(tree: Path, ctl: str, inventory: Path, nodes: str,
             state: Path) -> tuple[float, float]:
    """One 'metalslurm accept' run of ``tree``'s code: its wall time and its tests' own."""
    since = on_controller(ctl, "date +%Y-%m-%dT%H:%M:%S").strip()
    time.sleep(1)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "infra.cli", "accept", "-i", str(inventory),
                           "--nodes", nodes, "--html", str(state / "bench-accept.html")],
                          cwd=tree, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"metalslurm accept ({tree}) failed ({proc.returncode}): {proc.stderr}")
    tests = jobs_running_time(ctl, since)
    on_controller(ctl, f"scontrol update nodename={nodes} state=resume 2>/dev/null || true")
    return wall, tests


if __name__ == "__main__":
    raise SystemExit(main())
