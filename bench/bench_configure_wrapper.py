"""What ``metalslurm configure``'s way of running the playbook (infra/ops/configure.py:
run_playbook, its events read from a pipe) costs over plain ``ansible-playbook`` from a
shell, on the same converged cluster, runs alternated so machine noise hits both alike.

Prints each run's wall time and CPU-seconds (ansible-playbook and its workers, plus this
process's own reading of the events for run_playbook), then the medians and their ratios
run_playbook / plain. Every run must change nothing, or the bench stops.

    .venv/bin/python -m bench.bench_configure_wrapper \\
        --inventory .metalslurm/e2e-debian13/inventory.yml [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

from bench.figures import print_medians
from infra.ops.configure import ANSIBLE_DIR, ansible_playbook, run_playbook


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def plain(inventory: Path) -> tuple[float, float]:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg")}
    start, cpu = time.monotonic(), _cpu(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([ansible_playbook(), "-i", str(inventory), "site.yml"], cwd=ANSIBLE_DIR,
                          env=env, capture_output=True, text=True, check=False)
    wall, used = time.monotonic() - start, _cpu(resource.RUSAGE_CHILDREN) - cpu
    changed = [int(n) for n in re.findall(r"changed=(\d+)", proc.stdout)]
    if proc.returncode != 0 or not changed or any(changed):
        sys.exit(f"plain ansible-playbook: rc {proc.returncode}, changed {changed}: "
                 "the cluster must be converged\n" + proc.stdout[-2000:])
    return wall, used


def wrapped(inventory: Path) -> tuple[float, float]:
    start = time.monotonic()
    cpu = _cpu(resource.RUSAGE_CHILDREN) + _cpu(resource.RUSAGE_SELF)
    result = run_playbook(inventory, out=None)
    wall = time.monotonic() - start
    used = _cpu(resource.RUSAGE_CHILDREN) + _cpu(resource.RUSAGE_SELF) - cpu
    if not result.ok or result.changed:
        sys.exit(f"run_playbook: ok {result.ok}, changed {result.changed_tasks}: the cluster "
                 "must be converged\n" + "\n".join(result.failures))
    return wall, used


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inventory", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    inventory = args.inventory.resolve()
    figures: dict[str, list[tuple[float, float]]] = {"plain": [], "run_playbook": []}
    for n in range(args.runs):
        for name, run in (("plain", plain), ("run_playbook", wrapped)):
            wall, cpu = run(inventory)
            figures[name].append((wall, cpu))
            print(f"run {n + 1} {name:>12}: {wall:6.1f} s wall, {cpu:6.1f} CPU-s", flush=True)
    print_medians(figures, "run_playbook", "plain")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
