"""Start time of a container step against a plain step on the same node, in one run.

On a local cluster with containers (the default stack unless --stack says otherwise; brought
up when it is not running), as user alice on one static node:

- first use: ``srun --container-image=<image> --container-name=bench true``, which unpacks
  the image (its size is printed too);
- then, alternately, a container step with the image already unpacked
  (``srun --container-name=bench true``: Pyxis' global scope keeps the named container)
  and a plain step (``srun true``), each timed on the controller.

It prints the medians, the extra seconds of a container step and their ratio to a plain
step, and the extra as a fraction of the 2 s target.

    .venv/bin/python -m bench.bench_containers [--rounds 10] [--stack Pulumi.local.yaml]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

# The e2e tests' image: a node's own bash and coreutils with their libraries, a marker
# file, no device nodes.
from tests.e2e.cluster import BUILD_IMAGE, IMAGE

REPO = Path(__file__).resolve().parents[1]
TARGET_EXTRA_S = 2.0
USER = "alice"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "infra.cli", *args], cwd=REPO,
                          capture_output=True, text=True, check=False)


def on(stack: Path, node: str, command: str) -> str:
    proc = cli("local", "exec", "--stack", str(stack), node, "--", "sh", "-c", command)
    if proc.returncode != 0:
        raise SystemExit(f"{node}: {command[:200]} failed: {proc.stderr[-2000:]}")
    return proc.stdout.strip()


def timed(stack: Path, commands: list[str]) -> list[float]:
    """Run each command as the bench user on the controller; the seconds each took."""
    script = "; ".join(f"s=$(date +%s.%N); {c} >/dev/null; e=$(date +%s.%N); "
                       'echo "$s $e"' for c in commands)
    out = on(stack, "ctl", f"cd /home/{USER} && runuser -u {USER} -- bash -c '{script}'")
    return [float(e) - float(s) for s, e in (line.split() for line in out.splitlines())]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--stack", type=Path, default=REPO / "Pulumi.local.yaml")
    parser.add_argument("--node", default="gpu-001")
    args = parser.parse_args()
    if cli("local", "exec", "--stack", str(args.stack), "ctl", "--", "true").returncode != 0:
        up = cli("local", "up", "--stack", str(args.stack), "--no-verify")
        if up.returncode != 0:
            print(up.stdout[-3000:])
            return 1
    on(args.stack, args.node, BUILD_IMAGE)
    size = int(on(args.stack, args.node, f"stat -c %s {IMAGE}"))
    on(args.stack, args.node, f"runuser -u {USER} -- enroot remove --force pyxis_bench "
                              ">/dev/null 2>&1 || true")
    node = f"-w {args.node}"
    first = timed(args.stack, [f"srun {node} --container-image={IMAGE} --container-name=bench "
                               "true"])[0]
    container, plain = [], []
    for _ in range(args.rounds):
        c, p = timed(args.stack, [f"srun {node} --container-name=bench true", f"srun {node} true"])
        container.append(c)
        plain.append(p)
    med_c, med_p = statistics.median(container), statistics.median(plain)
    extra = med_c - med_p
    print(f"test image: {size / 1e6:.1f} MB squashfs; first use (import + unpack + start): "
          f"{first:.2f} s")
    print(f"median of {args.rounds}: container step {med_c:.2f} s, plain step {med_p:.2f} s")
    print(f"container step / plain step: {med_c / med_p:.2f}; extra per step {extra:.2f} s = "
          f"{extra / TARGET_EXTRA_S:.2f} of the {TARGET_EXTRA_S:.0f} s target "
          f"({'met' if extra < TARGET_EXTRA_S else 'NOT met'})")
    return 0 if extra < TARGET_EXTRA_S else 1


if __name__ == "__main__":
    sys.exit(main())
