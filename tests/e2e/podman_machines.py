"""Tiny podman containers that stand in for machines in the power driver e2e tests
(tests/e2e/test_power_drivers.py), behind the same stand-in BMCs the unit tests use with
machines in a JSON file (roles/slurm_elastic/tests/unit/power_helpers).

Each "machine" is a container (``ms-bmc-test-<n>``) running ``sleep infinity`` from a tiny image
made here from the host's own /bin/sleep and the libraries it links (no registry, no download),
created stopped; powering on is ``podman start``, off is ``podman stop`` (stop signal KILL, so it
is instant). Only containers named ms-bmc-test-* are ever touched: leftovers of an earlier run
are removed by that name before the tests, and the tests' own by their names after.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

IMAGE = "localhost/metalslurm-power-test:sleep"
PREFIX = "ms-bmc-test-"


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=check,
                          timeout=timeout)


def ensure_image() -> str:
    if podman("image", "exists", IMAGE, check=False).returncode == 0:
        return IMAGE
    sleep = Path(shutil.which("sleep") or "/bin/sleep").resolve()
    ldd = subprocess.run(["ldd", str(sleep)], capture_output=True, text=True, check=True).stdout
    libs = {Path(part) for line in ldd.splitlines() for part in line.split()
            if part.startswith("/")}
    with tempfile.TemporaryDirectory() as tmp:
        tar_path = Path(tmp) / "rootfs.tar"
        with tarfile.open(tar_path, "w") as tar:
            tar.add(sleep, arcname="bin/sleep")
            for lib in libs:
                tar.add(lib.resolve(), arcname=str(lib).lstrip("/"))
        podman("import", "--change", 'CMD ["/bin/sleep", "infinity"]', str(tar_path), IMAGE)
    return IMAGE


def remove_leftovers() -> None:
    names = podman("ps", "-a", "--format", "{{.Names}}", check=False).stdout.split()
    stale = [n for n in names if n.startswith(PREFIX)]
    if stale:
        podman("rm", "-f", "-t", "0", *stale, check=False)


def create(name: str) -> None:
    assert name.startswith(PREFIX)
    podman("rm", "-f", "-t", "0", name, check=False)
    # ulimits at or below the host's hard limits (see ENVIRONMENT.md); runc as for the nodes
    podman("--runtime", "runc", "create", "--name", name, "--stop-signal", "KILL",
           "--ulimit", "nofile=8192:8192", "--ulimit", "nproc=8192:8192",
           "--network", "bridge", IMAGE, "/bin/sleep", "infinity")


def remove(name: str) -> None:
    assert name.startswith(PREFIX)
    podman("rm", "-f", "-t", "0", name, check=False)


def running(name: str) -> bool:
    out = podman("inspect", "--format", "{{json .State.Running}}", name, check=False).stdout
    return bool(out.strip()) and json.loads(out.strip()) is True


def start(name: str) -> None:
    assert name.startswith(PREFIX)
    podman("start", name)


def stop(name: str) -> None:
    assert name.startswith(PREFIX)
    podman("stop", "-t", "0", name)


class PodmanMachines:
    """The containers as the stand-in BMCs see machines (power_helpers/machines.py)."""

    def running(self, name: str) -> bool:
        return running(name)

    def start(self, name: str) -> None:
        start(name)

    def stop(self, name: str) -> None:
        stop(name)
