"""A real IPMI 2.0 (RMCP+) BMC for the ipmi driver's tests: pyghmi's BMC server, whose chassis
power commands start and stop one podman container.

    python -m power_helpers.ipmi_podman_bmc --port P --user U --password W ms-bmc-test-N

(from tests/unit, as test_power_drivers.py runs it). Listens on 127.0.0.1 (UDP) only.
"""

from __future__ import annotations

import argparse

import pyghmi.ipmi.bmc as bmc
from pyghmi.ipmi.private import serversession

from . import podman_nodes

_open_session_response = serversession.ServerSession.create_open_session_response


def _cipher_suite_3_only(self, request):  # type: ignore[no-untyped-def]
    """pyghmi's server always answers with cipher suite 3 (HMAC-SHA1), whatever the client
    asked; its client asks for SHA-256 first and does not read the answer. Refuse other
    authentication algorithms with status 0x11, as a SHA-1-only BMC does: the client then
    retries with cipher suite 3 (its documented fallback)."""
    if request[12] != 1:
        return bytearray([request[0], 0x11, 0, 0]) + request[4:8]
    return _open_session_response(self, request)


serversession.ServerSession.create_open_session_response = _cipher_suite_3_only


class PodmanBmc(bmc.Bmc):
    def __init__(self, authdata: dict[str, str], port: int, container: str) -> None:
        super().__init__(authdata, port, address="127.0.0.1")
        self.container = container

    def get_power_state(self) -> str:
        return "on" if podman_nodes.running(self.container) else "off"

    def power_on(self) -> None:
        if not podman_nodes.running(self.container):
            podman_nodes.start(self.container)

    def power_off(self) -> None:
        if podman_nodes.running(self.container):
            podman_nodes.stop(self.container)

    power_shutdown = power_off

    def power_reset(self) -> None:
        self.power_off()
        self.power_on()

    power_cycle = power_reset


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--user", required=True)
    p.add_argument("--password", required=True)
    p.add_argument("container")
    args = p.parse_args()
    PodmanBmc({args.user: args.password}, args.port, args.container).listen(timeout=30)


if __name__ == "__main__":
    main()
