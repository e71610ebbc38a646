"""Submit-to-start latency of a job on a powered-down elastic node, split into its parts.

For each round: the elastic node is powered down (container stopped), a one-node job is
submitted for it, and the benchmark records, on the host's clock (the containers share it):

- slurmctld -> program: submit until the ResumeProgram's first log line;
- driver: the power driver's call (podman REST API start) from the program's log;
- slurmd registration: driver done until slurmctld shows the node up (no longer
  POWERING_UP);

and, in the same run, a raw container start: ``podman start`` until the node's slurmd is
active. The overhead metalslurm and Slurm add is the total minus the raw start; the target
is under 5 s.

    .venv/bin/python -m bench.bench_resume [--rounds 5] [--keep]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

from bench import elastic_bench
from bench.elastic_bench import LOG, wait
from bench.power_log import resume_timeline

REPO = Path(__file__).resolve().parents[1]

STACK = REPO / "bench" / "Pulumi.bench-elastic.yaml"
CLUSTER = "ms-bench-el"
NODE = "gpu-002"
OVERHEAD_TARGET_S = 5.0
STATE = REPO / ".metalslurm" / "bench-elastic"
# Compute node containers cannot be entered with 'podman exec' (their private cgroup
# namespace; infra/providers/local.py): the raw start is timed over SSH, as Ansible uses.
SSH = ["ssh", "-i", str(STATE / "ssh" / "id_ed25519"), "-o", "BatchMode=yes",
       "-o", "ConnectTimeout=1", "-o", f"UserKnownHostsFile={STATE / 'ssh' / 'known_hosts'}",
       "-o", "LogLevel=ERROR"]


def ctl(command: str) -> str:
    return elastic_bench.ctl(CLUSTER, command)


def node_state() -> str:
    return elastic_bench.node_state(CLUSTER, NODE)


def power_down() -> None:
    elastic_bench.power_down(CLUSTER, NODE)


def node_ssh() -> list[str]:
    inventory = yaml.safe_load((STATE / "inventory.yml").read_text())
    return [*SSH, f"root@{inventory['all']['hosts'][NODE]['ansible_host']}"]












def raw_container_start() -> float:
    """podman start until slurmd is active inside (then back to powered down)."""
    start = time.time()
    subprocess.run(["podman", "start", f"{CLUSTER}-{NODE}"], check=True, capture_output=True)
    end = wait("slurmd in the raw start", lambda: subprocess.run(
        [*node_ssh(), "systemctl is-active -q slurmd"], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, check=False).returncode == 0)
    wait("slurmctld to take the node", lambda: node_state() in ("idle", "idle~"), every=0.5)
    power_down()
    return end - start


def resume_round() -> dict[str, float]:
    submit = time.time()
    job = ctl(f"sbatch --parsable --nodelist={NODE} --nodes=1 -o /dev/null --wrap=true")
    registered = wait("the node to register", lambda: not node_state().endswith(("#", "~")))

    events = [json.loads(line) for line in ctl(f"cat {LOG}").splitlines()
              if line.startswith("{")]
    timeline = resume_timeline(events, NODE)
    assert timeline and timeline["ok"], timeline
    wait(f"job {job} to finish", lambda: ctl(f"squeue --noheader --jobs={job}") == "",
         every=0.5)
    power_down()
    return {"slurmctld->program": timeline["invoked"] - submit,
            "driver": timeline["driver_end"] - timeline["driver_start"],
            "slurmd registration": registered - timeline["driver_end"],
            "total": registered - submit}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    args = parser.parse_args()
    with elastic_bench.fresh_cluster(STACK, args.keep):
        power_down()
        rounds, raws = [], []
        for i in range(args.rounds):
            raws.append(raw_container_start())
            rounds.append(resume_round())
            print(f"round {i + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in rounds[-1].items())
                  + f"; raw container start {raws[-1]:.2f} s", flush=True)
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    raw = statistics.median(raws)
    overhead = med["total"] - raw
    print(f"median of {args.rounds}: " + ", ".join(f"{k} {v:.2f} s" for k, v in med.items()))
    print(f"raw container start (podman start -> slurmd active), median: {raw:.2f} s")
    print(f"overhead beyond the raw start: {overhead:.2f} s = {overhead / OVERHEAD_TARGET_S:.2f} "
          f"of the {OVERHEAD_TARGET_S:.0f} s target "
          f"({'met' if overhead < OVERHEAD_TARGET_S else 'NOT met'})")
    return 0 if overhead < OVERHEAD_TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
