"""The byo provider's hosts as inventory nodes and connection settings, without Pulumi:
what ``pulumi up`` (infra/pulumi/byo.py) and ``metalslurm up`` (infra/ops/byo.py) both
build the inventory from.
"""

from __future__ import annotations

from typing import Any

from infra.stack.byo import ByoHost, ByoSettings
from infra.stack.config import ClusterConfig
from infra.stack.inventory import BACKUP_GROUP, NodeSpec


def byo_settings(cfg: ClusterConfig) -> ByoSettings:
    if cfg.byo is None:
        raise ValueError("provider byo needs metalslurm:byo")
    return cfg.byo


def _host_vars(byo: ByoSettings, host: ByoHost) -> dict[str, Any]:
    """A host with a public address is reached directly, not through the jump host; one
    whose firewall the operator keeps (openFirewall false) gets no openings."""
    out: dict[str, Any] = {"ansible_ssh_common_args": ""} if host.public_address else {}
    open_firewall = byo.open_firewall_of(host.name)
    if open_firewall is not None:
        out["host_firewall_enabled"] = open_firewall
    return out


def node_specs(cfg: ClusterConfig) -> list[NodeSpec]:
    """Controller, NFS server, login nodes, then compute nodes in pool order, as the config
    gives them."""
    byo = byo_settings(cfg)
    specs = []
    for role, groups in (("controller", ("slurm_controller", "slurmdbd")),
                         ("controller-backup", (BACKUP_GROUP,)),
                         ("nfs", ("nfs_server",)), ("login", ("login",))):
        specs += [NodeSpec(name=h.name, address=h.address, groups=groups,
                           ansible_host=h.public_address, extra_vars=_host_vars(byo, h))
                  for h in byo.hosts if h.role == role]
    for pool in cfg.compute_pools:
        elastic = set(pool.elastic_names())
        for node in pool.node_names():
            h = byo.host(node)
            specs.append(NodeSpec(
                name=h.name, address=h.address, groups=("slurm_compute",),
                gpu_type=pool.gpu_type, gpu_count=pool.gpu_count,
                node_state="cloud" if node in elastic else "static",
                power=h.bmc.power() if h.bmc else None, extra_vars=_host_vars(byo, h)))
    return specs


def connection_vars(cfg: ClusterConfig) -> dict[str, Any]:
    byo = byo_settings(cfg)
    conn: dict[str, Any] = {"ansible_user": byo.ssh_user,
                            "ansible_become": byo.ssh_user != "root"}
    jump = jump_host(cfg)
    if jump:
        conn["ansible_ssh_common_args"] = f"-o ProxyJump={jump}"
    return conn


def jump_host(cfg: ClusterConfig) -> str | None:
    """user@host of the bastion, else of the controller's public address, else None."""
    byo = byo_settings(cfg)
    if byo.bastion:
        return f"{byo.bastion_user or byo.ssh_user}@{byo.bastion}"
    ctl = byo.host(cfg.controller_name)
    return f"{byo.ssh_user}@{ctl.public_address}" if ctl.public_address else None
