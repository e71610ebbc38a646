"""A real Redfish server for the redfish driver's tests: the sushy-tools emulator (its Flask
app, unmodified) with a systems driver whose power actions act on stand-in machines.

    python -m power_helpers.redfish_bmc --port P --htpasswd FILE --state FILE name [...]

(from roles/slurm_elastic/tests/unit, as test_power_drivers.py runs it): the machines are
flags in the ``--state`` JSON file (power_helpers/machines.py). The e2e tests serve the same
emulator with podman containers as machines (tests/e2e/power_bmcs.py calls :func:`serve`).
Each machine is one Redfish System, identity = its name. Listens on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import uuid

from sushy_tools.emulator import main as emulator
from sushy_tools.emulator.resources.systems.fakedriver import FakeDriver

from .machines import FileMachines, Machines


def systems_driver(machines: Machines) -> type[FakeDriver]:
    class MachineSystemsDriver(FakeDriver):
        """FakeDriver's inventory (CPUs, NICs, boot), with power backed by ``machines``."""

        def get_power_state(self, identity: str) -> str:
            return "On" if machines.running(self.name(identity)) else "Off"

        def set_power_state(self, identity: str, state: str) -> None:
            name = self.name(identity)
            if "On" in state and not machines.running(name):
                machines.start(name)
            elif state in ("ForceOff", "GracefulShutdown") and machines.running(name):
                machines.stop(name)
            elif "Restart" in state:
                if machines.running(name):
                    machines.stop(name)
                machines.start(name)

    return MachineSystemsDriver


def serve(port: int, htpasswd: str, names: list[str], machines: Machines) -> None:
    systems = [{"uuid": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)), "name": name,
                "power_state": "Off", "nics": []} for name in names]
    app = emulator.app
    app.configure(extra_config={"SUSHY_EMULATOR_FAKE_DRIVER": True,
                                "SUSHY_EMULATOR_FAKE_SYSTEMS": systems,
                                "SUSHY_EMULATOR_AUTH_FILE": htpasswd})
    driver = systems_driver(machines).initialize(app.config, app.logger)()
    emulator.Application.systems = property(lambda self: driver)  # type: ignore[assignment]
    app.run(host="127.0.0.1", port=port, threaded=True)


def arguments() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--htpasswd", required=True)
    p.add_argument("names", nargs="+")
    return p


def main() -> None:
    p = arguments()
    p.add_argument("--state", required=True, help="the machines' power flags (JSON)")
    args = p.parse_args()
    serve(args.port, args.htpasswd, args.names, FileMachines(args.state))


if __name__ == "__main__":
    main()
