"""``metalslurm:health``: the node health checker Slurm runs (roles/slurm_health).

The checker itself is ``roles/slurm_health/files/metalslurm-health`` (standard library
only, it runs on the nodes); this module reads its settings from the stack config and
hands them to the inventory, refusing values out of range with one sentence each. The
defaults of keys left out are not this module's: they are the collection's table
(``module_utils/health.py``), which the roles read too, for hand-written inventories.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.health import (
    DEFAULTS as HEALTH_DEFAULTS,
)

from infra.stack.schema import Collector
from infra.stack.schema import key as stack_key

# HealthCheckNodeState's words (slurm.conf) that every supported release knows (21.08 to
# 24.11): the node states to check in, and CYCLE (spread the runs over the interval
# instead of running every node at once). NONDRAINED_IDLE is left out: older releases
# do not know it, and scontrol does not show it.
NODE_STATES = ("ALLOC", "ANY", "CYCLE", "IDLE", "MIXED")
_KEYS = ("enabled", "interval", "nodeState", "checkTimeout", "xidWindow", "maxEccUncorrected",
         "ibRateGbps", "minFreeTmpMib", "minFreeCacheMib")


@dataclass(frozen=True)
class HealthSettings:
    """``metalslurm:health``, parsed; each field named as the inventory (and the defaults
    table) names it. See module_utils/health.py for what each one means."""

    enabled: bool = HEALTH_DEFAULTS["enabled"]
    interval: int = HEALTH_DEFAULTS["interval"]
    node_state: str = HEALTH_DEFAULTS["node_state"]
    check_timeout: int = HEALTH_DEFAULTS["check_timeout"]
    xid_window: int = HEALTH_DEFAULTS["xid_window"]
    max_ecc_uncorrected: int = HEALTH_DEFAULTS["max_ecc_uncorrected"]
    ib_rate_gbps: int = HEALTH_DEFAULTS["ib_rate_gbps"]
    min_free_tmp_mib: int = HEALTH_DEFAULTS["min_free_tmp_mib"]
    min_free_cache_mib: int = HEALTH_DEFAULTS["min_free_cache_mib"]

    def inventory_vars(self) -> dict[str, Any]:
        """``metalslurm_health``: every setting, named as the defaults table names it."""
        return {name: getattr(self, name) for name in HEALTH_DEFAULTS}


def node_state_problem(value: str) -> str | None:
    """Why ``value`` is not a HealthCheckNodeState, or None."""
    words = [w.strip() for w in value.split(",")]
    unknown = [w for w in words if w not in NODE_STATES]
    if not value or unknown:
        return (f"{value!r} is not a list of HealthCheckNodeState words (comma-separated, "
                f"from {', '.join(NODE_STATES)})")
    if words == ["CYCLE"]:
        return "CYCLE only says how to spread the runs: name the states too, e.g. ANY,CYCLE"
    return None


def parse_health(c: Collector, raw: Mapping[str, Any]) -> HealthSettings:
    where = stack_key("health")
    item = c.mapping(raw, "health", where)
    c.unknown_keys(item, _KEYS, where)
    d = HealthSettings()

    def number(name: str, default: int, minimum: int, maximum: int) -> int:
        value = c.integer(item, name, f"{where}.{name}", default, minimum, maximum)
        return default if value is None else value

    node_state = c.string(item, "nodeState", f"{where}.nodeState", default=d.node_state) \
        or d.node_state
    problem = node_state_problem(node_state)
    if problem:
        c.problem(f"{where}.nodeState", problem)
    # slurmd kills a HealthCheckProgram after 60 s: every check must fit well inside.
    return HealthSettings(
        enabled=c.boolean(item, "enabled", f"{where}.enabled", d.enabled),
        interval=number("interval", d.interval, 0, 86400),
        node_state=node_state,
        check_timeout=number("checkTimeout", d.check_timeout, 1, 30),
        xid_window=number("xidWindow", d.xid_window, 60, 7 * 86400),
        max_ecc_uncorrected=number("maxEccUncorrected", d.max_ecc_uncorrected, 0, 1000),
        ib_rate_gbps=number("ibRateGbps", d.ib_rate_gbps, 0, 1600),
        min_free_tmp_mib=number("minFreeTmpMib", d.min_free_tmp_mib, 0, 1024 * 1024),
        min_free_cache_mib=number("minFreeCacheMib", d.min_free_cache_mib, 0, 16 * 1024 * 1024))
