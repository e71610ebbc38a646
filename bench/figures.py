"""What the alternating benchmarks print at their end: each way's median wall time and
CPU-seconds, and one way's over another's."""

from __future__ import annotations

import statistics


def print_medians(figures: dict[str, list[tuple[float, float]]], after: str,
                  before: str) -> None:
    """``figures``: each way's (wall s, CPU-s) per run; prints the medians, then
    ``after`` / ``before``."""
    medians = {way: (statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs))
               for way, runs in figures.items()}
    for way, (wall, cpu) in medians.items():
        print(f"median, {way}: {wall:.1f} s, {cpu:.1f} CPU-s")
    print(f"{after} / {before}: wall {medians[after][0] / medians[before][0]:.2f}, "
          f"CPU {medians[after][1] / medians[before][1]:.2f}")
