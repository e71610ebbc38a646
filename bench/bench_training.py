"""Steps per second of the CPU training example on 1 node and on 2 nodes, in one run.

On a running local cluster (the e2e Debian 13 stack unless --stack says otherwise; brought
up when it is not running), as user alice on the static nodes gpu-001 and gpu-002:
the training environment is built on shared storage if it is missing (from wheels this
host downloads), then, alternately for --rounds rounds, examples/python/train_charlm.py
runs --steps steps as one process on gpu-001 and as two processes, one on each node
(data-parallel, gloo over the cluster network). Each run reports its steady steps/s (after
its first step, which compiles).

Every process has the same batch, so a 2-node step does twice the work of a 1-node step:
the 2-node scaling efficiency is (2-node samples/s) / (2 x 1-node samples/s), which is the
ratio of the steps/s. The local nodes are containers sharing this machine's cores, so the
figure checks the plumbing (rendezvous, gradient all-reduce between nodes); it is not a
claim about real hardware.

    .venv/bin/python -m bench.bench_training [--rounds 3] [--steps 200] [--batch 1024]
                                             [--stack STACK]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from tests.e2e.cluster import TRAIN_ENV, WHEELHOUSE, e2e_stack, train_wheels

REPO = Path(__file__).resolve().parents[1]
USER = "alice"
WORK = "/shared/bench-training"


def cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "infra.cli", *args], cwd=REPO, input=stdin,
                          capture_output=True, check=False)


def on(stack: Path, node: str, command: str, stdin: bytes | None = None) -> str:
    proc = cli("local", "exec", "--stack", str(stack), node, "--", "sh", "-c", command,
               stdin=stdin)
    if proc.returncode != 0:
        raise SystemExit(f"{node}: {command[:200]} failed: {proc.stderr.decode()[-2000:]}")
    return proc.stdout.decode().strip()


def ensure_environment(stack: Path) -> None:
    if on(stack, "ctl", f"test -r {TRAIN_ENV}/.metalslurm-env && echo ok || true") == "ok":
        return
    minor = on(stack, "gpu-001", "python3 -c 'import sys; print(sys.version_info[1])'")
    wheels = subprocess.run(["tar", "-C", str(train_wheels(f"3.{minor}")), "-c", "."],
                            capture_output=True, check=True).stdout
    on(stack, "ctl", f"mkdir -p {WHEELHOUSE} && tar -C {WHEELHOUSE} --no-same-owner -x",
       stdin=wheels)
    on(stack, "ctl", f"srun --nodes=1 --ntasks=1 -w gpu-001 env PIP_NO_INDEX=1 "
                     f"PIP_FIND_LINKS={WHEELHOUSE} {WORK}/examples/setup-train-env.sh")


def run(stack: Path, nodes: int, steps: int, batch: int, round_: int) -> float:
    """One training run on ``nodes`` nodes; its steps per second after the first step."""
    ckpt = f"{WORK}/ckpt-{nodes}-{round_}"
    out = on(stack, "ctl", f"cd {WORK} && rm -rf {ckpt} && runuser -u {USER} -- srun "
                           f"--nodes={nodes} --ntasks-per-node=1 -w gpu-[001-00{nodes}] "
                           f"--time=10 env JAX_PLATFORMS=cpu {TRAIN_ENV}/bin/python "
                           f"{WORK}/examples/python/train_charlm.py --data {WORK}/corpus.txt "
                           f"--checkpoint-dir {ckpt} --steps {steps} --batch {batch} "
                           f"--checkpoint-every {steps} --log-every {steps} 2>/dev/null")
    [end] = [e for e in (json.loads(line) for line in out.splitlines() if line.startswith("{"))
             if e["event"] == "end"]
    return float(end["steps_per_s"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=1024, help="sequences per process")
    parser.add_argument("--stack", type=Path, default=e2e_stack("Pulumi.e2e-debian13.yaml"))
    args = parser.parse_args()
    if cli("local", "exec", "--stack", str(args.stack), "ctl", "--", "true").returncode != 0:
        up = cli("local", "up", "--stack", str(args.stack), "--no-verify")
        if up.returncode != 0:
            print(up.stdout.decode()[-3000:])
            return 1
    tar = subprocess.run(["tar", "-C", str(REPO), "-c", "examples"], capture_output=True,
                         check=True).stdout
    on(args.stack, "ctl", f"mkdir -p {WORK} && tar -C {WORK} --no-same-owner -x && cp "
                          f"/usr/share/common-licenses/GPL-3 {WORK}/corpus.txt && chown -R "
                          f"{USER} {WORK}", stdin=tar)
    ensure_environment(args.stack)
    one, two = [], []
    for r in range(args.rounds):
        one.append(run(args.stack, 1, args.steps, args.batch, r))
        two.append(run(args.stack, 2, args.steps, args.batch, r))
    s1, s2 = statistics.median(one), statistics.median(two)
    b = args.batch
    print(f"{args.steps} steps, batch {b} per process, median of {args.rounds} rounds")
    print(f"1 node : {s1:.1f} steps/s = {b * s1:.0f} samples/s   (runs: {one})")
    print(f"2 nodes: {s2:.1f} steps/s = {2 * b * s2:.0f} samples/s   (runs: {two})")
    print(f"2-node scaling efficiency: {s2 / s1:.2f} "
          f"(2-node samples/s / 2 x 1-node samples/s; plumbing check on shared cores)")
    on(args.stack, "ctl", f"rm -rf {WORK}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
