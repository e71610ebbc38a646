"""The inventory contract's check, for the cluster_validate role (module_utils/inventory_contract.py
holds the rules; the operator's inventory builder applies the same ones), and the shared
paths of an inventory that does not list them, for the roles that export, mount, check or
list them, and the submit host (the roles that open srun's ports or run slurmrestd there)."""

from __future__ import annotations

from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils import inventory_contract
from ansible_collections.metalslurm.cluster.plugins.plugin_utils.filters import hostvar

# The variables the contract reads.
CONTRACT_VARS = ("metalslurm_address", "metalslurm_private_cidr", "metalslurm_gpu_count",
                 "metalslurm_gpu_type", "metalslurm_node_state", "metalslurm_partitions",
                 "metalslurm_shared_storage", "metalslurm_users", "metalslurm_groups",
                 "metalslurm_access")


def inventory_problems(groups: dict[str, list[str]], hostvars: Any) -> list[str]:
    """The inventory contract's broken rules, one sentence each (empty list = valid)."""
    names = {h for g in inventory_contract.GROUPS for h in groups.get(g, [])}
    view_hostvars = {h: {k: hostvar(hostvars, h, k) for k in CONTRACT_VARS
                         if hostvar(hostvars, h, k) is not None} for h in names}
    view = {"groups": {g: list(groups.get(g, [])) for g in inventory_contract.GROUPS},
            "hostvars": view_hostvars}
    return inventory_contract.inventory_problems(view)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"inventory_problems": inventory_problems,
                "shared_paths": inventory_contract.shared_paths,
                "submit_host": inventory_contract.submit_host}
