"""A real IPMI 2.0 (RMCP+) BMC for the ipmi driver's tests: pyghmi's BMC server, whose chassis
power commands act on one stand-in machine.

    python -m power_helpers.ipmi_bmc --port P --user U --password W --state FILE name

(from roles/slurm_elastic/tests/unit, as test_power_drivers.py runs it): the machine is a
flag in the ``--state`` JSON file (power_helpers/machines.py). The e2e tests serve the same
BMC with a podman container as the machine (tests/e2e/power_bmcs.py calls :func:`serve`).
Listens on 127.0.0.1 (UDP) only.
"""

from __future__ import annotations

import argparse

import pyghmi.ipmi.bmc as bmc
from pyghmi.ipmi.private import serversession

from .machines import FileMachines, Machines

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


class MachineBmc(bmc.Bmc):
    def __init__(self, authdata: dict[str, str], port: int, machines: Machines,
                 name: str) -> None:
        super().__init__(authdata, port, address="127.0.0.1")
        self.machines = machines
        self.machine = name

    def get_power_state(self) -> str:
        return "on" if self.machines.running(self.machine) else "off"

    def power_on(self) -> None:
        if not self.machines.running(self.machine):
            self.machines.start(self.machine)

    def power_off(self) -> None:
        if self.machines.running(self.machine):
            self.machines.stop(self.machine)

    power_shutdown = power_off

    def power_reset(self) -> None:
        self.power_off()
        self.power_on()

    power_cycle = power_reset


def serve(port: int, user: str, password: str, machines: Machines, name: str) -> None:
    MachineBmc({user: password}, port, machines, name).listen(timeout=30)


def arguments() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--user", required=True)
    p.add_argument("--password", required=True)
    p.add_argument("name")
    return p


def main() -> None:
    p = arguments()
    p.add_argument("--state", required=True, help="the machine's power flag (JSON)")
    args = p.parse_args()
    serve(args.port, args.user, args.password, FileMachines(args.state), args.name)


if __name__ == "__main__":
    main()
