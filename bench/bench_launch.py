"""Submit-to-start latency of a job on a launch-terminate elastic node, split into its parts.

The node has no machine while it is powered down. Each round submits a one-node job for it
and records, on the host's clock (the containers share it), from the power log:

- slurmctld -> program: submit until the ResumeProgram's first log line;
- machine made: the power driver's call (the proxy creates the container from the prepared
  compute image, podman starts it);
- joined: the join service's configure of the new machine (join_start to join_end), which
  ends once slurmd has registered;
- total: submit until the node leaves POWERING_UP.

The target is a total under 60 s here (ParallelCluster's median resume, 294 s on EC2, is
the anchor); printed as the ratio of the median to it. Then the node is powered down (its
machine removed) for the next round.

    .venv/bin/python -m bench.bench_launch [--rounds 3] [--keep]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from bench import elastic_bench
from bench.elastic_bench import LOG
from bench.power_log import resume_timeline

REPO = Path(__file__).resolve().parents[1]
STACK = REPO / "bench" / "Pulumi.bench-launch.yaml"
CLUSTER = "ms-bench-lt"
NODE = "gpu-002"
TARGET_S = 60.0








def ctl(command: str) -> str:
    return elastic_bench.ctl(CLUSTER, command)


def node_state() -> str:
    return elastic_bench.node_state(CLUSTER, NODE)


def wait(what: str, probe, timeout: float = 400.0, every: float = 0.2) -> float:
    return elastic_bench.wait(what, probe, timeout, every)


def power_down() -> None:
    """Powered down, and its machine gone."""
    elastic_bench.power_down(CLUSTER, NODE, gone=lambda: not machine_exists())


def machine_exists() -> bool:
    return subprocess.run(["podman", "container", "exists", f"{CLUSTER}-{NODE}"],
                          check=False).returncode == 0






def seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def join_times(events: list[dict], after: float) -> tuple[float, float]:
    ends = [e for e in events if e.get("event") == "join_end" and e.get("node") == NODE
            and seconds(e["ts"]) > after]
    assert ends and ends[-1]["ok"], ends
    return seconds(ends[-1]["ts"]) - ends[-1]["duration_s"], seconds(ends[-1]["ts"])


def resume_round() -> dict[str, float]:
    submit = time.time()
    job = ctl(f"sbatch --parsable --nodelist={NODE} --nodes=1 -o /dev/null --wrap=true")
    registered = wait("the node to register", lambda: not node_state().endswith(("#", "~")))

    def events() -> list[dict]:
        return [json.loads(line) for line in ctl(f"cat {LOG}").splitlines()
                if line.startswith("{")]

    wait("the join's end in the power log", lambda: any(
        e.get("event") == "join_end" and seconds(e["ts"]) > submit for e in events()))
    logged = events()
    timeline = resume_timeline(logged, NODE)
    assert timeline and timeline["ok"], timeline
    join_start, join_end = join_times(logged, submit)
    wait(f"job {job} to finish", lambda: ctl(f"squeue --noheader --jobs={job}") == "",
         every=0.5)
    power_down()
    invoked, made_start, made_end = (timeline["invoked"], timeline["driver_start"],
                                     timeline["driver_end"])
    assert invoked is not None and made_start is not None and made_end is not None, timeline
    return {"slurmctld->program": invoked - submit,
            "machine made": made_end - made_start,
            "joined": join_end - join_start,
            "total": registered - submit}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    args = parser.parse_args()
    with elastic_bench.fresh_cluster(STACK, args.keep):
        rounds = []
        for i in range(args.rounds):
            rounds.append(resume_round())
            print(f"round {i + 1}: " + ", ".join(f"{k} {v:.1f} s" for k, v in rounds[-1].items()),
                  flush=True)
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    print(f"median of {args.rounds}: " + ", ".join(f"{k} {v:.1f} s" for k, v in med.items()))
    print(f"submit to node up: {med['total']:.1f} s = {med['total'] / TARGET_S:.2f} of the "
          f"{TARGET_S:.0f} s target ({'met' if med['total'] < TARGET_S else 'NOT met'})")
    return 0 if med["total"] < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
