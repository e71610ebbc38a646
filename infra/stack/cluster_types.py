"""The cluster's own types: compute pools, partitions, power saving, shared storage.

Parsed by :mod:`infra.stack.config` and read by the provider sections
(:mod:`infra.stack.byo`, :mod:`infra.stack.oci`), so it imports no section module: the
sections depend on it, never on the aggregator.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.cluster_defaults import (
    DEFAULT_JOB_TIME,  # also the controller role's default for hand-written inventories
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.inventory_contract import (
    DEFAULT_SHARED_PATHS,
)


@dataclass(frozen=True)
class ComputePool:
    """A group of identical compute nodes.

    ``count`` nodes are static (always on); ``elastic_count`` more are declared
    ``State=CLOUD`` and powered up and down by Slurm's power saving. Nodes are named
    ``<name>-001`` onwards, static ones first, unless the provider names them (``hosts``:
    existing machines, static ones first).
    """

    name: str
    count: int
    gpu_type: str | None
    gpu_count: int
    elastic_count: int = 0
    shape: str | None = None
    hosts: tuple[str, ...] = ()

    def _generated(self, first: int, n: int) -> list[str]:
        return [f"{self.name}-{i:03d}" for i in range(first, first + n)]

    def static_names(self) -> list[str]:
        if self.hosts:
            return list(self.hosts[:self.count])
        return self._generated(1, self.count)

    def elastic_names(self) -> list[str]:
        if self.hosts:
            return list(self.hosts[self.count:self.count + self.elastic_count])
        return self._generated(self.count + 1, self.elastic_count)

    def node_names(self) -> list[str]:
        return self.static_names() + self.elastic_names()


@dataclass(frozen=True)
class Partition:
    """A Slurm partition over some pools (all pools when ``pools`` is empty)."""

    name: str
    pools: tuple[str, ...] = ()
    default: bool = False
    max_time: str = "UNLIMITED"
    default_time: str = DEFAULT_JOB_TIME
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ElasticSettings:
    """Slurm power saving for the pools' elastic nodes (seconds, nodes per minute)."""

    suspend_time: int
    suspend_timeout: int
    resume_timeout: int
    resume_rate: int
    suspend_rate: int
    boot_time: int
    reconcile_interval: int
    # Seconds a machine may be on while Slurm holds its node powered down before the
    # reconciler stops it: a machine started by hand gets this long for its slurmd to register.
    orphan_after: int


@dataclass(frozen=True)
class StorageSettings:
    """Shared file systems: NFS exports of ``paths`` from ``server``, or none."""

    backend: str = "nfs"
    server: str = "nfs"
    paths: tuple[str, ...] = DEFAULT_SHARED_PATHS
