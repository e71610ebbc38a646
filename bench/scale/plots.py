"""The scale lab's plots, from its results (bench/scale/__main__.py): PNGs for the README."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

# (key in a burst's summary, axis label, scale to the unit shown)
BURST_PANELS = (
    ("submits_per_s", "submissions / s", 1.0),
    ("starts_per_s", "job starts / s", 1.0),
    ("main_mean_cycle_us", "main scheduler mean cycle (ms)", 1e-3),
    ("bf_mean_cycle_us", "backfill mean cycle (ms)", 1e-3),
    ("slurmctld_cpu_s", "slurmctld CPU for the burst (s)", 1.0),
    ("slurmctld_peak_rss_mib", "slurmctld peak memory (MiB)", 1.0),
)


def _series(sizes: Sequence[Mapping[str, Any]], variant: str, key: str, scale: float
            ) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for row in sizes:
        value = row.get(variant, {}).get(key)
        if value is not None:
            xs.append(row["nodes"])
            ys.append(value * scale)
    return xs, ys


def draw(results: Mapping[str, Any], out: Path) -> list[Path]:
    """scale-throughput.png (the burst before and after the size tuning) and scale-up.png
    (start-up and memory against nodes); returns the files written."""
    sizes = results.get("sizes") or []
    if not sizes:
        return []
    jobs = sizes[0].get("tuned", {}).get("jobs", 0)
    fig, axes = plt.subplots(2, 3, figsize=(13, 7))
    for ax, (key, label, scale) in zip(axes.flat, BURST_PANELS, strict=True):
        for variant, style in (("untuned", "o--"), ("tuned", "s-")):
            xs, ys = _series(sizes, variant, key, scale)
            ax.plot(xs, ys, style, label="before tuning" if variant == "untuned" else "tuned")
        ax.set_xlabel("simulated 8-GPU nodes")
        ax.set_ylabel(label)
        ax.set_xscale("log", base=2)
        ax.grid(True, alpha=0.3)
    axes.flat[0].legend()
    fig.suptitle(f"Scale lab: a burst of {jobs:,} one-node jobs, Slurm 24.11, 2 CPU cores "
                 f"({results.get('when', '')})")
    fig.tight_layout()
    written = [out / "scale-throughput.png"]
    fig.savefig(written[0], dpi=90)
    plt.close(fig)

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    xs = [r["nodes"] for r in sizes]
    left.plot(xs, [r["tree"]["up_s"] for r in sizes], "o-", label="start to all idle")
    left.plot(xs, [r["tree"]["render_s"] for r in sizes], "s--", label="render (ansible)")
    left.set_ylabel("seconds")
    right.plot(xs, [r["slurmd_pss_mib"] for r in sizes], "o-", label="all slurmd (PSS)")
    right.plot(xs, [r["slurmctld_idle"]["rss_kib"] / 1024 for r in sizes], "s--",
               label="slurmctld (RSS)")
    right.set_ylabel("MiB")
    for ax in (left, right):
        ax.set_xlabel("simulated 8-GPU nodes")
        ax.set_xscale("log", base=2)
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle("Scale lab: bring-up and memory")
    fig.tight_layout()
    written.append(out / "scale-up.png")
    fig.savefig(written[1], dpi=90)
    plt.close(fig)
    return written
