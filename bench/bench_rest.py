"""Slurm's REST API on a running local cluster: "list jobs" with an empty queue and with
``--jobs`` (1,000) queued, against the same question asked with squeue, and the time
``scontrol token`` takes, in one run on the REST host (the first login node, else the
controller).

Everything is timed on the REST host by one Python script (no SSH in the timings): for each
queue size, ``--runs`` GETs of ``/slurm/<api>/jobs`` with a token, ``--runs`` of
``squeue --json`` (the same records through the same data parser, without HTTP) and of
plain ``squeue``; then ``--runs`` of ``scontrol token`` against ``scontrol ping`` (one RPC to
slurmctld each). The queued jobs are held batch jobs of root's (``sbatch --hold``), cancelled
at the end. Prints medians and the ratios.

    .venv/bin/python -m bench.bench_rest --stack .metalslurm/e2e-stacks/Pulumi.e2e-debian13.yaml
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml
from ansible_collections.metalslurm.cluster.plugins.module_utils.rest import (
    DEFAULTS,
    rest_release,
)

REPO = Path(__file__).resolve().parents[1]

# Runs on the REST host: prints one JSON object of timings (seconds per run).
_TIMER = r"""
import json, statistics, subprocess, sys, time, urllib.request
url, api, jobs, runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
token = subprocess.run(["scontrol", "token", "lifespan=3600"], capture_output=True,
                       text=True, check=True).stdout.strip().split("=", 1)[1]
def rest():
    req = urllib.request.Request(f"{url}/slurm/{api}/jobs", headers={
        "X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": token})
    with urllib.request.urlopen(req, timeout=60) as r:
        return len(json.loads(r.read())["jobs"])
def cmd(*argv):
    return lambda: subprocess.run(argv, capture_output=True, check=True).stdout
def timed(fn):
    out = []
    for _ in range(runs):
        t = time.perf_counter(); fn(); out.append(time.perf_counter() - t)
    return out
result = {}
def measure(tag):
    result[tag] = {"rows": rest(), "rest": timed(rest),
                   "squeue_json": timed(cmd("squeue", "--json")),
                   "squeue": timed(cmd("squeue", "--all"))}
measure("empty")
t = time.perf_counter()
ids = []
for _ in range(jobs):
    ids.append(subprocess.run(["sbatch", "--parsable", "--hold", "--partition=debug",
                               "--time=1", "-o", "/dev/null", "--wrap=true"],
                              capture_output=True, text=True, check=True).stdout.split(";")[0]
               .strip())
result["submit_seconds"] = time.perf_counter() - t
try:
    measure("queued")
finally:
    for i in range(0, len(ids), 200):
        subprocess.run(["scancel", *ids[i:i + 200]], check=False)
result["token"] = timed(cmd("scontrol", "token", "lifespan=60"))
result["ping"] = timed(cmd("scontrol", "ping"))
print(json.dumps(result))
"""


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "infra.cli", *args], cwd=REPO,
                          capture_output=True, text=True, check=False)


def on(stack: Path, node: str, argv: list[str]) -> str:
    proc = cli("local", "exec", "--stack", str(stack), node, "--", *argv)
    if proc.returncode != 0:
        raise SystemExit(f"{node}: {' '.join(argv)[:200]} failed: {proc.stderr[-2000:]}")
    return proc.stdout.strip()


def median_ms(values: list[float]) -> float:
    values = sorted(values)
    return 1000 * values[len(values) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args(argv)
    state = REPO / ".metalslurm" / args.stack.name.removeprefix("Pulumi.").removesuffix(".yaml")
    inventory = yaml.safe_load((state / "inventory.yml").read_text())["all"]
    children = inventory["children"]
    host = (list((children.get("login") or {}).get("hosts") or {})
            + list(children["slurm_controller"]["hosts"]))[0]
    rest = {**DEFAULTS, **inventory["vars"].get("metalslurm_rest", {})}
    address = rest["listen_address"] or inventory["hosts"][host]["metalslurm_address"]
    version = on(args.stack, host, ["dpkg-query", "--showformat=${Version}", "--show",
                                    "slurm-client"])
    api = rest_release(version).api_version
    out = on(args.stack, host, ["python3", "-c", _TIMER, f"http://{address}:{rest['port']}",
                                api, str(args.jobs), str(args.runs)])
    result = json.loads(out.splitlines()[-1])
    print(f"Slurm {version}, API {api}, {args.runs} runs each, medians (ms):")
    print(f"{'queue':>8} {'rows':>6} {'REST /jobs':>11} {'squeue --json':>14} {'squeue':>8} "
          f"{'REST/json':>10} {'REST/squeue':>12}")
    for tag in ("empty", "queued"):
        r = result[tag]
        rest_ms, json_ms, text_ms = (median_ms(r[k]) for k in ("rest", "squeue_json", "squeue"))
        print(f"{tag:>8} {r['rows']:>6} {rest_ms:>11.1f} {json_ms:>14.1f} {text_ms:>8.1f} "
              f"{rest_ms / json_ms:>10.2f} {rest_ms / text_ms:>12.2f}")
    growth = median_ms(result["queued"]["rest"]) / median_ms(result["empty"]["rest"])
    print(f"REST /jobs, {result['queued']['rows']} jobs against an empty queue: {growth:.2f}x")
    print(f"submitting {args.jobs} held jobs with sbatch: {result['submit_seconds']:.1f} s")
    token, ping = median_ms(result["token"]), median_ms(result["ping"])
    print(f"scontrol token: {token:.1f} ms; scontrol ping: {ping:.1f} ms; ratio "
          f"{token / ping:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
