"""The NVIDIA driver stack (roles/nvidia_gpu) on nodes with an NVIDIA driver: its services
run, the fabric manager runs at the driver's exact version where there are NVSwitches, and
DCGM's host engine answers. The GPU count and persistence mode are in test_health.py.

Skips, saying so, where the inventory gives a node no GPU, where the stack does not manage
the driver, and where there is no driver (the local cluster's fake GPUs).
"""

from __future__ import annotations

import pytest


@pytest.fixture
def gpu_node(host, host_name, cluster) -> str:
    if "slurm_compute" not in cluster.groups_of(host_name):
        pytest.skip(f"{host_name} runs no jobs")
    if int(cluster.hostvars[host_name].get("metalslurm_gpu_count", 0)) == 0:
        pytest.skip(f"{host_name} has no GPUs in the inventory")
    if (cluster.var("metalslurm_gpu") or {}).get("mode", "install") == "off":
        pytest.skip("metalslurm:gpu.mode is off: the driver stack is not managed")
    if not host.exists("nvidia-smi"):
        pytest.skip(f"{host_name} has no NVIDIA driver (nvidia-smi): fake GPUs only")
    return host_name


def _driver(host) -> str:
    return host.check_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader"
                             ).splitlines()[0].strip()


def test_the_persistence_daemon_runs(host, gpu_node):
    assert host.service("nvidia-persistenced").is_running
    assert host.service("nvidia-persistenced").is_enabled


def test_the_fabric_manager_runs_at_the_drivers_version_where_there_are_nvswitches(
        host, gpu_node):
    switches = host.check_output("lspci -nn -d 10de: | grep -c '\\[0680\\]' || true").strip()
    if switches in ("", "0"):
        assert not host.service("nvidia-fabricmanager").is_running, \
            f"{gpu_node} has no NVSwitch, yet runs the fabric manager"
        return
    assert host.service("nvidia-fabricmanager").is_running
    fm = host.check_output("nv-fabricmanager --version")
    assert _driver(host) in fm, f"fabric manager {fm!r} is not driver {_driver(host)}"


def test_the_dcgm_host_engine_answers_with_every_gpu(host, gpu_node, cluster):
    if not (cluster.var("metalslurm_gpu") or {}).get("dcgm", True):
        pytest.skip("metalslurm:gpu.dcgm is false")
    assert host.service("nvidia-dcgm").is_running
    listed = host.check_output("dcgmi discovery --list")
    want = int(cluster.hostvars[gpu_node]["metalslurm_gpu_count"])
    assert f"{want} GPU" in listed, listed


def test_only_root_reaches_the_dcgm_host_engine(host, gpu_node, cluster):
    """The guard (roles/nvidia_gpu: metalslurm-dcgm-guard) is loaded: user nobody's connection
    to the host engine is refused, root's (dcgmi above) is not."""
    if not (cluster.var("metalslurm_gpu") or {}).get("dcgm", True):
        pytest.skip("metalslurm:gpu.dcgm is false")
    assert host.service("metalslurm-dcgm-guard").is_enabled
    rules = host.check_output("nft list table inet metalslurm_dcgm_guard")
    assert 'oifname "lo" tcp dport 5555 meta skuid != 0' in rules, rules
    probe = host.run("setpriv --reuid=nobody --regid=nogroup --clear-groups -- "
                     "bash -c 'exec 3<>/dev/tcp/127.0.0.1/5555'")
    assert probe.rc != 0 and "Connection refused" in probe.stderr, probe.stderr
