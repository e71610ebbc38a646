"""Grafana dashboards of a metalslurm cluster, for sites that run Grafana: the one source of
dashboards/grafana/*.json (``python -m infra.ops.grafana`` writes them, ``--check`` says which
committed file is stale).

They show what the Prometheus consoles show (roles/monitoring/files/consoles/): the cluster
overview and one node, from the recording rules (roles/monitoring/files/metalslurm-recording.yml),
the Slurm exporter's series, the GPU-to-job series of roles/monitoring_node and node_exporter.
Every query goes through the data source variable ``DS_PROMETHEUS``. tests/unit/test_grafana.py
checks the files against this module, the layout, and every query with promtool.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Json = dict[str, Any]

OUT_DIR = Path(__file__).resolve().parents[2] / "dashboards" / "grafana"
SCHEMA_VERSION = 39
WIDTH = 24  # Grafana's grid columns
DS: Json = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
NODE = 'job="node",node="$node"'  # node_exporter's series of the chosen node
REAL_FS = 'fstype!~"tmpfs|ramfs|overlay|squashfs"'
NODE_LINK = "/d/metalslurm-node/metalslurm-node?var-node=${__value.raw}&${DS_PROMETHEUS:queryparam}"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = "__auto"
    instant: bool = False  # a table's query: one value per series, now


@dataclass(frozen=True)
class Panel:
    type: str  # timeseries, stat, table or row
    title: str
    queries: tuple[Query, ...] = ()
    w: int = WIDTH
    h: int = 8
    defaults: Json = field(default_factory=dict)
    options: Json = field(default_factory=dict)
    overrides: tuple[Json, ...] = ()
    transformations: tuple[Json, ...] = ()


def timeseries(title: str, *queries: Query, unit: str = "short", w: int = 12,
               stacked: bool = False, **defaults: Any) -> Panel:
    custom = {"drawStyle": "line", "fillOpacity": 60 if stacked else 10, "lineWidth": 1,
              "showPoints": "never",
              "stacking": {"group": "A", "mode": "normal" if stacked else "none"}}
    return Panel("timeseries", title, queries, w, 8, {"unit": unit, "custom": custom, **defaults},
                 {"legend": {"calcs": ["lastNotNull"], "displayMode": "list",
                             "placement": "bottom", "showLegend": True},
                  "tooltip": {"mode": "multi", "sort": "desc"}})


def stat(title: str, expr: str, unit: str = "short", w: int = 4, legend: str = "__auto",
         names: bool = False, **defaults: Any) -> Panel:
    """One number; ``names`` shows the series' names instead (a node's state, its flags)."""
    return Panel("stat", title, (Query(expr, legend),), w, 4, {"unit": unit, **defaults},
                 {"colorMode": "none" if names else "value",
                  "graphMode": "none" if names else "area", "justifyMode": "auto",
                  "orientation": "auto", "textMode": "name" if names else "value",
                  "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}})


def table(title: str, *queries: Query, w: int = 12, h: int = 8, rename: Json | None = None,
          hide: Sequence[str] = (), sort: str = "", node_link: str = "",
          **defaults: Any) -> Panel:
    """Instant queries side by side (merged on their labels); Time and ``hide`` hidden,
    columns renamed; ``node_link``: the column whose cells open the node dashboard."""
    hidden = dict.fromkeys(("Time", "__name__", "instance", "job", *hide), True)
    steps: list[Json] = [{"id": "organize", "options": {"excludeByName": hidden,
                                                         "renameByName": rename or {}}}]
    if len(queries) > 1:
        steps.insert(0, {"id": "merge", "options": {}})
    links = ({"matcher": {"id": "byName", "options": node_link},
              "properties": [{"id": "links", "value": [
                  {"title": "Node dashboard", "url": NODE_LINK}]}]},) if node_link else ()
    return Panel("table", title, tuple(Query(q.expr, q.legend, True) for q in queries), w, h,
                 {"unit": "short", **defaults},
                 {"showHeader": True, "cellHeight": "sm",
                  "sortBy": [{"desc": True, "displayName": sort}] if sort else []},
                 links, tuple(steps))


def row(title: str) -> Panel:
    return Panel("row", title, w=WIDTH, h=1)


def render_panel(panel: Panel, panel_id: int, x: int, y: int) -> Json:
    grid = {"h": panel.h, "w": panel.w, "x": x, "y": y}
    if panel.type == "row":
        return {"collapsed": False, "gridPos": grid, "id": panel_id, "panels": [],
                "title": panel.title, "type": "row"}
    targets = [{"datasource": DS, "editorMode": "code", "expr": q.expr,
                "format": "table" if q.instant else "time_series", "instant": q.instant,
                "legendFormat": q.legend, "range": not q.instant, "refId": chr(ord("A") + i)}
               for i, q in enumerate(panel.queries)]
    return {"datasource": DS, "fieldConfig": {"defaults": panel.defaults,
                                              "overrides": list(panel.overrides)},
            "gridPos": grid, "id": panel_id, "options": panel.options, "targets": targets,
            "title": panel.title, "transformations": list(panel.transformations),
            "type": panel.type}


def layout(panels: Sequence[Panel]) -> list[Json]:
    """Left to right, a new line where a panel no longer fits or a row starts; ids in order."""
    rendered, x, y, line_h = [], 0, 0, 0
    for panel_id, panel in enumerate(panels, start=1):
        if x + panel.w > WIDTH or (panel.type == "row" and x):
            x, y, line_h = 0, y + line_h, 0
        rendered.append(render_panel(panel, panel_id, x, y))
        x, line_h = x + panel.w, max(line_h, panel.h)
    return rendered


DATASOURCE_VARIABLE: Json = {
    "current": {}, "hide": 0, "includeAll": False, "label": "Prometheus", "multi": False,
    "name": "DS_PROMETHEUS", "options": [], "query": "prometheus", "refresh": 1, "regex": "",
    "skipUrlSync": False, "type": "datasource"}


def dashboard(uid: str, title: str, description: str, panels: Sequence[Panel],
              variables: Sequence[Json] = ()) -> Json:
    return {
        "annotations": {"list": []}, "description": description, "editable": True,
        "graphTooltip": 1, "links": [{"asDropdown": False, "icon": "external link",
                                      "includeVars": False, "keepTime": True,
                                      "tags": ["metalslurm"], "title": "metalslurm",
                                      "type": "dashboards"}],
        "panels": layout(panels), "refresh": "1m", "schemaVersion": SCHEMA_VERSION,
        "tags": ["metalslurm", "slurm"],
        "templating": {"list": [DATASOURCE_VARIABLE, *variables]},
        "time": {"from": "now-6h", "to": "now"}, "timepicker": {}, "timezone": "",
        "title": title, "uid": uid, "version": 1}


def overview() -> Json:
    zero_without_jobs = "or max(0 * slurm_up)"  # 0, not "no data", while the exporter answers
    return dashboard("metalslurm-overview", "metalslurm: cluster overview",
                     "Nodes, GPUs, the queue, GPU-hours per account and drained nodes "
                     "(the console metalslurm-overview.html).", [
        stat("Nodes", "cluster:slurm_nodes:sum"),
        stat("GPUs", 'status:slurm_gpus:sum{status="total"}'),
        stat("GPUs allocated", 'status:slurm_gpus:sum{status="allocated"}'),
        stat("GPU allocation", "cluster:slurm_gpus_allocated:ratio", "percentunit",
             min=0, max=1),
        stat("Jobs running", f'sum(state:slurm_jobs:sum{{state="running"}}) {zero_without_jobs}'),
        stat("Jobs pending", f"sum(cluster:slurm_jobs_pending:sum) {zero_without_jobs}"),
        stat("Slurm exporter up", "slurm_up", min=0, max=1),
        stat("Slurm's last full answer",
             "time() - max(slurm_exporter_last_success_timestamp_seconds)", "s"),
        stat("Longest pending", "max(slurm_jobs_pending_longest_seconds) or max(0 * slurm_up)",
             "s"),
        stat("Nodes drained or draining", 'flag:slurm_nodes_flagged:sum{flag="drain"}'),
        stat("node_exporters up", 'sum(up{job="node"})'),
        stat("Alerts firing", 'count(ALERTS{alertstate="firing"}) or vector(0)'),
        row("Nodes and GPUs"),
        timeseries("Nodes by state", Query("state:slurm_nodes:sum", "{{state}}"), stacked=True),
        timeseries("GPUs by status", Query(
            'status:slurm_gpus:sum{status=~"allocated|idle|unavailable"}', "{{status}}"),
            stacked=True),
        timeseries("GPU allocation by type", Query(
            'sum by (type) (type_status:slurm_gpus:sum{status="allocated"})'
            ' / sum by (type) (type_status:slurm_gpus:sum{status="total"} > 0)', "{{type}}"),
            unit="percentunit", min=0, max=1),
        timeseries("GPUs held by account", Query("account:slurm_job_gpus_allocated:sum",
                                                 "{{account}}"), stacked=True),
        row("Queue"),
        timeseries("Pending jobs by reason", Query("reason:slurm_jobs_pending:sum", "{{reason}}"),
                   w=8, stacked=True),
        timeseries("Pending jobs by partition", Query("partition:slurm_jobs_pending:sum",
                                                      "{{partition}}"), w=8, stacked=True),
        timeseries("Jobs by state", Query("state:slurm_jobs:sum", "{{state}}"), w=8),
        row("Accounts and drained nodes"),
        table("GPU-hours this week, top accounts",
              Query("sort_desc(topk(10, account:slurm_gpu_seconds:increase1w / 3600))"),
              Query("(account:slurm_job_gpus_allocated:sum"
                    " or 0 * account:slurm_gpu_seconds:increase1w)"
                    " and on (account) topk(10, account:slurm_gpu_seconds:increase1w)"),
              rename={"account": "Account", "Value #A": "GPU-hours (7 days)",
                      "Value #B": "GPUs held now"},
              sort="GPU-hours (7 days)", decimals=1),
        table("Drained nodes",
              Query("max by (node, owner, reason) (slurm_node_drain_info == 1)"),
              rename={"node": "Node", "owner": "By", "reason": "Reason"}, hide=["Value"],
              node_link="Node",
              noValue="No node is drained."),
        row("Nodes"),
        table("Nodes: base state and GPUs", Query(
            "max by (node, state) ((slurm_node_state == 1) * 0 + on (node) group_left ()"
            " sum by (node) (slurm_node_gpus) or (slurm_node_state == 1) * 0)"),
            w=WIDTH, h=10, rename={"node": "Node", "state": "State", "Value": "GPUs"},
            node_link="Node"),
    ])


def node() -> Json:
    variable = {
        "current": {}, "datasource": DS, "definition": "label_values(slurm_node_state, node)",
        "hide": 0, "includeAll": False, "label": "Node", "multi": False, "name": "node",
        "options": [], "query": "label_values(slurm_node_state, node)", "refresh": 2,
        "regex": "", "skipUrlSync": False, "sort": 1, "type": "query"}
    held = 'node="$node"'
    return dashboard("metalslurm-node", "metalslurm: node",
                     "One node: its Slurm state and drain reason, its GPUs and the jobs that "
                     "hold them, node_exporter's CPU, memory and disks (the console "
                     "metalslurm-node.html).", [
        stat("Slurm state", f"max by (state) (slurm_node_state{{{held}}} == 1)", legend="{{state}}",
             names=True, noValue="not in the exporter's answer"),
        stat("Flags", f"max by (flag) (slurm_node_flag{{{held}}} == 1)", legend="{{flag}}",
             w=8, names=True, noValue="none"),
        stat("GPUs", f"sum(slurm_node_gpus{{{held}}})", noValue="0"),
        stat("GPUs allocated", f"sum(slurm_node_gpus_allocated{{{held}}})", noValue="0"),
        stat("node_exporter up", f"up{{{NODE}}}", min=0, max=1),
        table("Drain reason",
              Query(f"max by (owner, reason) (slurm_node_drain_info{{{held}}} == 1)"), w=WIDTH, h=4,
              rename={"owner": "Drained by", "reason": "Reason"}, hide=["Value"],
              noValue="Not drained."),
        row("GPUs held by jobs"),
        table("GPUs held by jobs", Query(
            "max by (gpu, UUID, jobid, user, account, partition)"
            f" (metalslurm_gpu_job_info{{{held}}})"),
            rename={"gpu": "GPU", "jobid": "Job", "user": "User", "account": "Account",
                    "partition": "Partition"}, noValue="No job holds a GPU here."),
        timeseries("GPU utilisation, by job (DCGM)", Query(
            f"gpu:dcgm_gpu_util:job{{{held}}}", "GPU {{gpu}}: job {{jobid}} ({{user}})"),
            unit="percent", min=0, max=100),
        timeseries("GPU memory used, by job (DCGM)", Query(
            f"gpu:dcgm_fb_used_bytes:job{{{held}}}", "GPU {{gpu}}: job {{jobid}}"), unit="bytes"),
        timeseries("GPU power, by job (DCGM)", Query(
            f"gpu:dcgm_power_watts:job{{{held}}}", "GPU {{gpu}}: job {{jobid}}"), unit="watt"),
        row("CPU, memory and disks (node_exporter)"),
        stat("CPU used", "1 - avg(rate(node_cpu_seconds_total{"
             f'{NODE},mode="idle"}}[$__rate_interval]))', "percentunit", w=6, min=0, max=1),
        stat("Memory available", f"node_memory_MemAvailable_bytes{{{NODE}}}", "bytes", w=6),
        stat("Load (1m)", f"node_load1{{{NODE}}}", w=6),
        stat("Up for", f"time() - node_boot_time_seconds{{{NODE}}}", "s", w=6),
        timeseries("CPU by mode", Query("sum by (mode) (rate(node_cpu_seconds_total{"
                                        f'{NODE},mode!="idle"}}[$__rate_interval]))', "{{mode}}"),
                   unit="short", stacked=True),
        timeseries("Memory", Query(f"node_memory_MemTotal_bytes{{{NODE}}}"
                                   f" - node_memory_MemAvailable_bytes{{{NODE}}}", "used"),
                   Query(f"node_memory_MemAvailable_bytes{{{NODE}}}", "available"),
                   unit="bytes", stacked=True),
        timeseries("Disk space free", Query(
            f"node_filesystem_avail_bytes{{{NODE},{REAL_FS}}}"
            f" / node_filesystem_size_bytes{{{NODE},{REAL_FS}}}", "{{mountpoint}}"),
            unit="percentunit", min=0, max=1),
        table("Disks", Query("max by (mountpoint, device, fstype)"
                             f" (node_filesystem_size_bytes{{{NODE},{REAL_FS}}})"),
              Query("max by (mountpoint, device, fstype)"
                    f" (node_filesystem_avail_bytes{{{NODE},{REAL_FS}}})"),
              rename={"mountpoint": "Mount point", "device": "Device", "fstype": "Type",
                      "Value #A": "Size", "Value #B": "Free"}, unit="bytes"),
    ], [variable])


DASHBOARDS = {"metalslurm-overview.json": overview, "metalslurm-node.json": node}


def render(dashboard_json: Json) -> str:
    return json.dumps(dashboard_json, indent=2, sort_keys=True) + "\n"


def rendered() -> dict[str, str]:
    """File name -> its text, as ``main`` writes it."""
    return {name: render(build()) for name, build in DASHBOARDS.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.ops.grafana", description=__doc__)
    parser.add_argument("directory", nargs="?", type=Path, default=OUT_DIR,
                        help="where the JSON files go (default: dashboards/grafana/)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a file there differs from this source")
    args = parser.parse_args(argv)
    stale = []
    for name, text in rendered().items():
        path = args.directory / name
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(path)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for path in stale:
        print(f"{path} is stale: run 'python -m infra.ops.grafana' and commit it", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
