"""The slurm_topology role's filters (plugins/filter/topology.py): topology.conf from the
inventory's leaf switches, and from what ibnetdiscover printed."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.metalslurm.cluster.plugins.filter import topology

from tests.paths import FIXTURES

HOSTS = ["gpu-001", "gpu-002", "gpu-003", "gpu-004"]
CONFIG = {"source": "config", "plugin": "tree", "leaf_spines": {"leaf1": "spine1",
                                                               "leaf2": "spine1"},
          "spines": ["spine1"]}


def test_leaf_switches_of_the_hosts_become_topology_conf():
    hostvars = {h: {"metalslurm_switch": "leaf1" if h < "gpu-003" else "leaf2"} for h in HOSTS}
    found = topology.topology_from_inventory(HOSTS, hostvars, CONFIG)
    assert found["problems"] == []
    assert found["content"].splitlines()[1:] == [
        "SwitchName=leaf1 Nodes=gpu-[001-002]", "SwitchName=leaf2 Nodes=gpu-[003-004]",
        "SwitchName=spine1 Switches=leaf[1-2]"]


def test_a_host_without_its_leaf_switch_is_a_problem_not_an_error():
    hostvars = {h: {"metalslurm_switch": "leaf1"} for h in HOSTS[:3]}
    found = topology.topology_from_inventory(HOSTS, hostvars, CONFIG)
    assert found["content"] == ""
    assert any("gpu-004" in p for p in found["problems"]), found["problems"]


def test_the_local_clusters_recorded_fabric_gives_two_leaves_under_one_spine():
    text = (FIXTURES / "ib" / "local-e2e.ibnetdiscover").read_text()
    found = topology.discovered_topology(text, HOSTS, "")
    assert found["missing"] == [] and found["unmatched"] == []
    assert [line.split()[0] for line in found["content"].splitlines()[1:]] == [
        "SwitchName=ibleaf-001", "SwitchName=ibleaf-002", "SwitchName=ibspine-01"]


def test_an_output_without_switches_names_the_likely_cause():
    with pytest.raises(AnsibleFilterError, match="found no switch"):
        topology.discovered_topology("", HOSTS, "")
