"""Run the scale lab: for each size, the project's files rendered for a synthetic fat tree of
8-GPU nodes (32 a scalable unit, 8 rails), placement on topology/tree and topology/block, and
a burst of short jobs before and after the size tuning; then the SuperPOD recording's 119
hosts. Prints each figure, writes them as JSON and draws the plots as PNGs.

    .venv/bin/python -m bench.scale [--nodes 128,512,1024] [--jobs 10000] [--users 4]
                                    [--out DIR] [--plots DIR] [--no-recording] [--keep]
                                    [--bursts-only]

A burst (whole-node jobs, one sbatch each, the users in parallel) is submitted held (its
partition DOWN) and released in one update, so that starts per second are timed apart from
the submissions.
``--bursts-only`` skips the placement cases (and the recording): each size is started once
for its bring-up and memory figures, then the two bursts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils import (
    ibnetdiscover,
    topology_conf,
    topology_fabric,
)

from bench.bench_topology import SUPERPOD, superpod_nodes
from bench.out_dir import default_out
from bench.scale import lab as scale_lab
from bench.scale import placement
from tests.synthetic_fabric import synthetic_fat_tree

REPO = Path(__file__).resolve().parents[2]
MAX_NODES = 4096


class UsageError(ValueError):
    pass


def node_counts(text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--nodes: {text!r} is not a comma-separated list of node counts "
                         "(e.g. 128,512,1024)") from None
    if not counts or any(not 32 <= n <= MAX_NODES for n in counts):
        raise UsageError(f"--nodes: each count must be between 32 and {MAX_NODES} "
                         f"(one scalable unit to what fits in memory), not {text!r}")
    return counts


def positive(name: str, value: int, most: int) -> int:
    if not 1 <= value <= most:
        raise UsageError(f"--{name}: must be between 1 and {most}, not {value}")
    return value


def synthetic_topologies(count: int) -> tuple[list[str], dict[str, str]]:
    """Node names and topology.conf (tree and block) of a rail-optimized fat tree, from its
    ibnetdiscover dump by the code the slurm_topology role runs."""
    nodes = [f"gpu-{i:04d}" for i in range(1, count + 1)]
    dump = synthetic_fat_tree(count, hosts_per_leaf=32, rails=8, name="gpu-{:04d}")
    found = topology_fabric.tree_from_fabric(ibnetdiscover.parse_ibnetdiscover(dump), nodes)
    return nodes, {plugin: topology_conf.render_topology_conf(found.topology, plugin)
                   for plugin in ("tree", "block")}


def recording_topologies() -> tuple[list[str], dict[str, str]]:
    """The SuperPOD recording's DGX hosts and their topology.conf, tree and block."""
    text = SUPERPOD.read_text()
    nodes = superpod_nodes(text)
    found = topology_fabric.tree_from_fabric(ibnetdiscover.parse_ibnetdiscover(text), nodes)
    return nodes, {plugin: topology_conf.render_topology_conf(found.topology, plugin)
                   for plugin in ("tree", "block")}


def place(lab: scale_lab.Lab, work: Path, label: str, nodes: list[str], topo: str,
          plugin: str) -> dict[str, Any]:
    rendered = scale_lab.render(work, nodes, topo, plugin, tuning=True)
    up = lab.start(rendered)
    groups = placement.leaf_groups(topo)
    cases = placement.cases_for(groups, len(nodes), plugin)
    results = placement.run_cases(lab, topo, plugin, cases)
    for r in results:
        print(f"  [{label}, {plugin}] {r.line()}", flush=True)
    return {"render_s": round(rendered.seconds, 1), "up_s": round(up, 1),
            "cases": [{"case": r.case.label, "nodes": len(r.nodes), "spanned": list(r.spanned),
                       "most": r.most, "ok": r.ok, "why": r.why} for r in results],
            "ok": all(r.ok for r in results)}


def run_size(lab: scale_lab.Lab, work: Path, count: int, jobs: int, users: int,
             placement_cases: bool = True) -> dict[str, Any]:
    nodes, topos = synthetic_topologies(count)
    row: dict[str, Any] = {"nodes": count}
    if placement_cases:
        row["tree"] = place(lab, work, f"{count} nodes", nodes, topos["tree"], "tree")
    else:
        rendered = scale_lab.render(work, nodes, topos["tree"], "tree", tuning=True)
        row["tree"] = {"render_s": round(rendered.seconds, 1),
                       "up_s": round(lab.start(rendered), 1)}
    row["slurmd_pss_mib"] = round(lab.slurmd_memory_kib() / 1024, 1)
    row["slurmctld_idle"] = lab.slurmctld_usage()
    if placement_cases:
        row["block"] = place(lab, work, f"{count} nodes", nodes, topos["block"], "block")
    for tuning in (False, True):
        rendered = scale_lab.render(work, nodes, topos["tree"], "tree", tuning=tuning)
        lab.start(rendered)
        b = scale_lab.burst(lab, jobs, scale_lab.USERS[:users], scale_lab.WHOLE_NODE_JOB, held=True,
                            timeout=max(3600, jobs))
        key = "tuned" if tuning else "untuned"
        row[key] = scale_lab.burst_summary(b)
        row[key]["settings"] = {k: v for k, v in scale_lab.settings_of(rendered.slurm_conf).items()
                                if k in ("TreeWidth", "MessageTimeout", "SchedulerParameters",
                                         "SlurmctldParameters", "MaxJobCount")}
        print("  " + scale_lab.summary_line(f"{count} nodes, {key}", row[key]), flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__)
    parser.add_argument("--nodes", default="128,512,1024")
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--out", type=Path, default=default_out("scale"))
    parser.add_argument("--plots", type=Path, default=REPO / "docs/lab/img")
    parser.add_argument("--no-recording", action="store_true")
    parser.add_argument("--keep", action="store_true", help="leave the last lab running")
    parser.add_argument("--bursts-only", action="store_true",
                        help="no placement cases, no recording: bring-up, memory and bursts")
    args = parser.parse_args(argv)
    try:
        counts = node_counts(args.nodes)
        positive("jobs", args.jobs, 100000)
        positive("users", args.users, len(scale_lab.USERS))
        args.out.mkdir(parents=True, exist_ok=True)
        args.plots.mkdir(parents=True, exist_ok=True)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: --out/--plots: {exc.strerror}: {exc.filename}; name a writable "
              "directory", file=sys.stderr)
        return 2
    lab = scale_lab.Lab(args.out)
    results: dict[str, Any] = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                               "sizes": []}
    try:
        if not (args.no_recording or args.bursts_only):
            nodes, topos = recording_topologies()
            results["recording"] = {plugin: place(lab, args.out, "SuperPOD recording", nodes,
                                                  topos[plugin], plugin)
                                    for plugin in ("tree", "block")}
        for count in counts:
            print(f"{count} nodes", flush=True)
            results["sizes"].append(run_size(lab, args.out, count, args.jobs, args.users,
                                             placement_cases=not args.bursts_only))
            (args.out / "results.json").write_text(json.dumps(results, indent=1))
    except scale_lab.LabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            lab.stop()
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    from bench.scale.plots import draw
    for path in draw(results, args.plots):
        print(f"plot: {path}")
    if args.bursts_only:
        print(f"bursts only, no placement checked; results in {args.out / 'results.json'}")
        return 0
    ok = all(s["tree"]["ok"] and s["block"]["ok"] for s in results["sizes"]) and all(
        r["ok"] for r in results.get("recording", {}).values())
    print(f"placement {'as intended' if ok else 'NOT as intended'}; results in "
          f"{args.out / 'results.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
