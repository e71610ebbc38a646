"""A real Redfish server for the redfish driver's tests: the sushy-tools emulator (its Flask
app, unmodified) with a systems driver whose power actions start and stop podman containers.

    python -m power_helpers.redfish_podman_bmc --port P --htpasswd FILE ms-bmc-test-1 [...]

(from tests/unit, as test_power_drivers.py runs it). Each container is one Redfish System,
identity = container name. Listens on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import uuid

from sushy_tools.emulator import main as emulator
from sushy_tools.emulator.resources.systems.fakedriver import FakeDriver

from . import podman_nodes


class PodmanSystemsDriver(FakeDriver):
    """FakeDriver's inventory (CPUs, NICs, boot), with power backed by a podman container."""

    def get_power_state(self, identity: str) -> str:
        return "On" if podman_nodes.running(self.name(identity)) else "Off"

    def set_power_state(self, identity: str, state: str) -> None:
        name = self.name(identity)
        if "On" in state and not podman_nodes.running(name):
            podman_nodes.start(name)
        elif state in ("ForceOff", "GracefulShutdown") and podman_nodes.running(name):
            podman_nodes.stop(name)
        elif "Restart" in state:
            if podman_nodes.running(name):
                podman_nodes.stop(name)
            podman_nodes.start(name)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--htpasswd", required=True)
    p.add_argument("containers", nargs="+")
    args = p.parse_args()
    systems = [{"uuid": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)), "name": name,
                "power_state": "Off", "nics": []} for name in args.containers]
    app = emulator.app
    app.configure(extra_config={"SUSHY_EMULATOR_FAKE_DRIVER": True,
                                "SUSHY_EMULATOR_FAKE_SYSTEMS": systems,
                                "SUSHY_EMULATOR_AUTH_FILE": args.htpasswd})
    driver = PodmanSystemsDriver.initialize(app.config, app.logger)()
    emulator.Application.systems = property(lambda self: driver)  # type: ignore[assignment]
    app.run(host="127.0.0.1", port=args.port, threaded=True)


if __name__ == "__main__":
    main()
