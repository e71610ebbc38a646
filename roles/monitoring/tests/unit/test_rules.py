"""The monitoring role's alert and recording rules, as Prometheus reads them.

The alert rules are a template (templates/etc/prometheus/rules/metalslurm-alerts.yml.j2) that
the role renders with [[ ]] as Jinja's variable delimiters, so Prometheus' own {{ $labels.x }}
passes through; the recording rules are a static file (files/metalslurm-recording.yml). Here:

- the template renders with test values, reading exactly its four settings;
- ``promtool check rules`` accepts both files (and the alert rules as the role renders them,
  with the collection's module_utils/monitoring.py ``rule_values``), and ``promtool test
  rules`` passes every case under tests/promtool/ (synthetic series). promtool comes with
  Debian's ``prometheus`` package; without it these skip;
- without promtool: every alert has a case where it fires and one where it stays silent, a
  severity, and the annotations summary, description and action; the critical Xids are the
  health checker's, in the test values and in ``rule_values``.

``render_alerts`` is imported by the role's other tests.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.metalslurm.cluster.plugins.module_utils import monitoring
from jinja2 import Environment, StrictUndefined, meta

from tests.paths import REPO

ROLE = REPO / "roles" / "monitoring"
ALERTS_TEMPLATE = ROLE / "templates" / "etc" / "prometheus" / "rules" / "metalslurm-alerts.yml.j2"
RECORDING_RULES = ROLE / "files" / "metalslurm-recording.yml"
PROMTOOL_TESTS = sorted((ROLE / "tests" / "promtool").glob("*.test.yml"))
# The names the promtool test files give the rule files (rule_files:, relative to them).
RULE_FILE_NAMES = {"alerts": "metalslurm-alerts.yml", "recording": "metalslurm-recording.yml"}
CHECKER = REPO / "roles" / "slurm_health" / "files" / "metalslurm-health"
SEVERITIES = {"critical", "warning"}
ANNOTATIONS = {"summary", "description", "action"}
NO_PROMTOOL = ("promtool is not on PATH: install Debian's package 'prometheus' (it ships "
               "promtool) to check and test the rules")

# The node health checker, loaded as its test loads it (a program without .py).
_loader = importlib.machinery.SourceFileLoader("metalslurm_health_for_rules", str(CHECKER))
_spec = importlib.util.spec_from_loader("metalslurm_health_for_rules", _loader)
assert _spec is not None
checker = importlib.util.module_from_spec(_spec)
sys.modules["metalslurm_health_for_rules"] = checker  # dataclasses look their module up there
_loader.exec_module(checker)


def critical_xids_regex(xids: list[int]) -> str:
    """The rules' form of a list of Xids: a PromQL regex (which is anchored at both ends)."""
    return "|".join(str(x) for x in xids)


# The values the promtool cases expect (their annotations quote some of them).
TEST_VALUES: dict[str, Any] = {
    "pending_threshold": 3600,
    "disk_free_ratio": 0.1,
    "shared_paths_regex": "/home|/shared",
    "critical_xids_regex": critical_xids_regex(checker.DEFAULT_CRITICAL_XIDS),
}


def _environment() -> Environment:
    # What Ansible's template module does with variable_start_string='[[' and
    # variable_end_string=']]' (trim_blocks is its default).
    return Environment(variable_start_string="[[", variable_end_string="]]",
                       undefined=StrictUndefined, trim_blocks=True, keep_trailing_newline=True)


def render_alerts(values: dict) -> str:
    """The alert rules file as the monitoring role writes it, for ``values`` (the template's
    settings: pending_threshold, disk_free_ratio, shared_paths_regex, critical_xids_regex)."""
    return _environment().from_string(ALERTS_TEMPLATE.read_text()).render(
        __monitoring_rule_values=values)


def alert_rules(text: str) -> dict[str, dict]:
    """alert name -> its rule, in a rendered rules file."""
    rules = [r for g in yaml.safe_load(text)["groups"] for r in g["rules"]]
    return {r["alert"]: r for r in rules if "alert" in r}


ALERTS = alert_rules(render_alerts(TEST_VALUES))


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip(NO_PROMTOOL)
    return path


@pytest.fixture(scope="module")
def rules_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The rendered alert rules, the recording rules and the promtool cases, side by side
    (the cases name the rule files relative to themselves)."""
    d = tmp_path_factory.mktemp("rules")
    (d / RULE_FILE_NAMES["alerts"]).write_text(render_alerts(TEST_VALUES))
    shutil.copy(RECORDING_RULES, d / RULE_FILE_NAMES["recording"])
    for case in PROMTOOL_TESTS:
        shutil.copy(case, d / case.name)
    return d


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120,
                          check=False)


# ---- the template -------------------------------------------------------------------------

def test_the_template_reads_exactly_its_four_settings():
    text = ALERTS_TEMPLATE.read_text()
    assert meta.find_undeclared_variables(_environment().parse(text)) == \
        {"__monitoring_rule_values"}
    assert set(re.findall(r"\[\[ __monitoring_rule_values\.(\w+) \]\]", text)) == set(TEST_VALUES)


def test_rendering_leaves_prometheus_templating_as_it_is():
    text = render_alerts(TEST_VALUES)
    assert "[[" not in text and "]]" not in text
    assert "{{ $labels.node }}" in text


def test_the_rendered_rules_pass_yamllint():
    yamllint_config = pytest.importorskip("yamllint.config")
    linter = pytest.importorskip("yamllint.linter")
    conf = yamllint_config.YamlLintConfig(file=str(REPO / ".yamllint"))
    text = render_alerts(TEST_VALUES)
    problems = [f"{p.line}:{p.column} {p.desc} ({p.rule})"
                for p in linter.run(text, conf)]
    assert problems == []


# ---- promtool -----------------------------------------------------------------------------

@pytest.mark.parametrize("which", sorted(RULE_FILE_NAMES))
def test_promtool_accepts_the_rule_file(which, rules_dir):
    proc = run([promtool(), "check", "rules", RULE_FILE_NAMES[which]], rules_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("case", [p.name for p in PROMTOOL_TESTS])
def test_promtool_cases_pass(case, rules_dir):
    proc = run([promtool(), "test", "rules", case], rules_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---- without promtool ---------------------------------------------------------------------

def promtool_cases() -> list[tuple[str, dict]]:
    """(test file name, one of its tests) for every promtool test."""
    return [(path.name, test) for path in PROMTOOL_TESTS
            for test in (yaml.safe_load(path.read_text()) or {}).get("tests") or []]


def alert_cases() -> dict[str, dict[str, int]]:
    """alert name -> how many promtool evaluations expect it to fire, and to stay silent."""
    counts: dict[str, dict[str, int]] = {}
    for _name, test in promtool_cases():
        for case in test.get("alert_rule_test") or []:
            kind = "fires" if case.get("exp_alerts") else "silent"
            counts.setdefault(case["alertname"], {"fires": 0, "silent": 0})[kind] += 1
    return counts


def test_there_are_promtool_cases():
    assert PROMTOOL_TESTS, "no promtool test files under roles/monitoring/tests/promtool"


@pytest.mark.parametrize("case_file", PROMTOOL_TESTS, ids=lambda p: p.name)
def test_promtool_cases_read_only_the_two_rule_files(case_file):
    doc = yaml.safe_load(case_file.read_text())
    assert set(doc["rule_files"]) <= set(RULE_FILE_NAMES.values())


@pytest.mark.parametrize("alert", sorted(ALERTS))
def test_each_alert_has_a_case_that_fires_and_one_that_stays_silent(alert):
    counts = alert_cases().get(alert, {"fires": 0, "silent": 0})
    assert counts["fires"] > 0 and counts["silent"] > 0, (
        f"{alert}: {counts['fires']} promtool evaluation(s) where it fires and "
        f"{counts['silent']} where it stays silent; it needs one of each")


def test_the_promtool_cases_name_only_alerts_that_exist():
    assert set(alert_cases()) - set(ALERTS) == set()


@pytest.mark.parametrize("alert", sorted(ALERTS))
def test_each_alert_has_a_severity_and_says_what_to_do(alert):
    rule = ALERTS[alert]
    assert rule.get("labels", {}).get("severity") in SEVERITIES
    annotations = rule.get("annotations", {})
    assert set(annotations) >= ANNOTATIONS, f"{alert}: missing {ANNOTATIONS - set(annotations)}"
    assert all(annotations[key].strip() for key in ANNOTATIONS)


@pytest.mark.parametrize("alert", sorted(ALERTS))
def test_each_alert_says_how_long_it_waits(alert):
    assert re.fullmatch(r"[0-9]+[smh]", ALERTS[alert].get("for", "")), alert


def recording_rules(text: str) -> list[str]:
    return [r["record"] for g in yaml.safe_load(text)["groups"] for r in g["rules"]
            if "record" in r]


@pytest.mark.parametrize("record", recording_rules(RECORDING_RULES.read_text())
                         + recording_rules(render_alerts(TEST_VALUES)))
def test_each_recording_rule_has_a_promtool_case(record):
    exprs = [case["expr"] for _name, test in promtool_cases()
             for case in test.get("promql_expr_test") or []]
    assert any(record in expr for expr in exprs), f"no promql_expr_test reads {record}"


# ---- the critical Xids --------------------------------------------------------------------

def test_the_critical_xid_alert_takes_its_list_from_the_setting():
    assert "xid=~`[[ __monitoring_rule_values.critical_xids_regex ]]`" in \
        ALERTS_TEMPLATE.read_text()


def xids_matched(regex: str) -> set[int]:
    """The Xids (0 to 255) a PromQL regex selects (PromQL anchors its regexes)."""
    return {x for x in range(256) if re.fullmatch(f"(?:{regex})", str(x))}


def test_the_critical_xids_of_the_test_values_are_the_health_checkers():
    found = re.search(r"xid=~`([^`]*)`", ALERTS["GpuXidCritical"]["expr"])
    assert found, ALERTS["GpuXidCritical"]["expr"]
    assert xids_matched(found.group(1)) == set(checker.DEFAULT_CRITICAL_XIDS)


# ---- the values the role renders with (the collection's module_utils/monitoring.py) -------

def role_values(shared_paths: list[str]) -> dict[str, Any]:
    return monitoring.rule_values(monitoring.monitoring_settings({}), shared_paths)


def test_the_role_renders_the_template_with_exactly_its_settings():
    assert set(role_values(["/home"])) == set(TEST_VALUES)


def test_the_roles_critical_xids_are_the_health_checkers():
    regex = role_values(["/home"])["critical_xids_regex"]
    assert xids_matched(regex) == set(checker.DEFAULT_CRITICAL_XIDS)


# Paths with characters a regex escapes (PromQL's double-quoted strings would refuse the
# backslashes; the template puts the regex in backquotes), and no shared storage at all.
@pytest.mark.parametrize("shared_paths", [["/home", "/scratch-fast", "/data.v2"], []],
                         ids=["escaped-paths", "no-shared-storage"])
def test_promtool_accepts_the_rules_the_role_renders(shared_paths, tmp_path):
    rules = tmp_path / RULE_FILE_NAMES["alerts"]
    rules.write_text(render_alerts(role_values(shared_paths)))
    proc = run([promtool(), "check", "rules", rules.name], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
