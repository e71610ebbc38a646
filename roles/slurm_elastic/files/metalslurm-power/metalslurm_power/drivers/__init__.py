"""Power drivers: one small interface, one module per way of switching a machine."""

from __future__ import annotations

from typing import Any

from .base import NodeResult, PowerDriver

__all__ = ["NodeResult", "PowerDriver", "make_driver"]


def make_driver(name: str, params: dict[str, dict[str, Any]],
                credentials: dict[str, dict[str, str]]) -> PowerDriver:
    """A driver for ``params`` (node -> its parameters); the import happens only here."""
    if name == "local":
        from .local import LocalPodmanDriver

        return LocalPodmanDriver(params, credentials)
    if name == "redfish":
        from .redfish import RedfishDriver

        return RedfishDriver(params, credentials)
    if name == "ipmi":
        from .ipmi import IpmiDriver

        return IpmiDriver(params, credentials)
    if name == "oci":
        from .oci_compute import OciDriver

        return OciDriver(params, credentials)
    raise ValueError(f"unknown power driver {name!r}")
