"""``metalslurm:monitoring``: Prometheus, Alertmanager and the exporters (roles/monitoring,
roles/node_exporter, roles/slurm_exporter).

The defaults of keys left out and the rules each value follows are the collection's
(``module_utils/monitoring.py``), which the roles read too (a hand-written inventory is held
to the same rules); this module maps the stack's camelCase keys onto them, adds the rule only
the stack knows (the monitoring host must be one of the cluster's machines) and reports every
problem with the stack key to change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.monitoring import (
    DEFAULTS as MONITORING_DEFAULTS,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.monitoring import (
    STACK_NAMES,
    settings_problems,
)

from infra.schema import Collector
from infra.schema import key as stack_key

_INVENTORY_NAME = {camel: snake for snake, camel in STACK_NAMES.items()}


@dataclass(frozen=True)
class MonitoringSettings:
    """``metalslurm:monitoring``, parsed: ``given`` holds the keys the stack sets; the
    inventory gets them over the defaults table (the roles read the same table)."""

    given: Mapping[str, Any] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return bool(self.given.get("enabled", MONITORING_DEFAULTS["enabled"]))

    def inventory_vars(self) -> dict[str, Any]:
        return {**MONITORING_DEFAULTS, **self.given}


def parse_monitoring(c: Collector, raw: Mapping[str, Any], hosts: Iterable[str],
                     elastic: Iterable[str] = ()) -> MonitoringSettings:
    """The section, every problem recorded in ``c`` with its stack key; ``hosts``: the names
    of the cluster's machines (the monitoring host must be one of them); ``elastic``: those
    Slurm powers down when idle (it must not be one of those)."""
    where = stack_key("monitoring")
    item = c.mapping(raw, "monitoring", where)
    c.unknown_keys(item, tuple(STACK_NAMES.values()), where)
    given = {_INVENTORY_NAME[k]: v for k, v in item.items() if k in _INVENTORY_NAME}
    for name, sentence in settings_problems({**MONITORING_DEFAULTS, **given}):
        stack_name = STACK_NAMES.get(name, name).replace("send_resolved", "sendResolved")
        c.problem(f"{where}.{stack_name}", sentence)
    host = given.get("host")
    names = sorted(hosts)
    if isinstance(host, str) and host and host not in names:
        c.problem(f"{where}.host", f"{host!r} is not a machine of this cluster; name one of "
                  f"{', '.join(names)} (or leave it out: the controller)")
    elif isinstance(host, str) and host in set(elastic):
        c.problem(f"{where}.host", f"{host!r} is an elastic node: Slurm powers it down when "
                  "idle, and Prometheus with it; name a static machine (or leave it out: the "
                  "controller)")
    return MonitoringSettings(given=given)
