"""The Pulumi program for 1,000 compute nodes under mocks, against the 10 s target.

Runs the real program (__main__'s ``main``) under ``pulumi.runtime.set_mocks`` for each
provider with one pool of 1,000 static 8xH100 nodes, and prints the wall time of each
run and its ratio to the 10 s target (both measured here, in this run).

    .venv/bin/python bench/bench_pulumi.py [--nodes 1000] [--provider oci]
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.pulumi.mocks import run_program  # noqa: E402
from tests.pulumi.test_program import SECRET_VALUES, example  # noqa: E402

TARGET_SECONDS = 10.0


def config_for(provider: str, nodes: int) -> tuple[dict, dict]:
    plain, secrets = example(provider)
    cfg = copy.deepcopy(plain)
    pool = {"name": "gpu", "count": nodes, "gpuType": "h100", "gpuCount": 8}
    cfg["metalslurm:computePools"] = [pool]
    cfg["metalslurm:privateCidr"] = "10.40.0.0/21"
    cfg.pop("metalslurm:elastic", None)
    if provider == "byo":
        base = cfg["metalslurm:byo"]
        hosts = [h for h in base["hosts"] if h.get("role") in ("controller", "nfs")]
        for h in hosts:
            h["address"] = h["address"].replace("10.20.0.", "10.40.0.")
        hosts += [{"name": f"gpu-{i:04d}", "pool": "gpu",
                   "address": f"10.40.{1 + i // 250}.{1 + i % 250}",
                   "bmc": {"driver": "ipmi", "address": f"10.41.{i // 250}.{1 + i % 250}"}}
                  for i in range(nodes)]
        cfg["metalslurm:byo"] = {**base, "hosts": hosts}
    if provider == "oci":
        cfg["metalslurm:oci"] = {**cfg["metalslurm:oci"], "vcnCidr": "10.40.0.0/16"}
    return cfg, {k: SECRET_VALUES[k] for k in secrets}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--provider", action="append", choices=("local", "byo", "oci"))
    args = parser.parse_args()
    providers = args.provider or ["local", "byo", "oci"]
    worst = 0.0
    print(f"Pulumi program under mocks, {args.nodes} compute nodes, target "
          f"{TARGET_SECONDS:.0f} s")
    for provider in providers:
        cfg, secrets = config_for(provider, args.nodes)
        start = time.perf_counter()
        run = run_program(cfg, secrets)
        seconds = time.perf_counter() - start
        hosts = run.exports["inventory"]["all"]["children"]["slurm_compute"]["hosts"]
        assert len(hosts) == args.nodes, len(hosts)
        worst = max(worst, seconds / TARGET_SECONDS)
        print(f"  {provider:<6} {len(run.mocks.resources):5d} resources  {seconds:6.2f} s  "
              f"ratio {seconds / TARGET_SECONDS:.3f} of target")
    print(f"worst ratio {worst:.3f} ({'meets' if worst < 1 else 'misses'} the 10 s target)")
    return 0 if worst < 1 else 1


if __name__ == "__main__":
    sys.exit(main())
