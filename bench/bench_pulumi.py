"""The Pulumi program for 1,000 compute nodes under mocks, against the 10 s target.

Runs the real program (__main__'s ``main``) under ``pulumi.runtime.set_mocks`` for each
provider with one pool of 1,000 static 8xH100 nodes, and prints the wall time of each
run (with the CPU time of this process, which other load on the machine does not
inflate) and its ratio to the 10 s target (both measured here, in this run). Each
provider starts from a collected heap, so it does not pay for the previous run's garbage.
``--profile`` also prints where the time goes (cProfile, cumulative) to stderr.

    .venv/bin/python -m bench.bench_pulumi [--nodes 1000] [--provider oci] [--profile]
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import gc
import pstats
import sys
import time
from pathlib import Path

from tests.pulumi.mocks import SECRET_VALUES, example, run_program

REPO = Path(__file__).resolve().parents[1]

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
    parser.add_argument("--profile", action="store_true",
                        help="print the top functions by cumulative time (slows the run)")
    args = parser.parse_args()
    providers = args.provider or ["local", "byo", "oci"]
    worst = 0.0
    print(f"Pulumi program under mocks, {args.nodes} compute nodes, target "
          f"{TARGET_SECONDS:.0f} s")
    for provider in providers:
        cfg, secrets = config_for(provider, args.nodes)
        gc.collect()
        profile = cProfile.Profile() if args.profile else None
        start, cpu = time.perf_counter(), time.process_time()
        if profile:
            profile.enable()
        run = run_program(cfg, secrets)
        if profile:
            profile.disable()
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        hosts = run.exports["inventory"]["all"]["children"]["slurm_compute"]["hosts"]
        assert len(hosts) == args.nodes, len(hosts)
        worst = max(worst, seconds / TARGET_SECONDS)
        print(f"  {provider:<6} {len(run.mocks.resources):5d} resources  {seconds:6.2f} s  "
              f"(cpu {cpu:5.2f} s)  ratio {seconds / TARGET_SECONDS:.3f} of target", flush=True)
        if profile:
            print(f"--- {provider}: top 40 by cumulative time", file=sys.stderr)
            pstats.Stats(profile, stream=sys.stderr).sort_stats("cumulative").print_stats(40)
        del run
    print(f"worst ratio {worst:.3f} ({'meets' if worst < 1 else 'misses'} the 10 s target)")
    return 0 if worst < 1 else 1


if __name__ == "__main__":
    sys.exit(main())
