"""The monitoring settings over their defaults, and their rules (module_utils/monitoring.py)."""

from __future__ import annotations

import pytest
from ansible_collections.metalslurm.cluster.plugins.module_utils.monitoring import (
    DEFAULTS,
    MonitoringSettingsError,
    monitoring_settings,
    rule_values,
)


def test_nothing_given_is_every_default():
    assert monitoring_settings(None) == monitoring_settings({}) == DEFAULTS


def test_receivers_are_normalised_with_send_resolved_on_by_default():
    got = monitoring_settings({"receivers": [{"name": "ops"},
                                             {"name": "b", "sendResolved": False}]})
    assert got["receivers"] == [
        {"name": "ops", "type": "webhook", "send_resolved": True},
        {"name": "b", "type": "webhook", "send_resolved": False}]


@pytest.mark.parametrize(("given", "message"), [
    ({"retention_time": "15 days"}, "retention_time: '15 days' is not a Prometheus duration"),
    ({"retention_size": "0GB"}, "retention_size: '0GB' is not a Prometheus size"),
    ({"scrape_interval": 10, "exporter_interval": 30}, "scrape_interval: 10 s is below the "
                                                       "Slurm exporter's interval (30 s)"),
    ({"exporter_interval": True}, "exporter_interval: True is not a whole number"),
    ({"disk_free_ratio": 1.5}, "disk_free_ratio: 1.5 is not a fraction"),
    ({"receivers": [{"name": "a"}, {"name": "a"}]},
     "receivers[1].name: 'a' names two receivers"),
    ({"receivers": [{"name": "a", "type": "pagerduty"}]},
     "receivers[0].type: 'pagerduty' is not a receiver type"),
    ({"receivers": {"name": "a"}}, "receivers: must be a list"),
    ({"scrape_intervall": 30}, "unknown setting(s) scrape_intervall"),
])
def test_a_value_out_of_its_rules_is_refused_naming_the_setting(given, message):
    with pytest.raises(MonitoringSettingsError) as err:
        monitoring_settings(given)
    assert message in str(err.value)


def test_rule_values_escape_the_shared_paths_and_match_nothing_without_any():
    settings = monitoring_settings({})
    assert rule_values(settings, ["/home", "/scratch-fast"])["shared_paths_regex"] == \
        "/home|/scratch\\-fast"
    assert rule_values(settings, [])["shared_paths_regex"] == "^$"
    assert rule_values(settings, [])["critical_xids_regex"].split("|")[:3] == ["48", "61", "62"]
