"""``metalslurm:nccl``: the stack key of the NCCL settings on compute nodes.

Parsed here into ``metalslurm_nccl`` for the inventory; the rule for a setting's name and
value is the nccl_ib role's own (``metalslurm.cluster`` collection, ``module_utils/nccl.py``),
so the stack config and the role refuse the same settings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.nccl import (
    DEFAULTS,
    setting_problems,
)

from infra.stack.schema import Collector
from infra.stack.schema import key as stack_key

_NCCL_KEYS = ("enabled", "settings", "socketIfname")
_IFNAME_RE = re.compile(r"^=?[A-Za-z0-9_.:@-]{1,15}$")


@dataclass(frozen=True)
class NcclConfig:
    """``metalslurm:nccl``: whether nccl.conf is written, and what is set over the derived
    settings."""

    enabled: bool = DEFAULTS["enabled"]  # module_utils/nccl.py owns the defaults
    settings: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULTS["settings"]))
    socket_ifname: str = DEFAULTS["socket_ifname"]

    def inventory_vars(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "settings": dict(self.settings),
                "socket_ifname": self.socket_ifname}


def parse_nccl(c: Collector, raw: Mapping[str, Any]) -> NcclConfig:
    where = stack_key("nccl")
    item = c.mapping(raw, "nccl", where)
    if "gpudirect" in item:
        # GPUDirect RDMA has one setting: the driver's side (nvidia-peermem or DMA-BUF) and
        # nccl.conf's follow it together.
        c.problem(f"{where}.gpudirect", f"moved to {stack_key('gpu')}.gpudirect (auto, "
                  "peermem, dmabuf or off), which sets up the driver's side and nccl.conf "
                  "together: move the value there")
    c.unknown_keys({k: v for k, v in item.items() if k != "gpudirect"}, _NCCL_KEYS, where)
    enabled = c.boolean(item, "enabled", f"{where}.enabled", DEFAULTS["enabled"])
    ifname = c.string(item, "socketIfname", f"{where}.socketIfname", default="",
                      pattern=_IFNAME_RE if item.get("socketIfname") else None,
                      what="a network interface name such as eth0 or bond0")
    settings = c.mapping(item, "settings", f"{where}.settings")
    for problem in setting_problems(settings):
        name, _, sentence = problem.partition(" ")
        c.problem(name, sentence)
    return NcclConfig(enabled=bool(enabled), socket_ifname=(ifname or "").lstrip("="),
                      settings={str(k): str(v) for k, v in settings.items()})
