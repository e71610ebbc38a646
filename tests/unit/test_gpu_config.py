"""metalslurm:gpu in the stack config (infra/stack/gpu.py): the nvidia_gpu role's rules
(module_utils/gpu.py) applied to it, each problem naming the stack key."""

from __future__ import annotations

import pytest
from ansible_collections.metalslurm.cluster.plugins.module_utils import gpu

from infra.stack.config import parse_config
from infra.stack.schema import ConfigError


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
        "fabric_manager_version": "", "dcgm": True, "dcgm_version": "",
        "dcgm_exporter_version": "", "gpudirect": "auto",
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


def test_dcgm_and_its_exporter_can_be_pinned_to_exact_package_versions():
    cfg = parse_config(stack(dcgmVersion="1:4.2.3-1", dcgmExporterVersion="4.1.3-1"))
    assert (cfg.gpu.inventory_vars()["dcgm_version"],
            cfg.gpu.inventory_vars()["dcgm_exporter_version"]) == ("1:4.2.3-1", "4.1.3-1")
    assert problems(dcgmExporterVersion="4.1.3 1", dcgmVersion="latest") == [
        "metalslurm:gpu.dcgmVersion: is 'latest'; it must be a package version as apt shows it "
        "(apt-cache policy), such as 1:4.2.3-1",
        "metalslurm:gpu.dcgmExporterVersion: is '4.1.3 1'; it must be a package version as apt "
        "shows it (apt-cache policy), such as 1:4.2.3-1"]
    assert problems(dcgm=False, dcgmExporterVersion="4.1.3-1") == [
        "metalslurm:gpu.dcgmExporterVersion: 4.1.3-1 is set but dcgm is false; remove it or "
        "set dcgm true"]


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
                         "version, fabricManager, fabricManagerVersion, dcgm, dcgmVersion, "
                         "dcgmExporterVersion, gpudirect, "
                         "containerToolkit, mig, rebootPolicy, repository, "
                         "containerToolkitRepository"),
])
def test_bad_values_are_refused_with_one_sentence_each(keys, problem):
    assert problems(**keys) == [problem]


