"""Slurm power saving for elastic nodes (``metalslurm_elastic``): the one table of its timings.

Owner of these defaults, one row per provider (how long its machines take to come up
decides the rest). They are read by:

- the operator's stack parser (``infra/stack/config.py``: ``metalslurm:elastic`` keys left out);
- the roles, through the ``metalslurm.cluster.elastic_settings`` filter (a hand-written
  inventory without ``metalslurm_elastic``, or with part of it): slurm_controller writes
  slurm.conf's SuspendTime, SuspendTimeout, ResumeTimeout, ResumeRate and SuspendRate from
  them, slurm_elastic the power programs' config file (``stuck_after``, ``orphan_after``)
  and the reconciler's timer (``reconcile_interval``).

The power programs on the controller keep no default of their own for these: their
config file must carry them (the role always writes them).

Keys are in the inventory's form (snake_case); the stack config spells them in camelCase.
Seconds, except the rates (nodes per minute; 0: no limit).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# How a provider powers an elastic node: start and stop one machine that is kept, or make
# a machine anew on resume and destroy it on suspend (the stack's elasticMode; the power
# drivers' ``mode``).
START_STOP, LAUNCH_TERMINATE = "start-stop", "launch-terminate"
ELASTIC_MODES = (START_STOP, LAUNCH_TERMINATE)
# Where the controller keeps what it configures a machine made anew with (the join kit,
# infra/stack/join_kit.py; the slurm_elastic role's join tasks and metalslurm-join).
JOIN_DIR = "/var/lib/metalslurm/join"

# Bare metal spends minutes in firmware (POST, NIC and GPU option ROMs) before the OS
# boots; OCI's bare-metal GPU shapes take longer still; the local provider's nodes are
# containers. ResumeTimeout is a boot plus the time slurmd needs to register, with margin;
# SuspendTime is never below a boot (a node would be powered off and on again between jobs
# for longer than it is idle), so OCI's is longer than the others'.
_COMMON: dict[str, int] = {
    "resume_rate": 100,          # ResumeRate
    "suspend_rate": 100,         # SuspendRate
    "reconcile_interval": 60,    # the reconciler's timer
}
PROVIDER_DEFAULTS: dict[str, dict[str, int]] = {
    "local": {"boot_time": 15, "resume_timeout": 120, "suspend_time": 600,
              "suspend_timeout": 30, **_COMMON},
    "byo": {"boot_time": 600, "resume_timeout": 1200, "suspend_time": 600,
            "suspend_timeout": 300, **_COMMON},
    "oci": {"boot_time": 900, "resume_timeout": 1800, "suspend_time": 1800,
            "suspend_timeout": 300, **_COMMON},
}
# orphan_after (seconds a machine may run while Slurm holds its node powered down before
# the reconciler stops it) is not in the rows: left out, it is the resume_timeout in force
# (a machine started by hand gets as long as a resume to let its slurmd register).
KEYS = ("suspend_time", "suspend_timeout", "resume_timeout", "resume_rate", "suspend_rate",
        "boot_time", "reconcile_interval", "orphan_after")


class ElasticSettingsError(ValueError):
    """``metalslurm_elastic`` cannot be completed: an unknown key, or no provider to take the
    missing ones from."""


def elastic_settings(given: Mapping[str, Any] | None, provider: str | None) -> dict[str, Any]:
    """``given`` (the inventory's ``metalslurm_elastic``, or part of it) over ``provider``'s
    defaults, with ``orphan_after`` following ``resume_timeout`` when it is left out."""
    given = dict(given or {})
    unknown = sorted(set(given) - set(KEYS))
    if unknown:
        raise ElasticSettingsError(
            f"metalslurm_elastic: unknown setting(s) {', '.join(map(str, unknown))}; the "
            f"settings are {', '.join(KEYS)}")
    missing = [k for k in KEYS if k not in given and k != "orphan_after"]
    if missing and provider not in PROVIDER_DEFAULTS:
        raise ElasticSettingsError(
            f"metalslurm_elastic leaves out {', '.join(missing)}, and metalslurm_provider "
            f"({provider!r}) is not one of {', '.join(PROVIDER_DEFAULTS)}, whose defaults "
            "would fill them: set metalslurm_provider, or give every setting")
    settings = {**PROVIDER_DEFAULTS.get(str(provider), {}), **given}
    settings.setdefault("orphan_after", settings["resume_timeout"])
    return {k: settings[k] for k in KEYS}
