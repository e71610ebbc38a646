"""The DCGM fields the exporter reads (roles/nvidia_gpu/files/metalslurm-dcgm-counters.csv):
every DCGM series the alert rules, the recording rules, the consoles and the Grafana
dashboards use is one of them (NVIDIA's default-counters.csv lacks the double-bit ECC and
pending row-remap fields two alerts need), in the exporter's CSV format."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COUNTERS = REPO / "roles/nvidia_gpu/files/metalslurm-dcgm-counters.csv"
USERS = [REPO / "roles/monitoring/templates/etc/prometheus/rules/metalslurm-alerts.yml.j2",
         REPO / "roles/monitoring/files/metalslurm-recording.yml",
         *sorted((REPO / "roles/monitoring/files/consoles").glob("*.html")),
         *sorted((REPO / "dashboards/grafana").glob("*.json"))]


def fields() -> list[tuple[str, str, str]]:
    rows = []
    for line in COUNTERS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, kind, help_text = (part.strip() for part in line.split(",", 2))
            rows.append((name, kind, help_text))
    return rows


def test_each_line_is_a_field_a_prometheus_type_and_a_help_text():
    rows = fields()
    assert rows
    for name, kind, help_text in rows:
        assert re.fullmatch(r"DCGM_FI_[A-Z0-9_]+", name), name
        assert kind in ("gauge", "counter", "label"), (name, kind)
        assert help_text, name
    names = [name for name, _kind, _help in rows]
    assert len(names) == len(set(names)), "a field listed twice"


def test_every_dcgm_series_the_rules_and_dashboards_use_is_read():
    used = set()
    for path in USERS:
        used |= set(re.findall(r"DCGM_FI_[A-Z0-9_]+", path.read_text()))
    assert {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ROW_REMAP_PENDING",
            "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_GPU_UTIL"} <= used  # the scan finds them
    assert used - {name for name, _kind, _help in fields()} == set()


def test_the_counters_that_the_rules_take_increase_of_are_counters():
    kinds = {name: kind for name, kind, _help in fields()}
    rules = USERS[0].read_text() + USERS[1].read_text()
    for name in re.findall(r"(?:increase|rate)\((DCGM_FI_[A-Z0-9_]+)", rules):
        assert kinds[name] == "counter", name
