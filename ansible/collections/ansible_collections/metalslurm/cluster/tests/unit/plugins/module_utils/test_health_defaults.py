"""The node health checker's settings over their defaults (module_utils/health.py)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.metalslurm.cluster.plugins.filter.health import FilterModule
from ansible_collections.metalslurm.cluster.plugins.module_utils.health import (
    DEFAULTS,
    health_settings,
)

health_filter = FilterModule().filters()["health_settings"]


def test_nothing_given_is_every_default():
    assert health_settings(None) == health_settings({}) == DEFAULTS


def test_what_is_given_wins_and_the_rest_is_filled():
    got = health_filter({"interval": 30, "node_state": "IDLE"})
    assert (got["interval"], got["node_state"]) == (30, "IDLE")
    assert {k: v for k, v in got.items() if k not in ("interval", "node_state")} == {
        k: v for k, v in DEFAULTS.items() if k not in ("interval", "node_state")}


def test_a_misspelt_setting_is_refused_rather_than_left_at_its_default():
    with pytest.raises(AnsibleFilterError, match="metalslurm_health: unknown setting.s. "
                       "intervall; the checker has enabled, interval"):
        health_filter({"intervall": 30})
