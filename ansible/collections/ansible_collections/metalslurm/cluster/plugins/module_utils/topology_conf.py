"""Slurm's topology.conf: rendered from a :class:`Topology`, and read back (the file in use
places nodes a fabric scan misses).

Output is deterministic: the same inputs give a byte-identical topology.conf.

"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.slurmconf import (
    expand_hostlist,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.topology import (
    PLUGINS,
    SOURCES,
    Switch,
    Topology,
    TopologyError,
    compact_hostlist,
    make_topology,
    natural_key,
    topology_from_config,
)


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
             "(slurm_topology role) from the stack config or the fabric; edit those, not this file"]
    for s in topology.switches:
        comment = ""
        if s.members and s.members != (s.name,):
            comment = f"  # members: {compact_hostlist(s.members)}"
        if plugin == "block":
            if s.nodes:
                lines.append(f"BlockName={s.name} Nodes={compact_hostlist(s.nodes)}{comment}")
            continue
        line = f"SwitchName={s.name}"
        if s.nodes:
            line += f" Nodes={compact_hostlist(s.nodes)}"
        elif s.children:
            line += f" Switches={compact_hostlist(s.children)}"
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
