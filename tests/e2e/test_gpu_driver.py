"""The NVIDIA role's install path on the Debian 13 cluster, against STAND-IN packages.

No GPU and no NVIDIA repository are reachable here. What runs for real: the role itself
(``--tags nvidia_gpu``) against a local, signed apt repository of stand-in packages with
NVIDIA's names and versions (tests/e2e/nvidia_standins.py builds it; every package says
it is a stand-in), and a stand-in ``lspci`` (a script printing the PCI fixtures of
tests/fixtures/pci: a DGX H100 with NVSwitches on gpu-001, two H100 PCIe on gpu-002). This
proves the key check, the repository, the branch pin, the holds, the NVSwitch gating, the
services' enablement and order and a second run with 0 changed. No kernel module can load
here, so the role says the nodes must be rebooted and starts no service; that is asserted
too. Leaves the nodes as it found them (packages purged, files removed).
"""

from __future__ import annotations

import shutil

import pytest

from infra.configure import ConfigureResult, run_playbook
from tests.e2e import nvidia_standins
from tests.e2e.conftest import REPO

NODES = ("gpu-001", "gpu-002")
LSPCI = {"gpu-001": "dgx-h100-lspci.txt", "gpu-002": "h100-pcie-lspci.txt"}
STAND_IN_LSPCI = "/usr/local/bin/lspci"
DRIVER = ["nvidia-driver-cuda", "nvidia-kernel-open-dkms", "nvidia-persistenced"]
FABRIC = ["nvidia-fabricmanager", "libnvidia-nscq"]
OTHERS = ["datacenter-gpu-manager-4-cuda13", "nvidia-container-toolkit",
          "libnvidia-container-tools"]
FILES = ["/etc/apt/sources.list.d/metalslurm-nvidia.sources",
         "/etc/apt/preferences.d/metalslurm-nvidia-driver",
         "/etc/apt/keyrings/metalslurm-nvidia-cuda.asc",
         "/etc/apt/keyrings/metalslurm-nvidia-container-toolkit.asc",
         "/var/lib/metalslurm/nvidia-keys",
         "/etc/systemd/system/slurmd.service.d/metalslurm-nvidia.conf",
         "/etc/systemd/system/nvidia-dcgm.service.d", STAND_IN_LSPCI]


@pytest.fixture(scope="module")
def standin(debian13):
    assert debian13.up.returncode == 0, debian13.up.stdout[-3000:]
    shared = debian13.state / "shared" / "shared" / "e2e-nvidia"
    repo = nvidia_standins.build(shared)
    for node, fixture in LSPCI.items():
        shutil.copy(REPO / "tests" / "fixtures" / "pci" / fixture, shared / fixture)
        debian13.on(node, f"printf '#!/bin/sh\\n# STAND-IN lspci (metalslurm e2e): replays a "
                          f"PCI fixture\\nexec cat /shared/e2e-nvidia/{fixture}\\n' "
                          f"> {STAND_IN_LSPCI} && chmod 755 {STAND_IN_LSPCI}")
    yield debian13, repo
    for node in NODES:
        debian13.on(node, "apt-get purge -y -qq --allow-change-held-packages "
                          f"{' '.join(DRIVER + FABRIC + OTHERS)} >/dev/null 2>&1; "
                          f"rm -rf {' '.join(FILES)}; systemctl daemon-reload; "
                          "apt-get update -qq", check=False)
    shutil.rmtree(shared, ignore_errors=True)


def settings(repo: nvidia_standins.StandinRepository, **over) -> dict:
    base = "file:///shared/e2e-nvidia"
    return {"metalslurm_gpu": {
        "mode": "install", "branch": "580", "version": "", "fabric_manager": "auto",
        "dcgm": True, "gpudirect": "auto", "container_toolkit": True, "mig": False,
        "reboot_policy": "never",
        "repository": {"url": f"{base}/cuda", "key_url": f"{base}/key.asc",
                       "key_fingerprint": repo.fingerprint},
        "container_toolkit_repository": {"url": f"{base}/container-toolkit",
                                         "key_url": f"{base}/key.asc",
                                         "key_fingerprint": repo.fingerprint},
        **over}}


def driver_run(cluster, repo, limit: str = ",".join(NODES), **over) -> ConfigureResult:
    return run_playbook(cluster.inventory, tags="nvidia_gpu", limit=limit,
                        extra_vars=settings(repo, **over), out=lambda _line: None)


def versions(cluster, node: str) -> dict[str, str]:
    out = cluster.on(node, "dpkg-query --showformat='${Package}=${Version} ${Status}\\n' --show "
                           f"{' '.join(DRIVER + FABRIC + OTHERS)} 2>/dev/null",
                     check=False).stdout
    return {line.split("=")[0]: line.split("=")[1].split()[0]
            for line in out.splitlines() if line.endswith(" ok installed")}


def test_a_key_that_is_not_the_pinned_one_stops_the_run_before_anything_is_installed(standin):
    cluster, repo = standin
    result = driver_run(cluster, repo, limit="gpu-002", repository={
        "url": "file:///shared/e2e-nvidia/cuda", "key_url": "file:///shared/e2e-nvidia/key.asc",
        "key_fingerprint": "0" * 40})
    assert not result.ok
    assert any(f"the cuda repository's key (file:///shared/e2e-nvidia/key.asc) has fingerprint "
               f"{repo.fingerprint}, not the pinned {'0' * 40}" in f for f in result.failures), \
        result.failures
    assert cluster.on("gpu-002", f"ls {FILES[0]} {FILES[2]}", check=False).returncode != 0
    assert versions(cluster, "gpu-002") == {}


def test_a_branch_the_os_does_not_support_is_refused_naming_the_setting(standin):
    cluster, repo = standin
    result = driver_run(cluster, repo, limit="gpu-002", branch="535")
    assert not result.ok
    assert any("metalslurm_gpu: branch 535 is not supported on debian13: NVIDIA's repository "
               "for it starts with branch 580; set branch 580" in f for f in result.failures), \
        result.failures
    assert cluster.on("gpu-002", f"ls {FILES[0]}", check=False).returncode != 0
    assert versions(cluster, "gpu-002") == {}


def test_the_newest_driver_of_the_branch_is_installed_held_and_the_fabric_manager_only_with_nvswitches(  # noqa: E501
        standin):
    cluster, repo = standin
    result = driver_run(cluster, repo)
    assert result.ok, result.failures
    want = f"{nvidia_standins.NEWEST_OF_BRANCH}-1"  # not 580.65.06, not 590.44.01
    extra = {"datacenter-gpu-manager-4-cuda13": nvidia_standins.DCGM_VERSION,
             "nvidia-container-toolkit": nvidia_standins.TOOLKIT_VERSION,
             "libnvidia-container-tools": nvidia_standins.TOOLKIT_VERSION}
    assert versions(cluster, "gpu-001") == {**dict.fromkeys(DRIVER + FABRIC, want), **extra}
    assert versions(cluster, "gpu-002") == {**dict.fromkeys(DRIVER, want), **extra}
    assert cluster.on("gpu-001", "apt-mark showhold").stdout.split() == sorted(DRIVER + FABRIC)
    assert cluster.on("gpu-002", "apt-mark showhold").stdout.split() == sorted(DRIVER)
    # Enabled, in order, not started: no kernel module can load here.
    assert cluster.on("gpu-001", "systemctl is-enabled nvidia-persistenced nvidia-fabricmanager "
                                 "nvidia-dcgm").stdout.split() == ["enabled"] * 3
    assert cluster.on("gpu-002", "systemctl is-enabled nvidia-fabricmanager",
                      check=False).stdout.strip() in ("", "not-found")
    after = cluster.on("gpu-001", "systemctl show --property=After slurmd").stdout
    assert {"nvidia-persistenced.service", "nvidia-fabricmanager.service",
            "nvidia-dcgm.service"} <= set(after.strip().removeprefix("After=").split())
    dcgm_after = cluster.on("gpu-002", "systemctl show --property=After nvidia-dcgm").stdout
    assert "nvidia-persistenced.service" in dcgm_after.split("=", 1)[1].split()
    assert "nvidia-fabricmanager.service" not in dcgm_after
    assert cluster.on("gpu-001", "systemctl is-active nvidia-persistenced",
                      check=False).stdout.strip() == "inactive"
    for node in NODES:
        assert (f"{node}: NVIDIA driver {nvidia_standins.NEWEST_OF_BRANCH} is installed but the "
                f"running kernel cannot load it yet: its services are enabled, not started."
                ) in " ".join(" ".join(w.split()) for w in result.warnings), result.warnings

    again = driver_run(cluster, repo)
    assert again.ok, again.failures
    assert again.changed == 0, again.changed_tasks


def test_an_exact_version_moves_the_held_driver_to_it_and_keeps_it_held(standin):
    cluster, repo = standin
    result = driver_run(cluster, repo, limit="gpu-002", version="580.65.06")
    assert result.ok, result.failures
    assert {k: v for k, v in versions(cluster, "gpu-002").items() if k in DRIVER} == \
        dict.fromkeys(DRIVER, "580.65.06-1")
    assert cluster.on("gpu-002", "apt-mark showhold").stdout.split() == sorted(DRIVER)
    assert "580.65.06-*" in cluster.on("gpu-002", f"cat {FILES[1]}").stdout
