"""Slurm's switch topology (module_utils/topology*.py, ibnetdiscover.py): the fabric parser,
the tree rules, topology.conf written and read, the fabric-to-tree algorithm on a recorded
DGX H100 SuperPOD and on synthetic fat trees."""

from __future__ import annotations

from collections import defaultdict

import pytest
from ansible_collections.metalslurm.cluster.plugins.module_utils import (
    ibnetdiscover,
    topology_fabric,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.ibnetdiscover import (
    host_of,
    parse_ibnetdiscover,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.topology import (
    Switch,
    Topology,
    TopologyError,
    topology_from_config,
    tree_problems,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.topology_conf import (
    parse_topology_conf,
    render_topology_conf,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.topology_fabric import (
    tree_from_fabric,
)

from tests.paths import FIXTURES
from tests.synthetic_fabric import synthetic_fat_tree

SUPERPOD = FIXTURES / "ib/dgx-h100-superpod.ibnetdiscover"
GPUS = ["gpu-001", "gpu-002", "gpu-003", "gpu-004"]

# Counts in the SuperPOD recording, determined by hand with grep (F=the fixture):
#   grep -c '^Switch' $F                                   -> 40 switches
#   grep -c '^Ca' $F                                       -> 582 CAs
#   grep '^Switch' $F | grep -c IBLEAF                     -> 31 leaves (A09-P1-IBLEAF-03-01
#                                                             is not in the recording)
#   grep '^Switch' $F | grep -c IBSPINE                    -> 9 spines
#   grep '^Ca' $F | grep -c 'MT4129'                       -> 69 HCAs with an unset description
#   grep '^Ca' $F | grep -c 'Aggregation Node'             -> 40 SHARP aggregation nodes
#   grep '^Ca' $F | grep -o '"[a-z0-9-]*-dgx-[0-9]*-c[0-9]*' | sort -u | wc -l
#                                                          -> 119 DGX hosts
#   the other named hosts: grep '^Ca' $F | grep -v 'Mellanox\|dgx' -> B11-P1-CUFM-02,
#   localhost, ubuntu.
# Per scalable unit (the '-dgx-0N' part), grep ... | grep -c: 10, 11, 18, 17, 18, 15, 16, 14
# hosts; the leaves serving unit N are IBLEAF-<rail>-0N (4 rails; unit 01 lacks rail 03).
SUPERPOD_SWITCHES = 40
SUPERPOD_CAS = 582
SUPERPOD_DGX_HOSTS = 119
SUPERPOD_UNNAMED_HCAS = 69
SUPERPOD_HOSTS_PER_UNIT = {"01": 10, "02": 11, "03": 18, "04": 17, "05": 18, "06": 15,
                           "07": 16, "08": 14}


@pytest.fixture(scope="module")
def superpod() -> ibnetdiscover.Fabric:
    return parse_ibnetdiscover(SUPERPOD.read_text())


@pytest.fixture(scope="module")
def dgx_hosts(superpod) -> list[str]:
    hosts = {host_of(ca.description) for ca in superpod.cas.values()}
    return sorted(h for h in hosts if h and "-dgx-" in h)


def physical_leaves_of(fabric: ibnetdiscover.Fabric) -> dict[str, set[str]]:
    """Host -> the names of the switches its HCAs are cabled to, straight from the dump."""
    found: dict[str, set[str]] = defaultdict(set)
    for ca in fabric.cas.values():
        host = host_of(ca.description)
        for peer in ca.ports.values():
            if host and peer.kind == "S":
                sw = fabric.switches[peer.guid]
                found[host].add(topology_fabric.switch_name(sw.description, sw.guid))
    return found


# ------------------------------------------------------------------ the SuperPOD recording


def test_the_superpod_recording_parses_to_its_switches_and_cas(superpod):
    assert len(superpod.switches) == SUPERPOD_SWITCHES
    assert len(superpod.cas) == SUPERPOD_CAS
    leaf = superpod.switches["2c5eab0300b87b40"]
    assert leaf.description == "MF0;A09-P1-IBLEAF-04-04:MQM9701/U1"
    assert leaf.nports == 65
    assert leaf.ports[1] == ibnetdiscover.Peer("H", "e09d7303007a4bd8", 1,
                                          "a08-p1-dgx-04-c01 mlx5_5")
    assert leaf.ports[35] == ibnetdiscover.Peer("S", "2c5eab0300c26280", 32,
                                           "MF0;A10-P1-IBSPINE-02:MQM9701/U1")
    ca = superpod.cas["e09d7303007a5a68"]
    assert ca.description == "a08-p1-dgx-04-c17 mlx5_5"
    assert ca.ports == {1: ibnetdiscover.Peer("S", "2c5eab0300b87b40", 17,
                                         "MF0;A09-P1-IBLEAF-04-04:MQM9701/U1")}


def test_the_superpod_tree_puts_each_dgx_under_the_group_of_all_its_rail_leaves(
        superpod, dgx_hosts):
    assert len(dgx_hosts) == SUPERPOD_DGX_HOSTS
    found = tree_from_fabric(superpod, dgx_hosts)
    tree = found.topology
    assert tree_problems(tree) == []
    leaves = [s for s in tree.switches if s.nodes]
    placed = [n for s in leaves for n in s.nodes]
    assert sorted(placed) == dgx_hosts  # every DGX exactly once
    cabled = physical_leaves_of(superpod)
    for s in leaves:
        for node in s.nodes:
            assert cabled[node] <= set(s.members), (node, s.name)
    # 8 scalable units of rail leaves (4 + ... + 3) under one group of the 9 spines.
    assert {s.name: len(s.nodes) for s in leaves} == {
        f"su-{'A09' if int(u) <= 4 else 'B09'}-P1-IBLEAF-01-{u}": n
        for u, n in SUPERPOD_HOSTS_PER_UNIT.items()}
    assert sum(len(s.members) for s in leaves) == 31
    assert [s.name for s in tree.switches if not s.nodes] == ["group-A10-P1-IBSPINE-01"]
    spine_group = tree.switches[-1]
    assert len(spine_group.members) == 9 and len(spine_group.children) == 8
    assert found.unmatched_hosts == ("B11-P1-CUFM-02", "localhost", "ubuntu")
    assert len(found.unnamed_hcas) == SUPERPOD_UNNAMED_HCAS
    assert found.missing_nodes == ()
    assert found.warnings == (
        "3 host(s) in the fabric match no compute node of the inventory and are left out: "
        "B11-P1-CUFM-02, localhost, ubuntu.",
        "69 HCA(s) have no node description naming their host (rdma-ndd not running on "
        "them?) and are left out; see unnamed_hcas.")


def test_the_superpod_topology_conf(superpod, dgx_hosts):
    conf = render_topology_conf(tree_from_fabric(superpod, dgx_hosts).topology)
    lines = conf.splitlines()
    assert lines[0].startswith("# topology.conf for TopologyPlugin=topology/tree")
    assert lines[1] == ("SwitchName=su-A09-P1-IBLEAF-01-01 "
                        "Nodes=a05-p1-dgx-01-c[01,03-04,09,12-15,17-18]  "
                        "# members: A09-P1-IBLEAF-01-01,A09-P1-IBLEAF-02-01,A09-P1-IBLEAF-04-01")
    assert lines[-1] == ("SwitchName=group-A10-P1-IBSPINE-01 "
                         "Switches=su-A09-P1-IBLEAF-01-[01-04],su-B09-P1-IBLEAF-01-[05-08]  "
                         "# members: A10-P1-IBSPINE-[01-04],B10-P1-IBSPINE-[05-09]")
    assert len(lines) == 10
    assert parse_topology_conf(conf) == tree_from_fabric(superpod, dgx_hosts).topology


def test_the_same_fabric_gives_a_byte_identical_topology_conf(superpod, dgx_hosts):
    first = render_topology_conf(tree_from_fabric(superpod, dgx_hosts).topology)
    again = parse_ibnetdiscover(SUPERPOD.read_text())
    assert render_topology_conf(tree_from_fabric(again, list(reversed(dgx_hosts))).topology) \
        == first


def test_a_missing_node_keeps_its_previous_leaf(superpod, dgx_hosts):
    # a05-p1-dgx-01-c02 has no named HCA in the recording.
    previous = parse_topology_conf(
        "SwitchName=su-A09-P1-IBLEAF-01-01 Nodes=a05-p1-dgx-01-c[01-02]\n")
    found = tree_from_fabric(superpod, [*dgx_hosts, "a05-p1-dgx-01-c02"], previous)
    assert found.missing_nodes == ("a05-p1-dgx-01-c02",)
    leaf = found.topology.by_name()["su-A09-P1-IBLEAF-01-01"]
    assert "a05-p1-dgx-01-c02" in leaf.nodes
    assert "unplaced" not in found.topology.by_name()
    assert found.warnings[0] == (
        "a05-p1-dgx-01-c02 is not in the fabric (no HCA description names it); kept under "
        "su-A09-P1-IBLEAF-01-01, where the current topology.conf places it.")
    assert tree_problems(found.topology) == []


def test_a_node_never_placed_goes_under_unplaced_and_a_root_joins_the_tops(superpod,
                                                                           dgx_hosts):
    found = tree_from_fabric(superpod, [*dgx_hosts, "a05-p1-dgx-01-c02", "spare-01"])
    switches = found.topology.by_name()
    assert switches["unplaced"].nodes == ("a05-p1-dgx-01-c02", "spare-01")
    assert switches["root"].children == ("group-A10-P1-IBSPINE-01", "unplaced")
    assert found.topology.switches[-1].name == "root"
    assert tree_problems(found.topology) == []
    assert found.warnings[0] == (
        "a05-p1-dgx-01-c02,spare-01 are not in the fabric and not placed by the current "
        "topology.conf; put under the switch unplaced so Slurm still schedules them: check "
        "their InfiniBand cables and that rdma-ndd sets the HCA node descriptions.")


def test_an_unmatched_host_is_listed_by_name(superpod, dgx_hosts):
    found = tree_from_fabric(superpod, [h for h in dgx_hosts if h != "a07-p1-dgx-03-c05"])
    assert "a07-p1-dgx-03-c05" in found.unmatched_hosts
    assert "a07-p1-dgx-03-c05" not in {n for s in found.topology.switches for n in s.nodes}


# ------------------------------------------------------------------ host names


@pytest.mark.parametrize(("description", "host"), [
    ("a08-p1-dgx-04-c01 mlx5_5", "a08-p1-dgx-04-c01"),
    ("a06-p1-dgx-02-c01 HCA-6", "a06-p1-dgx-02-c01"),
    ("gpu-001 mlx5_0", "gpu-001"),
    ("gpu-001.cluster.example mlx5_0", "gpu-001.cluster.example"),
    ("  gpu-002  ", "gpu-002"),
    ("MT4129 ConnectX7   Mellanox Technologies", None),
    ("Mellanox Technologies Aggregation Node", None),
    ("", None),
    ("   ", None),
])
def test_host_of(description, host):
    assert host_of(description) == host


def test_inventory_names_match_case_insensitively_and_by_short_name():
    fabric = parse_ibnetdiscover(synthetic_fat_tree(4, hosts_per_leaf=2, spines=1,
                                                    name="GPU-{:03d}.cluster.example"))
    nodes = ["gpu-001", "gpu-002.cluster.example", "Gpu-003", "gpu-004"]
    found = tree_from_fabric(fabric, nodes)
    assert found.unmatched_hosts == ()
    assert found.missing_nodes == ()
    assert sorted(n for s in found.topology.switches for n in s.nodes) == sorted(nodes)


# ------------------------------------------------------------------ parsing errors


@pytest.mark.parametrize(("text", "message"), [
    ('Switch\t2 "S-0001"\t\t# "s" enhanced port 0 lid 1 lmc 0\n[3]\t"S-0002"[1]\t\t# "t"\n',
     "ibnetdiscover line 2: port 3 is not one of the 2 ports of 0001"),
    ('[1]\t"S-0002"[1]\t\t# "t" lid 1 4xNDR\n',
     "ibnetdiscover line 1: a port line outside a Switch or Ca block"),
    ("# comment\n\nhello world\n", "ibnetdiscover line 3: not ibnetdiscover output"),
    ('Ca\t1 "H-01"\t\t# "a mlx5_0"\n[1](01) \tgarbage\n',
     "ibnetdiscover line 2: not a port line"),
    ('Ca\t1 "S-01"\t\t# "a mlx5_0"\n', "ibnetdiscover line 1: a Ca with GUID S-01"),
    ('Ca\t1 "H-01"\t\t# "a"\n\nCa\t1 "H-01"\t\t# "b"\n',
     "ibnetdiscover line 3: GUID 01 is listed twice"),
])
def test_invalid_ibnetdiscover_output_names_the_line(text, message):
    with pytest.raises(TopologyError) as exc:
        parse_ibnetdiscover(text)
    assert str(exc.value).startswith(message)


def test_comments_blank_lines_and_guid_lines_are_skipped():
    fabric = parse_ibnetdiscover(
        "#\n# Topology file: generated\n\nvendid=0x2c9\ndevid=0xd2f2\nsysimgguid=0x1\n"
        'switchguid=0x1(1)\nSwitch\t1 "S-0000000000000001"\t\t# "MF0;leaf1:MQM9700/U1" '
        "enhanced port 0 lid 1 lmc 0\n"
        '[1]\t"H-0000000000000002"[1](0000000000000002) \t\t# "gpu-001 mlx5_0" lid 2 4xNDR\n'
        "\nvendid=0x2c9\ncaguid=0x2\n"
        'Ca\t1 "H-0000000000000002"\t\t# "gpu-001 mlx5_0"\n'
        '[1](0000000000000002) \t"S-0000000000000001"[1]\t\t# lid 2 lmc 0 '
        '"MF0;leaf1:MQM9700/U1" lid 1 4xNDR\n')
    assert list(fabric.switches) == ["0000000000000001"]
    assert fabric.cas["0000000000000002"].ports[1].description == "MF0;leaf1:MQM9700/U1"
    conf = render_topology_conf(tree_from_fabric(fabric, ["gpu-001"]).topology)
    assert conf.splitlines()[1:] == ["SwitchName=leaf1 Nodes=gpu-001"]


# ------------------------------------------------------------------ render and parse


def small_tree() -> Topology:
    return topology_from_config(
        [{"name": "leaf1", "nodes": "gpu-[001-002]", "spine": "spine1"},
         {"name": "leaf2", "nodes": ["gpu-004", "gpu-003"], "spine": "spine1"}],
        ["spine1"], GPUS)


def test_a_config_tree_renders_leaves_then_spines():
    assert render_topology_conf(small_tree()).splitlines()[1:] == [
        "SwitchName=leaf1 Nodes=gpu-[001-002]",
        "SwitchName=leaf2 Nodes=gpu-[003-004]",
        "SwitchName=spine1 Switches=leaf[1-2]"]


def test_several_tops_get_one_root_and_names_sort_naturally():
    tree = topology_from_config(
        [{"name": f"leaf{i}", "nodes": [f"gpu-{i:03d}"], "spine": f"spine{1 + i // 10}"}
         for i in (1, 2, 10)] + [{"name": "leaf11", "nodes": "gpu-011"}],
        ["spine1", "spine2"], ["gpu-001", "gpu-002", "gpu-010", "gpu-011"])
    assert [s.name for s in tree.switches] == ["leaf1", "leaf2", "leaf10", "leaf11",
                                               "spine1", "spine2", "root"]
    assert tree.by_name()["root"].children == ("leaf11", "spine1", "spine2")
    assert tree_problems(tree) == []


def test_render_and_parse_round_trip():
    for tree in (small_tree(), Topology((Switch("s1", ("a-1", "a-2"), members=("x1", "x2")),
                                         ))):
        conf = render_topology_conf(tree)
        assert parse_topology_conf(conf) == tree
        assert render_topology_conf(parse_topology_conf(conf)) == conf


def test_the_block_plugin_writes_one_block_per_leaf_and_block_sizes():
    conf = render_topology_conf(small_tree(), plugin="block", block_sizes=[2, 4])
    assert conf.splitlines()[1:] == ["BlockName=leaf1 Nodes=gpu-[001-002]",
                                     "BlockName=leaf2 Nodes=gpu-[003-004]",
                                     "BlockSizes=2,4"]
    back = parse_topology_conf(conf)
    assert back.block_sizes == (2, 4)
    assert render_topology_conf(back, plugin="block") == conf


@pytest.mark.parametrize(("text", "message"), [
    ("SwitchName=a Nodes=n1 Color=red\n", "topology.conf line 1: unknown key(s) color"),
    ("SwitchName=a Nodes=n1\nSwitchName=a Nodes=n2\n", "topology.conf line 2: a is defined"),
    ("Nodes=n1\n", "topology.conf line 1: starts with neither"),
    ("SwitchName=a Nodes=n1\nBlockName=b Nodes=n2\n", "topology.conf mixes SwitchName"),
])
def test_invalid_topology_conf(text, message):
    with pytest.raises(TopologyError) as exc:
        parse_topology_conf(text)
    assert str(exc.value).startswith(message)


# ------------------------------------------------------------------ metalslurm:topology


def test_topology_from_config_raises_every_problem():
    with pytest.raises(TopologyError) as exc:
        topology_from_config([{"name": "a", "nodes": "gpu-[001-003]", "spine": "s9"},
                              {"name": "a", "nodes": "gpu-003"}], [], GPUS)
    assert str(exc.value) == (
        "topology.leaves: leaf name 'a' is used more than once; "
        "topology.leaves[0].spine: 's9' is not one of the spines (topology.spines: none); "
        "topology.leaves: gpu-004 is a compute node under no leaf; add it to a leaf's nodes")


# ------------------------------------------------------------------ synthetic fabrics


def test_the_local_clusters_fabric_is_two_leaves_under_one_spine():
    text = synthetic_fat_tree(4, hosts_per_leaf=2, spines=1, name="gpu-{:03d}")
    assert text == synthetic_fat_tree(4, hosts_per_leaf=2, spines=1, name="gpu-{:03d}")
    fabric = parse_ibnetdiscover(text)
    assert (len(fabric.switches), len(fabric.cas)) == (3, 4)
    assert sorted(ca.description for ca in fabric.cas.values()) == [
        f"{n} mlx5_0" for n in GPUS]
    assert render_topology_conf(tree_from_fabric(fabric, GPUS).topology).splitlines()[1:] == [
        "SwitchName=ibleaf-001 Nodes=gpu-[001-002]",
        "SwitchName=ibleaf-002 Nodes=gpu-[003-004]",
        "SwitchName=ibspine-01 Switches=ibleaf-[001-002]"]


@pytest.mark.parametrize("rails", [1, 8])
def test_a_synthetic_fat_tree_of_2000_hosts(rails):
    nodes = [f"node-{i:05d}" for i in range(1, 2001)]
    fabric = parse_ibnetdiscover(synthetic_fat_tree(2000, rails=rails))
    assert len(fabric.cas) == 2000 * rails
    found = tree_from_fabric(fabric, nodes)
    assert tree_problems(found.topology) == []
    assert found.warnings == () and found.missing_nodes == () and found.unmatched_hosts == ()
    leaves = [s for s in found.topology.switches if s.nodes]
    assert sorted(n for s in leaves for n in s.nodes) == nodes
    # 63 scalable units of 32 hosts (the last one 16); with 8 rails each unit is 8 leaves.
    assert len(leaves) == 63
    assert {len(s.members) for s in leaves} == ({1} if rails == 1 else {8})
    assert found.topology.switches[-1].children  # one top: a core (group) switch


def interleaved(text: str) -> str:
    """Swap gpu-002 and gpu-003 in HCA descriptions: gpu-001 and gpu-003 on one leaf."""
    return text.replace('"gpu-002 ', '"gpu-TMP ').replace('"gpu-003 ', '"gpu-002 ') \
        .replace('"gpu-TMP ', '"gpu-003 ')


def test_the_e2e_clusters_simulated_fabric_is_the_generators_output():
    """The fabric ibsim serves to the Debian 13 e2e cluster is synthetic_fat_tree's output
    with gpu-002 and gpu-003 swapped, so each leaf holds one always-on node and one elastic
    one; it gives the two leaves and the spine the e2e tests expect."""
    path = FIXTURES / "ib" / "local-e2e.ibnetdiscover"
    text = interleaved(synthetic_fat_tree(4, hosts_per_leaf=2, spines=1, name="gpu-{:03d}"))
    assert path.read_text() == text
    found = tree_from_fabric(parse_ibnetdiscover(text), ["gpu-001", "gpu-002", "gpu-003",
                                                         "gpu-004"])
    assert render_topology_conf(found.topology).splitlines()[1:] == [
        "SwitchName=ibleaf-001 Nodes=gpu-[001,003]",
        "SwitchName=ibleaf-002 Nodes=gpu-[002,004]",
        "SwitchName=ibspine-01 Switches=ibleaf-[001-002]"]
