"""Read the power programs' JSON-lines log (metalslurm-power.log) for the resume benchmark.

``resume_timeline(events, node)`` gives, for the last resume of ``node``, the epoch times the
benchmark splits submit-to-start latency with:

- ``invoked``: slurmctld started the ResumeProgram (first line the program writes);
- ``driver_start`` / ``driver_end``: the power driver call for the batch holding the node;
- ``powered_on``: the node's ``power_on`` result (with ``address`` when the driver gave one);
- ``nodeaddr_set``: ``scontrol update nodeaddr=...`` done (None when addresses are static).

slurmd registration is not in this log: take it from ``scontrol show node`` (SlurmdStartTime)
or poll until the node leaves POWERING_UP. Usage: ``python bench/power_log.py LOG NODE``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def read_events(path: str | Path) -> list[dict[str, Any]]:
    events = []
    for line in Path(path).read_text().splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue  # e.g. a Python warning printed to the log by a library
    return events


def resume_timeline(events: list[dict[str, Any]], node: str) -> dict[str, float | None] | None:
    runs = [e["run"] for e in events if e.get("program") == "resume"
            and e.get("event") == "worker_start" and node in (e.get("nodes") or [])]
    if not runs:
        return None
    run = [e for e in events if e.get("run") == runs[-1]]

    def first(pred: Any) -> dict[str, Any] | None:
        return next((e for e in run if pred(e)), None)

    invoked = first(lambda e: e["event"] == "invoked")
    powered = first(lambda e: e["event"] == "power_on" and e.get("node") == node)
    start = first(lambda e: e["event"] == "driver_start" and e.get("action") == "power_on"
                  and node in (e.get("nodes") or []))
    end = first(lambda e: e["event"] == "driver_end" and e.get("action") == "power_on"
                and start is not None and e.get("batch") == start.get("batch")
                and e.get("driver") == start.get("driver"))
    addr = first(lambda e: e["event"] == "scontrol_update" and node in (e.get("nodes") or [])
                 and any(a.startswith("nodeaddr=") for a in e.get("args", [])))
    return {
        "invoked": invoked["t"] if invoked else None,
        "driver_start": start["t"] if start else None,
        "driver_end": end["t"] if end else None,
        "powered_on": powered["t"] if powered else None,
        "ok": powered.get("ok") if powered else None,
        "nodeaddr_set": addr["t"] if addr else None,
    }


if __name__ == "__main__":
    print(json.dumps(resume_timeline(read_events(sys.argv[1]), sys.argv[2]), indent=2))
