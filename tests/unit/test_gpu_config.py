"""metalslurm:gpu: the rules the stack config and the nvidia_gpu role share (infra/gpu.py),
the packages and repositories the role derives, and the lspci parser it finds GPUs with."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import load_module

from infra import gpu
from infra.config import parse_config
from infra.schema import ConfigError

REPO = Path(__file__).resolve().parents[2]
PCI = REPO / "tests" / "fixtures" / "pci"


def _nvidia_pci():
    return load_module(REPO / "roles" / "nvidia_gpu" / "library" / "nvidia_pci.py", "nvidia_pci")


def stack(os_name: str = "debian13", gpu_type: str = "h100", **gpu_keys) -> dict:
    return {"metalslurm:os": os_name,
            "metalslurm:computePools": [{"name": "gpu", "count": 2, "gpuType": gpu_type,
                                         "gpuCount": 8}],
            **({"metalslurm:gpu": gpu_keys} if gpu_keys else {})}


def problems(**kw) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_config(stack(**kw))
    return err.value.problems


def test_the_defaults_install_the_580_branch_from_nvidias_repository_with_its_pinned_key():
    cfg = parse_config(stack())
    assert cfg.gpu.inventory_vars() == {
        "mode": "install", "branch": "580", "version": "", "fabric_manager": "auto",
        "fabric_manager_version": "", "dcgm": True, "gpudirect": "auto",
        "container_toolkit": True, "mig": False, "reboot_policy": "never",
        "repository": {"url": "", "key_url": "", "key_fingerprint": ""},
        "container_toolkit_repository": {"url": "", "key_url": "", "key_fingerprint": ""}}
    assert gpu.repositories(cfg.gpu.inventory_vars(), "debian13", "x86_64", True) == [
        {"name": "cuda",
         "url": "https://developer.download.nvidia.com/compute/cuda/repos/debian13/x86_64",
         "key_url": "https://developer.download.nvidia.com/compute/cuda/repos/debian13/x86_64"
                    "/3bf863cc.pub",
         "fingerprint": "EB693B3035CD5710E231E123A4B469963BF863CC"},
        {"name": "container-toolkit",
         "url": "https://nvidia.github.io/libnvidia-container/stable/deb/amd64",
         "key_url": "https://nvidia.github.io/libnvidia-container/gpgkey",
         "fingerprint": "C95B321B61E88C1809C4F759DDCAE044F796ECB0"}]


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


def test_a_branch_the_os_does_not_support_is_refused_naming_the_setting():
    assert problems(os_name="debian13", branch="535") == [
        "metalslurm:gpu.branch: 535 is not supported on debian13: NVIDIA's repository for it "
        "starts with branch 580; set branch 580"]
    # (the local provider refuses Ubuntu itself; only the GPU rule matters here)
    assert [p for p in problems(os_name="ubuntu24.04", branch=535)
            if p.startswith("metalslurm:gpu")] == [
        "metalslurm:gpu.branch: 535 is not supported on ubuntu2404: NVIDIA's repository for "
        "it starts with branch 550; set branch 580"]


def test_a_preinstalled_driver_is_not_held_to_the_repositorys_branches():
    assert parse_config(stack(os_name="debian13", mode="preinstalled", branch="550")).gpu.branch \
        == "550"


def test_a_fabric_manager_version_other_than_the_drivers_is_refused():
    assert problems(version="580.95.05", fabricManagerVersion="580.82.07") == [
        "metalslurm:gpu.fabricManagerVersion: 580.82.07 differs from the driver's 580.95.05: "
        "the fabric manager must be exactly the driver's version (CUDA fails with error 802 "
        "otherwise); remove it or set 580.95.05"]
    assert parse_config(stack(version="580.95.05", fabricManagerVersion="580.95.05")).gpu \
        .fabric_manager_version == "580.95.05"


def test_a_version_of_another_branch_is_refused():
    assert problems(version="570.172.08") == [
        "metalslurm:gpu.version: 570.172.08 is not of branch 580; set branch to 570, or a 580 "
        "version"]


def test_mig_on_gpus_that_cannot_do_mig_is_refused():
    assert problems(gpu_type="l40s", mig=True) == [
        "metalslurm:gpu.mig: is true, but l40s GPUs cannot be partitioned with MIG (only a100, "
        "a30, b200, gh200, h100, h200 can); set mig false"]
    assert parse_config(stack(gpu_type="h100", mig=True)).gpu.mig is True


@pytest.mark.parametrize(("keys", "problem"), [
    ({"mode": "auto"}, "metalslurm:gpu.mode: is 'auto'; it must be one of install, "
                       "preinstalled, off"),
    ({"rebootPolicy": "always"}, "metalslurm:gpu.rebootPolicy: is 'always'; it must be one of "
                                 "never, drain"),
    ({"gpudirect": "gdrcopy"}, "metalslurm:gpu.gpudirect: is 'gdrcopy'; it must be one of "
                               "auto, dmabuf, peermem, off"),
    ({"branch": "58"}, "metalslurm:gpu.branch: is '58'; it must be a driver branch, three "
                       "digits such as 580"),
    ({"repository": {"keyFingerprint": "3bf863cc"}},
     "metalslurm:gpu.repository.key_fingerprint: is '3bf863cc'; it must be the key's 40-digit "
     "fingerprint in capitals (gpg --show-keys)"),
    ({"repository": {"url": "ftp://mirror/cuda"}},
     "metalslurm:gpu.repository.url: 'ftp://mirror/cuda' must be an http(s):// or file:/ URL"),
    ({"drivers": "580"}, "metalslurm:gpu.drivers: unknown key; allowed keys: mode, branch, "
                         "version, fabricManager, fabricManagerVersion, dcgm, gpudirect, "
                         "containerToolkit, mig, rebootPolicy, repository, "
                         "containerToolkitRepository"),
])
def test_bad_values_are_refused_with_one_sentence_each(keys, problem):
    assert problems(**keys) == [problem]


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


def test_lspci_finds_eight_gpus_and_four_nvswitches_on_a_dgx_h100():
    found = _nvidia_pci().parse_lspci((PCI / "dgx-h100-lspci.txt").read_text())
    assert [g["slot"] for g in found["gpus"]] == [
        "0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0", "0000:9a:00.0",
        "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]
    assert {(g["device"], g["name"]) for g in found["gpus"]} == {
        ("2330", "GH100 [H100 SXM5 80GB]")}
    assert [s["slot"] for s in found["nvswitches"]] == [
        "0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]


def test_lspci_on_pcie_h100s_finds_no_nvswitch_and_without_domain_adds_it():
    found = _nvidia_pci().parse_lspci((PCI / "h100-pcie-lspci.txt").read_text())
    assert [(g["slot"], g["device"]) for g in found["gpus"]] == [
        ("0000:41:00.0", "2331"), ("0000:c1:00.0", "2331")]
    assert found["nvswitches"] == []
    assert _nvidia_pci().parse_lspci(
        "18:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] "
        "(rev a1)\n00:1f.6 Ethernet controller [0200]: Intel Corporation Device [8086:0dc5]\n"
        "01:00.1 Audio device [0403]: NVIDIA Corporation Device [10de:22ba] (rev a1)\n") == {
        "gpus": [{"slot": "0000:18:00.0", "device": "2330",
                  "name": "GH100 [H100 SXM5 80GB]"}], "nvswitches": []}


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
