"""ipmi: a server's BMC over IPMI 2.0 (RMCP+) through pyghmi.

Node parameters: ``address``, optional ``port`` (623), ``off_mode`` (``shutdown``, the soft ACPI
power off, by default; ``off`` cuts power; a forced power off always uses ``off``).
Credentials: the node's entry or ``default`` in the config's ``credentials``.
"""

from __future__ import annotations

import threading
from typing import Any

from .base import OFF, ON, UNKNOWN, NodeResult, PerNodeDriver

# pyghmi keeps one RMCP+ session per (BMC, user, password, port) in the process and a second
# Command for the same session waits on the first one's state: make one Command per session,
# reuse it for every call (programs are short-lived; the reconciler makes a few calls).
_COMMANDS: dict[tuple[str, int, str | None, str | None], Any] = {}
_COMMANDS_LOCK = threading.Lock()


class IpmiDriver(PerNodeDriver):
    name = "ipmi"

    def _command(self, node: str) -> Any:
        from pyghmi.ipmi import command  # python3-pyghmi / PyPI pyghmi

        params = self.params[node]
        username, password = self.credentials(node)
        key = (str(params["address"]), int(params.get("port", 623)), username, password)
        with _COMMANDS_LOCK:
            cmd = _COMMANDS.get(key)
            if cmd is None or getattr(cmd.ipmi_session, "broken", False):
                cmd = command.Command(bmc=key[0], userid=username, password=password,
                                      port=key[1])
                _COMMANDS[key] = cmd
            return cmd

    @staticmethod
    def _power(cmd: Any) -> str:
        state = cmd.get_power().get("powerstate")
        return state if state in (ON, OFF) else UNKNOWN

    def _on(self, node: str) -> NodeResult:
        cmd = self._command(node)
        if self._power(cmd) != ON:
            cmd.set_power("on", wait=False)
        return NodeResult(node=node, ok=True, power=ON)

    def _off(self, node: str, force: bool) -> NodeResult:
        cmd = self._command(node)
        if self._power(cmd) != OFF:
            mode = "off" if force else str(self.params[node].get("off_mode", "shutdown"))
            cmd.set_power(mode, wait=False)
        return NodeResult(node=node, ok=True, power=OFF)

    def _status(self, node: str) -> NodeResult:
        return NodeResult(node=node, ok=True, power=self._power(self._command(node)))
