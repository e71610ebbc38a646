"""The nccl_ib role's filters: NCCL settings derived from a node's HCA facts, checked, and
rendered as /etc/nccl.conf and a file jobs source (module_utils/nccl.py)."""

from __future__ import annotations

from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils import nccl


def interface_of(facts: dict[str, Any], address: str) -> str:
    """The network interface carrying ``address`` in gathered facts ('' if none)."""
    for name in facts.get("interfaces") or []:
        iface = facts.get(name.replace("-", "_")) or facts.get(name) or {}
        addresses = [(iface.get("ipv4") or {}).get("address")]
        addresses += [a.get("address") for a in iface.get("ipv4_secondaries") or []]
        if address in addresses:
            return str(iface.get("device") or name)
    return ""


def nccl_settings(hcas: list[dict[str, Any]], host: str, socket_ifname: str, gpudirect: str,
                  overrides: dict[str, Any]) -> dict[str, Any]:
    """{settings, problems, warnings} for one node."""
    result = nccl.derive_nccl_settings(
        hcas, host=host, socket_ifname=socket_ifname or None,
        gpudirect=None if gpudirect in ("", "off") else gpudirect,
        overrides={str(k): str(v) for k, v in (overrides or {}).items()})
    return {"settings": result.settings, "problems": result.problems,
            "warnings": result.warnings}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "interface_of": interface_of,
            "nccl_config": nccl.nccl_config,
            "nccl_settings": nccl_settings,
            "nccl_setting_problems": nccl.setting_problems,
            "nccl_conf": nccl.render_nccl_conf,
            "nccl_env": nccl.render_nccl_env,
        }
