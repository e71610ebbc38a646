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
    ("finish_s", "release to all done (s)", 1.0),
    ("sinfo_ms_p95", "a user's sinfo during it, p95 (ms)", 1.0),
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
    fig, axes = plt.subplots(2, 4, figsize=(16, 7))
    for ax, (key, label, scale) in zip(axes.flat, BURST_PANELS, strict=True):
        for variant, style in (("untuned", "o--"), ("tuned", "s-")):
            xs, ys = _series(sizes, variant, key, scale)
            ax.plot(xs, ys, style, label="before tuning" if variant == "untuned" else "tuned")
        ax.set_xlabel("simulated 8-GPU nodes")
        ax.set_ylabel(label)
        ax.set_xscale("log", base=2)
        ax.grid(True, alpha=0.3)
    axes.flat[0].legend()
    held = " (submitted held, released at once)" if sizes[0].get("tuned", {}).get("held") else ""
    fig.suptitle(f"Scale lab: a burst of {jobs:,} one-node jobs{held}, Slurm 24.11, 2 CPU cores "
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


# Short states (sinfo %t) in the elastic timeline, in the order drawn: label, states.
ELASTIC_BANDS = (
    ("powered down (idle~)", ("idle~",)),
    ("allocated, resume not issued yet (~)", ("alloc~", "mix~", "comp~")),
    ("powering up (#)", ("alloc#", "mix#", "idle#", "comp#")),
    ("allocated", ("alloc", "mix", "comp")),
    ("idle, powered up", ("idle",)),
    ("powering down (%, !)", ("idle%", "idle!", "down%", "down!", "alloc!", "mix!")),
    ("down / drained", ("down", "down~", "down*", "drain", "drng", "drain~", "idle*")),
)


def draw_elastic(result: Mapping[str, Any], path: Path) -> Path:
    """scale-elastic.png: nodes by state against seconds since the job's submission, with
    the ResumeProgram and SuspendProgram calls (their node counts) below."""
    timeline = result["timeline"]
    ts = [row["t"] for row in timeline]
    known = {s for _, states in ELASTIC_BANDS for s in states}
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 1.3]})
    for label, states in ELASTIC_BANDS:
        ys = [sum(row.get(s, 0) for s in states) for row in timeline]
        if any(ys):
            top.plot(ts, ys, label=label)
    other = [sum(v for k, v in row.items() if k not in known and k not in ("t", "job"))
             for row in timeline]
    if any(other):
        top.plot(ts, other, ":", label="other states")
    job = result["job"]
    for x, text in ((job.get("running_after_s"), "job running"),
                    (job.get("done_after_s"), "job done")):
        if x:
            top.axvline(x, color="grey", linestyle="--", linewidth=0.8)
            top.annotate(text, (x, top.get_ylim()[1] * 0.95), rotation=90, fontsize=8,
                         ha="right", va="top")
    top.set_ylabel("nodes")
    top.grid(True, alpha=0.3)
    top.legend(fontsize=8, loc="center right")
    for key, style, label in (("resume", "C0", "ResumeProgram"),
                              ("suspend", "C3", "SuspendProgram")):
        calls = result[key]
        if calls.get("calls"):
            bottom.bar(calls["at_s"], calls["sizes"], width=1.5, color=style,
                       label=f"{label}: {calls['calls']} calls, {calls['nodes']} nodes")
    bottom.set_ylabel("nodes per call")
    bottom.set_xlabel("seconds since the job was submitted")
    bottom.grid(True, alpha=0.3)
    bottom.legend(fontsize=8)
    s = result["settings"]
    fig.suptitle(f"Scale lab: a {result['job_nodes']}-node job on {result['nodes']} powered-down "
                 f"CLOUD nodes, the real power programs\nResumeRate {s['ResumeRate']}/min, "
                 f"SuspendRate {s['SuspendRate']}/min, SuspendTime {s['SuspendTime']} s; the "
                 f"machines answer after {result['delay_s']} s, every {result['fail_every']}th "
                 f"start fails ({result['fail_mode']})", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
