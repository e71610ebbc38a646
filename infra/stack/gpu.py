"""``metalslurm:gpu``: the stack key of the NVIDIA driver stack on GPU nodes.

Parsed here (:func:`parse_gpu`) into ``metalslurm_gpu`` for the inventory; the rules are the
nvidia_gpu role's own (``metalslurm.cluster`` collection, ``module_utils/gpu.py``), applied
here to the stack config and by the role to its inventory, so both refuse the same values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.gpu import (
    DEFAULTS,
    gpu_problems,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.operating_systems import (
    OS_IDS,
    by_id,
)

from infra.stack.schema import Collector
from infra.stack.schema import key as stack_key

_KEYS = ("mode", "branch", "version", "fabricManager", "fabricManagerVersion", "dcgm",
         "dcgmVersion", "dcgmExporterVersion", "gpudirect", "containerToolkit", "mig",
         "rebootPolicy", "repository", "containerToolkitRepository")



_REPO_KEYS = ("url", "keyUrl", "keyFingerprint")



@dataclass(frozen=True)
class Repository:
    # empty: NVIDIA's URL for the node's OS release, its published key, the pinned fingerprint
    url: str = DEFAULTS["repository"]["url"]
    key_url: str = DEFAULTS["repository"]["key_url"]
    key_fingerprint: str = DEFAULTS["repository"]["key_fingerprint"]

    def inventory_vars(self) -> dict[str, str]:
        return {"url": self.url, "key_url": self.key_url,
                "key_fingerprint": self.key_fingerprint}



@dataclass(frozen=True)
class GpuSettings:
    """The defaults are module_utils/gpu.py's (``DEFAULTS``), which the role reads too."""

    mode: str = DEFAULTS["mode"]
    branch: str = DEFAULTS["branch"]
    version: str = DEFAULTS["version"]
    fabric_manager: str = DEFAULTS["fabric_manager"]
    fabric_manager_version: str = DEFAULTS["fabric_manager_version"]
    dcgm: bool = DEFAULTS["dcgm"]
    dcgm_version: str = DEFAULTS["dcgm_version"]
    dcgm_exporter_version: str = DEFAULTS["dcgm_exporter_version"]
    gpudirect: str = DEFAULTS["gpudirect"]
    container_toolkit: bool = DEFAULTS["container_toolkit"]
    mig: bool = DEFAULTS["mig"]
    reboot_policy: str = DEFAULTS["reboot_policy"]
    repository: Repository = field(default_factory=Repository)
    container_toolkit_repository: Repository = field(default_factory=Repository)

    def inventory_vars(self) -> dict[str, Any]:
        """``metalslurm_gpu`` as the role reads it."""
        return {"mode": self.mode, "branch": self.branch, "version": self.version,
                "fabric_manager": self.fabric_manager,
                "fabric_manager_version": self.fabric_manager_version, "dcgm": self.dcgm,
                "dcgm_version": self.dcgm_version,
                "dcgm_exporter_version": self.dcgm_exporter_version,
                "gpudirect": self.gpudirect, "container_toolkit": self.container_toolkit,
                "mig": self.mig, "reboot_policy": self.reboot_policy,
                "repository": self.repository.inventory_vars(),
                "container_toolkit_repository":
                    self.container_toolkit_repository.inventory_vars()}



def _repository(c: Collector, item: Mapping[str, Any], name: str, where: str) -> Repository:
    raw = c.mapping(item, name, f"{where}.{name}")
    c.unknown_keys(raw, _REPO_KEYS, f"{where}.{name}")
    return Repository(
        url=c.string(raw, "url", f"{where}.{name}.url", default="") or "",
        key_url=c.string(raw, "keyUrl", f"{where}.{name}.keyUrl", default="") or "",
        key_fingerprint=(c.string(raw, "keyFingerprint", f"{where}.{name}.keyFingerprint",
                                  default="") or "").replace(" ", ""))



def parse_gpu(c: Collector, raw: Mapping[str, Any], os_name: str | None,
              gpu_types: Sequence[str]) -> GpuSettings:
    where = stack_key("gpu")
    item = c.mapping(raw, "gpu", where)
    c.unknown_keys(item, _KEYS, where)
    d = GpuSettings()

    def text(name: str, default: str) -> str:
        value = item.get(name, default)
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # branch: 580 written without quotes
        if not isinstance(value, str):
            c.problem(f"{where}.{name}", f"must be a string, got {value!r}")
            return default
        return value

    settings = GpuSettings(
        mode=text("mode", d.mode), branch=text("branch", d.branch),
        version=text("version", d.version),
        fabric_manager=text("fabricManager", d.fabric_manager),
        fabric_manager_version=text("fabricManagerVersion", d.fabric_manager_version),
        dcgm=c.boolean(item, "dcgm", f"{where}.dcgm", d.dcgm),
        dcgm_version=text("dcgmVersion", d.dcgm_version),
        dcgm_exporter_version=text("dcgmExporterVersion", d.dcgm_exporter_version),
        gpudirect=text("gpudirect", d.gpudirect),
        container_toolkit=c.boolean(item, "containerToolkit", f"{where}.containerToolkit",
                                    d.container_toolkit),
        mig=c.boolean(item, "mig", f"{where}.mig", d.mig),
        reboot_policy=text("rebootPolicy", d.reboot_policy),
        repository=_repository(c, item, "repository", where),
        container_toolkit_repository=_repository(c, item, "containerToolkitRepository", where))
    release = by_id(os_name).cuda_repository if os_name and os_name in OS_IDS else os_name
    names = {"fabric_manager": "fabricManager", "fabric_manager_version":
             "fabricManagerVersion", "reboot_policy": "rebootPolicy",
             "container_toolkit_repository": "containerToolkitRepository",
             "dcgm_version": "dcgmVersion", "dcgm_exporter_version": "dcgmExporterVersion"}
    for problem in gpu_problems(settings.inventory_vars(), release, gpu_types):
        name, _, rest = problem.partition(" ")
        head = name.split(".")[0]
        if head in names or head in _KEYS or head == "repository":
            c.problem(f"{where}.{names.get(head, head)}{name[len(head):]}", rest)
        else:
            c.problem(where, problem)
    return settings
