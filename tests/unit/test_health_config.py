"""metalslurm:health from the stack to the inventory and slurm.conf's HealthCheck* settings;
values out of range refused with one sentence naming the setting."""

from __future__ import annotations

import pytest

from infra.stack.config import ConfigError, parse_config
from infra.stack.inventory import cluster_vars

POOL = [{"name": "gpu", "count": 2, "gpuType": "h100", "gpuCount": 8}]


def ms(**kwargs):
    return {f"metalslurm:{k}": v for k, v in kwargs.items()}


def problems(**kwargs) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_config(ms(computePools=POOL, **kwargs))
    return err.value.problems


def test_defaults_reach_the_inventory():
    cfg = parse_config(ms(computePools=POOL))
    assert cluster_vars(cfg, [])["metalslurm_health"] == {
        "enabled": True, "interval": 300, "node_state": "ANY,CYCLE", "check_timeout": 10,
        "xid_window": 3600, "max_ecc_uncorrected": 0, "ib_rate_gbps": 0,
        "min_free_tmp_mib": 1024, "min_free_cache_mib": 10240}


def test_settings_reach_the_inventory():
    cfg = parse_config(ms(computePools=POOL, health={
        "interval": 60, "nodeState": "IDLE,MIXED,CYCLE", "ibRateGbps": 400,
        "maxEccUncorrected": 2, "xidWindow": 600, "enabled": False}))
    got = cluster_vars(cfg, [])["metalslurm_health"]
    assert (got["interval"], got["node_state"], got["ib_rate_gbps"], got["max_ecc_uncorrected"],
            got["xid_window"], got["enabled"]) == (60, "IDLE,MIXED,CYCLE", 400, 2, 600, False)


@pytest.mark.parametrize(("health", "expected"), [
    ({"interval": -5}, "metalslurm:health.interval: must be at least 0, got -5"),
    ({"checkTimeout": 90}, "metalslurm:health.checkTimeout: must be at most 30, got 90"),
    ({"xidWindow": 10}, "metalslurm:health.xidWindow: must be at least 60, got 10"),
    ({"minFreeTmpMib": "1G"}, "metalslurm:health.minFreeTmpMib: must be a whole number, "
     "got '1G'"),
    ({"ibRateGbps": 4000}, "metalslurm:health.ibRateGbps: must be at most 1600, got 4000"),
    ({"nodeState": "ANY,BUSY"}, "metalslurm:health.nodeState: 'ANY,BUSY' is not a list of "
     "HealthCheckNodeState words (comma-separated, from ALLOC, ANY, CYCLE, IDLE, MIXED)"),
    ({"nodeState": "CYCLE"}, "metalslurm:health.nodeState: CYCLE only says how to spread the "
     "runs: name the states too, e.g. ANY,CYCLE"),
    ({"gpuCount": 8}, "metalslurm:health.gpuCount: unknown key"),
], ids=["interval", "timeout", "xid-window", "free-space-type", "ib-rate", "node-state",
        "cycle-only", "unknown-key"])
def test_out_of_range_settings_are_refused_naming_the_setting(health, expected):
    found = problems(health=health)
    assert any(p.startswith(expected) for p in found), found
