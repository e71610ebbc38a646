"""``metalslurm:topology``: the stack key of Slurm's switch topology.

Parsed here (:func:`parse_topology_settings`) into ``metalslurm_topology`` and each compute
host's ``metalslurm_switch``; the tree rules are the slurm_topology role's own
(``metalslurm.cluster`` collection, module_utils/topology*.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.topology import (
    INVENTORY_DEFAULTS,
    PLUGINS,
    SOURCES,
    SWITCH_NAME_RE,
    Topology,
    config_problems,
    config_topology,
    node_list,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.topology_conf import (
    render_topology_conf,
)

from infra.stack.schema import Collector, key

_TOPOLOGY_KEYS = ("plugin", "source", "leaves", "spines", "blockSizes", "discovery")



_LEAF_KEYS = ("name", "nodes", "spine")



_DISCOVERY_KEYS = ("host", "simulator")



@dataclass(frozen=True)
class LeafSpec:
    name: str
    nodes: tuple[str, ...]
    spine: str = ""



@dataclass(frozen=True)
class TopologySettings:
    """``metalslurm:topology``: the topology plugin and where its tree comes from."""

    plugin: str = INVENTORY_DEFAULTS["plugin"]  # module_utils/topology.py, as the roles'
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
    plugin = c.string(item, "plugin", f"{where}.plugin", default=TopologySettings.plugin,
                      choices=PLUGINS)
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
            leaf_nodes = node_list(leaf.get("nodes"))
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
        for w, message in (config_problems(where, parsed, spines, compute_nodes)
                           if parsed else []):
            c.problem(w, message)
        if len(c.problems) == before and parsed:
            topology = config_topology(parsed, spines)
    return TopologySettings(
        plugin=plugin or "tree", source=source or "config", leaves=tuple(leaves),
        spines=spines, block_sizes=block_sizes, discovery_host=host or "",
        discovery_simulator=simulator or "", topology=topology)
