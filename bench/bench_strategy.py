"""The project's Ansible strategy (ansible/strategy_plugins/mitogen_linear.py) of this
checkout against the same file at another commit, on the same hosts, runs alternated so
machine noise hits both alike.

Without ``--inventory`` the hosts are four local ones (connection local, nothing changes on
this machine: every task is ``command: true``, unchanged) and the playbook is 40 tasks whose
``when:`` is false on three of the four hosts, then 20 that run on all: the case a
converged configure is made of (its skipped host steps, its reads). With ``--inventory`` it
is ``ansible/site.yml`` against that inventory (a converged local cluster: every run must
change nothing, or the bench stops). Prints each run's wall time, the CPU-seconds of
ansible-playbook and its workers, the host steps (ok and skipped, from the recap), and the
medians' ratios after / before.

    .venv/bin/python -m bench.bench_strategy [--before HEAD~1] [--runs 3]
        [--inventory .metalslurm/e2e-debian13/inventory.yml]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
ANSIBLE = REPO / "ansible"
PLUGIN = "ansible/strategy_plugins/mitogen_linear.py"
LOCAL_HOSTS = ("h0", "h1", "h2", "h3")


def micro_playbook(work: Path) -> tuple[Path, Path]:
    tasks = [{"name": f"Skipped on three hosts {i}", "ansible.builtin.command": "true",
              "changed_when": False, "when": "inventory_hostname == 'h0'"} for i in range(40)]
    tasks += [{"name": f"Run on all {i}", "ansible.builtin.command": "true",
               "changed_when": False} for i in range(20)]
    playbook = work / "play.yml"
    playbook.write_text(yaml.safe_dump([{"name": "Bench", "hosts": "all",
                                         "gather_facts": False, "tasks": tasks}],
                                       sort_keys=False))
    inventory = work / "inventory.ini"
    inventory.write_text("".join(f"{h} ansible_connection=local "
                                 f"ansible_python_interpreter={sys.executable}\n"
                                 for h in LOCAL_HOSTS))
    return playbook, inventory


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(strategy: str, plugins: Path, inventory: Path, playbook: Path) -> dict[str, float]:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ANSIBLE / "ansible.cfg"),
               ANSIBLE_STRATEGY=strategy, ANSIBLE_NOCOLOR="1",
               ANSIBLE_STRATEGY_PLUGINS=f"{plugins}:{ANSIBLE / 'strategy_plugins'}",
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    started, cpu = time.monotonic(), children_cpu()
    proc = subprocess.run(["ansible-playbook", "-i", str(inventory), str(playbook)],
                          capture_output=True, text=True, env=env, check=False, cwd=ANSIBLE)
    wall, cpu = time.monotonic() - started, children_cpu() - cpu
    recap = [dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", line))
             for line in proc.stdout.splitlines() if re.match(r"^\S+\s+: ok=", line)]
    if proc.returncode != 0 or not recap or any(r["changed"] or r["failed"] for r in recap):
        raise SystemExit(f"{strategy}: the run failed or changed something (exit "
                         f"{proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    return {"wall": wall, "cpu": cpu, "ok": sum(r["ok"] for r in recap),
            "skipped": sum(r["skipped"] for r in recap)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="HEAD~1", help="the commit to compare with")
    parser.add_argument("--runs", type=int, default=3, help="runs of each (alternated)")
    parser.add_argument("--inventory", type=Path, help="a converged cluster's inventory "
                        "(default: four local hosts and a playbook of skipped tasks)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs: give 1 or more")
    if args.inventory is not None and not args.inventory.is_file():
        parser.error(f"--inventory: {args.inventory} is not a file; give a local cluster's "
                     "inventory (.metalslurm/<stack>/inventory.yml)")
    shown = subprocess.run(["git", "show", f"{args.before}:{PLUGIN}"], cwd=REPO,
                           capture_output=True, text=True, check=False)
    if shown.returncode != 0:
        parser.error(f"--before: {args.before} has no {PLUGIN}; give a commit that has it")
    with tempfile.TemporaryDirectory(prefix="bench-strategy-") as tmp:
        work = Path(tmp)
        (work / "mitogen_linear_before.py").write_text(shown.stdout)
        if args.inventory is None:
            playbook, inventory = micro_playbook(work)
        else:
            playbook, inventory = ANSIBLE / "site.yml", args.inventory.resolve()
        runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
        for i in range(args.runs):
            for label, strategy in (("before", "mitogen_linear_before"),
                                    ("after", "mitogen_linear")):
                result = run(strategy, work, inventory, playbook)
                runs[label].append(result)
                print(f"run {i + 1} {label:6s} {result['wall']:6.1f} s wall "
                      f"{result['cpu']:6.1f} CPU-s  host steps ok {result['ok']:.0f} "
                      f"skipped {result['skipped']:.0f}", flush=True)
    medians = {label: {key: statistics.median(r[key] for r in rows) for key in ("wall", "cpu")}
               for label, rows in runs.items()}
    for key, unit in (("wall", "s wall"), ("cpu", "CPU-s")):
        before, after = medians["before"][key], medians["after"][key]
        print(f"median {unit}: before ({args.before}) {before:.1f}, after {after:.1f}, "
              f"after / before {after / before:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
