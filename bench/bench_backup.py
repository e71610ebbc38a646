"""'metalslurm backup' and 'metalslurm restore' against the size of the accounting history,
measured in one run on a running local cluster (issue: day 2 part 2, backup and restore).

1. a backup of the cluster as it is (the baseline);
2. ``--jobs`` jobs of history added: job arrays of ``--array`` tasks (``true`` as alice on
   the static nodes), waited for until sacct has every one;
3. a backup again, then a restore of it onto the same controller (an empty queue).

Prints, for both backups: the size, the time in all and how long slurmctld was stopped; the
restore's time; and the ratios after/before, which is what compares between days (these
machines vary up to 2x). Leaves the cluster with the added history.

    python -m bench.bench_backup --stack .metalslurm/e2e-stacks/Pulumi.e2e-debian13b.yaml \\
        [--jobs 10000] [--array 1000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

from infra.ops.backup import run_backup, run_restore
from tests.e2e.cluster import LocalStack, wait_for

from .bench_up import REPO


def _cluster(stack: Path) -> LocalStack:
    name = yaml.safe_load(stack.read_text())["config"]["metalslurm:clusterName"]
    state = REPO / ".metalslurm" / stack.name.removeprefix("Pulumi.").removesuffix(".yaml")
    return LocalStack(stack.resolve(), name, state.name,
                      subprocess.CompletedProcess([], 0, "", ""), submit_host="login-001")


def _backup(cluster: LocalStack, dest: Path) -> dict[str, float]:
    lines: list[str] = []
    start = time.monotonic()
    run_backup(cluster.inventory, dest, lines.append)
    seconds = time.monotonic() - start
    manifest = json.loads((dest / "metalslurm-backup.json").read_text())
    size = sum(f["bytes"] for f in manifest["files"].values())
    print(lines[-1])
    return {"seconds": seconds, "stopped": manifest["slurmctld_stopped_seconds"],
            "kib": size / 1024}


def _jobs_in_history(cluster: LocalStack) -> int:
    """The jobs that have ended, as sacct has them."""
    out = cluster.ctl(
        "sacct --allocations --noheader --parsable2 --starttime=2000-01-01 --format=State "
        "| grep -c -v -E '^(PENDING|RUNNING|REQUEUED)' || true")
    return int(out.stdout.strip() or 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--array", type=int, default=1000)
    args = parser.parse_args()
    cluster = _cluster(args.stack)
    work = Path(tempfile.mkdtemp(prefix="bench-backup-"))
    try:
        had = _jobs_in_history(cluster)
        before = _backup(cluster, work / "before")
        added_start = time.monotonic()
        left = args.jobs
        while left > 0:
            size = min(args.array, left)
            job = cluster.submit("alice", f"--array=0-{size - 1} --nodelist=gpu-[001-002] "
                                 "--time=1 --wrap=true")
            wait_for(f"array {job} to end", lambda j=job: cluster.job_field(j, "%i") == "",
                     timeout=3600)
            left -= size
        wait_for("every job in sacct", lambda: _jobs_in_history(cluster) >= had + args.jobs,
                 timeout=600)
        added = time.monotonic() - added_start
        history = _jobs_in_history(cluster)
        after = _backup(cluster, work / "after")
        lines: list[str] = []
        start = time.monotonic()
        run_restore(cluster.inventory, work / "after", lines.append)
        restore = time.monotonic() - start
        print(lines[-1])
        print(f"history: {had} -> {history} jobs ({args.jobs} added in {added:.0f} s)")
        for key, unit in (("kib", "KiB"), ("seconds", "s"), ("stopped", "s")):
            print(f"backup {key}: {before[key]:.1f} {unit} -> {after[key]:.1f} {unit} "
                  f"(x{after[key] / max(before[key], 0.001):.2f})")
        print(f"restore of the {history}-job backup: {restore:.1f} s "
              f"(x{restore / max(after['seconds'], 0.001):.2f} its backup)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
