"""The monitoring filters: scrape targets from the inventory, the web login's hash."""

from __future__ import annotations

import bcrypt
import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.metalslurm.cluster.plugins.filter.monitoring import (
    FilterModule,
    dcgm_targets,
    node_targets,
    slurm_targets,
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


def test_the_slurm_exporters_are_the_controllers_and_the_backups():
    groups = {"slurm_controller": ["ctl"], "slurmdbd": ["ctl"], "slurm_compute": ["gpu-001"],
              "slurm_controller_backup": ["ctl2"]}
    hostvars = {"ctl": {"metalslurm_address": "10.0.0.10"},
                "ctl2": {"metalslurm_address": "10.0.0.9"},
                "gpu-001": {"metalslurm_address": "10.0.0.11"}}
    assert [(t["targets"], t["labels"]) for t in slurm_targets(groups, hostvars, 9341)] == [
        (["10.0.0.10:9341"], {"node": "ctl", "role": "controller", "elastic": "false"}),
        (["10.0.0.9:9341"], {"node": "ctl2", "role": "backup-controller", "elastic": "false"})]
    del groups["slurm_controller_backup"]
    assert [t["labels"]["node"] for t in slurm_targets(groups, hostvars, 9341)] == ["ctl"]


def dcgm_entry(node: str, address: str, elastic: str = "false") -> dict:
    return {"targets": [f"{address}:9400"],
            "labels": {"node": node, "role": "compute", "elastic": elastic}}


def test_dcgm_targets_are_the_nodes_that_published_an_exporter_and_sleeping_ones_keep_theirs():
    groups = {"slurm_controller": ["ctl"],
              "slurm_compute": ["gpu-001", "gpu-002", "gpu-003", "gpu-004", "cpu-001"]}
    hostvars = {
        "ctl": {"metalslurm_node": {"gpus": []}},
        # ran with an exporter
        "gpu-001": {"metalslurm_node": {"gpus": [], "dcgm_exporter": "10.0.0.11:9400"}},
        # ran without one now (DCGM turned off): its old target goes
        "gpu-002": {"metalslurm_node": {"gpus": [], "gpudirect": "off"}},
        # elastic, asleep (not in this run): keeps the target the file has
        "gpu-003": {"metalslurm_node_state": "cloud"},
        # elastic, up, with an exporter
        "gpu-004": {"metalslurm_node_state": "cloud",
                    "metalslurm_node": {"dcgm_exporter": "10.0.0.14:9400"}},
        # not in this run, and never had one
        "cpu-001": {}}
    previous = [dcgm_entry("gpu-002", "10.0.0.12"), dcgm_entry("gpu-003", "10.0.0.13", "true"),
                # left the inventory: gone
                dcgm_entry("gpu-009", "10.0.0.19"),
                # not an entry: ignored
                "junk", {"targets": []}]
    assert dcgm_targets(groups, hostvars, previous) == [
        dcgm_entry("gpu-001", "10.0.0.11"), dcgm_entry("gpu-003", "10.0.0.13", "true"),
        dcgm_entry("gpu-004", "10.0.0.14", "true")]


@pytest.mark.parametrize("previous", [None, "", [], {"a": 1}])
def test_dcgm_targets_without_a_usable_file_are_this_runs_only(previous):
    groups = {"slurm_compute": ["gpu-001", "gpu-002"]}
    hostvars = {"gpu-001": {"metalslurm_node": {"dcgm_exporter": "10.0.0.11:9400"}}}
    assert dcgm_targets(groups, hostvars, previous) == [dcgm_entry("gpu-001", "10.0.0.11")]


def test_the_hash_checks_the_password_and_is_the_same_each_run():
    password = "Zq4u7b2Lr9TkP1sVx8cW3yN6mE5hA0dJ"
    hashed = web_password_hash(password)
    assert bcrypt.checkpw(password.encode(), hashed.encode())
    assert not bcrypt.checkpw(b"guess", hashed.encode())
    assert hashed == web_password_hash(password) != web_password_hash(password + "x")
    assert hashed.startswith("$2b$10$")


def test_the_ports_are_the_owners():
    assert FILTERS["monitoring_ports"](None) == {
        "prometheus": 9090, "alertmanager": 9093, "node_exporter": 9100, "slurm_exporter": 9341,
        "dcgm_exporter": 9400}


def test_bad_settings_reach_the_play_as_a_filter_error():
    with pytest.raises(AnsibleFilterError, match="retention_time"):
        FILTERS["monitoring_settings"]({"retention_time": "soon"})
