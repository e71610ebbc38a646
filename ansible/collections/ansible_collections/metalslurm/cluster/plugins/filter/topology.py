"""The slurm_topology role's filters: topology.conf from the inventory's leaf switches, or from
what ibnetdiscover found (module_utils/topology*.py)."""

from __future__ import annotations

from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils import (
    topology,
    topology_conf,
    topology_fabric,
)
from ansible_collections.metalslurm.cluster.plugins.plugin_utils.filters import (
    filter_errors,
    hostvar,
)

topology_errors = filter_errors(topology.TopologyError)


@topology_errors
def topology_from_inventory(hosts: list[str], hostvars: Any,
                            settings: dict[str, Any]) -> dict[str, Any]:
    """{content, problems}: topology.conf from each compute host's metalslurm_switch."""
    switch_of = {h: hostvar(hostvars, h, "metalslurm_switch") for h in hosts}
    content, problems = topology_conf.topology_from_inventory(hosts, switch_of, settings)
    return {"content": content, "problems": problems}


@topology_errors
def discovered_topology(stdout: str, hosts: list[str], previous: str, plugin: str = "tree",
                        block_sizes: list[int] | None = None) -> dict[str, Any]:
    """{content, warnings, missing, unmatched, unnamed} from ibnetdiscover's output."""
    return topology_fabric.discovered_topology(stdout, hosts, previous, plugin, block_sizes)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "topology_settings": topology.topology_settings,
            "topology_from_inventory": topology_from_inventory,
            "discovered_topology": discovered_topology,
        }
