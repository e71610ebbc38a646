"""Slurm's REST API (slurmrestd) with JWT: its settings' defaults and what each release has.

One owner for the defaults of ``metalslurm_rest`` (the stack config's ``metalslurm:rest``):
``infra/stack/rest.py`` fills the stack's keys from :data:`DEFAULTS`, and the roles merge a
hand-written inventory's value over the same table (filter ``rest_settings``).

:data:`RELEASES` records, per Slurm release the supported operating systems ship
(``module_utils/slurm_versions.py``'s DISTRO_SLURM), whether the distribution packages the
JWT plugin (``slurm-wlm-jwt-plugin``, ``auth_jwt.so``), which OpenAPI plugins slurmrestd
loads, and the REST API version the example client and the tests speak, with where each fact
was read.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.operating_systems import (
    OPERATING_SYSTEMS,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.slurm_versions import (
    distro_slurm,
)

__all__ = ["DEFAULTS", "RELEASES", "RestRelease", "RestSettingsError", "jwt_os_problem",
           "os_release", "port_problem", "rest_release", "rest_settings"]

# slurmrestd's port in Slurm's own documentation (rest_quickstart, the packaged unit's
# commented example and 24.11's default ExecStart).
DEFAULT_PORT = 6820
# Ports the cluster's daemons already hold on the REST host (slurmctld, slurmd, slurmdbd,
# Prometheus, Alertmanager, node_exporter, the Slurm exporter).
TAKEN_PORTS = (6817, 6818, 6819, 9090, 9093, 9100, 9341)

DEFAULTS: dict[str, Any] = {
    # slurmrestd on the REST host, AuthAltTypes=auth/jwt on slurmctld and slurmdbd.
    "enabled": True,
    "port": DEFAULT_PORT,
    # The address slurmrestd listens on; empty: the REST host's private address.
    "listen_address": "",
    # The longest lifespan (seconds) 'scontrol token' gives a user (AuthAltParameters
    # max_token_lifespan; root and SlurmUser are not bound by it, so admins can mint
    # longer-lived service tokens). 0: Slurm's own (no limit).
    "max_token_lifespan": 86400,
}


class RestSettingsError(ValueError):
    """A ``metalslurm_rest`` value the roles cannot use: one sentence naming the key."""


@dataclass(frozen=True)
class RestRelease:
    """What one Slurm release offers slurmrestd with JWT."""

    release: str  # "22.05"
    jwt_plugin: bool  # the distribution packages slurm-wlm-jwt-plugin
    openapi_plugins: tuple[str, ...]  # slurmrestd -s
    api_version: str  # the newest path version those plugins serve: /slurm/<it>/ping
    source: str


RELEASES: tuple[RestRelease, ...] = (
    RestRelease("21.08", False, (), "",
                "packages.ubuntu.com: slurmrestd 21.08.5-2ubuntu1 is in jammy, but "
                "slurm-wlm-jwt-plugin's page lists noble and newer only"),
    RestRelease("22.05", True, ("openapi/v0.0.38", "openapi/dbv0.0.38"), "v0.0.38",
                "Debian 12's slurm-wlm-jwt-plugin and slurm-wlm-basic-plugins "
                "22.05.8-4+deb12u3 (dpkg -c: auth_jwt.so, openapi_v0_0_36..38.so, "
                "openapi_dbv0_0_36..38.so; v0.0.36 is deprecated in 22.05's slurmrestd(8))"),
    RestRelease("23.11", True, ("openapi/slurmctld", "openapi/slurmdbd"), "v0.0.40",
                "packages.ubuntu.com noble: slurm-wlm-jwt-plugin 23.11.4-1.2ubuntu5; the "
                "23.11.3 changelog (openSUSE's slurm.changes) names openapi/slurmctld and "
                "data_parser/v0.0.40 as 23.11's; not run here"),
    RestRelease("24.11", True, ("openapi/slurmctld", "openapi/slurmdbd"), "v0.0.42",
                "Debian 13's packages 24.11.5-4 on a local node: auth_jwt.so, "
                "openapi_slurmctld.so, openapi_slurmdbd.so, data_parser_v0_0_40..42.so"),
)


def _release_key(text: str) -> tuple[int, int]:
    major, minor = str(text).split(".")[:2]
    return int(major), int(minor)


def rest_release(version: str) -> RestRelease:
    """The entry for a Slurm version (``"24.11.5-4"``, ``"22.05"``): the newest recorded
    release not newer than it."""
    try:
        wanted = _release_key(version.split("-")[0])
    except (ValueError, IndexError):
        raise RestSettingsError(f"cannot read a Slurm release from {version!r}") from None
    known = [r for r in RELEASES if _release_key(r.release) <= wanted]
    if not known:
        raise RestSettingsError(f"Slurm {version} is older than every release recorded for "
                                f"the REST API ({RELEASES[0].release})")
    return known[-1]


def os_release(os_name: str) -> RestRelease | None:
    """The entry for the Slurm a stack's ``os`` (``debian13``, ``ubuntu22.04``) ships; None for
    an os the tables do not know."""
    match = re.fullmatch(r"([a-z]+)([\d.]+)", str(os_name))
    if not match:
        return None
    try:
        return rest_release(distro_slurm(match[1], match[2]).slurm.release)
    except (ValueError, RestSettingsError):
        return None


def jwt_os_problem(os_name: str) -> str | None:
    """Why the REST API cannot run on ``os_name``'s Slurm, or None."""
    release = os_release(os_name)
    if release is None or release.jwt_plugin:
        return None
    return (f"{os_name}'s Slurm {release.release} has no JWT plugin package "
            "(slurm-wlm-jwt-plugin), which slurmrestd needs to authenticate users: turn the "
            "REST API off (metalslurm:rest enabled: false), or use an os whose Slurm has it "
            f"({', '.join(_jwt_os_ids())})")


def _jwt_os_ids() -> list[str]:
    """The supported operating systems whose Slurm has the JWT plugin."""
    return [o.id for o in OPERATING_SYSTEMS
            if (release := os_release(o.id)) is not None and release.jwt_plugin]


def rest_settings(given: Mapping[str, Any] | None,
                  private_cidr: str | None = None) -> dict[str, Any]:
    """``given`` over :data:`DEFAULTS`, checked (a hand-written inventory gets the stack
    config's checks): raise RestSettingsError naming the key."""
    given = dict(given or {})
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise RestSettingsError(f"metalslurm_rest has no {', '.join(unknown)}: it takes "
                                f"{', '.join(DEFAULTS)}")
    settings = {**DEFAULTS, **given}
    if not isinstance(settings["enabled"], bool):
        raise RestSettingsError("metalslurm_rest.enabled must be true or false")
    port = settings["port"]
    if isinstance(port, bool) or not isinstance(port, int) or not 1024 <= port <= 65535:
        raise RestSettingsError(f"metalslurm_rest.port {port!r} must be a port from 1024 to "
                                "65535")
    if port_problem(port):
        raise RestSettingsError(f"metalslurm_rest.port {port_problem(port)}")
    lifespan = settings["max_token_lifespan"]
    if isinstance(lifespan, bool) or not isinstance(lifespan, int) or lifespan < 0:
        raise RestSettingsError("metalslurm_rest.max_token_lifespan must be a number of "
                                "seconds (0: no limit)")
    problem = listen_address_problem(settings["listen_address"], private_cidr)
    if problem:
        raise RestSettingsError(f"metalslurm_rest.listen_address {problem}")
    return settings


def port_problem(port: Any) -> str | None:
    """Why ``port`` (a number from 1024 to 65535) cannot be slurmrestd's, or None."""
    if port in TAKEN_PORTS:
        return (f"{port} is a port another daemon of the cluster listens on "
                f"({', '.join(map(str, TAKEN_PORTS))}); use {DEFAULT_PORT}")
    return None


def listen_address_problem(value: Any, private_cidr: str | None) -> str | None:
    """Why ``value`` cannot be slurmrestd's listen address, or None (empty: the host's
    private address)."""
    if value in ("", None):
        return None
    try:
        address = ipaddress.IPv4Address(str(value))
    except ValueError:
        return f"{value!r} is not an IPv4 address"
    if address.is_unspecified:
        return (f"{value} would listen on every interface, public ones too: leave it out "
                "(the host's private address) or give a private one")
    if private_cidr and address not in ipaddress.ip_network(private_cidr, strict=False):
        return (f"{value} is outside the cluster's private network {private_cidr}: the API "
                "is served on the private network only")
    return None
