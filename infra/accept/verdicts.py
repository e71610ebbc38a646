"""The acceptance gate's verdicts: a figure against its fixed floor, the fleet's median and the
node's own past, and the history those medians come from.

The history is JSON lines on the controller's own disk (HISTORY_PATH in
infra/accept/gate.py), one measurement a line, appended by every gate run: a repaired node
is compared with the rest of its hardware type and with what it measured itself before. A
fixed floor (Azure's health checks' 460 GB/s for an H100 node's NCCL all_reduce, say)
catches a broken node; the fleet-relative check catches the one that passes the floor but
is well below its siblings (one throttling GPU costs a 64-node job its pace).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

from ansible_collections.metalslurm.cluster.plugins.module_utils.cluster_defaults import (
    ACCEPT_REASON_PREFIX as REASON_PREFIX,  # the roles drain into the gate with it too
)

PASS_FAIL_UNIT = "failed tests"  # the unit of a pass/fail test's figure (DCGM's diagnostic)
DEFAULT_FRACTION = 0.10
DEFAULT_MIN_SAMPLES = 3
DEFAULT_WINDOW_DAYS = 90


@dataclass(frozen=True)
class Measurement:
    """One test's figure on one node (``value`` None: the test did not give one, and
    ``error`` says why: "timed out", "no result in its output")."""

    run: str
    time: str  # ISO 8601, UTC
    node: str
    test: str  # nccl_1node, nccl_pair, ib_write_bw:mlx5_0, dcgm_diag
    hardware: str  # the GPU or HCA type the thresholds are keyed by
    value: float | None
    unit: str
    error: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@dataclass(frozen=True)
class Verdict:
    measurement: Measurement
    floor: float | None
    fleet_median: float | None
    own_median: float | None
    passed: bool
    reason: str  # empty when passed; what the drain reason says after the prefix

    def to_json(self) -> str:
        """A history line: the measurement's fields and the verdict's."""
        return json.dumps({**asdict(self.measurement), "floor": self.floor,
                           "fleet_median": self.fleet_median, "own_median": self.own_median,
                           "passed": self.passed, "reason": self.reason}, sort_keys=True)

    @classmethod
    def from_json(cls, line: str) -> Verdict:
        doc = json.loads(line)
        if not isinstance(doc, dict):
            raise ValueError("not an object")
        verdict = {k: doc.pop(k) for k in ("floor", "fleet_median", "own_median", "passed",
                                           "reason") if k in doc}
        m = Measurement(**doc)
        datetime.fromisoformat(m.time)
        return cls(m, verdict.get("floor"), verdict.get("fleet_median"),
                   verdict.get("own_median"), bool(verdict.get("passed", True)),
                   str(verdict.get("reason", "")))


def _figure(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def judge(m: Measurement, floor: float | None, history: Sequence[Measurement],
          fraction: float = DEFAULT_FRACTION,
          min_samples: int = DEFAULT_MIN_SAMPLES) -> Verdict:
    """``m`` against ``floor`` and the medians of ``history`` (the same test on the same
    hardware; the node's own past for the own median, everyone else's for the fleet's).
    A median needs ``min_samples`` figures; with fewer it is not judged against."""
    same = [h for h in history if h.test == m.test and h.hardware == m.hardware
            and (h.node, h.run) != (m.node, m.run)]
    fleet = [h.value for h in same if h.value is not None and h.node != m.node]
    own = [h.value for h in same if h.value is not None and h.node == m.node]
    fleet_median = statistics.median(fleet) if len(fleet) >= min_samples else None
    own_median = statistics.median(own) if len(own) >= min_samples else None
    verdict = Verdict(m, floor, fleet_median, own_median, True, "")
    share = f"{100 - fraction * 100:.0f}%"
    if m.value is None:
        reason = f"{m.test} {m.error or 'gave no figure'}"
    elif floor is not None and m.value < floor:
        reason = f"{m.test} {_figure(m.value)} {m.unit} < {_figure(floor)}"
    elif fleet_median is not None and m.value < (1 - fraction) * fleet_median:
        reason = (f"{m.test} {_figure(m.value)} {m.unit} < {share} of fleet median "
                  f"{_figure(fleet_median)}")
    elif own_median is not None and m.value < (1 - fraction) * own_median:
        reason = (f"{m.test} {_figure(m.value)} {m.unit} < {share} of own median "
                  f"{_figure(own_median)}")
    else:
        return verdict
    return replace(verdict, passed=False, reason=reason)


def drain_reason(verdicts: Iterable[Verdict]) -> str:
    """The reason a failing node keeps: the prefix and each failed test's figure."""
    failed = [v.reason for v in verdicts if not v.passed]
    return f"{REASON_PREFIX} {'; '.join(failed)}" if failed else ""


# ---- the history ---------------------------------------------------------------------------


def read_verdicts_text(text: str, now: datetime, window_days: int = DEFAULT_WINDOW_DAYS,
                       ) -> tuple[list[Verdict], int]:
    """The history's lines of the last ``window_days`` and how many lines were unreadable
    (a line cut by a full disk, say: skipped, counted, never fatal)."""
    since = now - timedelta(days=window_days)
    out, bad = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            v = Verdict.from_json(line)
        except (ValueError, TypeError):
            bad += 1
            continue
        if datetime.fromisoformat(v.measurement.time) >= since:
            out.append(v)
    return out, bad


def read_history_text(text: str, now: datetime, window_days: int = DEFAULT_WINDOW_DAYS,
                      ) -> tuple[list[Measurement], int]:
    """The measurements of :func:`read_verdicts_text`."""
    verdicts, bad = read_verdicts_text(text, now, window_days)
    return [v.measurement for v in verdicts], bad


def read_history(path: Path, now: datetime, window_days: int = DEFAULT_WINDOW_DAYS,
                 ) -> tuple[list[Measurement], int]:
    """:func:`read_history_text` of a file (none yet: an empty history)."""
    if not path.exists():
        return [], 0
    return read_history_text(path.read_text(errors="replace"), now, window_days)


def append_history(path: Path, records: Iterable[Measurement | Verdict]) -> None:
    """Append one line per record (one write: lines of concurrent runs do not mix)."""
    text = "".join(r.to_json() + "\n" for r in records)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(text)


def judge_check(m: Measurement, problem: str) -> Verdict:
    """A pass/fail test (DCGM's diagnostic): failed when ``problem`` (or ``m.error``) says
    why; its value is the count of failed results, never compared with a median."""
    reason = problem or (m.error and f"{m.test} {m.error}") or ""
    if m.value is None and not reason:
        reason = f"{m.test} gave no result"
    return Verdict(m, None, None, None, not reason, reason)
