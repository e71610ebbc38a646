"""Prometheus' memory on a running local cluster, from Prometheus' own metrics.

Read through its HTTP API with the cluster's login (the stack's secrets directory), from
this machine (the local cluster's controller address is reachable from the host): resident
memory, Go heap in use, series in the head block, samples appended per second, uptime, and
the ratio that carries to a bigger cluster: resident bytes per head series. An hour is the
figure the README quotes; a younger Prometheus is measured too, and said to be younger.

    .venv/bin/python -m bench.bench_prometheus_memory \
        --stack .metalslurm/e2e-stacks/Pulumi.e2e-debian13.yaml
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from infra.stack.config import load_stack_file
from infra.stack.state import StateDir

REPO = Path(__file__).resolve().parents[1]
QUERIES = {
    "resident": 'process_resident_memory_bytes{job="prometheus"}',
    "heap": 'go_memstats_heap_inuse_bytes{job="prometheus"}',
    "series": 'prometheus_tsdb_head_series{job="prometheus"}',
    "samples_per_s": 'rate(prometheus_tsdb_head_samples_appended_total{job="prometheus"}[5m])',
    "started": 'process_start_time_seconds{job="prometheus"}',
    "now": "time()",
    "targets": "count(up)",
}


def query(url: str, password: str, expr: str) -> float:
    request = urllib.request.Request(
        f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
    token = base64.b64encode(f"metalslurm:{password}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, timeout=10) as answer:
        data = json.load(answer)["data"]
    if data["resultType"] == "scalar":
        return float(data["result"][1])
    return float(data["result"][0]["value"][1]) if data["result"] else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_prometheus_memory")
    parser.add_argument("--stack", type=Path, required=True, help="the local stack file")
    args = parser.parse_args(argv)
    cfg = load_stack_file(args.stack, check_artifacts=False)
    state = StateDir(REPO / ".metalslurm" / args.stack.stem.removeprefix("Pulumi."))
    password = state.secret_file("monitoring_password_file").read_text().strip()
    host = cfg.monitoring.given.get("host") or cfg.controller_name
    hosts = yaml.safe_load((state.root / "inventory.yml").read_text())["all"]["hosts"]
    url = f"http://{hosts[host]['metalslurm_address']}:9090"
    got = {name: query(url, password, expr) for name, expr in QUERIES.items()}
    uptime = got["now"] - got["started"]
    print(f"Prometheus on {host} ({url}), up {uptime / 60:.0f} min"
          + ("" if uptime >= 3600 else " (less than the hour the README quotes)"))
    print(f"  targets               {got['targets']:.0f}")
    print(f"  head series           {got['series']:.0f}")
    print(f"  samples appended/s    {got['samples_per_s']:.0f}")
    print(f"  resident memory       {got['resident'] / 2**20:.1f} MiB")
    print(f"  Go heap in use        {got['heap'] / 2**20:.1f} MiB")
    print(f"  resident per series   {got['resident'] / got['series'] / 1024:.1f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
