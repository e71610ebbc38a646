"""End-to-end tests: real local clusters of podman nodes, configured by the real roles."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STACKS = Path(__file__).resolve().parent / "stacks"


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session", autouse=True)
def _needs_root_and_podman():
    problems = []
    if os.geteuid() != 0:
        problems.append("run as root")
    for tool in ("podman", "runc", "debootstrap"):
        if shutil.which(tool) is None:
            problems.append(f"install {tool} ('make deps')")
    if problems:
        pytest.fail("the e2e tests need a real local cluster: " + ", ".join(problems),
                    pytrace=False)


def metalslurm(*args: str, timeout: int = 1500) -> subprocess.CompletedProcess[str]:
    """Run the metalslurm CLI as a user would, from the repository root."""
    proc = subprocess.run([sys.executable, "-m", "infra.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, check=False)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    return proc


def cluster_containers(cluster_name: str) -> list[str]:
    out = subprocess.run(["podman", "ps", "-a", "--format", "json", "--filter",
                          f"label=metalslurm.cluster={cluster_name}"],
                         capture_output=True, text=True, check=True).stdout
    return sorted(c["Names"][0] for c in json.loads(out or "[]"))


def network_exists(name: str) -> bool:
    return subprocess.run(["podman", "network", "exists", name], check=False).returncode == 0


DEBIAN13_STACK = STACKS / "Pulumi.e2e-debian13.yaml"


@pytest.fixture(scope="session")
def debian13_up():
    """The Debian 13 cluster, brought up once from nothing (leftovers of earlier runs removed
    first) and shared by the modules that test it; removed at the end of the session."""
    if os.environ.get("METALSLURM_E2E_REUSE"):
        # Developer shortcut: test against the cluster a previous 'local up' left running.
        yield subprocess.CompletedProcess(["local", "up"], 0, "", "")
        return
    metalslurm("local", "down", "--stack", str(DEBIAN13_STACK))
    assert cluster_containers("ms-e2e13") == []
    proc = metalslurm("local", "up", "--stack", str(DEBIAN13_STACK))
    yield proc
    metalslurm("local", "down", "--stack", str(DEBIAN13_STACK))
