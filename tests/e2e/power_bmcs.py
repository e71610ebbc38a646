"""The stand-in BMCs of the power driver unit tests, powering podman containers instead of
flags in a file (tests/e2e/test_power_drivers.py runs them):

    python -m tests.e2e.power_bmcs redfish --port P --htpasswd FILE ms-bmc-test-1 [...]
    python -m tests.e2e.power_bmcs ipmi --port P --user U --password W ms-bmc-test-3

run from the repository root with roles/slurm_elastic/tests/unit on PYTHONPATH (where
power_helpers lives).
"""

from __future__ import annotations

import sys

from power_helpers import ipmi_bmc, redfish_bmc

from tests.e2e.podman_machines import PodmanMachines


def main(argv: list[str]) -> None:
    kind, rest = argv[0], argv[1:]
    if kind == "redfish":
        args = redfish_bmc.arguments().parse_args(rest)
        redfish_bmc.serve(args.port, args.htpasswd, args.names, PodmanMachines())
    elif kind == "ipmi":
        args = ipmi_bmc.arguments().parse_args(rest)
        ipmi_bmc.serve(args.port, args.user, args.password, PodmanMachines(), args.name)
    else:
        raise SystemExit(f"unknown BMC kind {kind!r}: redfish or ipmi")


if __name__ == "__main__":
    main(sys.argv[1:])
