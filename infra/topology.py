"""Slurm's topology.conf, from the stack config or from an InfiniBand fabric.

Two sources (stack key ``metalslurm:topology``, :func:`parse_topology_settings`):

* ``source: config``: leaves and spines as the user lists them (:func:`topology_from_config`).
* ``source: ibnetdiscover``: the fabric as ``ibnetdiscover`` prints it
  (:func:`parse_ibnetdiscover`), turned into a tree (:func:`tree_from_fabric`).

Hosts in the fabric. An HCA's node description is set by rdma-core's ``rdma-ndd`` to
``"<hostname> <hca>"`` (``"a08-p1-dgx-04-c01 mlx5_5"``), so the host is its first token
(:func:`host_of`). Descriptions the firmware sets before rdma-ndd runs
(``"MT4129 ConnectX7   Mellanox Technologies"``) name no host: such HCAs are reported as
``unnamed_hcas``. SHARP aggregation nodes (``"Mellanox Technologies Aggregation Node"``, a
CA inside each Quantum switch) are neither hosts nor unnamed HCAs and are left out. A host
matches an inventory node case-insensitively, by full name or by short name (before the
first '.'); hosts that match none are reported by name (``unmatched_hosts``), never
dropped silently.

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

Output is deterministic: the same inputs give a byte-identical topology.conf.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from infra.schema import Collector, key
from infra.slurmconf import compress_hostlist, expand_hostlist

PLUGINS = ("tree", "block")
SOURCES = ("config", "ibnetdiscover")
ROOT = "root"
UNPLACED = "unplaced"
# A switch or block name Slurm reads as one hostlist word (no ',', '[', ']' or spaces).
SWITCH_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_TOPOLOGY_KEYS = ("plugin", "source", "leaves", "spines", "blockSizes", "discovery")
_LEAF_KEYS = ("name", "nodes", "spine")
_DISCOVERY_KEYS = ("host", "simulator")


class TopologyError(ValueError):
    """An ibnetdiscover dump, topology.conf or topology that cannot be used."""


# --------------------------------------------------------------------------- the fabric


@dataclass(frozen=True)
class Peer:
    """The far end of a cable: kind 'S' (switch), 'H' (channel adapter) or 'R' (router)."""

    kind: str
    guid: str
    port: int
    description: str


@dataclass(frozen=True)
class FabricNode:
    """A switch or channel adapter (HCA) with its cabled ports (port number -> peer)."""

    kind: str
    guid: str
    description: str
    nports: int
    ports: Mapping[int, Peer]


@dataclass(frozen=True)
class Fabric:
    switches: Mapping[str, FabricNode]  # by GUID (16 hex digits, lower case)
    cas: Mapping[str, FabricNode]
    routers: Mapping[str, FabricNode] = field(default_factory=dict)


_NODE_KINDS = {"Switch": "S", "Ca": "H", "Rt": "R"}
# Switch	65 "S-2c5eab0300b87b40"		# "MF0;A09-P1-IBLEAF-04-04:MQM9701/U1" enhanced port 0 ...
# Ca	1 "H-e09d7303007a5a68"		# "a08-p1-dgx-04-c17 mlx5_5"
_HEADER_RE = re.compile(
    r'(Switch|Ca|Rt)\s+(\d+)\s+"([SHR])-([0-9A-Fa-f]+)"\s*(?:#\s*"(.*)"(.*))?')
# [1]	"H-e09d7303007a4bd8"[1](e09d7303007a4bd8) 		# "a08-p1-dgx-04-c01 mlx5_5" lid 647 4xNDR
# [1](e09d7303007a5a68) 	"S-2c5eab0300b87b40"[17]		# lid 657 lmc 0 "MF0;..." lid 73 4xNDR
_PORT_RE = re.compile(
    r'\[(\d+)\](?:\[ext\s+\d+\])?(?:\([0-9A-Fa-f]+\))?\s+"([SHR])-([0-9A-Fa-f]+)"'
    r'\[(\d+)\](?:\[ext\s+\d+\])?(?:\([0-9A-Fa-f]+\))?\s*(?:#\s*(.*))?')
_QUOTED_RE = re.compile(r'"(.*)"')
_IGNORED_PREFIXES = ("vendid=", "devid=", "sysimgguid=", "switchguid=", "caguid=", "rtguid=")


def parse_ibnetdiscover(text: str) -> Fabric:
    """The switches, CAs and cables of an ``ibnetdiscover`` dump (its default output).

    Comments, blank lines and the ``vendid=``/``devid=``/``sysimgguid=``/``switchguid=``/
    ``caguid=`` lines are skipped. Anything else that is not a node header or a port line
    raises :class:`TopologyError` naming the line.
    """
    nodes: dict[str, dict[str, FabricNode]] = {"S": {}, "H": {}, "R": {}}
    current: tuple[str, str, str, int, dict[int, Peer]] | None = None

    def close() -> None:
        if current is not None:
            kind, guid, desc, nports, ports = current
            nodes[kind][guid] = FabricNode(kind, guid, desc, nports, ports)

    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            close()
            current = None
            continue
        if line.startswith("#") or line.lower().startswith(_IGNORED_PREFIXES):
            continue
        if line.startswith("["):
            match = _PORT_RE.fullmatch(line)
            if match is None:
                raise TopologyError(f"ibnetdiscover line {number}: not a port line: {raw!r}")
            if current is None:
                raise TopologyError(f"ibnetdiscover line {number}: a port line outside a "
                                    "Switch or Ca block")
            port = int(match[1])
            if not 1 <= port <= current[3]:
                raise TopologyError(f"ibnetdiscover line {number}: port {port} is not one "
                                    f"of the {current[3]} ports of {current[1]}")
            if port in current[4]:
                raise TopologyError(f"ibnetdiscover line {number}: port {port} of "
                                    f"{current[1]} is listed twice")
            quoted = _QUOTED_RE.search(match[5] or "")
            current[4][port] = Peer(match[2], match[3].lower(), int(match[4]),
                                    quoted[1] if quoted else "")
            continue
        match = _HEADER_RE.fullmatch(line)
        if match is None:
            raise TopologyError(f"ibnetdiscover line {number}: not ibnetdiscover output: "
                                f"{raw!r}")
        kind = _NODE_KINDS[match[1]]
        if match[3] != kind:
            raise TopologyError(f"ibnetdiscover line {number}: a {match[1]} with GUID "
                                f"{match[3]}-{match[4]}")
        guid = match[4].lower()
        if any(guid in known for known in nodes.values()):
            raise TopologyError(f"ibnetdiscover line {number}: GUID {guid} is listed twice")
        close()
        current = (kind, guid, match[5] or "", int(match[2]), {})
    close()
    return Fabric(switches=nodes["S"], cas=nodes["H"], routers=nodes["R"])


# Descriptions the firmware sets while no rdma-ndd has named the HCA after its host.
_UNSET_RE = re.compile(r"Mellanox Technologies|NVIDIA Technologies|^MT\d+\b", re.IGNORECASE)
_AGGREGATION_RE = re.compile(r"Aggregation Node", re.IGNORECASE)


def host_of(description: str) -> str | None:
    """The host an HCA belongs to, from its node description; None when it names none.

    rdma-core's rdma-ndd sets the description to ``"<hostname> <hca>"``, so the host is the
    first token: ``"a08-p1-dgx-04-c01 mlx5_5"`` -> ``"a08-p1-dgx-04-c01"``. Empty and
    firmware-default descriptions (``"MT4129 ConnectX7   Mellanox Technologies"``,
    ``"Mellanox Technologies Aggregation Node"``) give None.
    """
    text = description.strip()
    if not text or _UNSET_RE.search(text):
        return None
    return text.split()[0]


class _Matcher:
    """Inventory node names by lower-case full name and by lower-case short name."""

    def __init__(self, nodes: Iterable[str]) -> None:
        self.full: dict[str, str] = {}
        shorts: dict[str, list[str]] = defaultdict(list)
        for node in nodes:
            self.full.setdefault(node.lower(), node)
            shorts[node.lower().split(".", 1)[0]].append(node)
        self.short = {s: names[0] for s, names in shorts.items() if len(set(names)) == 1}

    def __call__(self, host: str) -> str | None:
        lower = host.lower()
        return self.full.get(lower) or self.short.get(lower.split(".", 1)[0])


# --------------------------------------------------------------------------- topologies


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders ``leaf2`` before ``leaf10``."""
    return tuple((0, int(part)) if part.isdigit() else (1, part.lower())
                 for part in re.split(r"(\d+)", name) if part)


@dataclass(frozen=True)
class Switch:
    """A topology.conf switch: leaf (``nodes``) or upper level (``children``: switch names).

    ``members``: the physical switches a grouped switch stands for (empty: just itself).
    """

    name: str
    nodes: tuple[str, ...] = ()
    children: tuple[str, ...] = ()
    members: tuple[str, ...] = ()


@dataclass(frozen=True)
class Topology:
    """Switches in topology.conf order: leaves first, then each upper level."""

    switches: tuple[Switch, ...]
    block_sizes: tuple[int, ...] = ()

    def by_name(self) -> dict[str, Switch]:
        return {s.name: s for s in self.switches}

    def leaf_of(self) -> dict[str, str]:
        """Node -> the (first) leaf switch listing it."""
        found: dict[str, str] = {}
        for switch in self.switches:
            for node in switch.nodes:
                found.setdefault(node, switch.name)
        return found


def _levels(switches: Sequence[Switch]) -> dict[str, int]:
    by_name = {s.name: s for s in switches}
    levels: dict[str, int] = {}

    def level(name: str, seen: frozenset[str]) -> int:
        if name in levels:
            return levels[name]
        switch = by_name.get(name)
        if switch is None or name in seen or not switch.children:
            value = 0
        else:
            value = 1 + max(level(c, seen | {name}) for c in switch.children)
        levels[name] = value
        return value

    for s in switches:
        level(s.name, frozenset())
    return levels


def make_topology(switches: Iterable[Switch], block_sizes: Sequence[int] = ()) -> Topology:
    """A topology in canonical order: by level (leaves first), then natural name order;
    each switch's nodes and children in natural order."""
    canonical = [Switch(s.name, tuple(sorted(set(s.nodes), key=natural_key)),
                        tuple(sorted(set(s.children), key=natural_key)),
                        tuple(sorted(set(s.members), key=natural_key))) for s in switches]
    levels = _levels(canonical)
    canonical.sort(key=lambda s: (levels[s.name], natural_key(s.name), s.name))
    return Topology(tuple(canonical), tuple(block_sizes))


def tree_problems(topology: Topology) -> list[str]:
    """What keeps a topology from being a tree Slurm's topology/tree schedules well: one
    root, every switch reachable from it, no cycles, each node under exactly one leaf."""
    problems = []
    by_name: dict[str, Switch] = {}
    for s in topology.switches:
        if s.name in by_name:
            problems.append(f"switch {s.name} is defined twice")
        by_name[s.name] = s
    parents: dict[str, list[str]] = defaultdict(list)
    for s in topology.switches:
        if s.nodes and s.children:
            problems.append(f"switch {s.name} has both nodes and child switches")
        for child in s.children:
            if child not in by_name:
                problems.append(f"switch {s.name} names an unknown child switch {child}")
            parents[child].append(s.name)
    for child, names in sorted(parents.items()):
        if len(names) > 1:
            problems.append(f"switch {child} is under {len(names)} switches: "
                            f"{', '.join(sorted(names))}")
    roots = [s.name for s in topology.switches if s.name not in parents]
    if len(roots) != 1:
        problems.append(f"{len(roots)} top-level switches ({', '.join(roots) or 'none'}); "
                        "a tree has one")
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        name = stack.pop()
        if name in seen:
            problems.append(f"switch {name} is reached twice (a cycle or a shared child)")
            continue
        seen.add(name)
        stack.extend(c for c in by_name[name].children if c in by_name)
    unreachable = [s.name for s in topology.switches if s.name not in seen]
    if unreachable:
        problems.append(f"switches not reachable from the top: {', '.join(unreachable)}")
    where: dict[str, list[str]] = defaultdict(list)
    for s in topology.switches:
        for node in s.nodes:
            where[node].append(s.name)
    for node, names in sorted(where.items(), key=lambda item: natural_key(item[0])):
        if len(names) > 1:
            problems.append(f"node {node} is under {len(names)} leaves: {', '.join(names)}")
    return problems


# A hostlist expression every Slurm release reads: a prefix and at most one bracketed range
# at the end (gpu-[001-004]). python-hostlist can also write forms such as
# A09-P1-IBLEAF-[01-02]-01 (a range inside the name); Slurm's own parser is not relied on
# for those, so such names are listed one by one.
_SIMPLE_HOSTLIST_RE = re.compile(r"^[^\[\],]+(\[[0-9,-]+\])?(,[^\[\],]+(\[[0-9,-]+\])?)*$")


_TRAILING_NUMBER_RE = re.compile(r"^(.*?)(\d*)$")


def _hostlist(names: Iterable[str]) -> str:
    names = list(names)
    compressed = compress_hostlist(names)
    if _SIMPLE_HOSTLIST_RE.fullmatch(compressed):
        return compressed
    # Compress only the trailing number: one simple expression per prefix.
    by_prefix: dict[str, list[str]] = defaultdict(list)
    for name in set(names):
        by_prefix[_TRAILING_NUMBER_RE.fullmatch(name)[1]].append(name)  # type: ignore[index]
    parts = []
    for prefix in sorted(by_prefix, key=natural_key):
        part = compress_hostlist(by_prefix[prefix])
        parts.append(part if _SIMPLE_HOSTLIST_RE.fullmatch(part)
                     else ",".join(sorted(by_prefix[prefix], key=natural_key)))
    return ",".join(parts)


def render_topology_conf(topology: Topology, plugin: str = "tree",
                         block_sizes: Sequence[int] | None = None) -> str:
    """topology.conf for topology/tree (SwitchName lines) or topology/block (BlockName
    lines, one per leaf, and BlockSizes: Slurm >= 24.05; see topology.conf(5))."""
    if plugin not in PLUGINS:
        raise TopologyError(f"plugin {plugin!r} is not one of {', '.join(PLUGINS)}")
    sizes = tuple(block_sizes if block_sizes is not None else topology.block_sizes)
    if sizes and plugin != "block":
        raise TopologyError("BlockSizes is only for the block plugin")
    lines = [f"# topology.conf for TopologyPlugin=topology/{plugin}, written by metalslurm "
             "(infra/topology.py) from the stack config or the fabric; edit those, not this file"]
    for s in topology.switches:
        comment = ""
        if s.members and s.members != (s.name,):
            comment = f"  # members: {_hostlist(s.members)}"
        if plugin == "block":
            if s.nodes:
                lines.append(f"BlockName={s.name} Nodes={_hostlist(s.nodes)}{comment}")
            continue
        line = f"SwitchName={s.name}"
        if s.nodes:
            line += f" Nodes={_hostlist(s.nodes)}"
        elif s.children:
            line += f" Switches={_hostlist(s.children)}"
        lines.append(line + comment)
    if sizes:
        lines.append("BlockSizes=" + ",".join(str(n) for n in sizes))
    return "\n".join(lines) + "\n"


def _expand(expression: str, number: int) -> list[str]:
    try:
        return expand_hostlist(expression)
    except Exception:
        raise TopologyError(f"topology.conf line {number}: {expression!r} is not a "
                            "hostlist expression") from None


def parse_topology_conf(text: str) -> Topology:
    """A topology.conf written by :func:`render_topology_conf` (or by hand) read back."""
    switches: list[Switch] = []
    names: set[str] = set()
    block_sizes: tuple[int, ...] = ()
    kinds: set[str] = set()
    for number, raw in enumerate(text.splitlines(), start=1):
        body, _, comment = raw.partition("#")
        if not body.strip():
            continue
        fields: dict[str, str] = {}
        first = ""
        for token in body.split():
            name, sep, value = token.partition("=")
            if not sep or not value:
                raise TopologyError(f"topology.conf line {number}: {token!r} is not "
                                    "Key=Value")
            lower = name.lower()
            if lower in fields:
                raise TopologyError(f"topology.conf line {number}: {name} given twice")
            fields[lower] = value
            first = first or lower
        if first == "blocksizes" and len(fields) == 1:
            try:
                block_sizes = tuple(int(v) for v in fields["blocksizes"].split(","))
            except ValueError:
                raise TopologyError(f"topology.conf line {number}: BlockSizes must be "
                                    "numbers separated by ','") from None
            continue
        allowed = {"switchname": {"switchname", "nodes", "switches", "linkspeed"},
                   "blockname": {"blockname", "nodes"}}.get(first)
        if allowed is None:
            raise TopologyError(f"topology.conf line {number}: starts with neither "
                                "SwitchName=, BlockName= nor BlockSizes=")
        unknown = sorted(set(fields) - allowed)
        if unknown:
            raise TopologyError(f"topology.conf line {number}: unknown key(s) "
                                f"{', '.join(unknown)}")
        kinds.add(first)
        name = fields[first]
        if name in names:
            raise TopologyError(f"topology.conf line {number}: {name} is defined twice")
        names.add(name)
        members_match = re.search(r"members:\s*(\S+)", comment)
        members = _expand(members_match[1], number) if members_match else []
        switches.append(Switch(
            name, tuple(_expand(fields["nodes"], number)) if "nodes" in fields else (),
            tuple(_expand(fields["switches"], number)) if "switches" in fields else (),
            tuple(members)))
    if len(kinds) > 1:
        raise TopologyError("topology.conf mixes SwitchName (tree) and BlockName (block) "
                            "lines")
    return make_topology(switches, block_sizes)


# --------------------------------------------------------------------------- discovery


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


def _plural(names: Sequence[str], one: str, many: str) -> str:
    return one if len(names) == 1 else many


def tree_from_fabric(fabric: Fabric, nodes: Sequence[str],
                     previous: Topology | None = None) -> Discovery:
    """A Slurm tree for ``nodes`` (the inventory's compute nodes) from a parsed fabric;
    see the module documentation for the rules."""
    if not nodes:
        raise TopologyError("no compute nodes to place in a topology")
    match = _Matcher(nodes)
    warnings: list[str] = []

    # Physical switch names, made unique.
    raw_names = {g: switch_name(s.description, g) for g, s in fabric.switches.items()}
    counts: dict[str, int] = defaultdict(int)
    for name in raw_names.values():
        counts[name] += 1
    names = {g: (n if counts[n] == 1 else f"{n}-{g}") for g, n in raw_names.items()}
    twice = sorted({n for n, c in counts.items() if c > 1}, key=natural_key)
    if twice:
        warnings.append(f"{len(twice)} switch description(s) are used by several switches "
                        f"({', '.join(twice)}); their GUIDs were appended to tell them apart.")

    # Hosts on each switch.
    switch_nodes: dict[str, set[str]] = defaultdict(set)
    edge: set[str] = set()  # switches with any host HCA (matched or not)
    unmatched: set[str] = set()
    unnamed: list[str] = []
    for guid in sorted(fabric.cas):
        ca = fabric.cas[guid]
        if _AGGREGATION_RE.search(ca.description):
            continue
        host = host_of(ca.description)
        node = match(host) if host else None
        if host is None:
            unnamed.append(guid)
        elif node is None:
            unmatched.add(host)
        for peer in ca.ports.values():
            if peer.kind == "S" and peer.guid in fabric.switches:
                edge.add(peer.guid)
                if node is not None:
                    switch_nodes[peer.guid].add(node)

    # Levels: distance from the leaves, climbing only through switches without hosts.
    level_of: dict[str, int] = dict.fromkeys(switch_nodes, 0)
    by_level: list[list[str]] = [sorted(switch_nodes)]
    while by_level[-1]:
        upper = sorted({p.guid for g in by_level[-1] for p in fabric.switches[g].ports.values()
                        if p.kind == "S" and p.guid in fabric.switches
                        and p.guid not in level_of and p.guid not in edge})
        for g in upper:
            level_of[g] = len(by_level)
        by_level.append(upper)
    by_level.pop()

    # Level 0: leaves whose hosts overlap are one switch.
    groups: list[Switch] = []
    group_of: dict[str, str] = {}  # physical GUID -> group name
    used: set[str] = set()

    def group_name(members: list[str], prefix: str) -> str:
        ordered = sorted(members, key=natural_key)
        base = ordered[0] if len(ordered) == 1 else f"{prefix}{ordered[0]}"
        name, n = base, 1
        while name in used or name in (ROOT, UNPLACED):
            n += 1
            name = f"{base}-{n}"
        used.add(name)
        return name

    uf = _UnionFind(by_level[0] if by_level else [])
    leaves_of_node: dict[str, str] = {}
    for guid in by_level[0] if by_level else []:
        for node in switch_nodes[guid]:
            first = leaves_of_node.setdefault(node, guid)
            if first != guid:
                uf.union(first, guid)
    components = sorted(([names[g] for g in comp], comp) for comp in uf.groups())
    for member_names, comp in sorted(components, key=lambda c: natural_key(
            sorted(c[0], key=natural_key)[0])):
        name = group_name(member_names, "su-")
        for g in comp:
            group_of[g] = name
        groups.append(Switch(name, tuple(n for g in comp for n in switch_nodes[g]),
                             members=tuple(member_names)))
    tops = {s.name for s in groups}

    # Upper levels: switches linked to the same group below are one switch.
    for k in range(1, len(by_level)):
        uf = _UnionFind(by_level[k])
        children_of: dict[str, set[str]] = defaultdict(set)
        first_parent: dict[str, str] = {}
        for guid in by_level[k]:
            for p in fabric.switches[guid].ports.values():
                if level_of.get(p.guid) == k - 1:
                    child = group_of[p.guid]
                    children_of[guid].add(child)
                    first = first_parent.setdefault(child, guid)
                    if first != guid:
                        uf.union(first, guid)
        level_groups = [([names[g] for g in comp], comp) for comp in uf.groups()]
        for member_names, comp in sorted(level_groups, key=lambda c: natural_key(
                sorted(c[0], key=natural_key)[0])):
            name = group_name(member_names, "group-")
            children = {c for g in comp for c in children_of[g]}
            for g in comp:
                group_of[g] = name
            groups.append(Switch(name, children=tuple(children), members=tuple(member_names)))
            tops -= children
            tops.add(name)

    # Inventory nodes the fabric does not show.
    placed = {n for s in groups for n in s.nodes}
    missing = sorted((n for n in set(nodes) if n not in placed), key=natural_key)
    leaves = {s.name: s for s in groups if s.nodes}
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
        groups[groups.index(s)] = Switch(s.name, s.nodes + tuple(kept_nodes), s.children,
                                         s.members)
        warnings.append(
            f"{_hostlist(kept_nodes)} {_plural(kept_nodes, 'is', 'are')} not in the fabric "
            f"(no HCA description names {_plural(kept_nodes, 'it', 'them')}); kept under "
            f"{leaf}, where the current topology.conf places "
            f"{_plural(kept_nodes, 'it', 'them')}.")
    if unplaced:
        groups.append(Switch(UNPLACED, tuple(unplaced)))
        tops.add(UNPLACED)
        warnings.append(
            f"{_hostlist(unplaced)} {_plural(unplaced, 'is', 'are')} not in the fabric and "
            f"not placed by the current topology.conf; put under the switch {UNPLACED} so "
            f"Slurm still schedules {_plural(unplaced, 'it', 'them')}: check "
            f"{_plural(unplaced, 'its', 'their')} InfiniBand cables and that rdma-ndd sets "
            "the HCA node descriptions.")
    if len(tops) > 1:
        groups.append(Switch(ROOT, children=tuple(tops)))
    if unmatched:
        names_sorted = sorted(unmatched, key=natural_key)
        warnings.append(f"{len(names_sorted)} host(s) in the fabric match no compute node "
                        f"of the inventory and are left out: {', '.join(names_sorted)}.")
    if unnamed:
        warnings.append(f"{len(unnamed)} HCA(s) have no node description naming their host "
                        "(rdma-ndd not running on them?) and are left out; see unnamed_hcas.")
    return Discovery(make_topology(groups), tuple(sorted(unmatched, key=natural_key)),
                     tuple(unnamed), tuple(missing), tuple(warnings))


# --------------------------------------------------------------------------- from config


def _config_problems(prefix: str, leaves: Sequence[tuple[str, str, list[str], str]],
                     spines: Sequence[str], nodes: Sequence[str]) -> list[tuple[str, str]]:
    """(where, sentence) for each problem of leaves given as (where, name, nodes, spine)."""
    problems: list[tuple[str, str]] = []
    names = [leaf[1] for leaf in leaves]
    for dup in sorted({n for n in names if names.count(n) > 1}, key=natural_key):
        problems.append((f"{prefix}.leaves", f"leaf name {dup!r} is used more than once"))
    for shared in sorted(set(names) & set(spines), key=natural_key):
        problems.append((f"{prefix}.leaves", f"{shared!r} is both a leaf and a spine"))
    known = set(nodes)
    under: dict[str, list[str]] = defaultdict(list)
    for where, name, leaf_nodes, spine in leaves:
        if spine and spine not in spines:
            problems.append((f"{where}.spine", f"{spine!r} is not one of the spines "
                             f"({prefix}.spines: {', '.join(spines) or 'none'})"))
        strangers = [n for n in dict.fromkeys(leaf_nodes) if n not in known]
        if strangers:
            verb = _plural(strangers, "is not a compute node", "are not compute nodes")
            problems.append((f"{where}.nodes", f"{_hostlist(strangers)} {verb} of this "
                             "cluster"))
        for node in dict.fromkeys(leaf_nodes):
            if node in known and name not in under[node]:
                under[node].append(name)
    for node, leaf_names in sorted(under.items(), key=lambda item: natural_key(item[0])):
        if len(leaf_names) > 1:
            problems.append((f"{prefix}.leaves", f"node {node} is in more than one leaf "
                             f"({', '.join(leaf_names)}); Slurm wants each node under one leaf"))
    orphans = [n for n in nodes if n not in under]
    if orphans:
        problems.append((f"{prefix}.leaves", f"{_hostlist(orphans)} "
                         f"{_plural(orphans, 'is a compute node', 'are compute nodes')} under "
                         f"no leaf; add {_plural(orphans, 'it', 'them')} to a leaf's nodes"))
    used_spines = {leaf[3] for leaf in leaves}
    for spine in spines:
        if spine not in used_spines:
            problems.append((f"{prefix}.spines", f"spine {spine!r} has no leaf under it"))
    return problems


def _config_topology(leaves: Sequence[tuple[str, str, list[str], str]],
                     spines: Sequence[str]) -> Topology:
    switches = [Switch(name, tuple(leaf_nodes)) for _, name, leaf_nodes, _ in leaves]
    tops = [name for _, name, _, spine in leaves if not spine]
    for spine in dict.fromkeys(spines):
        switches.append(Switch(spine, children=tuple(
            name for _, name, _, s in leaves if s == spine)))
        tops.append(spine)
    if len(tops) > 1:
        switches.append(Switch(ROOT, children=tuple(tops)))
    return make_topology(switches)


def _node_list(value: Any) -> list[str] | None:
    """A leaf's nodes: a hostlist expression or a list of names; None if neither."""
    if isinstance(value, str):
        try:
            return expand_hostlist(value)
        except Exception:
            return None
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def topology_from_config(leaves: Sequence[Mapping[str, Any]], spines: Sequence[str],
                         nodes: Sequence[str]) -> Topology:
    """A tree from leaves ``{name, nodes (hostlist or list), spine?}`` and spine names;
    a root switch joins the tops when there are several. Raises :class:`TopologyError`
    with every problem (see :func:`parse_topology_settings`)."""
    parsed = []
    problems: list[tuple[str, str]] = []
    for i, leaf in enumerate(leaves):
        leaf_nodes = _node_list(leaf.get("nodes"))
        if leaf_nodes is None:
            problems.append((f"topology.leaves[{i}].nodes", "must be a hostlist expression "
                             "or a list of node names"))
            leaf_nodes = []
        parsed.append((f"topology.leaves[{i}]", str(leaf.get("name", "")), leaf_nodes,
                       str(leaf.get("spine") or "")))
    problems += _config_problems("topology", parsed, list(spines), list(nodes))
    if problems:
        raise TopologyError("; ".join(f"{w}: {m}" for w, m in problems))
    return _config_topology(parsed, list(spines))


@dataclass(frozen=True)
class LeafSpec:
    name: str
    nodes: tuple[str, ...]
    spine: str = ""


@dataclass(frozen=True)
class TopologySettings:
    """``metalslurm:topology``: the topology plugin and where its tree comes from."""

    plugin: str = "tree"
    source: str = "config"
    leaves: tuple[LeafSpec, ...] = ()
    spines: tuple[str, ...] = ()
    block_sizes: tuple[int, ...] = ()
    discovery_host: str = ""  # the host that runs ibnetdiscover ("": the controller)
    discovery_simulator: str = ""  # an ibnetdiscover file ibsim serves as the fabric
    topology: Topology | None = None  # source config: the tree

    def topology_conf(self) -> str | None:
        """topology.conf for source config; None when the fabric gives it."""
        if self.topology is None:
            return None
        return render_topology_conf(self.topology, self.plugin, self.block_sizes)

    def inventory_vars(self) -> dict[str, Any]:
        """``metalslurm_topology`` as the Ansible inventory carries it. The leaves' nodes
        are not in it: each compute host's ``metalslurm_switch`` names its leaf
        (:meth:`switch_of`), which is what a hand-written inventory sets too."""
        return {
            "plugin": self.plugin,
            "source": self.source,
            "leaf_spines": {leaf.name: leaf.spine for leaf in self.leaves if leaf.spine},
            "spines": list(self.spines),
            "block_sizes": list(self.block_sizes),
            "discovery_host": self.discovery_host,
            "simulator_fabric": self.discovery_simulator,
        }

    def switch_of(self) -> dict[str, str]:
        """Compute node -> the leaf switch the config puts it under (source config)."""
        return {node: leaf.name for leaf in self.leaves for node in leaf.nodes}


def _block_sizes(c: Collector, value: Any, where: str) -> tuple[int, ...]:
    if (not isinstance(value, list) or not value
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                       for v in value)):
        c.problem(where, "must be a non-empty list of positive whole numbers (nodes per "
                  "block), such as [2, 4]")
        return ()
    base = value[0]
    for size in value[1:]:
        ratio = size // base
        if size % base or ratio < 2 or ratio & (ratio - 1):
            c.problem(where, f"{size} is not the first size ({base}) times a power of two "
                      "(2, 4, 8, ...), as Slurm's topology/block requires")
    return tuple(value)


def parse_topology_settings(c: Collector, raw: Mapping[str, Any],
                            compute_nodes: Sequence[str] = ()) -> TopologySettings | None:
    """``metalslurm:topology`` (``raw``: the stack's keys without the namespace); None when
    absent. ``compute_nodes``: the cluster's compute node names, which leaves must cover.
    Every problem is recorded on ``c``."""
    if raw.get("topology") is None:
        return None
    where = key("topology")
    before = len(c.problems)
    item = c.mapping(raw, "topology", where)
    c.unknown_keys(item, _TOPOLOGY_KEYS, where)
    plugin = c.string(item, "plugin", f"{where}.plugin", default="tree", choices=PLUGINS)
    source = c.string(item, "source", f"{where}.source", default="config", choices=SOURCES)
    block_sizes: tuple[int, ...] = ()
    if item.get("blockSizes") is not None:
        if plugin != "block":
            c.problem(f"{where}.blockSizes", f"is only read when plugin is block (it is "
                      f"{plugin!r})")
        else:
            block_sizes = _block_sizes(c, item["blockSizes"], f"{where}.blockSizes")
    discovery = c.mapping(item, "discovery", f"{where}.discovery")
    c.unknown_keys(discovery, _DISCOVERY_KEYS, f"{where}.discovery")
    host = c.string(discovery, "host", f"{where}.discovery.host", default="",
                    pattern=re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
                    if discovery.get("host") else None, what="a host name of this cluster")
    simulator = c.string(discovery, "simulator", f"{where}.discovery.simulator", default="")
    leaves: list[LeafSpec] = []
    spines: tuple[str, ...] = ()
    topology = None
    if source == "ibnetdiscover":
        for name in ("leaves", "spines"):
            if item.get(name) is not None:
                c.problem(f"{where}.{name}", "is only read when source is config (it is "
                          "'ibnetdiscover'); the fabric gives the switches")
    elif source == "config":
        if discovery:
            c.problem(f"{where}.discovery", "is only read when source is ibnetdiscover (it is "
                      "'config')")
        parsed = []
        for item_key, leaf in c.mappings(item.get("leaves"), f"{where}.leaves", _LEAF_KEYS,
                                         "leaves ({name, nodes, spine})"):
            leaf_name = c.string(leaf, "name", f"{item_key}.name", pattern=SWITCH_NAME_RE,
                            what="letters, digits, '.', '_' and '-', at most 64 characters")
            leaf_nodes = _node_list(leaf.get("nodes"))
            if leaf_nodes is None:
                c.problem(f"{item_key}.nodes", "must be a hostlist expression such as "
                          "gpu-[001-004] or a list of node names")
                leaf_nodes = []
            spine = c.string(leaf, "spine", f"{item_key}.spine", default="")
            parsed.append((item_key, leaf_name or "", leaf_nodes, spine or ""))
            if leaf_name:
                leaves.append(LeafSpec(leaf_name, tuple(leaf_nodes), spine or ""))
        if item.get("spines") is not None:
            spines = c.string_list(item, "spines", f"{where}.spines", SWITCH_NAME_RE,
                                   "switch name")
        for w, message in (_config_problems(where, parsed, spines, compute_nodes)
                           if parsed else []):
            c.problem(w, message)
        if len(c.problems) == before and parsed:
            topology = _config_topology(parsed, spines)
    return TopologySettings(
        plugin=plugin or "tree", source=source or "config", leaves=tuple(leaves),
        spines=spines, block_sizes=block_sizes, discovery_host=host or "",
        discovery_simulator=simulator or "", topology=topology)


# --------------------------------------------------------------------------- synthetic


def _guid(base: int, index: int) -> str:
    return f"{base + index:016x}"


def synthetic_fat_tree(hosts: int, hosts_per_leaf: int = 32, rails: int = 1, spines: int = 4,
                       name: str = "node-{:05d}") -> str:
    """An ``ibnetdiscover`` dump of a rail-optimized fat tree (the recording's format,
    which ibsim also loads as its fabric file), with deterministic GUIDs and LIDs.

    Hosts ``name.format(1..hosts)`` each have ``rails`` HCAs ``mlx5_<r>``; a scalable unit
    of ``hosts_per_leaf`` hosts has one leaf per rail. Pods of up to 32 leaves (whole
    scalable units) each have ``spines`` spines linked to every leaf of the pod; with more
    than one pod, core switch k links to spine k of every pod.
    """
    if hosts < 1 or hosts_per_leaf < 1 or rails < 1 or spines < 1:
        raise TopologyError("hosts, hosts_per_leaf, rails and spines must be at least 1")
    units = -(-hosts // hosts_per_leaf)
    units_per_pod = max(1, 32 // rails)
    pods = -(-units // units_per_pod)
    lids = iter(range(1, 1 << 16))

    # (guid, description, lid, ports: port -> (kind, peer guid, peer port))
    switches: dict[str, tuple[str, int, dict[int, tuple[str, str, int]]]] = {}
    cas: dict[str, tuple[str, int, dict[int, tuple[str, str, int]]]] = {}
    sw_base, ca_base = 0x2C5EAB0300000000, 0xE09D730300000000
    leaf_guid: dict[tuple[int, int], str] = {}
    for su in range(units):
        for rail in range(rails):
            guid = _guid(sw_base, 0x10000 + su * rails + rail)
            leaf_guid[su, rail] = guid
            leaf = f"ibleaf-{rail + 1}-{su + 1:03d}" if rails > 1 else f"ibleaf-{su + 1:03d}"
            switches[guid] = (f"MF0;{leaf}:MQM9700/U1", next(lids), {})
    spine_guid: dict[tuple[int, int], str] = {}
    for pod in range(pods):
        for k in range(spines):
            guid = _guid(sw_base, 0x20000 + pod * spines + k)
            spine_guid[pod, k] = guid
            desc = (f"MF0;ibspine-{pod + 1:02d}-{k + 1:02d}:MQM9700/U1" if pods > 1
                    else f"MF0;ibspine-{k + 1:02d}:MQM9700/U1")
            switches[guid] = (desc, next(lids), {})
    core_guid = {}
    if pods > 1:
        for k in range(spines):
            guid = _guid(sw_base, 0x30000 + k)
            core_guid[k] = guid
            switches[guid] = (f"MF0;ibcore-{k + 1:02d}:MQM9700/U1", next(lids), {})

    def link(a: str, pa: int, b: str, pb: int) -> None:
        for guid, port, peer, peer_port in ((a, pa, b, pb), (b, pb, a, pa)):
            ports = switches[guid][2] if guid in switches else cas[guid][2]
            ports[port] = ("S" if peer in switches else "H", peer, peer_port)

    for h in range(hosts):
        su, slot = divmod(h, hosts_per_leaf)
        host = name.format(h + 1)
        for rail in range(rails):
            guid = _guid(ca_base, h * 16 + rail)
            cas[guid] = (f"{host} mlx5_{rail}", next(lids), {})
            link(leaf_guid[su, rail], slot + 1, guid, 1)
    for (su, rail), leaf in leaf_guid.items():
        pod = su // units_per_pod
        leaf_in_pod = (su % units_per_pod) * rails + rail
        for k in range(spines):
            link(leaf, hosts_per_leaf + 1 + k, spine_guid[pod, k], leaf_in_pod + 1)
    for (pod, k), spine in spine_guid.items():
        if core_guid:
            link(spine, units_per_pod * rails + 1, core_guid[k], pod + 1)

    def describe(guid: str) -> tuple[str, int]:
        entry = switches.get(guid) or cas[guid]
        return entry[0], entry[1]

    out = ["#", "# Topology file: generated by metalslurm (infra/topology.py synthetic_fat_tree)",
           "#", f"# Initiated from node {next(iter(cas))} port {next(iter(cas))}", ""]
    for guid, (desc, lid, ports) in switches.items():
        nports = max(ports) if ports else 1
        out += ["vendid=0x2c9", "devid=0xd2f2", f"sysimgguid=0x{guid}",
                f"switchguid=0x{guid}({guid})",
                f'Switch\t{nports} "S-{guid}"\t\t# "{desc}" enhanced port 0 lid {lid} lmc 0']
        for port in sorted(ports):
            kind, peer, peer_port = ports[port]
            peer_desc, peer_lid = describe(peer)
            if kind == "H":
                out.append(f'[{port}]\t"H-{peer}"[{peer_port}]({peer}) \t\t# "{peer_desc}" '
                           f"lid {peer_lid} 4xNDR")
            else:
                out.append(f'[{port}]\t"S-{peer}"[{peer_port}]\t\t# "{peer_desc}" '
                           f"lid {peer_lid} 4xNDR")
        out.append("")
    for guid, (desc, lid, ports) in cas.items():
        out += ["vendid=0x2c9", "devid=0x1021", f"sysimgguid=0x{guid}", f"caguid=0x{guid}",
                f'Ca\t1 "H-{guid}"\t\t# "{desc}"']
        for port in sorted(ports):
            _, peer, peer_port = ports[port]
            peer_desc, peer_lid = describe(peer)
            out.append(f'[{port}]({guid}) \t"S-{peer}"[{peer_port}]\t\t# lid {lid} lmc 0 '
                       f'"{peer_desc}" lid {peer_lid} 4xNDR')
        out.append("")
    return "\n".join(out)



# --------------------------------------------------------------------------- the role's side


def topology_from_inventory(compute_hosts: Sequence[str], switch_of: Mapping[str, Any],
                            settings: Mapping[str, Any]) -> tuple[str, list[str]]:
    """(topology.conf, problems) for the slurm_topology role from an inventory: each compute
    host's ``metalslurm_switch`` (``switch_of``) and ``metalslurm_topology`` (``settings``:
    source, plugin, leaf_spines, spines, block_sizes). The file is empty unless the source
    is config; a hand-written inventory is held to the stack config's rules."""
    source = str(settings.get("source") or "none")
    plugin = str(settings.get("plugin") or "tree")
    problems: list[str] = []
    if source not in ("none", *SOURCES):
        problems.append(f"metalslurm_topology.source {source!r} is not one of none, "
                        f"{', '.join(SOURCES)}")
    if plugin not in PLUGINS:
        problems.append(f"metalslurm_topology.plugin {plugin!r} is not one of "
                        f"{', '.join(PLUGINS)}")
    block_sizes = [int(n) for n in settings.get("block_sizes") or []]
    if block_sizes and plugin != "block":
        problems.append("metalslurm_topology.block_sizes is only read with plugin block")
    if source != "config" or problems:
        return "", problems
    leaf_spines = dict(settings.get("leaf_spines") or {})
    members: dict[str, list[str]] = defaultdict(list)
    for host in compute_hosts:
        if switch_of.get(host):
            members[str(switch_of[host])].append(host)
    if not members:
        return "", ["metalslurm_topology.source is config but no compute host has a "
                    "metalslurm_switch (its leaf switch)"]
    strangers = [leaf for leaf in leaf_spines if leaf not in members]
    if strangers:
        problems.append(f"metalslurm_topology.leaf_spines names leaves no compute host is "
                        f"under: {', '.join(sorted(strangers, key=natural_key))}")
    leaves = [{"name": leaf, "nodes": nodes, "spine": leaf_spines.get(leaf, "")}
              for leaf, nodes in sorted(members.items(), key=lambda kv: natural_key(kv[0]))]
    try:
        topology = topology_from_config(leaves, list(settings.get("spines") or []),
                                        list(compute_hosts))
    except TopologyError as exc:
        problems.append(str(exc).replace("topology.leaves", "metalslurm_switch"))
    if problems:
        return "", problems
    return render_topology_conf(topology, plugin, block_sizes or None), []


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
