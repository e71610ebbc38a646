"""The NVIDIA driver stack's rules (module_utils/gpu.py): the repositories and packages a
driver branch comes from, the branches each OS release's repository carries, the pinned keys."""

from __future__ import annotations

import pytest
from ansible_collections.metalslurm.cluster.plugins.module_utils import gpu


def test_arm_servers_get_the_sbsa_repository_and_no_toolkit_without_containers():
    assert gpu.repositories({}, "ubuntu2404", "aarch64", False) == [
        {"name": "cuda",
         "url": "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/sbsa",
         "key_url": "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/sbsa"
                    "/3bf863cc.pub",
         "fingerprint": gpu.CUDA_KEY_FINGERPRINT}]



def test_a_mirror_replaces_the_url_and_its_key_url_follows_it():
    repos = gpu.repositories({"repository": {"url": "https://mirror.example/cuda/"}},
                             "debian12", "x86_64", False)
    assert repos[0]["url"] == "https://mirror.example/cuda"
    assert repos[0]["key_url"] == "https://mirror.example/cuda/3bf863cc.pub"



@pytest.mark.parametrize(("release", "branch", "ok"), [
    ("debian13", "580", True), ("debian13", "570", False), ("debian12", "535", True),
    ("ubuntu2204", "535", True), ("ubuntu2404", "535", False), ("ubuntu2404", "550", True),
])
def test_each_os_release_takes_the_branches_its_repository_carries(release, branch, ok):
    found = gpu.gpu_problems({"branch": branch}, release)
    assert (found == []) is ok, found



def test_ubuntu_names_the_driver_packages_per_branch_until_590_and_debian_never():
    assert gpu.driver_packages("ubuntu", "580", True) == [
        "libnvidia-compute-580", "nvidia-dkms-580-open", "nvidia-utils-580",
        "nvidia-compute-utils-580", "nvidia-fabricmanager-580", "libnvidia-nscq-580"]
    assert gpu.driver_packages("ubuntu", "590", False) == [
        "libnvidia-compute", "nvidia-dkms-open", "nvidia-utils", "nvidia-compute-utils"]
    assert gpu.driver_packages("debian", "580", False) == [
        "nvidia-driver-cuda", "nvidia-kernel-open-dkms", "nvidia-persistenced"]
    assert gpu.dcgm_package("570") == "datacenter-gpu-manager-4-cuda12"
    assert gpu.dcgm_package("580") == "datacenter-gpu-manager-4-cuda13"



def test_os_release_names_follow_nvidias_repository_directories():
    assert gpu.os_release("Debian", "13.1") == "debian13"
    assert gpu.os_release("Debian", "12") == "debian12"
    assert gpu.os_release("Ubuntu", "22.04") == "ubuntu2204"



def test_a_fetched_key_is_checked_against_the_pinned_fingerprint():
    colons = ("pub:-:255:22:4FEEFCAA9FD0C904:1700000000:::-:::scSC:::::ed25519:::0:\n"
              "fpr:::::::::6AA1CA17C718A03054B3C9384FEEFCAA9FD0C904:\n"
              "uid:-::::1700000000::X::metalslurm stand-in repository::::::::::0:\n")
    repo = {"name": "cuda", "key_url": "file:///k.asc",
            "fingerprint": "6AA1CA17C718A03054B3C9384FEEFCAA9FD0C904"}
    assert gpu.key_problems([{"item": repo, "stdout": colons}]) == []
    other = {**repo, "name": "container-toolkit", "fingerprint": "0" * 40}
    assert gpu.key_problems([{"item": other, "stdout": colons},
                             {"item": repo, "stdout": "not a key"}]) == [
        "the container-toolkit repository's key (file:///k.asc) has fingerprint "
        "6AA1CA17C718A03054B3C9384FEEFCAA9FD0C904, not the pinned " + "0" * 40 + "; fetch the "
        "right key, or pin its fingerprint in "
        "metalslurm_gpu.container_toolkit_repository.key_fingerprint",
        "the cuda repository's key (file:///k.asc) has fingerprint none (not an OpenPGP key), "
        "not the pinned 6AA1CA17C718A03054B3C9384FEEFCAA9FD0C904; fetch the right key, or pin "
        "its fingerprint in metalslurm_gpu.repository.key_fingerprint"]
