"""Cold 'local up' with the node image cached, split into provision, configure and verify,
and the idempotent re-run of configure as a fraction of the cold configure.

Targets on a 2-core machine: cold up under 300 s; re-run under 15 % of the cold configure
with 0 changed tasks. The ratio is measured within one run, so machine noise hits both.

    python bench/bench_up.py [--stack bench/Pulumi.bench.yaml] [--os debian12]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from infra.config import load_stack_file  # noqa: E402
from infra.configure import run_playbook  # noqa: E402
from infra.providers.images import ensure_image  # noqa: E402
from infra.providers.local import LocalCluster  # noqa: E402
from infra.verify import run_verify  # noqa: E402

COLD_UP_TARGET_S = 300.0
RERUN_TARGET_FRACTION = 0.15


def timed(fn):
    start = time.monotonic()
    value = fn()
    return value, time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", type=Path, default=REPO / "bench" / "Pulumi.bench.yaml")
    parser.add_argument("--os", choices=["debian12", "debian13"])
    parser.add_argument("--strategy", help="Ansible strategy, e.g. mitogen_linear "
                        "(needs 'pip install mitogen'); default: linear")
    args = parser.parse_args()
    cfg = load_stack_file(args.stack)
    if args.os:
        cfg = replace(cfg, os=args.os)
    quiet = lambda _line: None  # noqa: E731
    cluster = LocalCluster(cfg=cfg, state_dir=REPO / ".metalslurm" / "bench", log=quiet)
    cluster.destroy()
    cluster.preflight()
    image, image_s = timed(lambda: ensure_image(cfg.os, cfg.local.image_source,
                                                cfg.local.mirror, log=quiet))
    print(f"image {image}: {image_s:.1f} s (not part of the cold up: cached beforehand)")
    try:
        inventory, provision_s = timed(lambda: cluster.provision(image))
        cold, configure_s = timed(lambda: run_playbook(inventory, strategy=args.strategy,
                                                       out=quiet))
        if not cold.ok:
            print("cold configure failed:", *cold.failures, sep="\n  ")
            return 1
        verify_rc, verify_s = timed(lambda: run_verify(inventory, out=quiet))
        rerun, rerun_s = timed(lambda: run_playbook(inventory, strategy=args.strategy,
                                                    out=quiet))
    finally:
        cluster.destroy()
    cold_up_s = provision_s + configure_s + verify_s
    fraction = rerun_s / configure_s
    nodes = len(cluster.specs())
    print(f"nodes: {nodes} ({cfg.os}), strategy {args.strategy or 'linear'}, "
          f"{cold.changed} changed tasks in the cold configure")
    print(f"provision  {provision_s:7.1f} s")
    print(f"configure  {configure_s:7.1f} s")
    print(f"verify     {verify_s:7.1f} s  (rc {verify_rc})")
    print(f"cold up    {cold_up_s:7.1f} s  target < {COLD_UP_TARGET_S:.0f} s: "
          f"{'met' if cold_up_s < COLD_UP_TARGET_S else 'NOT met'}")
    print(f"re-run     {rerun_s:7.1f} s  {rerun.changed} changed")
    print(f"re-run / cold configure = {fraction:.2f}  target < {RERUN_TARGET_FRACTION:.2f}: "
          f"{'met' if fraction < RERUN_TARGET_FRACTION else 'NOT met'}")
    return 0 if verify_rc == 0 and rerun.ok and rerun.changed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
