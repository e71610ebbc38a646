"""``metalslurm accept``: the acceptance gate on an inventory's nodes, and its reports.

The inputs (inventory, node names, --html) are checked here before anything runs on a node;
the gate itself is :mod:`infra.accept.gate`.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra.accept.gate import HISTORY_PATH, Gate, gate_nodes, read_history_file
from infra.accept.remote import Remote
from infra.accept.report import format_table, render_html
from infra.accept.verdicts import read_verdicts_text
from infra.ops.inventory_file import INVENTORY_FILE, hosts_in_group, load_inventory
from infra.ops.output import say
from infra.stack.accept import settings_from_inventory
from infra.stack.inputs import InputError, parse_hostlist, read_text_argument

if TYPE_CHECKING:
    from infra.accept.gate import GateSettings


def _setup(inventory: Path,
           level: str | None) -> tuple[dict[str, Any], GateSettings, Remote]:
    """The inventory's compute nodes, the gate's settings and a connection to the
    controller; every input checked first (nothing runs on a node before)."""
    document = load_inventory(inventory, "--inventory")
    controller = hosts_in_group(inventory, "slurm_controller")[0]
    nodes = gate_nodes(document)
    if not nodes:
        raise InputError("--inventory", f"has no host in group slurm_compute; give "
                         f"{INVENTORY_FILE}", inventory)
    all_vars = (document.get("all") or {}).get("vars") or {}
    settings = settings_from_inventory(all_vars, level)
    host_vars = {**all_vars, **(((document.get("all") or {}).get("hosts") or {}).get(
        controller) or {})}
    return nodes, settings, Remote(controller, host_vars)


def check_html_argument(path: Path | None) -> None:
    """--html names a page to write: a new file, or one this command wrote (an HTML page);
    anything else there is not overwritten."""
    if path is None:
        return
    what = "a new file name, or a page 'metalslurm accept' wrote, for the report"
    if path.exists() or path.is_symlink():
        text = read_text_argument(path, "--html", what, allow_empty=True)
        if text and not text.startswith("<!DOCTYPE html>"):
            raise InputError("--html", f"is a file that is not an HTML page; give {what}", path)
    elif not path.parent.is_dir():
        raise InputError("--html", f"is in {path.parent}, which is not a directory; give {what}",
                         path)


def _report_path(html: Path | None, inventory: Path, run: str) -> Path:
    return html or inventory.resolve().parent / "accept" / f"{run}.html"


def run_gate(inventory: Path | None, *, nodes: str | None, level: str | None,
             html: Path | None) -> int:
    """The acceptance gate on the named nodes, or on those drained with its prefix."""
    check_html_argument(html)
    if inventory is None:
        raise InputError("--inventory", f"is required: give {INVENTORY_FILE}")
    compute, settings, remote = _setup(inventory, level)
    requested = parse_hostlist(nodes, "--nodes") if nodes else None
    if requested:
        unknown = [n for n in requested if n not in compute]
        if unknown:
            raise InputError("--nodes", f"names {', '.join(unknown)}, not compute nodes of the "
                             f"inventory ({', '.join(sorted(compute))}); give compute nodes",
                             nodes)
    try:
        gate = Gate(remote, settings, compute, log=say)
        result = gate.run(requested)
        if not result.tested:
            say("no node to test" + ("" if requested else
                                     " (none is drained with 'metalslurm-accept:')"))
            return 0
        history, _bad = gate.history()
        sys.stdout.write(format_table(result.verdicts))
        html_path = _report_path(html, inventory, result.run)
        html_path.parent.mkdir(parents=True, exist_ok=True)
        earlier = [m for m in history if m.run != result.run]  # the fleet before this run
        html_path.write_text(render_html(result.verdicts, earlier,
                                         f"metalslurm acceptance gate, run {result.run}"))
    finally:
        remote.close()
    per_node = result.seconds / len(result.tested)
    say(f"{len(result.passed)} passed, {len(result.drained)} drained; {result.rounds} "
        f"two-node rounds, {result.jobs} jobs, {result.seconds:.1f} s ({per_node:.1f} s a "
        f"node); report: {html_path}")
    return 1 if result.drained else 0


def report_run(inventory: Path, *, run: str | None, html: Path | None) -> int:
    """The table and HTML page of a run (default: the last) from the gate's history."""
    check_html_argument(html)
    _nodes, settings, remote = _setup(inventory, None)
    try:
        text = read_history_file(remote)
    finally:
        remote.close()
    records, _bad = read_verdicts_text(text, datetime.now(UTC), settings.history_days)
    history = [r.measurement for r in records]
    runs = sorted({m.run for m in history})
    if not runs:
        raise InputError("--inventory", f"the gate's history ({HISTORY_PATH} on the controller) "
                         f"has no run in the last {settings.history_days} days; run "
                         "'metalslurm accept' first", inventory)
    run = run or runs[-1]
    if run not in runs:
        raise InputError("--run", f"is not a run of the history; the runs are "
                         f"{', '.join(runs[-10:])}", run)
    verdicts = [r for r in records if r.measurement.run == run]
    sys.stdout.write(format_table(verdicts))
    html_path = _report_path(html, inventory, run)
    html_path.parent.mkdir(parents=True, exist_ok=True)
    html_path.write_text(render_html(verdicts, [m for m in history if m.run != run],
                                     f"metalslurm acceptance gate, run {run}"))
    say(f"report: {html_path}")
    return 0
