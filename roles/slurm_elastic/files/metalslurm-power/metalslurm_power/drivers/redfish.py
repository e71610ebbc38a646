"""redfish: a server's BMC through sushy.

Node parameters: ``endpoint`` (https://bmc), optional ``system_id`` (default: the only system
the BMC lists), ``verify_tls`` (bool or CA bundle path, default true), ``off_type``
(``GracefulShutdown`` default, or ``ForceOff``; a forced power off always uses ForceOff).
Credentials: the node's entry or ``default`` in the config's ``credentials``.
"""

from __future__ import annotations

from typing import Any

from .base import OFF, ON, UNKNOWN, NodeResult, PerNodeDriver


class RedfishDriver(PerNodeDriver):
    name = "redfish"

    def _system(self, node: str) -> Any:
        import sushy  # python3-sushy / PyPI sushy, only needed for this driver

        params = self.params[node]
        username, password = self.credentials(node)
        verify = params.get("verify_tls", True)
        conn = sushy.Sushy(str(params["endpoint"]), username=username, password=password,
                           verify=verify)
        system_id = params.get("system_id")
        if not system_id:
            members = list(conn.get_system_collection().members_identities)
            if len(members) != 1:
                raise RuntimeError(f"BMC lists {len(members)} systems; set system_id")
            system_id = members[0]
        return conn.get_system(system_id)

    @staticmethod
    def _power(system: Any) -> str:
        # sushy >= 4 returns a PowerState enum ("On", "PoweringOn", ...); older ones a string.
        value = str(getattr(system.power_state, "value", system.power_state)).lower()
        if value in ("on", "poweringon", "powering on"):
            return ON
        if value in ("off", "poweringoff", "powering off"):
            return OFF
        return UNKNOWN

    @staticmethod
    def _reset(system: Any, kind: str) -> None:
        import sushy

        enum = getattr(sushy, "ResetType", None)  # sushy >= 4 (Debian 12 has 4.3.3)
        system.reset_system(enum(kind) if enum is not None else kind)

    def _on(self, node: str) -> NodeResult:
        system = self._system(node)
        if self._power(system) != ON:
            self._reset(system, "On")
        return NodeResult(node=node, ok=True, power=ON)

    def _off(self, node: str, force: bool) -> NodeResult:
        system = self._system(node)
        if self._power(system) != OFF:
            kind = "ForceOff" if force else str(self.params[node].get("off_type",
                                                                        "GracefulShutdown"))
            self._reset(system, kind)
        return NodeResult(node=node, ok=True, power=OFF)

    def _status(self, node: str) -> NodeResult:
        return NodeResult(node=node, ok=True, power=self._power(self._system(node)))
