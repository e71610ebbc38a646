"""Starting and stopping the stand-in BMCs (redfish_bmc.py, ipmi_bmc.py) the power driver
tests talk to: the unit tests' (machines in a JSON file) and the e2e tests' (podman
containers) alike."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable
from typing import IO


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(check: Callable[[], bool], timeout: float = 30.0, what: str = "server") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{what} did not come up in {timeout:.0f}s")


def tcp_port_answers(port: int) -> Callable[[], bool]:
    def check() -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    return check


def stop_process(proc: subprocess.Popen, log: IO[str] | None = None) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    if log is not None:
        log.close()
