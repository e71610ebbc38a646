"""The machines a stand-in BMC powers on and off in the power driver tests.

A BMC stand-in (redfish_bmc.py, ipmi_bmc.py) takes any object with ``running``, ``start``
and ``stop``: the unit tests give it :class:`FileMachines` (no container: each machine is a
flag in a JSON file, which the test reads to see what the driver did); the e2e tests
(tests/e2e/test_power_drivers.py) give it podman containers (tests/e2e/podman_machines.py).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol


class Machines(Protocol):
    def running(self, name: str) -> bool: ...

    def start(self, name: str) -> None: ...

    def stop(self, name: str) -> None: ...


class FileMachines:
    """Machines that are a power flag each in one JSON file (``{name: true|false}``): the BMC
    runs in its own process, and the test and the BMC see the same state. An unknown name
    is an error, as a BMC for another machine would be."""

    def __init__(self, path: str | os.PathLike[str], names: Iterable[str] = ()) -> None:
        self.path = Path(path)
        names = list(names)
        if names:
            self.path.write_text(json.dumps(dict.fromkeys(names, False)))

    def _update(self, name: str, on: bool) -> None:
        # One writer at a time (the Redfish emulator answers in threads); readers see the
        # old file or the new one, never half of one.
        with open(self.path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = json.loads(self.path.read_text())
            if name not in state:
                raise KeyError(f"no machine {name}")
            state[name] = on
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(state))
            os.replace(tmp, self.path)

    def running(self, name: str) -> bool:
        return bool(json.loads(self.path.read_text())[name])

    def start(self, name: str) -> None:
        self._update(name, True)

    def stop(self, name: str) -> None:
        self._update(name, False)
