"""'local up' of the default stack from nothing (node image cached), then converged re-runs
of configure, each measured in the same run, so machine noise hits them alike.

The stack is the default one, Pulumi.local.yaml (1 controller, 2 static and 2 elastic
8 x H100 nodes, accounting), under its own name and network so it never meets a
developer's 'make up' cluster. The cold 'up' is provision,
configure (elastic nodes powered up for their first configure, then powered down) and
verify. The re-runs start, like a second 'make up', with the elastic nodes powered down.

Targets on a 2-core machine: cold 'up' under 300 s; a converged configure in 25 s or less
and at most 0.30 of the cold configure, with 0 changed tasks.

    python -m bench.bench_up [--os debian12] [--reruns 3] [--strategy mitogen_linear]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from ipaddress import IPv4Network
from pathlib import Path

from infra.cli import local_up
from infra.config import load_stack_file
from infra.configure import run_playbook
from infra.providers.local import LocalCluster, LocalPlan
from infra.state import StateDir

REPO = Path(__file__).resolve().parents[1]
BENCH_NAME = "ms-bench"
BENCH_NETWORK = IPv4Network("10.78.20.0/24")
COLD_UP_TARGET_S = 300.0
RERUN_TARGET_S = 25.0
RERUN_TARGET_FRACTION = 0.30


def wait_until_elastic_nodes_are_down(cluster: LocalCluster, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while any(cluster.running(n) for n in cluster.plan.elastic_nodes):
        if time.monotonic() > deadline:
            raise SystemExit("elastic nodes did not power down")
        time.sleep(2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", type=Path, default=REPO / "Pulumi.local.yaml")
    parser.add_argument("--os", choices=["debian12", "debian13"])
    parser.add_argument("--reruns", type=int, default=3)
    parser.add_argument("--strategy", help="Ansible strategy, e.g. mitogen_linear "
                        "(needs 'pip install mitogen'); default: linear")
    args = parser.parse_args()
    cfg = replace(load_stack_file(args.stack), cluster_name=BENCH_NAME,
                  private_cidr=BENCH_NETWORK)
    if args.os:
        cfg = replace(cfg, os=args.os)
    quiet = lambda _line: None  # noqa: E731
    cluster = LocalCluster(plan=LocalPlan.from_config(cfg),
                           state=StateDir(REPO / ".metalslurm" / "bench"), log=quiet)
    cluster.destroy()
    try:
        rc, timings = local_up(cfg, cluster)
        if rc != 0:
            print(f"local up failed ({rc})")
            return 1
        wait_until_elastic_nodes_are_down(cluster)
        reruns = []
        for _ in range(args.reruns):
            start = time.monotonic()
            result = run_playbook(cluster.state.inventory, strategy=args.strategy, out=quiet)
            reruns.append((time.monotonic() - start, result))
    finally:
        cluster.destroy()
    report(cfg.os, len(cluster.specs()), timings, reruns, args.strategy)
    return 0 if all(r.ok and r.changed == 0 for _s, r in reruns) else 1


def report(os_name: str, nodes: int, timings: dict[str, float], reruns: list, strategy) -> None:
    cold_up = timings["nodes"] + timings["configure"] + timings["verify"]
    median = statistics.median(s for s, _r in reruns)
    fraction = median / timings["configure"]
    print(f"nodes: {nodes} ({os_name}), strategy {strategy or 'linear'}")
    print(f"image      {timings['image']:7.1f} s  (cached beforehand; not part of the cold up)")
    for phase in ("nodes", "configure", "verify"):
        print(f"{phase:<10} {timings[phase]:7.1f} s")
    print(f"cold up    {cold_up:7.1f} s  target < {COLD_UP_TARGET_S:.0f} s: "
          f"{'met' if cold_up < COLD_UP_TARGET_S else 'NOT met'}")
    for i, (seconds, result) in enumerate(reruns, 1):
        print(f"re-run {i}   {seconds:7.1f} s  {result.changed} changed")
    print(f"re-run (median) {median:.1f} s  target <= {RERUN_TARGET_S:.0f} s: "
          f"{'met' if median <= RERUN_TARGET_S else 'NOT met'}")
    print(f"re-run / cold configure = {fraction:.2f}  target <= {RERUN_TARGET_FRACTION:.2f}: "
          f"{'met' if fraction <= RERUN_TARGET_FRACTION else 'NOT met'}")


if __name__ == "__main__":
    sys.exit(main())
