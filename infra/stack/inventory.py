"""The one Ansible inventory schema every provider produces, and its validation.

Shape (YAML)::

    all:
      vars:      metalslurm_cluster_name, metalslurm_private_cidr, metalslurm_provider,
                 metalslurm_os, metalslurm_partitions, metalslurm_shared_storage, ...
      children:
        slurm_controller: {hosts: {<name>: {}}}        exactly one
        slurmdbd:         {hosts: {<name>: {}}}        usually the controller
        nfs_server:       {hosts: {...}}               zero or one
        slurm_compute:    {hosts: {<name>: {}}}        one or more
        login:            {hosts: {...}}               optional

Host variables (set once, under ``all.hosts``):
``ansible_host``, ``metalslurm_address`` (private address), ``metalslurm_gpu_type``,
``metalslurm_gpu_count``, ``metalslurm_node_state`` (``static`` or ``cloud``),
``metalslurm_switch`` (optional leaf switch), ``metalslurm_power`` (``{driver: ..., ...}``,
non-secret parameters only).

The contract's rules (:func:`inventory_problems`, in the ``metalslurm.cluster``
collection's ``module_utils/inventory_contract.py``) run here, before a provider writes an
inventory, and in the playbook's first play (the cluster_validate role, through the
collection's ``inventory_problems`` filter), so a hand-written inventory gets the same
checks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.inventory_contract import (
    BACKUP_GROUP,
    GROUPS,
    inventory_problems,
)

from infra.stack.config import ClusterConfig


@dataclass(frozen=True)
class NodeSpec:
    """One machine as a provider knows it."""

    name: str
    address: str
    groups: tuple[str, ...]
    ansible_host: str | None = None
    gpu_type: str | None = None
    gpu_count: int = 0
    node_state: str = "static"
    switch: str | None = None
    power: Mapping[str, Any] | None = None
    extra_vars: Mapping[str, Any] = field(default_factory=dict)

    def host_vars(self) -> dict[str, Any]:
        hv: dict[str, Any] = {
            "ansible_host": self.ansible_host or self.address,
            "metalslurm_address": self.address,
        }
        if "slurm_compute" in self.groups:
            hv["metalslurm_node_state"] = self.node_state
            hv["metalslurm_gpu_count"] = self.gpu_count
            if self.gpu_type:
                hv["metalslurm_gpu_type"] = self.gpu_type
            if self.switch:
                hv["metalslurm_switch"] = self.switch
            if self.power:
                hv["metalslurm_power"] = dict(self.power)
        hv.update(self.extra_vars)
        return hv


def with_switches(cfg: ClusterConfig, specs: list[NodeSpec]) -> list[NodeSpec]:
    """The specs with each compute node's leaf switch (``metalslurm_switch``) from the
    stack's ``metalslurm:topology`` leaves; a provider's own value is kept."""
    switch_of = cfg.topology.switch_of() if cfg.topology is not None else {}
    return [replace(s, switch=switch_of[s.name]) if s.switch is None and s.name in switch_of
            else s for s in specs]


def login_specs(cfg: ClusterConfig) -> list[NodeSpec]:
    """The login nodes of a provider that plans addresses (local, oci): from the top of the
    private subnet downward, below the last address (the NFS server's, taken or not), so no
    change to the compute pools moves one and adding one moves no other node."""
    hosts = list(cfg.private_cidr.hosts())
    return [NodeSpec(name=name, address=str(hosts[-2 - i]), groups=("login",))
            for i, name in enumerate(cfg.login.names())]


def backup_controller_specs(cfg: ClusterConfig, controller_index: int) -> list[NodeSpec]:
    """The backup controller of a provider that plans addresses (local, oci), if the stack
    has one: the address just below the controller's (host ``controller_index``, counted
    from 1), which no other node takes, so adding one moves no node."""
    if not cfg.controller_backup:
        return []
    hosts = list(cfg.private_cidr.hosts())
    return [NodeSpec(name=cfg.controller_backup, address=str(hosts[controller_index - 2]),
                     groups=(BACKUP_GROUP,))]


def cluster_vars(cfg: ClusterConfig, specs: list[NodeSpec]) -> dict[str, Any]:
    """The ``all`` vars of the inventory that come from the stack config.

    The same for every provider; a provider adds its connection settings.
    """
    compute = [s.name for s in specs if "slurm_compute" in s.groups]
    pool_of = {n: p.name for p in cfg.compute_pools for n in p.node_names()}
    partitions = []
    for part in cfg.partitions:
        nodes = [n for n in compute if not part.pools or pool_of[n] in part.pools]
        partitions.append({"name": part.name, "nodes": nodes, "default": part.default,
                           "max_time": part.max_time, "default_time": part.default_time,
                           "options": dict(part.options)})
    acct = cfg.accounting
    el = cfg.elastic
    return {
        "metalslurm_cluster_name": cfg.cluster_name,
        "metalslurm_provider": cfg.provider,
        "metalslurm_private_cidr": str(cfg.private_cidr),
        "metalslurm_os": cfg.os,
        "metalslurm_shared_storage": cfg.storage.backend,
        "metalslurm_shared_paths": list(cfg.storage.paths) if cfg.storage.backend != "none"
        else [],
        "metalslurm_partitions": partitions,
        "metalslurm_slurm_conf": dict(cfg.slurm_conf),
        "metalslurm_users": [u.inventory_vars() for u in cfg.users],
        "metalslurm_groups": [{"name": g.name, "gid": g.gid} for g in cfg.groups],
        "metalslurm_access": cfg.access.inventory_vars(),
        "metalslurm_containers": cfg.containers.inventory_vars(),
        "metalslurm_topology": (cfg.topology.inventory_vars() if cfg.topology is not None
                                else {"source": "none"}),
        "metalslurm_nccl": cfg.nccl.inventory_vars(),
        "metalslurm_health": cfg.health.inventory_vars(),
        "metalslurm_gpu": cfg.gpu.inventory_vars(),
        "metalslurm_monitoring": cfg.monitoring.inventory_vars(),
        "metalslurm_rest": cfg.rest.inventory_vars(),
        "metalslurm_accept": dict(cfg.accept),
        "metalslurm_elastic": {
            "suspend_time": el.suspend_time, "suspend_timeout": el.suspend_timeout,
            "resume_timeout": el.resume_timeout, "resume_rate": el.resume_rate,
            "suspend_rate": el.suspend_rate, "boot_time": el.boot_time,
            "reconcile_interval": el.reconcile_interval, "orphan_after": el.orphan_after,
        },
        "metalslurm_accounting": {
            "database_host": acct.database_host or "",
            "database_port": acct.database_port,
            "database_name": acct.database_name,
            "database_user": acct.database_user,
            "prune": acct.prune,
            "qos": [{"name": q.name, "priority": q.priority, "limits": dict(q.limits),
                     "description": q.description} for q in acct.qos],
            "accounts": [{"name": a.name, "users": list(a.users), "fairshare": a.fairshare,
                          "qos": list(a.qos), "default_qos": a.default_qos,
                          "description": a.description} for a in acct.accounts],
        },
    }


class InventoryError(ValueError):
    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("inventory is not valid:\n" + "\n".join(f"  - {p}" for p in problems))


def build_inventory(nodes: Iterable[NodeSpec], cluster_vars: Mapping[str, Any]) -> dict[str, Any]:
    """Build the inventory document from node specs; raise InventoryError if it is invalid."""
    nodes = list(nodes)
    hosts: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for node in nodes:
        if node.name in hosts:
            problems.append(f"host {node.name!r}: the name is used by two nodes")
            continue
        hosts[node.name] = node.host_vars()
    children: dict[str, Any] = {}
    for group in GROUPS:
        members = [n.name for n in nodes if group in n.groups]
        children[group] = {"hosts": {name: None for name in members}}
    inventory = {"all": {"vars": dict(cluster_vars), "hosts": hosts, "children": children}}
    problems += inventory_problems(inventory_view(inventory))
    if problems:
        raise InventoryError(problems)
    return inventory


def inventory_view(inventory: Mapping[str, Any]) -> dict[str, Any]:
    """Flatten an inventory document into ``{"groups": {...}, "hostvars": {...}}``."""
    top = inventory["all"]
    groups = {g: list((top.get("children", {}).get(g) or {}).get("hosts") or {}) for g in GROUPS}
    hostvars = {}
    for name, hv in (top.get("hosts") or {}).items():
        merged = dict(top.get("vars") or {})
        merged.update(hv or {})
        hostvars[name] = merged
    return {"groups": groups, "hostvars": hostvars}


def make_inventory(cfg: ClusterConfig, specs: list[NodeSpec], connection: Mapping[str, Any],
                   power: Mapping[str, Mapping[str, Any]],
                   files: Mapping[str, str]) -> dict[str, Any]:
    """The foundation's inventory for these specs; raises InventoryError if it is invalid."""
    specs = [replace(s, power=dict(power[s.name])) if s.name in power else s for s in specs]
    specs = with_switches(cfg, specs)
    all_vars = cluster_vars(cfg, specs)
    all_vars.update(connection)
    all_vars.update(files)
    return build_inventory(specs, all_vars)
