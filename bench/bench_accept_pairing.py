"""Rounds and jobs the acceptance gate's pairwise tests need to name the bad nodes of a fleet
(infra/accept/pairing.py), simulated: a test passes when neither of its two nodes is bad.

For 8, 64 and 512 nodes under test and 1, 2 and 5 % bad nodes placed at random (``--trials``
placements each, seeded), it prints the median and worst rounds and jobs, how often every
node was named right (bad as bad, good as good, none left inconclusive), and the ratios to
two plans measured in the same run:

- against one reference node: each node under test paired with the same known-good node,
  one job after the other (n jobs, n rounds: a node takes one test at a time);
- all pairs: every pair of nodes once, as rounds of a round-robin (n(n-1)/2 jobs, n-1 rounds),
  which names every bad node without a reference but costs quadratically.

    .venv/bin/python -m bench.bench_accept_pairing [--trials 200] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import statistics

from infra.accept.pairing import BAD, GOOD, isolate

SIZES = (8, 64, 512)


def bad_counts(n: int) -> list[int]:
    return sorted({1, 2, max(1, round(n * 0.05))})


def trial(n: int, bad_count: int, rng: random.Random) -> tuple[int, int, bool]:
    nodes = [f"gpu-{i:04d}" for i in range(n)]
    bad = set(rng.sample(nodes, bad_count))
    plan = isolate(nodes, lambda a, b: a not in bad and b not in bad)
    right = plan.verdicts() == {node: BAD if node in bad else GOOD for node in nodes}
    return len(plan.rounds), plan.jobs, right


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_accept_pairing")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    print(f"{'nodes':>5} {'bad':>4} | {'rounds med/max':>14} {'jobs med/max':>13} "
          f"{'named right':>11} | {'jobs / 1-ref':>12} {'rounds / 1-ref':>14} "
          f"{'jobs / all-pairs':>16} {'rounds / all-pairs':>18}")
    for n in SIZES:
        for bad_count in bad_counts(n):
            runs = [trial(n, bad_count, rng) for _ in range(args.trials)]
            rounds = [r for r, _j, _ok in runs]
            jobs = [j for _r, j, _ok in runs]
            right = sum(ok for _r, _j, ok in runs) / len(runs)
            med_rounds, med_jobs = statistics.median(rounds), statistics.median(jobs)
            all_pairs_jobs, all_pairs_rounds = n * (n - 1) // 2, n - 1
            print(f"{n:>5} {bad_count:>4} | {med_rounds:>6.0f} / {max(rounds):<5} "
                  f"{med_jobs:>6.0f} / {max(jobs):<5} {right:>10.0%} | "
                  f"{med_jobs / n:>12.3f} {med_rounds / n:>14.4f} "
                  f"{med_jobs / all_pairs_jobs:>16.4f} {med_rounds / all_pairs_rounds:>18.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
