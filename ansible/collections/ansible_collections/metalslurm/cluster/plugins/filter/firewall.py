"""The host firewall's openings for one host (module_utils/firewall.py owns them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils import firewall
from ansible_collections.metalslurm.cluster.plugins.plugin_utils.filters import (
    filter_errors,
    hostvar,
)


@filter_errors(firewall.FirewallError)
def host_firewall_rules(host: str, groups: Mapping[str, Any], hostvars: Any, cidr: str,
                        monitoring_host: str = "", rest_port: int | None = None,
                        submit_host: str = "") -> list[dict[str, str]]:
    """``firewall.openings`` with each cluster host's metalslurm_address read from hostvars."""
    hosts = {h for group in ("slurm_controller", "slurmdbd", "nfs_server", "slurm_compute",
                             "login") for h in groups.get(group) or []}
    addresses = {h: hostvar(hostvars, h, "metalslurm_address") for h in hosts}
    return firewall.openings(host, groups, addresses, cidr, monitoring_host, rest_port,
                             submit_host)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"host_firewall_rules": host_firewall_rules,
                "host_firewall_summary": lambda _=None: firewall.summary()}
