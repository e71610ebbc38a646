"""Slurm's switch topology as a model: switches, their levels, and the rules of a tree.

A :class:`Topology` comes from one of two sources (stack key ``metalslurm:topology``):

* ``source: config``: leaves and spines as the user lists them (:func:`topology_from_config`).
* ``source: ibnetdiscover``: the fabric as ``ibnetdiscover`` prints it
  (module_utils/ibnetdiscover.py), turned into a tree (module_utils/topology_fabric.py).

topology.conf is written and read by module_utils/topology_conf.py.
"""


from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.slurmconf import (
    compress_hostlist,
    expand_hostlist,
)

PLUGINS = ("tree", "block")
SOURCES = ("config", "ibnetdiscover")
# ``metalslurm_topology`` for what an inventory leaves out (the roles merge over it with the
# ``topology_settings`` filter; infra/stack/topology.py takes the plugin from here). Source
# none: an inventory that describes no switches gets no topology.conf and no TopologyPlugin
# (a stack config always says where its tree comes from: config unless given).
INVENTORY_DEFAULTS: dict[str, Any] = {
    "plugin": "tree", "source": "none", "leaf_spines": {}, "spines": [], "block_sizes": [],
    "discovery_host": "", "simulator_fabric": ""}


def topology_settings(value: Mapping[str, Any] | None) -> dict[str, Any]:
    """``metalslurm_topology`` over :data:`INVENTORY_DEFAULTS` (a key it gives stays its
    own)."""
    merged = {k: (type(v)(v) if isinstance(v, dict | list) else v)
              for k, v in INVENTORY_DEFAULTS.items()}
    merged.update(value or {})
    return merged

ROOT = "root"
UNPLACED = "unplaced"
# A switch or block name Slurm reads as one hostlist word (no ',', '[', ']' or spaces).
SWITCH_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class TopologyError(ValueError):
    """An ibnetdiscover dump, topology.conf or topology that cannot be used."""


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


def plural(names: Sequence[str], one: str, many: str) -> str:
    return one if len(names) == 1 else many


# A hostlist expression every Slurm release reads: a prefix and at most one bracketed range
# at the end (gpu-[001-004]). python-hostlist can also write forms such as
# A09-P1-IBLEAF-[01-02]-01 (a range inside the name); Slurm's own parser is not relied on
# for those, so such names are listed one by one.
SIMPLE_HOSTLIST_RE = re.compile(r"^[^\[\],]+(\[[0-9,-]+\])?(,[^\[\],]+(\[[0-9,-]+\])?)*$")



TRAILING_NUMBER_RE = re.compile(r"^(.*?)(\d*)$")



def compact_hostlist(names: Iterable[str]) -> str:
    names = list(names)
    compressed = compress_hostlist(names)
    if SIMPLE_HOSTLIST_RE.fullmatch(compressed):
        return compressed
    # Compress only the trailing number: one simple expression per prefix.
    by_prefix: dict[str, list[str]] = defaultdict(list)
    for name in set(names):
        by_prefix[TRAILING_NUMBER_RE.fullmatch(name)[1]].append(name)  # type: ignore[index]
    parts = []
    for prefix in sorted(by_prefix, key=natural_key):
        part = compress_hostlist(by_prefix[prefix])
        parts.append(part if SIMPLE_HOSTLIST_RE.fullmatch(part)
                     else ",".join(sorted(by_prefix[prefix], key=natural_key)))
    return ",".join(parts)


def _reach_problems(topology: Topology, by_name: dict[str, Switch],
                    roots: list[str]) -> list[str]:
    """Switches reached twice walking down from the top ones (a cycle or a shared child),
    and switches never reached."""
    problems = []
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
    return problems


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
    problems += _reach_problems(topology, by_name, roots)
    where: dict[str, list[str]] = defaultdict(list)
    for s in topology.switches:
        for node in s.nodes:
            where[node].append(s.name)
    for node, names in sorted(where.items(), key=lambda item: natural_key(item[0])):
        if len(names) > 1:
            problems.append(f"node {node} is under {len(names)} leaves: {', '.join(names)}")
    return problems


# --------------------------------------------------------------------------- from config


def config_problems(prefix: str, leaves: Sequence[tuple[str, str, list[str], str]],
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
            verb = plural(strangers, "is not a compute node", "are not compute nodes")
            problems.append((f"{where}.nodes", f"{compact_hostlist(strangers)} {verb} of this "
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
        problems.append((f"{prefix}.leaves", f"{compact_hostlist(orphans)} "
                         f"{plural(orphans, 'is a compute node', 'are compute nodes')} under "
                         f"no leaf; add {plural(orphans, 'it', 'them')} to a leaf's nodes"))
    used_spines = {leaf[3] for leaf in leaves}
    for spine in spines:
        if spine not in used_spines:
            problems.append((f"{prefix}.spines", f"spine {spine!r} has no leaf under it"))
    return problems


def config_topology(leaves: Sequence[tuple[str, str, list[str], str]],
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


def node_list(value: Any) -> list[str] | None:
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
        leaf_nodes = node_list(leaf.get("nodes"))
        if leaf_nodes is None:
            problems.append((f"topology.leaves[{i}].nodes", "must be a hostlist expression "
                             "or a list of node names"))
            leaf_nodes = []
        parsed.append((f"topology.leaves[{i}]", str(leaf.get("name", "")), leaf_nodes,
                       str(leaf.get("spine") or "")))
    problems += config_problems("topology", parsed, list(spines), list(nodes))
    if problems:
        raise TopologyError("; ".join(f"{w}: {m}" for w, m in problems))
    return config_topology(parsed, list(spines))


