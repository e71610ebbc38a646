"""The Slurm exporter's refresh at scale, against the 1 s target.

A 1,000-node, 10,000-job cluster, its Slurm outputs generated in memory in the shape of the
recorded ones (tests/fixtures/slurm/exporter/local-24.11: one ``scontrol --details --oneliner
show nodes`` line per node, one ``squeue --Format`` line per job, the recorded sdiag and sshare
JSON, and 2,000 ended allocations for sacct). A stand-in runner hands them to the exporter, so
what is timed is the exporter's own work: parse + build the metrics (``Exporter.refresh``) +
the exposition a scrape gets (``generate_latest``). Median of ``--repeat`` runs, each from a
collected heap. Also printed: the Slurm commands one refresh runs, and what reading the JSON
forms of nodes and jobs would cost in Python alone (``json.loads`` of the recorded records,
repeated to the same scale), beside the text parse the exporter does instead.

The cost of the commands themselves (squeue's JSON writer, 4 s for 10,000 jobs) was measured
on a Slurm 24.11.5 slurmctld and is in the exporter's docstring.

    .venv/bin/python -m bench.bench_exporter [--repeat 5] [--nodes 1000] [--jobs 10000]
"""

from __future__ import annotations

import argparse
import gc
import importlib.machinery
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path

from prometheus_client import generate_latest

REPO = Path(__file__).resolve().parents[1]
PROGRAM = REPO / "roles/slurm_exporter/files/metalslurm-slurm-exporter"
RECORDED = REPO / "tests/fixtures/slurm/exporter/local-24.11"
TARGET_SECONDS = 1.0
NOW = datetime(2026, 11, 26, 12, 0, 0)


def load_exporter():
    loader = importlib.machinery.SourceFileLoader("metalslurm_slurm_exporter", str(PROGRAM))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = module
    loader.exec_module(module)
    return module


def median_of(repeat: int, run: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def node_lines(count: int) -> str:
    """The recorded allocated node's line, renamed and given a state and GPUs in use."""
    template = next(line for line in (RECORDED / "scontrol-show-nodes.txt").read_text()
                    .splitlines() if line.startswith("NodeName=gpu-001 "))
    states = [("ALLOCATED", 8), ("MIXED", 4), ("IDLE", 0), ("IDLE+CLOUD+POWERED_DOWN", 0),
              ("MIXED+DRAIN", 2), ("IDLE+DRAIN", 0), ("DOWN+NOT_RESPONDING", 0)]
    lines = []
    for i in range(1, count + 1):
        state, used = states[i % len(states)]
        index = f"0-{used - 1}" if used else "N/A"
        line = (template.replace("gpu-001", f"gpu-{i:04d}")
                .replace("State=ALLOCATED", f"State={state}")
                .replace("GresUsed=gpu:h100:8(IDX:0-7)", f"GresUsed=gpu:h100:{used}(IDX:{index})"))
        if "DRAIN" in state:
            line += f" Reason=metalslurm-health: gpu_count=7 < 8 [root@{NOW:%Y-%m-%dT%H:%M:%S}]"
        lines.append(line)
    return "\n".join(lines) + "\n"


def job_lines(count: int) -> str:
    """squeue --Format lines as recorded: a third running with 1-8 H100, the rest pending."""
    sep = "\x1f"
    reasons = ["Resources", "Priority", "QOSGrpGRESMinutes", "BeginTime", "JobHeldUser",
               "ReqNodeNotAvail, UnavailableNodes:gpu-[0001-0042]"]
    lines = []
    for i in range(1, count + 1):
        gpus = i % 8 + 1
        running = i % 3 == 0
        submit = NOW - timedelta(seconds=37 * i)
        tres = (f"cpu={gpus * 28},mem={gpus * 250}G,node=1,billing={gpus * 28},"
                f"gres/gpu={gpus},gres/gpu:h100={gpus}")
        lines.append(sep.join([
            f"{1000 + i}", "RUNNING" if running else "PENDING",
            ["train", "debug", "priority"][i % 3], f"team-{i % 20:02d}",
            "None" if running else reasons[i % len(reasons)],
            f"{submit:%Y-%m-%dT%H:%M:%S}", tres]))
    return "\n".join(lines) + "\n"


def sacct_lines(count: int) -> str:
    return "".join(
        f"{50_000 + i}|team-{i % 20:02d}|{60 * (i % 90 + 1)}|billing=8,cpu=8,"
        f"gres/gpu:h100={i % 8 + 1},gres/gpu={i % 8 + 1},mem=64G,node=1|"
        f"{NOW - timedelta(seconds=i % 300):%Y-%m-%dT%H:%M:%S}|COMPLETED\n"
        for i in range(count))


def repeated_json(path: Path, key: str, count: int) -> str:
    """The recorded JSON with its ``key`` list repeated up to ``count`` records."""
    doc = json.loads(path.read_text())
    records = doc[key]
    doc[key] = [records[i % len(records)] for i in range(count)]
    return json.dumps(doc)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=10_000)
    args = parser.parse_args(argv)
    exporter_mod = load_exporter()
    outputs = {
        "scontrol": node_lines(args.nodes),
        "squeue": job_lines(args.jobs),
        "sdiag": (RECORDED / "sdiag.json").read_text(),
        "config": (RECORDED / "scontrol-show-config.txt").read_text(),
        "sshare": (RECORDED / "sshare.json").read_text(),
        "sacct": sacct_lines(2000),
    }
    calls: list[str] = []

    def runner(argv: Sequence[str], timeout: float):
        name = "config" if list(argv[-2:]) == ["show", "config"] else Path(argv[0]).name
        calls.append(name)
        return exporter_mod.Completed(0, outputs[name], "")

    clock_now = [(NOW - timedelta(minutes=10)).timestamp()]
    exporter = exporter_mod.Exporter(runner=runner, clock=lambda: clock_now[0])
    clock_now[0] = NOW.timestamp()
    registry = exporter_mod.registry_for(exporter)
    exposition = b""

    def refresh_and_scrape() -> None:
        nonlocal exposition
        exporter.refresh()
        exposition = generate_latest(registry)

    refresh_and_scrape()
    assert all(exporter.snapshot.up.values()), exporter.snapshot.up
    per_refresh = len(calls)
    seconds = median_of(args.repeat, refresh_and_scrape)
    scrape = median_of(args.repeat, lambda: generate_latest(registry))
    series = sum(1 for line in exposition.decode().splitlines() if not line.startswith("#"))
    ratio = seconds / TARGET_SECONDS
    print(f"Slurm exporter, {args.nodes:,} nodes and {args.jobs:,} jobs, median of "
          f"{args.repeat}")
    print(f"  Slurm commands per refresh: {per_refresh} ({', '.join(calls[:per_refresh])})")
    print(f"  parse + collect + exposition: {seconds:.3f} s / 1 s target = {ratio:.3f} "
          f"({series:,} series, {len(exposition) / 1e6:.2f} MB)")
    print(f"  of which a scrape (exposition of the snapshot): {scrape * 1000:.1f} ms")

    nodes_text = outputs["scontrol"]
    jobs_text = outputs["squeue"]
    nodes_json = repeated_json(RECORDED / "scontrol-show-nodes.json", "nodes", args.nodes)
    jobs_json = repeated_json(RECORDED / "squeue.json", "jobs", args.jobs)
    readers: list[tuple[str, str, Callable[[str], object]]] = [
        ("nodes text parse", nodes_text, exporter_mod.parse_nodes_text),
        ("nodes JSON json.loads alone", nodes_json, json.loads),
        ("jobs text parse", jobs_text, exporter_mod.parse_jobs_text),
        ("jobs JSON json.loads alone", jobs_json, json.loads)]
    for label, text, parse in readers:
        took = median_of(args.repeat, partial(parse, text))
        print(f"  {label}: {took * 1000:.1f} ms ({len(text) / 1e6:.2f} MB)")
    print(f"ratio {ratio:.3f} ({'meets' if ratio < 1 else 'misses'} the 1 s target)")
    return 0 if ratio < 1 else 1


if __name__ == "__main__":
    sys.exit(main())
