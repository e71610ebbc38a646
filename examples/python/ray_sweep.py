"""A hyperparameter sweep with Ray across the nodes of one Slurm allocation.

ray-sweep.sbatch starts the Ray cluster (head on the first node, one worker per other node)
and runs this driver on the head node. It waits until every node of the allocation has
joined, then runs one trial per learning rate as a Ray task, spread over the nodes, and
prints each result and the best as JSON lines (and a log line per Ray node, from Ray).

A trial here fits a character bigram model (softmax over the next character, full-batch
gradient descent in numpy) to --data: small enough for CPUs, real enough that the learning
rate matters. A GPU sweep asks Ray for GPUs per trial (num_gpus=1) and trains a real model.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

import numpy as np
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


def bigram_trial(data: str, lr: float, steps: int) -> dict[str, object]:
    with open(data, encoding="utf-8") as handle:
        text = handle.read()
    vocab = sorted(set(text))
    index = {c: i for i, c in enumerate(vocab)}
    ids = np.fromiter((index[c] for c in text), dtype=np.int64, count=len(text))
    counts = np.zeros((len(vocab), len(vocab)))
    np.add.at(counts, (ids[:-1], ids[1:]), 1.0)
    total, rows = counts.sum(), counts.sum(axis=1, keepdims=True)
    weights = np.zeros_like(counts)
    loss = float("nan")
    for _ in range(steps):
        logits = weights - weights.max(axis=1, keepdims=True)
        logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
        loss = float(-(counts * logp).sum() / total)
        weights -= lr * (rows * np.exp(logp) - counts) / total
    return {"lr": lr, "loss": round(loss, 4), "host": socket.gethostname().split(".")[0],
            "pid": os.getpid()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--address", required=True, help="the Ray head, host:port")
    p.add_argument("--nodes", type=int, required=True, help="wait for this many Ray nodes")
    p.add_argument("--data", required=True)
    p.add_argument("--lrs", default="1,3,10,30,100,300,1000,3000")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--join-timeout", type=float, default=120.0)
    args = p.parse_args(argv)

    ray.init(address=args.address, log_to_driver=False)
    deadline = time.monotonic() + args.join_timeout
    while (alive := sum(n["Alive"] for n in ray.nodes())) < args.nodes:
        if time.monotonic() > deadline:
            print(f"ray_sweep: {alive} of {args.nodes} Ray nodes joined within "
                  f"{args.join_timeout:.0f} s; see the workers' output", file=sys.stderr)
            return 1
        time.sleep(1)
    print(json.dumps({"event": "cluster", "nodes": alive,
                      "cpus": int(ray.cluster_resources().get("CPU", 0))}), flush=True)

    # Trial i on node i mod N: Ray's own SPREAD is best effort, and trials this short all
    # finish on the head's warm workers before the other node's workers have started.
    nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
    trial = ray.remote(num_cpus=1)(bigram_trial)
    lrs = [float(x) for x in args.lrs.split(",")]
    results = ray.get([
        trial.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            node_id=nodes[i % len(nodes)], soft=False)).remote(args.data, lr, args.steps)
        for i, lr in enumerate(lrs)])
    for result in results:
        print(json.dumps({"event": "trial", **result}), flush=True)
    best = min(results, key=lambda r: float(r["loss"]))  # type: ignore[arg-type]
    print(json.dumps({"event": "best", "lr": best["lr"], "loss": best["loss"]}), flush=True)
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
