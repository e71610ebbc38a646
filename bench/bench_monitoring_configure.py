"""What the monitoring roles (or the roles ``--roles`` names) cost a converged configure,
against another revision, on a running local cluster.

Runs the playbook (ansible-playbook with ansible.posix.profile_roles, as 'metalslurm
configure' runs it) on the cluster's inventory, ``--runs`` times with ``--against`` (a git
revision, checked out in a temporary worktree), then ``--runs`` times with this checkout,
each side after one warm-up run (which puts back the files the two revisions render
differently: the sides cannot alternate without rewriting them).
Prints each run's seconds per monitoring role (monitoring, monitoring_node, slurm_exporter;
before monitoring_node there were node_exporter and gpu_job_map), their sum, the whole
run, and the medians; then the ratio of the medians (this / against). Every measured run
must change nothing. With ``--cold STACK`` it recreates the stack's nodes instead and times
one cold configure: the monitoring roles' seconds and their share of the run.

    .venv/bin/python -m bench.bench_monitoring_configure \\
        --inventory .metalslurm/e2e-debian13/inventory.yml --against 7e2d467 --runs 5
    .venv/bin/python -m bench.bench_monitoring_configure \\
        --inventory .metalslurm/e2e-debian13/inventory.yml \\
        --cold .metalslurm/e2e-stacks/Pulumi.e2e-debian13.yaml
    .venv/bin/python -m bench.bench_monitoring_configure \\
        --inventory .metalslurm/cold-2node/inventory.yml --cold bench/stacks/Pulumi.cold-2node.yaml
    .venv/bin/python -m bench.bench_monitoring_configure --roles slurm_rest,slurm_common \\
        --inventory .metalslurm/e2e-debian13/inventory.yml --against f402f75 --runs 5

(the last: the smallest monitored cluster, two nodes, so one node's installs do not wait for
four others' on a two-core machine; ``metalslurm local down --stack`` it afterwards.)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROLES = ("monitoring", "monitoring_node", "slurm_exporter", "node_exporter", "gpu_job_map")
RECAP_LINE = re.compile(r"^(\w+) -+ ([0-9.]+)s$", re.M)
CHANGED = re.compile(r"changed=(\d+)")


def run_once(checkout: Path, inventory: Path,
             roles_timed: tuple[str, ...] = ROLES) -> tuple[dict[str, float], float, int]:
    env = dict(os.environ, ANSIBLE_CONFIG=str(checkout / "ansible/ansible.cfg"),
               ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_roles",
               ANSIBLE_PYTHON_INTERPRETER="auto_silent", ANSIBLE_NOCOLOR="1",
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    start = time.monotonic()
    # Its own process group: a bench stopped midway (SIGTERM, Ctrl-C) takes the playbook and
    # its workers with it instead of leaving them configuring the cluster from a worktree
    # that is about to be removed.
    child = subprocess.Popen([str(Path(sys.executable).parent / "ansible-playbook"), "-i",
                              str(inventory), "site.yml"], cwd=checkout / "ansible", env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    try:
        stdout, _ = child.communicate()
    except BaseException:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        raise
    proc = subprocess.CompletedProcess(child.args, child.returncode, stdout, "")
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"the playbook failed in {checkout}:\n{proc.stdout[-3000:]}")
    roles = {name: float(value) for name, value in RECAP_LINE.findall(proc.stdout)}
    changed = sum(int(n) for n in CHANGED.findall(proc.stdout.split("PLAY RECAP", 1)[-1]))
    return {role: roles.get(role, 0.0) for role in roles_timed}, seconds, changed


def cold(stack: Path, inventory: Path, timed: tuple[str, ...] = ROLES) -> int:
    """One cold configure on new nodes: the timed roles' seconds against the run's."""
    metalslurm = str(Path(sys.executable).parent / "metalslurm")
    for step in (["local", "down", "--stack", str(stack)],
                 ["local", "up", "--stack", str(stack), "--no-configure"]):
        proc = subprocess.run([metalslurm, *step], cwd=REPO, capture_output=True, text=True,
                              check=False)
        if proc.returncode != 0:
            sys.exit(f"metalslurm {' '.join(step)} failed:\n{proc.stdout[-2000:]}{proc.stderr}")
    roles, seconds, changed = run_once(REPO, inventory, timed)
    parts = " ".join(f"{r} {roles[r]:.2f}" for r in timed if roles[r])
    total = sum(roles.values())
    target = "; target: the monitoring roles <= 15 s cold" if timed == ROLES else ""
    print(f"cold configure: {parts}  sum {total:.1f} s of a {seconds:.1f} s run "
          f"({total / seconds:.2f}), {changed} changed{target}")
    return 0


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(f"stopped by signal {signum}")


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _stop)  # the worktree and the playbook are cleaned up
    parser = argparse.ArgumentParser(prog="python -m bench.bench_monitoring_configure")
    parser.add_argument("--inventory", type=Path, required=True)
    parser.add_argument("--against", help="a git revision to compare with")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--roles", default=",".join(ROLES),
                        help="the roles to time, comma-separated (default: the monitoring "
                             "roles, old and new names)")
    parser.add_argument("--cold", type=Path, metavar="STACK",
                        help="instead: remove and recreate this local stack's nodes (metalslurm "
                             "local down, up --no-configure) and time one cold configure of "
                             "--inventory (the stack's)")
    args = parser.parse_args(argv)
    if args.cold is not None:
        if not args.cold.is_file():
            parser.error(f"--cold {args.cold}: no such stack file")
        return cold(args.cold.resolve(), args.inventory.resolve(),
                    tuple(r for r in args.roles.split(",") if r))
    if not args.against:
        parser.error("--against: name a git revision to compare with (or use --cold STACK)")
    inventory = args.inventory.resolve()
    if not inventory.is_file():
        parser.error(f"--inventory {args.inventory}: no such file; bring the cluster up first")
    worktree = Path(tempfile.mkdtemp(prefix="metalslurm-bench-")) / "against"
    add = subprocess.run(["git", "worktree", "add", "--detach", str(worktree), args.against],
                         cwd=REPO, capture_output=True, text=True, check=False)
    if add.returncode != 0:
        parser.error(f"--against {args.against}: {add.stderr.strip()}")
    sides = {"this": REPO, "against": worktree}
    timed = tuple(r for r in args.roles.split(",") if r)
    results: dict[str, list[tuple[dict[str, float], float]]] = {"this": [], "against": []}
    try:
        for side in ("against", "this"):
            run_once(sides[side], inventory, timed)  # warm-up: this side's files in place
            for i in range(args.runs):
                roles, seconds, changed = run_once(sides[side], inventory, timed)
                if changed:
                    sys.exit(f"{side} run {i + 1} changed {changed} task(s): not converged")
                results[side].append((roles, seconds))
                parts = " ".join(f"{r} {roles[r]:.2f}" for r in timed if roles[r])
                print(f"{side:8s} run {i + 1}: {parts}  sum {sum(roles.values()):.2f} s, "
                      f"whole run {seconds:.1f} s, {changed} changed", flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=REPO,
                       capture_output=True, check=False)
        shutil.rmtree(worktree.parent, ignore_errors=True)
    medians = {}
    for side, rows in results.items():
        sums = [sum(roles.values()) for roles, _s in rows]
        medians[side] = (statistics.median(sums), statistics.median(s for _r, s in rows))
        print(f"{side:8s} median: {', '.join(timed)} {medians[side][0]:.2f} s of a "
              f"{medians[side][1]:.1f} s run")
    target = "; target: the monitoring roles <= 2 s converged" if timed == ROLES else ""
    print(f"this / against: the roles {medians['this'][0] / max(medians['against'][0], 1e-9):.2f}"
          f", whole run {medians['this'][1] / medians['against'][1]:.2f}{target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
