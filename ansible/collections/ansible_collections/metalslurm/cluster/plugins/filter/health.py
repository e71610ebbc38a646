"""The node health checker's settings over their defaults (module_utils/health.py), for the
slurm_health role and slurm.conf's HealthCheck* settings."""

from __future__ import annotations

from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils import health
from ansible_collections.metalslurm.cluster.plugins.plugin_utils.filters import filter_errors


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"health_settings": filter_errors(health.HealthSettingsError)(
            health.health_settings)}
