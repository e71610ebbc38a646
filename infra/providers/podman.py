"""Thin wrapper over the podman command line (root, runc runtime)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any


class PodmanError(RuntimeError):
    pass


def podman_path() -> str:
    path = shutil.which("podman")
    if path is None:
        raise PodmanError("podman is not installed: run 'make deps' (apt-get install podman runc)")
    return path


def podman(*args: str, check: bool = True, timeout: float | None = 300,
           input_bytes: bytes | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``podman ARGS``; raise PodmanError with podman's own message on failure."""
    cmd = [podman_path(), *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout,
                              input=input_bytes, check=False)
    except subprocess.TimeoutExpired as exc:
        raise PodmanError(f"'podman {' '.join(args)}' did not finish in {timeout} s") from exc
    result = subprocess.CompletedProcess(
        cmd, proc.returncode, proc.stdout.decode(errors="replace"),
        proc.stderr.decode(errors="replace"))
    if check and proc.returncode != 0:
        raise PodmanError(f"'podman {' '.join(args)}' failed ({proc.returncode}): "
                          f"{result.stderr.strip() or result.stdout.strip()}")
    return result


def podman_json(*args: str) -> Any:
    out = podman(*args).stdout
    return json.loads(out) if out.strip() else []


def image_exists(ref: str) -> bool:
    return podman("image", "exists", ref, check=False).returncode == 0


def containers(label_filters: Sequence[str]) -> list[dict[str, Any]]:
    args = ["ps", "-a", "--format", "json"]
    for f in label_filters:
        args += ["--filter", f"label={f}"]
    result: list[dict[str, Any]] = podman_json(*args)
    return result


def remove_containers(names: Sequence[str], attempts: int = 3, stop_seconds: int = 2) -> None:
    """Remove containers (stopping them first), whatever state they are in.

    Each gets ``stop_seconds`` to stop (a node's systemd shuts its services down) before
    SIGKILL; 0 where nothing in it outlives the removal (a whole cluster destroyed with its
    state directory: the shutdown costs a node about 1.4 CPU-seconds for nothing).

    ``podman rm -f`` can lose a race with a container that stops by itself between its
    SIGTERM timeout and its SIGKILL ("container state improper: stopped") and leave that
    container behind; it is removed on the next attempt. Raises PodmanError naming the
    containers still there after the last attempt.
    """
    left = list(names)
    error = ""
    for _ in range(attempts):
        if not left:
            return
        proc = podman("rm", "-f", "-t", str(stop_seconds), "--ignore", *left, check=False,
                      timeout=180)
        error = proc.stderr.strip()
        left = [n for n in left
                if podman("container", "exists", n, check=False).returncode == 0]
    if left:
        raise PodmanError(f"could not remove container(s) {', '.join(left)}: {error}")


def networks() -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = podman_json("network", "ls", "--format", "json")
    return result
