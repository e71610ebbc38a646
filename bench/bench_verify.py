"""What sharing one SSH connection per host saves the verify suite, measured alternately.

Runs the testinfra suite against a running cluster's inventory ``--reruns`` times each way,
alternated: as ``metalslurm verify`` runs it (infra/ops/verify.py: an Ansible configuration
that gives testinfra a control path, so each host's commands share one connection), and as
plain pytest with the project's ansible.cfg (testinfra then opens a connection per command).
Prints each run's wall seconds and the machine's busy CPU-seconds (both ends of every SSH
connection run here), and the medians' ratios, shared over plain.

    .venv/bin/python -m bench.bench_verify [--reruns 3]
        [--inventory .metalslurm/local/inventory.yml]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.bench_configure_scale import host_busy_seconds
from bench.figures import print_medians
from infra.ops.configure import ANSIBLE_DIR, venv_on_path
from infra.ops.verify import VERIFY_DIR, run_verify

REPO = Path(__file__).resolve().parents[1]


def plain(inventory: Path) -> int:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg")}
    return subprocess.run([sys.executable, "-m", "pytest", str(VERIFY_DIR), "-q",
                           "-p", "no:cacheprovider", "--hosts=ansible://all",
                           f"--ansible-inventory={inventory}"], cwd=REPO, env=env,
                          capture_output=True, check=False).returncode


def shared(inventory: Path) -> int:
    return run_verify(inventory, out=lambda _line: None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inventory", type=Path,
                        default=REPO / ".metalslurm/local/inventory.yml")
    parser.add_argument("--reruns", type=int, default=3)
    args = parser.parse_args(argv)
    venv_on_path()
    figures: dict[str, list[tuple[float, float]]] = {"plain": [], "shared": []}
    for n in range(1, args.reruns + 1):
        for way, run in (("plain", plain), ("shared", shared)):
            start, cpu = time.monotonic(), host_busy_seconds()
            rc = run(args.inventory.resolve())
            wall, busy = time.monotonic() - start, host_busy_seconds() - cpu
            if rc != 0:
                print(f"run {n} ({way}) failed with exit code {rc}")
                return 1
            figures[way].append((wall, busy))
            print(f"run {n}, {way}: {wall:.1f} s, {busy:.1f} CPU-s")
    print_medians(figures, "shared", "plain")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
