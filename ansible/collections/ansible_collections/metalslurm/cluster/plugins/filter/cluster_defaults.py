"""The defaults several roles share (module_utils/cluster_defaults.py owns them)."""

from __future__ import annotations

from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.cluster_defaults import (
    cluster_defaults,
)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"cluster_defaults": cluster_defaults}
