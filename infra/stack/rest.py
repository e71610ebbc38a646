"""``metalslurm:rest``: Slurm's REST API (slurmrestd) with JWT authentication.

The defaults of keys left out are the collection's table (``module_utils/rest.py``), which
the roles read too, for hand-written inventories; so are the per-release facts (whether the
distribution packages the JWT plugin). Refused here, before any machine is touched: REST on
an operating system whose Slurm has no packaged JWT plugin (named, with what to change), a
listen address outside the private network, a port another daemon holds (the sentences are
the table's, the same for a hand-written inventory).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.rest import (
    DEFAULTS,
    jwt_os_problem,
    listen_address_problem,
    port_problem,
)

from infra.stack.schema import Collector
from infra.stack.schema import key as stack_key

_KEYS = ("enabled", "port", "listenAddress", "maxTokenLifespan")


@dataclass(frozen=True)
class RestSettings:
    """``metalslurm:rest``, parsed (see module_utils/rest.py for each setting)."""

    enabled: bool = DEFAULTS["enabled"]
    port: int = DEFAULTS["port"]
    listen_address: str = DEFAULTS["listen_address"]
    max_token_lifespan: int = DEFAULTS["max_token_lifespan"]

    def inventory_vars(self) -> dict[str, Any]:
        """``metalslurm_rest``: every setting, named as the defaults table names it."""
        return {name: getattr(self, name) for name in DEFAULTS}


def parse_rest(c: Collector, raw: Mapping[str, Any], os_name: str | None,
               cidr: ipaddress.IPv4Network | None) -> RestSettings:
    where = stack_key("rest")
    item = c.mapping(raw, "rest", where)
    c.unknown_keys(item, _KEYS, where)
    d = RestSettings()
    no_jwt = jwt_os_problem(os_name) if os_name else None
    # Where the release has no JWT plugin, REST is off unless asked for (and then refused).
    enabled = c.boolean(item, "enabled", f"{where}.enabled", d.enabled and not no_jwt)
    if enabled and no_jwt:
        c.problem(f"{where}.enabled", f"is true, but {no_jwt}")
    port = c.integer(item, "port", f"{where}.port", d.port, 1024, 65535)
    if port_problem(port):
        c.problem(f"{where}.port", str(port_problem(port)))
    listen = c.string(item, "listenAddress", f"{where}.listenAddress", default="") or ""
    problem = listen_address_problem(listen, str(cidr) if cidr else None)
    if problem:
        c.problem(f"{where}.listenAddress", problem)
    lifespan = c.integer(item, "maxTokenLifespan", f"{where}.maxTokenLifespan",
                         d.max_token_lifespan, 0, 365 * 86400)
    return RestSettings(enabled=enabled, port=d.port if port is None else port,
                        listen_address=listen,
                        max_token_lifespan=(d.max_token_lifespan if lifespan is None
                                            else lifespan))
