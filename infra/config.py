"""Stack configuration: parse a ``Pulumi.<stack>.yaml`` file into frozen dataclasses.

One parser serves the Pulumi program and ``metalslurm local up``. Every problem in a
config is collected and reported together (:class:`ConfigError`), each naming the key
that has to change, so a user fixes a file in one pass and nothing is created before
the whole config is known to be good.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

NAMESPACE = "metalslurm"

PROVIDERS = ("local",)
OPERATING_SYSTEMS = ("debian12", "debian13")
GPU_TYPES = ("a100", "a10", "b200", "gh200", "h100", "h200", "l4", "l40s", "mi300x")
IMAGE_SOURCES = ("auto", "registry", "debootstrap")

# RFC 1123 host label, lower case: what Slurm, DNS and podman all accept as a node name.
NODE_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
# Slurm ClusterName doubles as a prefix for accounting tables and container names.
CLUSTER_NAME_RE = re.compile(r"^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$")
POOL_NAME_RE = re.compile(r"^[a-z]([a-z0-9-]{0,14}[a-z0-9])?$")
PARTITION_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,30}$")
# Slurm MaxTime: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or UNLIMITED.
SLURM_TIME_RE = re.compile(
    r"^(UNLIMITED|INFINITE|\d+|\d+:\d{2}(:\d{2})?|\d+-\d{1,2}(:\d{2}){0,2})$")

MAX_GPUS_PER_NODE = 16
# First host addresses kept free in the private subnet (gateway and friends).
RESERVED_HOST_ADDRESSES = 9


class ConfigError(ValueError):
    """A stack config with one or more problems; ``problems`` holds one line each."""

    def __init__(self, problems: list[str], source: str = "stack config") -> None:
        self.problems = problems
        self.source = source
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{source}: {len(problems)} problem(s):\n{lines}")


@dataclass(frozen=True)
class ComputePool:
    """A group of identical compute nodes, named ``<name>-001`` onwards."""

    name: str
    count: int
    gpu_type: str | None
    gpu_count: int

    def node_names(self) -> list[str]:
        return [f"{self.name}-{i:03d}" for i in range(1, self.count + 1)]


@dataclass(frozen=True)
class Partition:
    """A Slurm partition over some pools (all pools when ``pools`` is empty)."""

    name: str
    pools: tuple[str, ...] = ()
    default: bool = False
    max_time: str = "UNLIMITED"
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LocalSettings:
    """Options only the local (podman) provider reads."""

    image_source: str = "auto"
    mirror: str | None = None


@dataclass(frozen=True)
class ClusterConfig:
    cluster_name: str
    provider: str
    private_cidr: ipaddress.IPv4Network
    os: str
    controller_name: str
    compute_pools: tuple[ComputePool, ...]
    partitions: tuple[Partition, ...]
    slurm_conf: Mapping[str, Any]
    local: LocalSettings

    def compute_node_names(self) -> list[str]:
        return [n for pool in self.compute_pools for n in pool.node_names()]


def _key(name: str) -> str:
    return f"{NAMESPACE}:{name}"


class _Collector:
    """Reads typed values out of a raw mapping, recording every problem it finds."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def problem(self, key: str, message: str) -> None:
        self.problems.append(f"{key}: {message}")

    def string(self, raw: Mapping[str, Any], name: str, key: str, default: str | None = None,
               choices: tuple[str, ...] | None = None, pattern: re.Pattern[str] | None = None,
               what: str = "") -> str | None:
        value = raw.get(name, default)
        if value is None:
            if default is None:
                self.problem(key, "is required")
            return None
        if not isinstance(value, str):
            self.problem(key, f"must be a string, got {type(value).__name__} {value!r}")
            return None
        if choices is not None and value not in choices:
            self.problem(key, f"{value!r} is not one of the allowed values: {', '.join(choices)}")
            return None
        if pattern is not None and not pattern.match(value):
            self.problem(key, f"{value!r} is not valid: {what}")
            return None
        return value

    def integer(self, raw: Mapping[str, Any], name: str, key: str, default: int | None,
                minimum: int = 0, maximum: int | None = None) -> int | None:
        value = raw.get(name, default)
        if value is None:
            self.problem(key, "is required")
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.problem(key, f"must be a whole number, got {value!r}")
            return None
        if value < minimum:
            self.problem(key, f"must be at least {minimum}, got {value}")
            return None
        if maximum is not None and value > maximum:
            self.problem(key, f"must be at most {maximum}, got {value}")
            return None
        return value

    def boolean(self, raw: Mapping[str, Any], name: str, key: str, default: bool) -> bool:
        value = raw.get(name, default)
        if not isinstance(value, bool):
            self.problem(key, f"must be true or false, got {value!r}")
            return default
        return value

    def mapping(self, raw: Mapping[str, Any], name: str, key: str) -> Mapping[str, Any]:
        value = raw.get(name, {})
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.problem(key, f"must be a mapping, got {type(value).__name__}")
            return {}
        return value

    def mappings(self, value: Any, key: str, allowed: tuple[str, ...],
                 what: str) -> list[tuple[str, Mapping[str, Any]]]:
        """``(item_key, item)`` for each mapping in a list; problems for everything else."""
        if not isinstance(value, list) or not value:
            self.problem(key, f"must be a non-empty list of {what}")
            return []
        found = []
        for i, item in enumerate(value):
            item_key = f"{key}[{i}]"
            if not isinstance(item, Mapping):
                self.problem(item_key, f"must be a mapping with {', '.join(allowed)}")
                continue
            self.unknown_keys(item, allowed, item_key)
            found.append((item_key, item))
        return found

    def duplicates(self, key: str, names: list[str], what: str) -> None:
        for dup in sorted({n for n in names if names.count(n) > 1}):
            self.problem(key, f"{what} {dup!r} is used more than once")

    def unknown_keys(self, raw: Mapping[str, Any], allowed: tuple[str, ...], key: str) -> None:
        for name in raw:
            if name not in allowed:
                self.problem(f"{key}.{name}", f"unknown key; allowed keys: {', '.join(allowed)}")


_TOP_KEYS = ("clusterName", "provider", "privateCidr", "os", "controller", "computePools",
             "partitions", "slurmConf", "local")
_POOL_KEYS = ("name", "count", "gpuType", "gpuCount")
_PARTITION_KEYS = ("name", "pools", "default", "maxTime", "options")


def _parse_cidr(c: _Collector, raw: Mapping[str, Any]) -> ipaddress.IPv4Network | None:
    key = _key("privateCidr")
    value = c.string(raw, "privateCidr", key, default="10.77.0.0/24")
    if value is None:
        return None
    try:
        net = ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        c.problem(key, f"{value!r} is not a valid network in CIDR notation ({exc}); "
                  "example: 10.77.0.0/24")
        return None
    if not isinstance(net, ipaddress.IPv4Network):
        c.problem(key, f"{value!r} must be an IPv4 network")
        return None
    if not net.is_private:
        c.problem(key, f"{value!r} is not a private range (use 10.0.0.0/8, 172.16.0.0/12 or "
                  "192.168.0.0/16)")
        return None
    if net.prefixlen > 28:
        c.problem(key, f"{value!r} is too small: use a /28 or larger")
        return None
    return net


def _parse_pools(c: _Collector, raw: Mapping[str, Any]) -> list[ComputePool]:
    key = _key("computePools")
    value = raw.get("computePools")
    if value is None:
        value = [{"name": "gpu", "count": 2, "gpuType": "h100", "gpuCount": 8}]
    pools: list[ComputePool] = []
    for pkey, item in c.mappings(value, key, _POOL_KEYS, "pools, each with name and count"):
        name = c.string(item, "name", f"{pkey}.name", pattern=POOL_NAME_RE,
                        what="lower-case letters, digits and '-', starting with a letter, "
                        "at most 16 characters")
        count = c.integer(item, "count", f"{pkey}.count", default=None, minimum=0, maximum=1000)
        gpu_count = c.integer(item, "gpuCount", f"{pkey}.gpuCount", default=0, minimum=0,
                              maximum=MAX_GPUS_PER_NODE)
        gpu_type = item.get("gpuType")
        if gpu_type is not None and gpu_type not in GPU_TYPES:
            c.problem(f"{pkey}.gpuType", f"{gpu_type!r} is not one of the allowed values: "
                      f"{', '.join(GPU_TYPES)}")
            gpu_type = None
        elif gpu_count and gpu_type is None:
            c.problem(f"{pkey}.gpuType", f"pool has gpuCount {gpu_count} but no gpuType; "
                      f"set one of: {', '.join(GPU_TYPES)}")
        elif gpu_type is not None and gpu_count == 0:
            c.problem(f"{pkey}.gpuCount", f"pool has gpuType {gpu_type!r} but gpuCount 0; "
                      f"set 1 to {MAX_GPUS_PER_NODE}")
        if name is not None and count is not None and gpu_count is not None:
            pools.append(ComputePool(name, count, gpu_type, gpu_count))
    c.duplicates(key, [p.name for p in pools], "pool name")
    if pools and sum(p.count for p in pools) == 0:
        c.problem(key, "the cluster needs at least one compute node (every count is 0)")
    return pools


def _parse_partitions(c: _Collector, raw: Mapping[str, Any],
                      pools: list[ComputePool]) -> list[Partition]:
    key = _key("partitions")
    value = raw.get("partitions")
    if value is None:
        return [Partition(name="gpu", default=True)]
    pool_names = {p.name for p in pools}
    parts: list[Partition] = []
    for pkey, item in c.mappings(value, key, _PARTITION_KEYS, "partitions, each with a name"):
        name = c.string(item, "name", f"{pkey}.name", pattern=PARTITION_NAME_RE,
                        what="lower-case letters, digits, '-' and '_', starting with a letter")
        default = c.boolean(item, "default", f"{pkey}.default", False)
        max_time = c.string(item, "maxTime", f"{pkey}.maxTime", default="UNLIMITED",
                            pattern=SLURM_TIME_RE,
                            what="a Slurm time such as 120, 2:00:00, 7-00:00:00 or UNLIMITED")
        options = c.mapping(item, "options", f"{pkey}.options")
        raw_pools = item.get("pools", [])
        if not isinstance(raw_pools, list) or not all(isinstance(p, str) for p in raw_pools):
            c.problem(f"{pkey}.pools", "must be a list of pool names")
            raw_pools = []
        for p in raw_pools:
            if p not in pool_names:
                c.problem(f"{pkey}.pools", f"{p!r} is not a pool in {_key('computePools')}: "
                          f"{', '.join(sorted(pool_names)) or 'none'}")
        if name is not None and max_time is not None:
            parts.append(Partition(name, tuple(raw_pools), default, max_time, dict(options)))
    c.duplicates(key, [p.name for p in parts], "partition name")
    defaults = [p.name for p in parts if p.default]
    if len(defaults) > 1:
        c.problem(key, f"only one partition may be the default, got {', '.join(defaults)}")
    return parts


def parse_config(raw_config: Mapping[str, Any], source: str = "stack config") -> ClusterConfig:
    """Parse the ``config:`` mapping of a stack file (keys ``metalslurm:<name>``)."""
    c = _Collector()
    raw: dict[str, Any] = {}
    for full_key, value in raw_config.items():
        ns, _, name = str(full_key).partition(":")
        if ns != NAMESPACE or not name:
            # Other namespaces (oci:region, ...) belong to providers' own packages.
            continue
        raw[name] = value
    c.unknown_keys(raw, _TOP_KEYS, NAMESPACE)

    cluster_name = c.string(raw, "clusterName", _key("clusterName"), default="metalslurm",
                            pattern=CLUSTER_NAME_RE,
                            what="lower-case letters, digits and '-', starting with a letter, "
                            "at most 32 characters")
    provider = c.string(raw, "provider", _key("provider"), default="local", choices=PROVIDERS)
    os_name = c.string(raw, "os", _key("os"), default="debian13", choices=OPERATING_SYSTEMS)
    cidr = _parse_cidr(c, raw)

    controller = c.mapping(raw, "controller", _key("controller"))
    c.unknown_keys(controller, ("name",), _key("controller"))
    controller_name = c.string(controller, "name", f"{_key('controller')}.name", default="ctl",
                               pattern=NODE_NAME_RE,
                               what="a host name: lower-case letters, digits and '-'")

    pools = _parse_pools(c, raw)
    partitions = _parse_partitions(c, raw, pools)
    slurm_conf = c.mapping(raw, "slurmConf", _key("slurmConf"))

    local_raw = c.mapping(raw, "local", _key("local"))
    c.unknown_keys(local_raw, ("imageSource", "mirror"), _key("local"))
    image_source = c.string(local_raw, "imageSource", f"{_key('local')}.imageSource",
                            default="auto", choices=IMAGE_SOURCES)
    mirror = local_raw.get("mirror")
    if mirror is not None and not (isinstance(mirror, str) and re.match(r"^https?://", mirror)):
        c.problem(f"{_key('local')}.mirror",
                  f"{mirror!r} must be an http(s) URL of a Debian mirror")

    node_names = [n for p in pools for n in p.node_names()]
    if controller_name is not None:
        node_names.append(controller_name)
    for dup in sorted({n for n in node_names if node_names.count(n) > 1}):
        c.problem(_key("computePools"), f"node name {dup!r} would be used by two nodes; "
                  "rename the controller or the pool")
    for n in node_names:
        if not NODE_NAME_RE.match(n):
            c.problem(_key("computePools"), f"node name {n!r} is not a valid Slurm node/host name")
    if cidr is not None:
        usable = cidr.num_addresses - 2 - RESERVED_HOST_ADDRESSES
        if len(node_names) > usable:
            c.problem(_key("privateCidr"), f"{cidr} has room for {usable} nodes, the config "
                      f"asks for {len(node_names)}; use a larger network")

    if c.problems:
        raise ConfigError(c.problems, source)
    assert cluster_name and provider and os_name and cidr and controller_name and image_source
    return ClusterConfig(
        cluster_name=cluster_name,
        provider=provider,
        private_cidr=cidr,
        os=os_name,
        controller_name=controller_name,
        compute_pools=tuple(pools),
        partitions=tuple(partitions),
        slurm_conf=dict(slurm_conf),
        local=LocalSettings(image_source=image_source, mirror=mirror),
    )


def load_stack_file(path: str | Path) -> ClusterConfig:
    """Read a ``Pulumi.<stack>.yaml`` file and parse its ``config:`` section."""
    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError([f"file not found: {path}"], str(path)) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"not valid YAML: {exc}"], str(path)) from None
    if document is None:
        document = {}
    if not isinstance(document, Mapping) or not isinstance(document.get("config", {}), Mapping):
        raise ConfigError(["the file must be a mapping with a 'config:' mapping inside"], str(path))
    return parse_config(document.get("config") or {}, source=str(path))
