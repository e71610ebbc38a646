"""The slurm.conf settings a cluster of its size needs (module_utils/slurm_scale.py), for the
slurm_controller role's size tuning layer."""

from __future__ import annotations

from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils import slurm_scale, slurm_versions
from ansible_collections.metalslurm.cluster.plugins.plugin_utils.filters import filter_errors


@filter_errors(slurm_scale.ScaleError, slurm_versions.SlurmVersionError)
def size_tuning(nodes: int, release: str, base: dict[str, Any],
                overrides: dict[str, Any] | None = None,
                partitions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """``nodes | size_tuning(release, base, overrides, partitions)``: the settings to
    combine over ``base`` and under the operator's ``overrides``."""
    return slurm_scale.size_tuning(int(nodes), release, base, overrides or {}, partitions or [])


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"size_tuning": size_tuning}
