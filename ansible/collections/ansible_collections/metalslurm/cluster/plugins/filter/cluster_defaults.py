"""The defaults several roles share, and the accounting and acceptance-gate settings over
theirs (module_utils/cluster_defaults.py owns them)."""

from __future__ import annotations

from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.cluster_defaults import (
    accept_gate,
    accept_settings,
    accounting_settings,
    cluster_defaults,
)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"cluster_defaults": cluster_defaults, "accounting_settings": accounting_settings,
                "accept_settings": accept_settings, "accept_gate": accept_gate}
