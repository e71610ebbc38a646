"""The acceptance gate's results for people: a table per node for the terminal, and one
self-contained HTML page (inline SVG, no script, no network) with a plot per test: each
node's figure against the floor, over the fleet's spread from the history.
"""

from __future__ import annotations

import html
import statistics
from collections import defaultdict
from collections.abc import Sequence

from infra.accept.verdicts import PASS_FAIL_UNIT, Measurement, Verdict

PASS_COLOUR, FAIL_COLOUR, FLOOR_COLOUR, FLEET_COLOUR = "#1a7f37", "#cf222e", "#9a6700", "#d0d7de"


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _figure(m: Measurement) -> str:
    return _num(m.value) if m.value is not None else m.error or "-"


def format_table(verdicts: Sequence[Verdict]) -> str:
    """One line per node and test: figure, floor, fleet median, own median, verdict."""
    header = ("node", "test", "figure", "unit", "floor", "fleet median", "own median", "verdict")
    rows = [header]
    for v in sorted(verdicts, key=lambda v: (v.measurement.node, v.measurement.test)):
        m = v.measurement
        rows.append((m.node, m.test, _figure(m),
                     m.unit, _num(v.floor), _num(v.fleet_median), _num(v.own_median),
                     "pass" if v.passed else f"FAIL: {v.reason}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    lines = ("  ".join(cell.ljust(w) for cell, w in zip(r[:-1], widths, strict=True))
             + "  " + r[-1] for r in rows)
    return "\n".join(lines) + "\n"


def _plot(test: str, verdicts: Sequence[Verdict], history: Sequence[Measurement]) -> str:
    """An SVG strip plot of one test: a dot per node, the floor as a line, the fleet's
    history as a band from its lowest to its highest figure with the median marked."""
    width, height, left, right, top, bottom = 720, 260, 60, 20, 20, 70
    figures = [v.measurement.value for v in verdicts if v.measurement.value is not None]
    hardware = {v.measurement.hardware for v in verdicts}
    fleet = [h.value for h in history if h.test == test and h.hardware in hardware
             and h.value is not None]
    floors = [v.floor for v in verdicts if v.floor is not None]
    values = figures + fleet + floors
    if not values:
        return f"<p>{html.escape(test)}: no figures (every run failed before measuring).</p>"
    # Zoomed to the figures (a strip plot, not bars): a node 10 % below its siblings shows.
    spread = max(values) - min(values) or max(values) * 0.1 or 1.0
    low, high = max(0.0, min(values) - 0.25 * spread), max(values) + 0.25 * spread
    plot_h = height - top - bottom

    def y(value: float) -> float:
        return top + plot_h - (value - low) / (high - low) * plot_h

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="{html.escape(test)}">',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#57606a"/>',
             f'<line x1="{left}" y1="{top + plot_h}" x2="{width - right}" y2="{top + plot_h}" '
             'stroke="#57606a"/>']
    for tick in (low, (low + high) / 2, high):
        parts.append(f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end" '
                     f'font-size="11">{_num(tick)}</text>')
    if fleet:
        parts.append(f'<rect x="{left}" y="{y(max(fleet)):.1f}" width="{width - left - right}" '
                     f'height="{max(1.0, y(min(fleet)) - y(max(fleet))):.1f}" '
                     f'fill="{FLEET_COLOUR}" opacity="0.6"><title>fleet history: {len(fleet)} '
                     f'figures, {_num(min(fleet))} to {_num(max(fleet))}</title></rect>')
        median = statistics.median(fleet)
        parts.append(f'<line x1="{left}" y1="{y(median):.1f}" x2="{width - right}" '
                     f'y2="{y(median):.1f}" stroke="#57606a" stroke-dasharray="4 3"/>'
                     f'<text x="{width - right}" y="{y(median) - 4:.1f}" text-anchor="end" '
                     f'font-size="11">fleet median {_num(median)}</text>')
    for floor in sorted(set(floors)):
        parts.append(f'<line x1="{left}" y1="{y(floor):.1f}" x2="{width - right}" '
                     f'y2="{y(floor):.1f}" stroke="{FLOOR_COLOUR}" stroke-width="2"/>'
                     f'<text x="{left + 4}" y="{y(floor) - 4:.1f}" font-size="11" '
                     f'fill="{FLOOR_COLOUR}">floor {_num(floor)}</text>')
    ordered = sorted(verdicts, key=lambda v: v.measurement.node)
    step = (width - left - right) / (len(ordered) + 1)
    for i, v in enumerate(ordered, 1):
        x, m = left + i * step, v.measurement
        colour = PASS_COLOUR if v.passed else FAIL_COLOUR
        label = html.escape(m.node)
        parts.append(f'<text x="{x:.1f}" y="{top + plot_h + 14}" font-size="11" '
                     f'text-anchor="end" transform="rotate(-40 {x:.1f} {top + plot_h + 14})">'
                     f'{label}</text>')
        if m.value is None:
            parts.append(f'<text x="{x:.1f}" y="{top + plot_h - 6}" font-size="14" '
                         f'text-anchor="middle" fill="{FAIL_COLOUR}">&#x2715;<title>{label}: '
                         f'{html.escape(m.error or "no figure")}</title></text>')
            continue
        parts.append(f'<circle cx="{x:.1f}" cy="{y(m.value):.1f}" r="6" fill="{colour}">'
                     f'<title>{label}: {_num(m.value)} {html.escape(m.unit)}</title></circle>')
    parts.append("</svg>")
    return "".join(parts)


def render_html(verdicts: Sequence[Verdict], history: Sequence[Measurement],
                title: str = "metalslurm acceptance gate") -> str:
    by_test: dict[str, list[Verdict]] = defaultdict(list)
    for v in verdicts:
        by_test[v.measurement.test].append(v)
    nodes: dict[str, bool] = {}
    for v in verdicts:
        nodes[v.measurement.node] = nodes.get(v.measurement.node, True) and v.passed
    failed = sorted(n for n, ok in nodes.items() if not ok)
    rows = "".join(
        f'<tr class="{"pass" if v.passed else "fail"}"><td>{html.escape(v.measurement.node)}</td>'
        f"<td>{html.escape(v.measurement.test)}</td><td>{_figure(v.measurement)}</td>"
        f"<td>{html.escape(v.measurement.unit)}</td><td>{_num(v.floor)}</td>"
        f"<td>{_num(v.fleet_median)}</td><td>{_num(v.own_median)}</td>"
        f'<td>{"pass" if v.passed else html.escape(v.reason)}</td></tr>'
        for v in sorted(verdicts, key=lambda v: (v.measurement.node, v.measurement.test)))
    # Pass/fail tests (DCGM's diagnostic: a count of failed results) are in the table only.
    plots = "".join(f"<h2>{html.escape(test)}</h2>{_plot(test, vs, history)}"
                    for test, vs in sorted(by_test.items())
                    if any(v.measurement.unit != PASS_FAIL_UNIT for v in vs))
    runs = sorted({v.measurement.run for v in verdicts})
    summary = (f"{len(nodes) - len(failed)} of {len(nodes)} nodes passed"
               + (f"; failed: {html.escape(', '.join(failed))}" if failed else ""))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: "DejaVu Sans", sans-serif; margin: 24px; color: #1f2328; }}
table {{ border-collapse: collapse; font-size: 13px; }}
td, th {{ border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; }}
tr.fail td {{ background: #ffebe9; }}
.summary {{ font-size: 16px; font-weight: bold; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p class="summary">{summary}</p>
<p>Run {html.escape(", ".join(runs))}. Green: passed; red: failed (the reason is the node's
drain reason). The grey band is the fleet's history of the same test on the same hardware
(lowest to highest, dashed: its median); the amber line is the floor.</p>
{plots}
<h2>Every figure</h2>
<table><tr><th>node</th><th>test</th><th>figure</th><th>unit</th><th>floor</th>
<th>fleet median</th><th>own median</th><th>verdict</th></tr>{rows}</table>
</body></html>
"""
