"""The nvidia_gpu role's filters: its settings' rules, the packages and repositories of a
driver branch, the pinned keys, and the driver's view of the GPUs against the inventory's
(module_utils/gpu.py)."""

from __future__ import annotations

from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils import gpu


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "os_release": gpu.os_release,
            "gpu_settings": gpu.gpu_settings,
            "gpu_problems": gpu.gpu_problems,
            "nvidia_driver_packages": gpu.driver_packages,
            "dcgm_package": gpu.dcgm_package,
            "nvidia_repositories": gpu.repositories,
            "nvidia_key_problems": gpu.key_problems,
            "gpu_facts_problems": gpu.facts_problems,
        }
