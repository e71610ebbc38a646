"""Filters about systemd units, for the roles that keep services running: a task that would
only keep a unit running and enabled is skipped when service_facts already shows it so, and
mount units are named the way systemd names them."""

from __future__ import annotations

from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils import slurmconf
from ansible_collections.metalslurm.cluster.plugins.plugin_utils.filters import filter_errors


def service_up(services: dict[str, Any], name: str) -> bool:
    """True when ``ansible_facts.services`` (service_facts) shows systemd unit ``name``
    running and enabled."""
    unit = services.get(name if name.endswith(".service") else f"{name}.service") or {}
    return unit.get("state") == "running" and unit.get("status") == "enabled"


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "service_up": service_up,
            # '/home' -> 'home.mount', '/data/ckpt-1' -> 'data-ckpt\x2d1.mount'
            # (what 'systemd-escape --path --suffix=mount' prints)
            "mount_unit": filter_errors(slurmconf.SlurmConfError)(slurmconf.mount_unit_name),
        }
