"""metalslurm:topology in the stack config (infra/stack/topology.py): leaves and spines, the
fabric as the source, blocks, and one sentence per problem naming the key."""

from __future__ import annotations

import pytest
from ansible_collections.metalslurm.cluster.plugins.module_utils.topology import (
    Topology,
    topology_from_config,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.topology_conf import (
    render_topology_conf,
)

from infra.stack.schema import Collector
from infra.stack.topology import parse_topology_settings

GPUS = ["gpu-001", "gpu-002", "gpu-003", "gpu-004"]


def small_tree() -> Topology:
    return topology_from_config(
        [{"name": "leaf1", "nodes": "gpu-[001-002]", "spine": "spine1"},
         {"name": "leaf2", "nodes": ["gpu-004", "gpu-003"], "spine": "spine1"}],
        ["spine1"], GPUS)


def settings(compute_nodes=GPUS, **topology_config):
    c = Collector()
    found = parse_topology_settings(c, {"topology": topology_config}, compute_nodes)
    return found, c.problems



def test_no_topology_key_is_no_settings():
    assert parse_topology_settings(Collector(), {}, GPUS) is None



def test_config_leaves_and_spines():
    found, problems = settings(
        plugin="tree", source="config",
        leaves=[{"name": "leaf1", "nodes": "gpu-[001-002]", "spine": "spine1"},
                {"name": "leaf2", "nodes": "gpu-[003-004]", "spine": "spine1"}],
        spines=["spine1"])
    assert problems == []
    assert found is not None and found.topology == small_tree()
    assert found.inventory_vars() == {
        "plugin": "tree", "source": "config",
        "leaf_spines": {"leaf1": "spine1", "leaf2": "spine1"},
        "spines": ["spine1"], "block_sizes": [], "discovery_host": "", "simulator_fabric": ""}
    assert found.switch_of() == {"gpu-001": "leaf1", "gpu-002": "leaf1", "gpu-003": "leaf2",
                                 "gpu-004": "leaf2"}
    assert found.topology_conf() == render_topology_conf(small_tree())



def test_ibnetdiscover_settings():
    found, problems = settings(source="ibnetdiscover",
                               discovery={"host": "ctl", "simulator": "fabric.ibnetdiscover"})
    assert problems == []
    assert found is not None and found.topology is None
    assert (found.inventory_vars()["discovery_host"],
            found.inventory_vars()["simulator_fabric"]) == ("ctl", "fabric.ibnetdiscover")
    assert found.topology_conf() is None



def test_block_settings():
    found, problems = settings(plugin="block", blockSizes=[2, 4],
                               leaves=[{"name": "b1", "nodes": "gpu-[001-002]"},
                                       {"name": "b2", "nodes": "gpu-[003-004]"}])
    assert problems == []
    assert found is not None and found.topology_conf() == (
        render_topology_conf(found.topology or Topology(()), "block", [2, 4]))



@pytest.mark.parametrize(("config", "expected"), [
    ({"leaves": [{"name": "leaf1", "nodes": "gpu-[001-004]", "spine": "spine9"}],
      "spines": ["spine1"]},
     ["metalslurm:topology.leaves[0].spine: 'spine9' is not one of the spines "
      "(metalslurm:topology.spines: spine1)",
      "metalslurm:topology.spines: spine 'spine1' has no leaf under it"]),
    ({"leaves": [{"name": "leaf1", "nodes": "gpu-[001-002]"},
                 {"name": "leaf1", "nodes": "gpu-[003-004]"}]},
     ["metalslurm:topology.leaves: leaf name 'leaf1' is used more than once"]),
    ({"leaves": [{"name": "leaf1", "nodes": "gpu-[001-003]"},
                 {"name": "leaf2", "nodes": "gpu-[003-004]"}]},
     ["metalslurm:topology.leaves: node gpu-003 is in more than one leaf (leaf1, leaf2); "
      "Slurm wants each node under one leaf"]),
    ({"leaves": [{"name": "leaf1", "nodes": "gpu-[001-004,009]"}]},
     ["metalslurm:topology.leaves[0].nodes: gpu-009 is not a compute node of this cluster"]),
    ({"leaves": [{"name": "leaf1", "nodes": "gpu-[001-002]"}]},
     ["metalslurm:topology.leaves: gpu-[003-004] are compute nodes under no leaf; add them "
      "to a leaf's nodes"]),
    ({"source": "ibnetdiscover", "leaves": [{"name": "leaf1", "nodes": "gpu-[001-004]"}]},
     ["metalslurm:topology.leaves: is only read when source is config (it is "
      "'ibnetdiscover'); the fabric gives the switches"]),
    ({"blockSizes": [2], "leaves": [{"name": "leaf1", "nodes": "gpu-[001-004]"}]},
     ["metalslurm:topology.blockSizes: is only read when plugin is block (it is 'tree')"]),
    ({"plugin": "block", "blockSizes": [2, 6],
      "leaves": [{"name": "leaf1", "nodes": "gpu-[001-004]"}]},
     ["metalslurm:topology.blockSizes: 6 is not the first size (2) times a power of two "
      "(2, 4, 8, ...), as Slurm's topology/block requires"]),
    ({"colour": "blue", "leaves": [{"name": "leaf1", "nodes": "gpu-[001-004]", "rack": 1}]},
     ["metalslurm:topology.colour: unknown key; allowed keys: plugin, source, leaves, "
      "spines, blockSizes, discovery",
      "metalslurm:topology.leaves[0].rack: unknown key; allowed keys: name, nodes, spine"]),
    ({"source": "config"},
     ["metalslurm:topology.leaves: must be a non-empty list of leaves ({name, nodes, "
      "spine})"]),
])
def test_each_bad_topology_config_is_one_sentence(config, expected):
    found, problems = settings(**config)
    assert problems == expected
    assert found is None or found.topology is None



def test_problems_are_collected_not_first_only():
    _, problems = settings(blockSizes=[2], bogus=1,
                           leaves=[{"name": "leaf1", "nodes": "gpu-[001-002]", "spine": "x"},
                                   {"name": "leaf1", "nodes": "gpu-009"}])
    assert len(problems) == 6
