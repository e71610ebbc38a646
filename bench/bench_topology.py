"""topology.conf generation and rendering at scale, against the 1 s target.

Measures, in one run, the wall time of (each printed with its ratio to the 1 s target):

(a) the DGX H100 SuperPOD recording (tests/fixtures/ib): parse + tree + render;
(b) a synthetic rail-optimized fat tree of 2,000 hosts, with 8 rails and with 1 rail:
    parse + tree + render (generating the dump is not timed);
(c) slurm.conf plus topology.conf for 10,000 nodes. No Python function renders the whole
    slurm.conf: the controller role's template (slurm.conf.j2) joins the lines of
    ``slurmconf.settings_lines``, the NodeName lines and ``slurmconf.partition_lines``, so
    this renders those same lines (``node_lines`` for NodeName) from Python, plus
    topology.conf from a config tree of 32-node leaves under 8 spines.

Each figure is the best of ``--repeat`` runs, each from a collected heap.
``--profile`` prints where the time of (c) goes (cProfile, cumulative) to stderr.

    .venv/bin/python -m bench.bench_topology [--repeat 3] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from ansible_collections.metalslurm.cluster.plugins.module_utils import (
    ibnetdiscover,
    slurmconf,
    topology,
    topology_conf,
    topology_fabric,
)

from tests.synthetic_fabric import synthetic_fat_tree

REPO = Path(__file__).resolve().parents[1]
SUPERPOD = REPO / "tests/fixtures/ib/dgx-h100-superpod.ibnetdiscover"
TARGET_SECONDS = 1.0


def best_of(repeat: int, run: Callable[[], object]) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - start)
    return best, result


def fabric_conf(text: str, nodes: list[str]) -> str:
    found = topology_fabric.tree_from_fabric(ibnetdiscover.parse_ibnetdiscover(text), nodes)
    return topology_conf.render_topology_conf(found.topology)


def superpod_nodes(text: str) -> list[str]:
    fabric = ibnetdiscover.parse_ibnetdiscover(text)
    hosts = {ibnetdiscover.host_of(ca.description) for ca in fabric.cas.values()}
    return sorted(h for h in hosts if h and "-dgx-" in h)


def slurm_and_topology_conf(count: int) -> str:
    names = [f"gpu-{i:05d}" for i in range(1, count + 1)]
    settings = {"ClusterName": "metalslurm", "SlurmctldHost": "ctl(10.40.0.10)",
                "SelectType": "select/cons_tres", "TopologyPlugin": "topology/tree",
                "GresTypes": "gpu", "SchedulerType": "sched/backfill"}
    node_records = [{"NodeName": n, "CPUs": 224, "Sockets": 2, "CoresPerSocket": 56,
                     "ThreadsPerCore": 2, "RealMemory": 2002018, "Gres": "gpu:h100:8",
                     "State": "UNKNOWN"} for n in names]
    partitions = [{"PartitionName": p, "Nodes": names, "State": "UP", "MaxTime": t}
                  for p, t in (("debug", "2:00:00"), ("train", "7-00:00:00"),
                               ("priority", "30-00:00:00"))]
    slurm_conf = "\n".join([*slurmconf.settings_lines(settings), "",
                            *slurmconf.node_lines(node_records), "",
                            *slurmconf.partition_lines(partitions)]) + "\n"
    leaves = [{"name": f"leaf{i // 32 + 1:03d}", "nodes": names[i:i + 32],
               "spine": f"spine{(i // 32) % 8 + 1}"} for i in range(0, count, 32)]
    tree = topology.topology_from_config(leaves, [f"spine{k}" for k in range(1, 9)], names)
    return slurm_conf + topology_conf.render_topology_conf(tree)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true",
                        help="print the top functions of (c) by cumulative time")
    args = parser.parse_args()
    superpod = SUPERPOD.read_text()
    dgx = superpod_nodes(superpod)
    cases: list[tuple[str, Callable[[], object]]] = [
        ("(a) SuperPOD recording: parse + tree + render", lambda: fabric_conf(superpod, dgx))]
    for rails in (8, 1):
        text = synthetic_fat_tree(2000, rails=rails)
        nodes = [f"node-{i:05d}" for i in range(1, 2001)]
        cases.append((f"(b) synthetic fat tree, 2,000 hosts, {rails} rail(s): parse + tree "
                      "+ render", partial(fabric_conf, text, nodes)))
    cases.append(("(c) slurm.conf lines + topology.conf, 10,000 nodes",
                  lambda: slurm_and_topology_conf(10_000)))
    print(f"topology.conf at scale, target {TARGET_SECONDS:.0f} s each, best of {args.repeat}")
    worst = 0.0
    for label, run in cases:
        seconds, _ = best_of(args.repeat, run)
        ratio = seconds / TARGET_SECONDS
        worst = max(worst, ratio)
        print(f"  {label}: {seconds:.3f} s / 1 s target = {ratio:.3f}", flush=True)
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        slurm_and_topology_conf(10_000)
        profile.disable()
        pstats.Stats(profile, stream=sys.stderr).sort_stats("cumulative").print_stats(25)
    print(f"worst ratio {worst:.3f} ({'meets' if worst < 1 else 'misses'} the 1 s target)")
    return 0 if worst < 1 else 1


if __name__ == "__main__":
    sys.exit(main())
