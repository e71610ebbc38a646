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

The same :func:`inventory_problems` runs on the operator side (before a provider
writes an inventory) and inside the playbook's first play (through the
``metalslurm_inventory_problems`` filter), so a hand-written inventory gets the
same checks.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from infra.config import ClusterConfig
from infra.schema import GPU_TYPES, MAX_GPUS_PER_NODE, NODE_NAME_RE

GROUPS = ("slurm_controller", "slurmdbd", "nfs_server", "slurm_compute", "login")
NODE_STATES = ("static", "cloud")
# nfs: exported by the nfs_server host, mounted by the others; host-bind: the local
# provider bind-mounts one host directory per path into every node (kernels without
# NFS); none: no shared file system.
SHARED_STORAGE = ("nfs", "host-bind", "none")


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
        "metalslurm_users": [{"name": u.name, "uid": u.uid} for u in cfg.users],
        "metalslurm_containers": cfg.containers.inventory_vars(),
        "metalslurm_topology": (cfg.topology.inventory_vars() if cfg.topology is not None
                                else {"source": "none"}),
        "metalslurm_nccl": cfg.nccl.inventory_vars(),
        "metalslurm_health": cfg.health.inventory_vars(),
        "metalslurm_gpu": cfg.gpu.inventory_vars(),
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


def _get(hostvars: Mapping[str, Any], host: str, key: str, default: Any = None) -> Any:
    try:
        return hostvars[host].get(key, default)
    except (KeyError, AttributeError):
        return default


def inventory_problems(view: Mapping[str, Any]) -> list[str]:
    """Every rule the inventory contract states, as one sentence per broken rule.

    ``view`` is ``{"groups": {group: [host, ...]}, "hostvars": {host: {var: value}}}``:
    what :func:`inventory_view` returns, or what Ansible has as ``groups``/``hostvars``.
    """
    groups: Mapping[str, list[str]] = view["groups"]
    hostvars: Mapping[str, Any] = view["hostvars"]
    problems: list[str] = []

    controllers = list(groups.get("slurm_controller") or [])
    compute = list(groups.get("slurm_compute") or [])
    if not controllers:
        problems.append("group slurm_controller is empty: put exactly one host in it")
    elif len(controllers) > 1:
        problems.append(f"group slurm_controller has {len(controllers)} hosts "
                        f"({', '.join(controllers)}): put exactly one host in it")
    if not compute:
        problems.append("group slurm_compute is empty: add at least one compute host")
    nfs = list(groups.get("nfs_server") or [])
    if len(nfs) > 1:
        problems.append(f"group nfs_server has {len(nfs)} hosts ({', '.join(nfs)}): "
                        "use zero or one")
    first = (controllers or compute or [""])[0]
    storage = _get(hostvars, first, "metalslurm_shared_storage", "none")
    if storage not in SHARED_STORAGE:
        problems.append(f"metalslurm_shared_storage {storage!r} is not one of "
                        f"{', '.join(SHARED_STORAGE)}")
    elif storage == "nfs" and len(nfs) != 1:
        problems.append("metalslurm_shared_storage is nfs but group nfs_server is empty: put "
                        "the NFS server host in it, or set metalslurm_shared_storage: none")

    all_hosts = sorted({h for g in GROUPS for h in (groups.get(g) or [])})
    seen_lower: dict[str, str] = {}
    seen_addr: dict[str, str] = {}
    cidr_text = None
    for h in all_hosts:
        cidr_text = cidr_text or _get(hostvars, h, "metalslurm_private_cidr")
    try:
        cidr = ipaddress.ip_network(cidr_text) if cidr_text else None
    except ValueError:
        problems.append(f"metalslurm_private_cidr {cidr_text!r} is not a network in CIDR "
                        "notation (example: 10.77.0.0/24)")
        cidr = None

    for h in all_hosts:
        if not NODE_NAME_RE.match(h):
            problems.append(f"host {h!r}: Slurm and DNS reject this name; use lower-case "
                            "letters, digits and '-' (at most 63, not starting or ending "
                            "with '-')")
        other = seen_lower.setdefault(h.lower(), h)
        if other != h:
            problems.append(f"hosts {other!r} and {h!r} differ only in case: host names "
                            "are case-insensitive, rename one")
        address = _get(hostvars, h, "metalslurm_address")
        if address is None:
            problems.append(f"host {h!r}: metalslurm_address (its private address) is not set")
            continue
        try:
            ip = ipaddress.ip_address(str(address))
        except ValueError:
            problems.append(f"host {h!r}: metalslurm_address {address!r} is not an IP address")
            continue
        prev = seen_addr.setdefault(str(ip), h)
        if prev != h:
            problems.append(f"hosts {prev!r} and {h!r} have the same address {ip}")
        if cidr is not None and ip not in cidr:
            problems.append(f"host {h!r}: address {ip} is outside the private network {cidr}")

    for h in compute:
        problems += _compute_host_problems(h, hostvars)

    for i, part in enumerate(_get(hostvars, (compute or all_hosts or [""])[0],
                                  "metalslurm_partitions", []) or []):
        for node in part.get("nodes", []) if isinstance(part, Mapping) else []:
            if node not in compute:
                problems.append(f"metalslurm_partitions[{i}] ({part.get('name')}): node "
                                f"{node!r} is not in group slurm_compute")
    return problems


def _compute_host_problems(h: str, hostvars: Mapping[str, Any]) -> list[str]:
    problems = []
    count = _get(hostvars, h, "metalslurm_gpu_count", 0)
    gtype = _get(hostvars, h, "metalslurm_gpu_type")
    if isinstance(count, str) and count.isdigit():
        count = int(count)
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_GPUS_PER_NODE:
        problems.append(f"host {h!r}: metalslurm_gpu_count must be a whole number from 0 to "
                        f"{MAX_GPUS_PER_NODE}, got {count!r}")
    elif count > 0 and not gtype:
        problems.append(f"host {h!r}: has {count} GPUs but no metalslurm_gpu_type; set one of "
                        f"{', '.join(GPU_TYPES)}")
    elif gtype and count == 0:
        problems.append(f"host {h!r}: has metalslurm_gpu_type {gtype!r} but no "
                        "metalslurm_gpu_count; set how many GPUs it has")
    if gtype and gtype not in GPU_TYPES:
        problems.append(f"host {h!r}: metalslurm_gpu_type {gtype!r} is not one of "
                        f"{', '.join(GPU_TYPES)}")
    state = _get(hostvars, h, "metalslurm_node_state", "static")
    if state not in NODE_STATES:
        problems.append(f"host {h!r}: metalslurm_node_state {state!r} is not one of "
                        f"{', '.join(NODE_STATES)}")
    return problems
