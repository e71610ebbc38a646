"""The nvidia_gpu role's filter plugin: the names the role calls map to module_utils/gpu.py."""

from __future__ import annotations

from ansible_collections.metalslurm.cluster.plugins.filter.gpu import FilterModule
from ansible_collections.metalslurm.cluster.plugins.module_utils import gpu

FILTERS = FilterModule().filters()


def test_the_cuda_repository_name_comes_from_ansibles_distribution_facts():
    assert FILTERS["os_release"]("Debian", "12") == "debian12"
    assert FILTERS["os_release"]("Ubuntu", "24.04") == "ubuntu2404"


def test_an_unknown_mode_is_a_problem_naming_the_setting():
    problems = FILTERS["gpu_problems"]({"mode": "compile"})
    assert any("mode is 'compile'" in p for p in problems), problems


def test_each_filter_is_the_module_utils_function():
    assert (FILTERS["nvidia_driver_packages"], FILTERS["dcgm_package"],
            FILTERS["nvidia_repositories"]) == (gpu.driver_packages, gpu.dcgm_package,
                                                gpu.repositories)
