"""A Slurm switch tree from an InfiniBand fabric (``ibnetdiscover``).

Levels. Leaves are the switches with at least one port to a matched host; every other
switch's level is its distance (in switch hops) from the leaves, found breadth first.
Switches with host HCAs of their own but no matched host (a leaf of management servers,
for one) are not climbed through, so they never pose as upper levels. Links between
switches of the same level are ignored. Any number of levels is handled.

Rail-optimized fabrics. Slurm's topology/tree wants each node under one leaf switch: its
plugin reads topology.conf in ``switch_record_validate()``
(SchedMD slurm, src/plugins/topology/tree/switch_record.c), collects nodes listed under
more than one leaf switch in a ``multi_homed_bitmap`` and warns "Multiple leaf switches
contain nodes: ..."; a switch's ``parent`` is a single index there, so a tree is what it
schedules on. topology.conf(5) asks that "all nodes in the network must be connected to at
least one switch". In a rail-optimized fabric (a DGX SuperPOD) each host has 8 compute
HCAs, each cabled to a different leaf (one leaf per rail), so a host appears under 8 leaves.
Such leaves are grouped: leaves whose hosts overlap form one virtual leaf (connected
components of the host-leaf graph), so the 8 rail leaves that serve the same 32 DGX of a
scalable unit become one Slurm switch. NVIDIA/topograph does much the same: its
``pkg/ib/ib.go`` (``simplify``) folds switches whose children are identical into one
``group_<height>_<n>``; connected components fold partial overlaps too (a host whose HCA on
one rail has no description), which identical-children folding would leave under two leaves.
Upper levels are grouped the same way: switches of level k+1 linked to the same level-k
group are one switch, whose children are the level-k groups they link to, so every switch
has one parent.

Names. A physical switch is named from its description: ``"MF0;A09-P1-IBLEAF-04-04:
MQM9701/U1"`` gives ``A09-P1-IBLEAF-04-04`` (the part between ';' and ':', as topograph
does); a description that is already a plain name is kept; otherwise ``ib-<guid>``. Names
used twice get ``-<guid>`` appended. A group of several switches is named after its first
member (natural order) with ``su-`` (leaves: a scalable unit) or ``group-`` (upper levels)
in front, e.g. ``su-A09-P1-IBLEAF-01-01``: stable while the first leaf stays, readable, a
valid hostlist word, and its number stays last so ``Switches=`` compresses to a plain
``su-A09-P1-IBLEAF-01-[01-04]``. topology.conf carries each group's members in a
``# members:`` comment on its line. When more than one switch is at the top, a switch
``root`` joins them so every node is reachable from one switch.

Nodes not in the fabric are never dropped from Slurm: a node missing from the fabric keeps
the leaf the current topology.conf gives it (``previous``), with a warning; a node never
placed goes under a leaf switch ``unplaced`` attached to the root, with a warning.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.ibnetdiscover import (
    AGGREGATION_RE,
    Fabric,
    NodeMatcher,
    host_of,
    parse_ibnetdiscover,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.topology import (
    ROOT,
    SWITCH_NAME_RE,
    UNPLACED,
    Switch,
    Topology,
    TopologyError,
    compact_hostlist,
    make_topology,
    natural_key,
    plural,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.topology_conf import (
    parse_topology_conf,
    render_topology_conf,
)


@dataclass(frozen=True)
class Discovery:
    """A tree from the fabric, with what did not fit in it."""

    topology: Topology
    unmatched_hosts: tuple[str, ...]  # hosts in the fabric no inventory node matches
    unnamed_hcas: tuple[str, ...]  # GUIDs of HCAs with a firmware-default description
    missing_nodes: tuple[str, ...]  # inventory nodes the fabric does not show
    warnings: tuple[str, ...]


_SWITCH_DESC_RE = re.compile(r"[^;:]+;([^;:]+):[^;:]+")


def switch_name(description: str, guid: str) -> str:
    """A switch's topology.conf name, from its node description (see the module doc)."""
    match = _SWITCH_DESC_RE.fullmatch(description.strip())
    name = match[1].strip() if match else description.strip()
    return name if SWITCH_NAME_RE.fullmatch(name) else f"ib-{guid}"


class _UnionFind:
    def __init__(self, items: Iterable[str]) -> None:
        self.parent = {i: i for i in items}

    def find(self, item: str) -> str:
        root = item
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[item] != root:
            self.parent[item], item = root, self.parent[item]
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            # the smaller key wins, so the result does not depend on the order of unions
            if rb < ra:
                ra, rb = rb, ra
            self.parent[rb] = ra

    def groups(self) -> list[list[str]]:
        found: dict[str, list[str]] = defaultdict(list)
        for item in self.parent:
            found[self.find(item)].append(item)
        return list(found.values())


def _unique_switch_names(fabric: Fabric, warnings: list[str]) -> dict[str, str]:
    """Each physical switch's name (GUID -> name), a name used twice with the GUID appended
    (with a warning)."""
    raw_names = {g: switch_name(s.description, g) for g, s in fabric.switches.items()}
    counts: dict[str, int] = defaultdict(int)
    for name in raw_names.values():
        counts[name] += 1
    names = {g: (n if counts[n] == 1 else f"{n}-{g}") for g, n in raw_names.items()}
    twice = sorted({n for n, c in counts.items() if c > 1}, key=natural_key)
    if twice:
        warnings.append(f"{len(twice)} switch description(s) are used by several switches "
                        f"({', '.join(twice)}); their GUIDs were appended to tell them apart.")
    return names


@dataclass
class _HostLinks:
    """The fabric's host HCAs, seen from the switches they are cabled to."""

    switch_nodes: dict[str, set[str]]  # switch GUID -> the inventory nodes cabled to it
    edge: set[str]  # switches with any host HCA (matched or not)
    unmatched: set[str]  # hosts no inventory node matches
    unnamed: list[str]  # GUIDs of HCAs without a description naming their host


def _host_links(fabric: Fabric, match: NodeMatcher) -> _HostLinks:
    """Which inventory nodes each switch has cables to, skipping aggregation HCAs."""
    found = _HostLinks(defaultdict(set), set(), set(), [])
    for guid in sorted(fabric.cas):
        ca = fabric.cas[guid]
        if AGGREGATION_RE.search(ca.description):
            continue
        host = host_of(ca.description)
        node = match(host) if host else None
        if host is None:
            found.unnamed.append(guid)
        elif node is None:
            found.unmatched.add(host)
        for peer in ca.ports.values():
            if peer.kind == "S" and peer.guid in fabric.switches:
                found.edge.add(peer.guid)
                if node is not None:
                    found.switch_nodes[peer.guid].add(node)
    return found


def _switch_levels(fabric: Fabric, links: _HostLinks) -> tuple[dict[str, int], list[list[str]]]:
    """Each switch's level (GUID -> distance from the leaves) and the switches of each level,
    climbing only through switches without hosts."""
    level_of: dict[str, int] = dict.fromkeys(links.switch_nodes, 0)
    by_level: list[list[str]] = [sorted(links.switch_nodes)]
    while by_level[-1]:
        upper = sorted({p.guid for g in by_level[-1] for p in fabric.switches[g].ports.values()
                        if p.kind == "S" and p.guid in fabric.switches
                        and p.guid not in level_of and p.guid not in links.edge})
        for g in upper:
            level_of[g] = len(by_level)
        by_level.append(upper)
    by_level.pop()
    return level_of, by_level


def _by_first_member(components: Iterable[tuple[list[str], list[str]]]
                     ) -> list[tuple[list[str], list[str]]]:
    """Groups (member names, member GUIDs) in the natural order of their first member."""
    return sorted(components, key=lambda c: natural_key(sorted(c[0], key=natural_key)[0]))


class _Grouping:
    """The Slurm switches made of the physical ones, level by level (see the module doc)."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names  # physical GUID -> name
        self.groups: list[Switch] = []
        self.group_of: dict[str, str] = {}  # physical GUID -> group name
        self.tops: set[str] = set()  # the groups with no parent yet
        self.used: set[str] = set()

    def group_name(self, members: list[str], prefix: str) -> str:
        """A unique name for a group: its only member's, or its first member's after
        ``prefix``."""
        ordered = sorted(members, key=natural_key)
        base = ordered[0] if len(ordered) == 1 else f"{prefix}{ordered[0]}"
        name, n = base, 1
        while name in self.used or name in (ROOT, UNPLACED):
            n += 1
            name = f"{base}-{n}"
        self.used.add(name)
        return name

    def add_leaves(self, leaves: list[str], switch_nodes: dict[str, set[str]]) -> None:
        """Level 0: leaves whose hosts overlap are one switch."""
        uf = _UnionFind(leaves)
        leaves_of_node: dict[str, str] = {}
        for guid in leaves:
            for node in switch_nodes[guid]:
                first = leaves_of_node.setdefault(node, guid)
                if first != guid:
                    uf.union(first, guid)
        components = sorted(([self.names[g] for g in comp], comp) for comp in uf.groups())
        for member_names, comp in _by_first_member(components):
            name = self.group_name(member_names, "su-")
            for g in comp:
                self.group_of[g] = name
            self.groups.append(Switch(name, tuple(n for g in comp for n in switch_nodes[g]),
                                      members=tuple(member_names)))
        self.tops = {s.name for s in self.groups}

    def add_upper_level(self, fabric: Fabric, level: int, switches: list[str],
                        level_of: dict[str, int]) -> None:
        """An upper level: switches linked to the same group below are one switch."""
        uf = _UnionFind(switches)
        children_of: dict[str, set[str]] = defaultdict(set)
        first_parent: dict[str, str] = {}
        for guid in switches:
            for p in fabric.switches[guid].ports.values():
                if level_of.get(p.guid) == level - 1:
                    child = self.group_of[p.guid]
                    children_of[guid].add(child)
                    first = first_parent.setdefault(child, guid)
                    if first != guid:
                        uf.union(first, guid)
        level_groups = [([self.names[g] for g in comp], comp) for comp in uf.groups()]
        for member_names, comp in _by_first_member(level_groups):
            name = self.group_name(member_names, "group-")
            children = {c for g in comp for c in children_of[g]}
            for g in comp:
                self.group_of[g] = name
            self.groups.append(Switch(name, children=tuple(children),
                                      members=tuple(member_names)))
            self.tops -= children
            self.tops.add(name)

    def place_missing(self, nodes: Sequence[str], previous: Topology | None,
                      warnings: list[str]) -> list[str]:
        """Put the inventory nodes the fabric does not show where the current topology.conf
        has them, or under the switch ``unplaced``; returns them."""
        placed = {n for s in self.groups for n in s.nodes}
        missing = sorted((n for n in set(nodes) if n not in placed), key=natural_key)
        leaves = {s.name: s for s in self.groups if s.nodes}
        kept: dict[str, list[str]] = defaultdict(list)
        unplaced: list[str] = []
        before = previous.leaf_of() if previous is not None else {}
        for node in missing:
            leaf = before.get(node)
            if leaf in leaves:
                kept[leaf].append(node)
            else:
                unplaced.append(node)
        for leaf, kept_nodes in sorted(kept.items(), key=lambda item: natural_key(item[0])):
            s = leaves[leaf]
            self.groups[self.groups.index(s)] = Switch(s.name, s.nodes + tuple(kept_nodes),
                                                       s.children, s.members)
            warnings.append(
                f"{compact_hostlist(kept_nodes)} {plural(kept_nodes, 'is', 'are')} not in the "
                f"fabric (no HCA description names {plural(kept_nodes, 'it', 'them')}); kept "
                f"under {leaf}, where the current topology.conf places "
                f"{plural(kept_nodes, 'it', 'them')}.")
        if unplaced:
            self.groups.append(Switch(UNPLACED, tuple(unplaced)))
            self.tops.add(UNPLACED)
            warnings.append(
                f"{compact_hostlist(unplaced)} {plural(unplaced, 'is', 'are')} not in the fabric "
                f"and not placed by the current topology.conf; put under the switch {UNPLACED} "
                f"so Slurm still schedules {plural(unplaced, 'it', 'them')}: check "
                f"{plural(unplaced, 'its', 'their')} InfiniBand cables and that rdma-ndd sets "
                "the HCA node descriptions.")
        return missing


def tree_from_fabric(fabric: Fabric, nodes: Sequence[str],
                     previous: Topology | None = None) -> Discovery:
    """A Slurm tree for ``nodes`` (the inventory's compute nodes) from a parsed fabric;
    see the module documentation for the rules."""
    if not nodes:
        raise TopologyError("no compute nodes to place in a topology")
    warnings: list[str] = []
    names = _unique_switch_names(fabric, warnings)
    links = _host_links(fabric, NodeMatcher(nodes))
    level_of, by_level = _switch_levels(fabric, links)
    grouping = _Grouping(names)
    grouping.add_leaves(by_level[0] if by_level else [], links.switch_nodes)
    for k in range(1, len(by_level)):
        grouping.add_upper_level(fabric, k, by_level[k], level_of)
    missing = grouping.place_missing(nodes, previous, warnings)
    groups = grouping.groups
    if len(grouping.tops) > 1:
        groups.append(Switch(ROOT, children=tuple(grouping.tops)))
    unmatched = sorted(links.unmatched, key=natural_key)
    if unmatched:
        warnings.append(f"{len(unmatched)} host(s) in the fabric match no compute node "
                        f"of the inventory and are left out: {', '.join(unmatched)}.")
    if links.unnamed:
        warnings.append(f"{len(links.unnamed)} HCA(s) have no node description naming their "
                        "host (rdma-ndd not running on them?) and are left out; see "
                        "unnamed_hcas.")
    return Discovery(make_topology(groups), tuple(unmatched), tuple(links.unnamed),
                     tuple(missing), tuple(warnings))


def discovered_topology(ibnetdiscover: str, compute_hosts: Sequence[str], previous: str,
                        plugin: str = "tree",
                        block_sizes: Sequence[int] | None = None) -> dict[str, Any]:
    """What the role writes after ``ibnetdiscover``: topology.conf and the report. The
    current topology.conf (``previous``, empty if none) places nodes the fabric misses."""
    fabric = parse_ibnetdiscover(ibnetdiscover)
    if not fabric.switches:
        raise TopologyError("ibnetdiscover found no switch: is this host's HCA port ACTIVE "
                            "and connected to the fabric? (ibstat shows its state)")
    before = parse_topology_conf(previous) if previous.strip() else None
    found = tree_from_fabric(fabric, list(compute_hosts), before)
    return {"content": render_topology_conf(found.topology, plugin, block_sizes or None),
            "warnings": list(found.warnings), "missing": list(found.missing_nodes),
            "unmatched": list(found.unmatched_hosts), "unnamed": list(found.unnamed_hcas)}
