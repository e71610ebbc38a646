"""The node health checker (roles/slurm_health): installed on every node that runs jobs,
run by Slurm, and finding the node healthy now; on nodes with an NVIDIA driver, the
driver's view of the GPUs (count, persistence mode) matches the inventory.

The driver checks skip where there is no nvidia-smi (the local cluster's fake GPUs),
saying so; the checker itself runs everywhere.
"""

from __future__ import annotations

import json

import pytest

PROGRAM = "/usr/local/sbin/metalslurm-health"


def _enabled(cluster) -> bool:
    return bool((cluster.var("metalslurm_health") or {}).get("enabled", True))


@pytest.fixture(autouse=True)
def _only_compute_nodes_with_the_checker(request: pytest.FixtureRequest, cluster) -> None:
    if not _enabled(cluster):
        pytest.skip("metalslurm:health.enabled is false: no checker is installed")
    if "host" in request.fixturenames:
        name = str(request.getfixturevalue("host").backend.host)
        if "slurm_compute" not in cluster.groups_of(name):
            pytest.skip(f"{name} runs no jobs")


def test_slurm_runs_the_checker(controller, cluster):
    settings = cluster.var("metalslurm_health") or {}
    out = controller.check_output("scontrol show config | grep -E '^HealthCheck'")
    shown = {line.split("=", 1)[0].strip(): line.split("=", 1)[1].strip()
             for line in out.splitlines()}
    assert shown["HealthCheckProgram"] == PROGRAM
    assert shown["HealthCheckInterval"] == f"{settings.get('interval', 300)} sec"
    # Slurm prints CYCLE first whatever the order in slurm.conf ("CYCLE,ANY").
    assert set(shown["HealthCheckNodeState"].split(",")) == set(
        settings.get("node_state", "ANY,CYCLE").split(","))


def test_the_checker_is_installed_and_finds_the_node_healthy(host, host_name):
    program = host.file(PROGRAM)
    assert (program.user, program.group, program.mode) == ("root", "root", 0o755)
    config = json.loads(host.file("/etc/metalslurm-health.json").content_string)
    assert config["node"] == host_name
    run = host.run(f"{PROGRAM} --dry-run")
    assert run.rc == 0, run.stdout
    assert run.stdout.splitlines()[-1] == f"node {host_name}: healthy"


def test_the_driver_sees_the_inventorys_gpus_with_persistence_mode_on(host, host_name, cluster):
    want = int(cluster.hostvars[host_name].get("metalslurm_gpu_count", 0))
    if want == 0:
        pytest.skip(f"{host_name} has no GPUs in the inventory")
    if not host.exists("nvidia-smi"):
        pytest.skip(f"{host_name} has no NVIDIA driver (nvidia-smi): fake GPUs only")
    out = host.check_output("nvidia-smi --query-gpu=persistence_mode --format=csv,noheader")
    assert out.splitlines() == ["Enabled"] * want
