"""The node health checker's settings (``metalslurm_health``): the one table of their defaults.

Owner of these defaults. They are read by:

- the operator's stack parser (``infra/stack/health.py``: ``metalslurm:health`` keys left out);
- the roles, through the ``metalslurm.cluster.health_settings`` filter (an inventory written
  by hand without ``metalslurm_health``, or with part of it): slurm_health writes the
  checker's config file from them, slurm_controller slurm.conf's ``HealthCheckInterval``
  and ``HealthCheckNodeState``.

The checker itself (``roles/slurm_health/files/metalslurm-health``) runs on nodes without
this repository, so it keeps its own copies of the ones it reads (for a run by hand with no
config file); ``tests/unit/test_setting_owners.py`` keeps them equal to these.

Keys are in the inventory's form (snake_case); the stack config spells them in camelCase.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DEFAULTS: dict[str, Any] = {
    "enabled": True,               # install the checker, and have slurmd run it
    "interval": 300,               # HealthCheckInterval, seconds
    "node_state": "ANY,CYCLE",     # HealthCheckNodeState
    "check_timeout": 10,           # seconds each check may take
    "xid_window": 3600,            # seconds an Xid error counts
    "max_ecc_uncorrected": 0,      # volatile uncorrected ECC errors tolerated per GPU
    "ib_rate_gbps": 0,             # the rate every InfiniBand compute port must reach; 0: any
    "min_free_tmp_mib": 1024,      # free space the jobs' /tmp and /dev/shm base must keep
    "min_free_cache_mib": 10240,   # free space Enroot's layer cache must keep
}


class HealthSettingsError(ValueError):
    """``metalslurm_health`` names a setting the checker does not have."""


def health_settings(given: Mapping[str, Any] | None) -> dict[str, Any]:
    """``given`` (the inventory's ``metalslurm_health``, or part of it) over the defaults.

    A key the checker does not know is refused (a typo would otherwise leave the default in
    place without a word)."""
    given = dict(given or {})
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise HealthSettingsError(
            f"metalslurm_health: unknown setting(s) {', '.join(map(str, unknown))}; the "
            f"checker has {', '.join(DEFAULTS)}")
    return {**DEFAULTS, **given}
