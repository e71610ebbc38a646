"""metalslurm:topology and metalslurm:nccl from the stack to the inventory, and the role's
own check of a hand-written inventory's switches (module_utils/topology_conf.py
topology_from_inventory)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.metalslurm.cluster.plugins.module_utils.topology_conf import (
    topology_from_inventory,
)

from infra.stack.config import ConfigError, parse_config
from infra.stack.inventory import NodeSpec, cluster_vars, with_switches

FABRIC = Path(__file__).resolve().parents[1] / "fixtures" / "ib" / "local-e2e.ibnetdiscover"
POOL = [{"name": "gpu", "count": 4, "gpuType": "h100", "gpuCount": 8}]
LEAVES = {"leaves": [{"name": "leaf1", "nodes": "gpu-[001-002]", "spine": "spine1"},
                     {"name": "leaf2", "nodes": "gpu-[003-004]", "spine": "spine1"}],
          "spines": ["spine1"]}


def ms(**kwargs):
    return {f"metalslurm:{k}": v for k, v in kwargs.items()}


def problems(**kwargs) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_config(ms(computePools=POOL, **kwargs), base_dir=FABRIC.parent)
    return err.value.problems


def test_leaves_become_each_hosts_switch_and_the_inventory_topology():
    cfg = parse_config(ms(computePools=POOL, topology=LEAVES))
    specs = [NodeSpec(f"gpu-00{i}", f"10.77.0.{10 + i}", ("slurm_compute",))
             for i in range(1, 5)]
    assert [s.switch for s in with_switches(cfg, specs)] == ["leaf1", "leaf1", "leaf2", "leaf2"]
    assert cluster_vars(cfg, specs)["metalslurm_topology"] == {
        "plugin": "tree", "source": "config", "leaf_spines": {"leaf1": "spine1",
                                                              "leaf2": "spine1"},
        "spines": ["spine1"], "block_sizes": [], "discovery_host": "", "simulator_fabric": ""}


def test_without_a_topology_key_there_is_none():
    cfg = parse_config(ms(computePools=POOL))
    assert cfg.topology is None
    assert cluster_vars(cfg, [])["metalslurm_topology"] == {"source": "none"}


def test_the_simulated_fabric_is_read_relative_to_the_stack_file():
    cfg = parse_config(ms(computePools=POOL, topology={
        "source": "ibnetdiscover", "discovery": {"simulator": FABRIC.name}}),
        base_dir=FABRIC.parent)
    assert cfg.topology is not None
    assert cfg.topology.discovery_simulator == str(FABRIC)


@pytest.mark.parametrize(("topology", "provider", "expected"), [
    ({"source": "ibnetdiscover", "discovery": {"simulator": "missing.ibnetdiscover"}}, "local",
     f"metalslurm:topology.discovery.simulator: {FABRIC.parent / 'missing.ibnetdiscover'} is "
     "not a file (an ibnetdiscover output, read relative to the stack file)"),
    ({"leaves": [{"name": "leaf1", "nodes": "gpu-[001-004]", "spine": "spine9"}],
      "spines": ["spine1"]}, "local",
     "metalslurm:topology.leaves[0].spine: 'spine9' is not one of the spines "
     "(metalslurm:topology.spines: spine1)"),
    ({"leaves": [{"name": "leaf1", "nodes": "gpu-[001-002]"},
                 {"name": "leaf1", "nodes": "gpu-[003-004]"}]}, "local",
     "metalslurm:topology.leaves: leaf name 'leaf1' is used more than once"),
])
def test_bad_topologies_are_refused_naming_the_key(topology, provider, expected):
    assert expected in problems(topology=topology, provider=provider)


def test_a_simulator_is_refused_on_real_machines():
    found = problems(provider="byo", topology={"source": "ibnetdiscover",
                                               "discovery": {"simulator": FABRIC.name}})
    assert ("metalslurm:topology.discovery.simulator: simulates a fabric for clusters without "
            "InfiniBand hardware; the byo provider's machines have a real one: remove it"
            ) in found


def test_nccl_settings_reach_the_inventory():
    cfg = parse_config(ms(computePools=POOL, nccl={
        "settings": {"NCCL_IB_TIMEOUT": 22, "NCCL_DEBUG": "WARN"}, "socketIfname": "bond0"}))
    assert cluster_vars(cfg, [])["metalslurm_nccl"] == {
        "enabled": True, "settings": {"NCCL_IB_TIMEOUT": "22", "NCCL_DEBUG": "WARN"},
        "socket_ifname": "bond0"}


@pytest.mark.parametrize(("nccl", "expected"), [
    ({"settings": {"NCCL_IB_HCAS": "=mlx5_0"}},
     "metalslurm:nccl.settings.NCCL_IB_HCAS: is not a variable NCCL reads (the list, with its "
     "source, is NCCL_VARIABLES in module_utils/nccl.py)"),
    ({"settings": {"NCCL_DEBUG": "WARN\nNCCL_IB_HCA=mlx5"}},
     "metalslurm:nccl.settings.NCCL_DEBUG: must be one value on one line"),
    # one GPUDirect setting, the GPU stack's: the old key names the new one
    ({"gpudirect": "dmabuf"}, "metalslurm:nccl.gpudirect: moved to metalslurm:gpu.gpudirect "
     "(auto, peermem, dmabuf or off), which sets up the driver's side and nccl.conf together: "
     "move the value there"),
    ({"socketIfname": "eth0; rm -rf /"}, "metalslurm:nccl.socketIfname"),
    ({"hca": "mlx5_0"}, "metalslurm:nccl.hca: unknown key; allowed keys: enabled, settings, "
     "socketIfname"),
])
def test_bad_nccl_settings_are_refused_naming_the_key(nccl, expected):
    assert any(p.startswith(expected) for p in problems(nccl=nccl)), problems(nccl=nccl)


SWITCHES = {"gpu-001": "leaf1", "gpu-002": "leaf1", "gpu-003": "leaf2", "gpu-004": "leaf2"}
HOSTS = list(SWITCHES)


def test_a_hand_written_inventory_gives_the_same_file():
    content, found = topology_from_inventory(HOSTS, SWITCHES, {
        "source": "config", "leaf_spines": {"leaf1": "spine1", "leaf2": "spine1"},
        "spines": ["spine1"]})
    assert found == []
    assert content.splitlines()[1:] == ["SwitchName=leaf1 Nodes=gpu-[001-002]",
                                        "SwitchName=leaf2 Nodes=gpu-[003-004]",
                                        "SwitchName=spine1 Switches=leaf[1-2]"]


@pytest.mark.parametrize(("switches", "settings", "expected"), [
    ({**SWITCHES, "gpu-004": None}, {"source": "config"},
     "metalslurm_switch: gpu-004 is a compute node under no leaf"),
    (SWITCHES, {"source": "config", "leaf_spines": {"leaf1": "spine2"}, "spines": ["spine1"]},
     "'spine2' is not one of the spines"),
    (SWITCHES, {"source": "config", "leaf_spines": {"leaf9": "spine1"}, "spines": ["spine1"]},
     "metalslurm_topology.leaf_spines names leaves no compute host is under: leaf9"),
    ({}, {"source": "config"}, "metalslurm_topology.source is config but no compute host has "
     "a metalslurm_switch"),
    (SWITCHES, {"source": "ibnetdiscover", "plugin": "fat"},
     "metalslurm_topology.plugin 'fat' is not one of tree, block"),
])
def test_a_hand_written_inventory_is_held_to_the_same_rules(switches, settings, expected):
    content, found = topology_from_inventory(HOSTS, switches, settings)
    assert content == ""
    assert any(expected in p for p in found), found
