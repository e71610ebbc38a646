"""The acceptance gate's settings over their defaults, and its drain reason's prefix
(module_utils/accept.py), for the slurm_compute and nvidia_gpu roles."""

from __future__ import annotations

from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.accept import (
    accept_gate,
    accept_settings,
)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"accept_settings": accept_settings, "accept_gate": accept_gate}
