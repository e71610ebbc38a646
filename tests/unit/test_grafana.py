"""The Grafana dashboards (dashboards/grafana/*.json) and their one source, infra/ops/grafana.py.

Checked here, never in a Grafana: the committed files are what the source writes (and
``--check`` says so, or names the stale file); panel ids are unique and the panels lie on
Grafana's 24-column grid without overlap; every panel queries through the ``DS_PROMETHEUS``
variable; every query parses (``promtool check rules`` on them written as recording rules;
skipped without promtool, from Debian's ``prometheus`` package); every metric a query names
exists: a recording rule, a series the Slurm exporter writes for the recorded outputs under
tests/fixtures/slurm/exporter/, the GPU-to-job series of roles/monitoring_node, or
one of the few node_exporter and Prometheus names listed here.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from functools import cache
from itertools import combinations
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from infra.ops import grafana
from tests.paths import FIXTURES, REPO, ROLES

RECORDING_RULES = ROLES / "monitoring" / "files" / "metalslurm-recording.yml"
EXPORTER = ROLES / "slurm_exporter" / "files" / "metalslurm-slurm-exporter"
GPU_JOBS = ROLES / "monitoring_node" / "files" / "metalslurm-gpu-jobs"
RECORDED = FIXTURES / "slurm" / "exporter"
# Series neither the rules nor metalslurm's programs make: node_exporter's, Prometheus' own.
NODE_EXPORTER = {"node_boot_time_seconds", "node_cpu_seconds_total", "node_filesystem_avail_bytes",
                 "node_filesystem_size_bytes", "node_load1", "node_memory_MemAvailable_bytes",
                 "node_memory_MemTotal_bytes"}
PROMETHEUS = {"ALERTS", "up"}
# Grafana's variables, as a query sees them once Grafana has put a value in.
VARIABLES = {"$__rate_interval": "5m", "$node": "gpu-001"}
NO_PROMTOOL = ("promtool is not on PATH: install Debian's package 'prometheus' (it ships "
               "promtool) to check the dashboards' queries")
# PromQL words that are not metric names (functions are told by the "(" after them).
KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
            "group_right", "offset", "bool", "inf", "nan"}
DASHBOARDS = sorted(grafana.DASHBOARDS)


@cache
def dashboard(name: str) -> dict[str, Any]:
    return grafana.DASHBOARDS[name]()


def panels(name: str) -> list[dict[str, Any]]:
    return dashboard(name)["panels"]


def queries(name: str) -> Iterator[tuple[str, str]]:
    """(where: "panel <id> <refId>", PromQL) of every panel target, Grafana's variables
    filled in."""
    for panel in panels(name):
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in VARIABLES.items():
                expr = expr.replace(variable, value)
            yield f"panel {panel['id']} {target['refId']}", expr


# ---- the files are the source's ------------------------------------------------------------

@pytest.mark.parametrize("name", DASHBOARDS)
def test_committed_file_is_what_the_source_writes(name):
    path = grafana.OUT_DIR / name
    assert path.read_text() == grafana.rendered()[name], \
        f"{path.relative_to(REPO)} is stale: run 'python -m infra.ops.grafana'"


def test_check_passes_on_a_fresh_directory_and_names_a_stale_file(tmp_path, capsys):
    assert grafana.main([str(tmp_path)]) == 0
    assert grafana.main([str(tmp_path), "--check"]) == 0
    stale = tmp_path / "metalslurm-node.json"
    stale.write_text(stale.read_text().replace("metalslurm: node", "metalslurm: nodes"))
    assert grafana.main([str(tmp_path), "--check"]) == 1
    assert capsys.readouterr().err == (f"{stale} is stale: run 'python -m infra.ops.grafana' "
                                       "and commit it\n")


@pytest.mark.parametrize("name, uid, title", [
    ("metalslurm-overview.json", "metalslurm-overview", "metalslurm: cluster overview"),
    ("metalslurm-node.json", "metalslurm-node", "metalslurm: node")])
def test_dashboard_uid_title_and_schema(name, uid, title):
    found = dashboard(name)
    assert (found["uid"], found["title"], found["schemaVersion"]) == (uid, title, 39)


# ---- layout ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", DASHBOARDS)
def test_panel_ids_are_unique(name):
    ids = [p["id"] for p in panels(name)]
    assert len(ids) == len(set(ids)), ids


@pytest.mark.parametrize("name", DASHBOARDS)
def test_panels_fit_24_columns(name):
    outside = [p["title"] for p in panels(name)
               if p["gridPos"]["x"] < 0 or p["gridPos"]["w"] < 1 or p["gridPos"]["h"] < 1
               or p["gridPos"]["x"] + p["gridPos"]["w"] > 24]
    assert not outside


def overlap(a: dict[str, int], b: dict[str, int]) -> bool:
    return (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"]
            and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"])


@pytest.mark.parametrize("name", DASHBOARDS)
def test_panels_do_not_overlap(name):
    both = [(a["title"], b["title"]) for a, b in combinations(panels(name), 2)
            if overlap(a["gridPos"], b["gridPos"])]
    assert not both


def test_overlap_sees_a_shared_cell():
    assert overlap({"x": 0, "y": 0, "w": 12, "h": 8}, {"x": 11, "y": 7, "w": 4, "h": 4})
    assert not overlap({"x": 0, "y": 0, "w": 12, "h": 8}, {"x": 12, "y": 0, "w": 12, "h": 8})


# ---- the data source -------------------------------------------------------------------------

DS = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}


@pytest.mark.parametrize("name", DASHBOARDS)
def test_data_source_is_a_variable(name):
    variables = {v["name"]: v for v in dashboard(name)["templating"]["list"]}
    assert (variables["DS_PROMETHEUS"]["type"], variables["DS_PROMETHEUS"]["query"]) == \
        ("datasource", "prometheus")


@pytest.mark.parametrize("name", DASHBOARDS)
def test_every_query_uses_the_data_source_variable(name):
    elsewhere = [(p["title"], t["refId"]) for p in panels(name) if p["type"] != "row"
                 for t in [{"refId": "panel", "datasource": p["datasource"]}, *p["targets"]]
                 if t["datasource"] != DS]
    assert not elsewhere


@pytest.mark.parametrize("name", DASHBOARDS)
def test_every_panel_but_a_row_has_a_query(name):
    assert not [p["title"] for p in panels(name) if p["type"] != "row" and not p["targets"]]


def test_node_variable_lists_slurm_nodes():
    node = {v["name"]: v for v in dashboard("metalslurm-node.json")["templating"]["list"]}["node"]
    assert (node["query"], node["datasource"]) == ("label_values(slurm_node_state, node)", DS)


# ---- the queries parse -----------------------------------------------------------------------

def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip(NO_PROMTOOL)
    return path


@pytest.mark.parametrize("name", DASHBOARDS)
def test_promtool_parses_every_query(name, tmp_path):
    # promtool names a rule that does not parse by its record: grafana:panel_<id>_<refId>:check
    rules = [{"record": f"grafana:{where.replace(' ', '_')}:check", "expr": expr}
             for where, expr in queries(name)]
    assert rules
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": name, "rules": rules}]}))
    proc = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---- the metrics exist -----------------------------------------------------------------------

def _program(path: Path, name: str) -> ModuleType:
    """A program without .py (the exporter, the prolog) as a module."""
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    loader.exec_module(module)
    return module


def exposed(text: str) -> set[str]:
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


# Each command's recorded output (tests/fixtures/slurm/exporter/README.md), by the command the
# exporter runs: the local cluster (JSON for sdiag and sshare) and the one-container 24.11
# cluster with two drained nodes (it recorded no sshare or sacct: empty answers).
RECORDED_CLUSTERS = [
    {"scontrol": "local-24.11/scontrol-show-nodes.txt", "squeue": "local-24.11/squeue.txt",
     "sdiag --json": "local-24.11/sdiag.json", "sshare --json": "local-24.11/sshare.json",
     "sacct": "local-24.11/sacct.txt", "scontrol config": "local-24.11/scontrol-show-config.txt"},
    {"scontrol": "single-24.11/scontrol-show-nodes-running.txt",
     "squeue": "single-24.11/squeue-running.txt",
     "sdiag --json": "single-24.11/sdiag-running.json",
     "scontrol config": "single-24.11/scontrol-show-config.txt"},
]


@cache
def exporter_series() -> set[str]:
    """The series the Slurm exporter exposes for the recorded outputs, as
    roles/slurm_exporter/tests/unit/ hands them to it."""
    exporter = _program(EXPORTER, "metalslurm_slurm_exporter_for_grafana")
    found: set[str] = set()
    for files in RECORDED_CLUSTERS:
        def runner(argv: Sequence[str], timeout: float, files: dict[str, str] = files) -> Any:
            key = Path(argv[0]).name + (" --json" if "--json" in argv else
                                        " config" if argv[-1] == "config" else "")
            if key in files:
                return exporter.Completed(0, (RECORDED / files[key]).read_text(), "")
            if "--json" in argv:  # as Slurm 22.05 answers: the exporter asks for text
                return exporter.Completed(1, "", "unrecognized option '--json'")
            return exporter.Completed(0, "", "")

        running = exporter.Exporter(runner=runner, clock=lambda: 1795000000.0)
        running.refresh()
        found |= exposed(generate_latest(exporter.registry_for(running)).decode())
    return found


@cache
def gpu_job_series() -> set[str]:
    gpu_jobs = _program(GPU_JOBS, "metalslurm_gpu_jobs_for_grafana")
    return exposed(gpu_jobs.render_textfile([{
        "jobid": "7", "user": "alice", "account": "team-a", "partition": "gpu",
        "gpus": [{"gpu": "0", "UUID": "GPU-0", "minor": "0"}]}]))


@cache
def recorded_rules() -> set[str]:
    return {rule["record"] for group in yaml.safe_load(RECORDING_RULES.read_text())["groups"]
            for rule in group["rules"]}


def known_metrics() -> set[str]:
    return (recorded_rules() | exporter_series() | gpu_job_series() | NODE_EXPORTER
            | PROMETHEUS)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers left once strings, label
    matchers, ranges, label lists, offsets, function names and keywords are taken out."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\boffset\s+\w+", " ", text)
    names = re.findall(r"(?<![\w:.])([A-Za-z_:][\w:]*)(?![\w:]|\s*\()", text)
    return {n for n in names if n.lower() not in KEYWORDS}


@pytest.mark.parametrize("expr, names", [
    ('sum by (state) (slurm_nodez{state="idle"})', {"slurm_nodez"}),
    ("sum(rate(node_cpu_seconds_total{mode!='idle'}[5m])) / 3600", {"node_cpu_seconds_total"}),
    ("a:b:c - a:b:c offset 1w and on (x) group_left (y) topk(10, d_e) > 0.5",
     {"a:b:c", "d_e"}),
])
def test_metric_names_finds_what_a_query_reads(expr, names):
    assert metric_names(expr) == names


def test_the_known_metrics_come_from_each_source():
    """Guards the test below against an empty source (a moved fixture would pass it)."""
    assert {"slurm_node_drain_info", "slurm_account_gpu_seconds_total", "slurm_up"} <= \
        exporter_series()
    assert gpu_job_series() == {"metalslurm_gpu_job_info"}
    assert {"state:slurm_nodes:sum", "gpu:dcgm_gpu_util:job"} <= recorded_rules()
    assert "slurm_nodez" not in known_metrics()


@pytest.mark.parametrize("name", DASHBOARDS)
def test_every_metric_a_query_reads_exists(name):
    unknown = {where: sorted(metric_names(expr) - known_metrics())
               for where, expr in queries(name) if metric_names(expr) - known_metrics()}
    assert not unknown


def test_every_query_reads_a_metric():
    """metric_names finds something in every query (an empty set would pass the test above)."""
    assert not [where for name in DASHBOARDS for where, expr in queries(name)
                if not metric_names(expr)]


def test_the_node_variable_reads_an_exporter_series():
    query = {v["name"]: v for v in dashboard("metalslurm-node.json")["templating"]["list"]}
    metric = re.fullmatch(r"label_values\((\w+), node\)", query["node"]["query"])
    assert metric is not None and metric.group(1) in exporter_series()
