"""The monitoring filters: scrape targets from the inventory, the web login's hash."""

from __future__ import annotations

import bcrypt
import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.metalslurm.cluster.plugins.filter.monitoring import (
    FilterModule,
    node_targets,
    web_password_hash,
)

FILTERS = FilterModule().filters()


def test_a_node_in_several_groups_is_one_target_with_its_first_role():
    groups = {"slurm_controller": ["ctl"], "slurmdbd": ["ctl"], "nfs_server": ["nfs"],
              "slurm_compute": ["gpu-002", "gpu-001"]}
    hostvars = {"ctl": {"metalslurm_address": "10.0.0.10"},
                "nfs": {"metalslurm_address": "10.0.0.9"},
                "gpu-001": {"metalslurm_address": "10.0.0.11"},
                "gpu-002": {"metalslurm_address": "10.0.0.12", "metalslurm_node_state": "cloud"}}
    assert [(t["targets"], t["labels"]) for t in node_targets(groups, hostvars, 9100)] == [
        (["10.0.0.10:9100"], {"node": "ctl", "role": "controller", "elastic": "false"}),
        (["10.0.0.11:9100"], {"node": "gpu-001", "role": "compute", "elastic": "false"}),
        (["10.0.0.12:9100"], {"node": "gpu-002", "role": "compute", "elastic": "true"}),
        (["10.0.0.9:9100"], {"node": "nfs", "role": "nfs", "elastic": "false"})]


def test_the_hash_checks_the_password_and_is_the_same_each_run():
    password = "Zq4u7b2Lr9TkP1sVx8cW3yN6mE5hA0dJ"
    hashed = web_password_hash(password)
    assert bcrypt.checkpw(password.encode(), hashed.encode())
    assert not bcrypt.checkpw(b"guess", hashed.encode())
    assert hashed == web_password_hash(password) != web_password_hash(password + "x")
    assert hashed.startswith("$2b$10$")


def test_the_ports_are_the_owners():
    assert FILTERS["monitoring_ports"](None) == {
        "prometheus": 9090, "alertmanager": 9093, "node_exporter": 9100, "slurm_exporter": 9341}


def test_bad_settings_reach_the_play_as_a_filter_error():
    with pytest.raises(AnsibleFilterError, match="retention_time"):
        FILTERS["monitoring_settings"]({"retention_time": "soon"})
