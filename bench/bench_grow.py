"""The configure cost of adding one node to a running 4-node cluster, against a converged
run of the same cluster, measured in one run (issue: day 2, grow).

The cluster is the default stack (Pulumi.local.yaml) with 4 static GPU nodes and no elastic
ones, from prepared images, under its own name and network. Each 'local up' below is what an
operator runs: the 'configure' phase of its timings is what is compared.

1. 'local up' from nothing (cold, 4 nodes);
2. 'local up' again, nothing changed (converged, 4 nodes), ``--reruns`` times;
3. the pool's count to 5 and 'local up' (grow: gpu-005 made from the prepared image and
   configured; slurm.conf names it everywhere through Slurm's reconfigure);
4. 'local up' again at 5 (converged, 5 nodes).

Prints each figure and the ratios grow / converged (at 4 nodes, and at 5 after it). No
target is set by the issue; the figure tells what one more node costs an operator's run.

    python -m bench.bench_grow [--reruns 2] [--keep]
"""

from __future__ import annotations

import argparse
import statistics
import time
from ipaddress import IPv4Network

import yaml

from infra.ops.local import local_up
from infra.providers.local import LocalCluster, LocalPlan
from infra.stack.config import ClusterConfig, load_stack_file
from infra.stack.state import StateDir

from .bench_up import REPO

NAME = "ms-bgrow"
NETWORK = IPv4Network("10.78.23.0/24")
STATE = REPO / ".metalslurm" / "bench-grow"


def cluster_of(nodes: int) -> tuple[ClusterConfig, LocalCluster]:
    """The default stack with ``nodes`` static nodes and no elastic ones (written as a stack
    file, as an operator edits one), and its local cluster."""
    doc = yaml.safe_load((REPO / "Pulumi.local.yaml").read_text())
    config = doc["config"]
    config["metalslurm:clusterName"] = NAME
    config["metalslurm:privateCidr"] = str(NETWORK)
    pool = config["metalslurm:computePools"][0]
    pool["count"] = nodes
    pool.pop("elasticCount", None)
    config.pop("metalslurm:elastic", None)
    # The new node goes under the second leaf switch, as an operator cables and declares it.
    config["metalslurm:topology"]["leaves"][-1]["nodes"] = f"gpu-[003-{nodes:03d}]"
    containers = config.get("metalslurm:containers") or {}
    if containers.get("mirror", "/").startswith(".."):
        containers["mirror"] = str((REPO / containers["mirror"]).resolve())
    STATE.mkdir(parents=True, exist_ok=True)
    stack = STATE / "Pulumi.bench-grow.yaml"
    stack.write_text(yaml.safe_dump(doc, sort_keys=False))
    cfg = load_stack_file(stack)
    return cfg, LocalCluster(plan=LocalPlan.from_config(cfg), state=StateDir(STATE),
                             log=lambda _m: None)


def up(nodes: int) -> float:
    """'local up' with ``nodes`` nodes; its configure phase in seconds."""
    cfg, cluster = cluster_of(nodes)
    start = time.monotonic()
    rc, timings = local_up(cfg, cluster)
    if rc != 0:
        raise SystemExit(f"local up with {nodes} nodes failed ({rc})")
    return timings.get("configure", time.monotonic() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reruns", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    args = parser.parse_args()
    cluster_of(5)[1].destroy()
    try:
        cold = up(4)
        converged4 = [up(4) for _ in range(args.reruns)]
        grow = up(5)
        converged5 = [up(5) for _ in range(args.reruns)]
    finally:
        if not args.keep:
            cluster_of(5)[1].destroy()
    base = statistics.median(converged4)
    print("default stack, 4 static nodes from prepared images; each figure is the configure "
          "phase of a 'local up'")
    print(f"  cold (4 nodes):                 {cold:6.1f} s")
    print(f"  converged (4 nodes), median:    {base:6.1f} s  {converged4}")
    print(f"  adding gpu-005:                 {grow:6.1f} s")
    print(f"  converged (5 nodes), median:    {statistics.median(converged5):6.1f} s  "
          f"{converged5}")
    print(f"  grow / converged (4):           {grow / base:6.2f}")
    print(f"  grow / converged (5):           {grow / statistics.median(converged5):6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
