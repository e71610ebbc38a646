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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

NAMESPACE = "metalslurm"

PROVIDERS = ("local", "byo", "oci")
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
MAX_NODES_PER_POOL = 1000
# Slurm account, QOS and user names: what sacctmgr accepts without quoting.
ACCOUNT_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
USER_NAME_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
# Shared file systems are mounted at absolute paths without spaces.
MOUNT_PATH_RE = re.compile(r"^/[A-Za-z0-9._/-]+$")
STORAGE_BACKENDS = ("nfs", "none")
# Expected boot time of a powered-down node and the ResumeTimeout / SuspendTimeout
# defaults, by provider (seconds). Bare metal spends minutes in firmware (POST, NIC and
# GPU option ROMs) before the OS boots; OCI bare-metal GPU shapes take longer still.
PROVIDER_BOOT_SECONDS = {"local": 15, "byo": 600, "oci": 900}
PROVIDER_RESUME_TIMEOUT = {"local": 120, "byo": 1200, "oci": 1800}
PROVIDER_SUSPEND_TIMEOUT = {"local": 30, "byo": 300, "oci": 300}
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
    """A group of identical compute nodes.

    ``count`` nodes are static (always on); ``elastic_count`` more are declared
    ``State=CLOUD`` and powered up and down by Slurm's power saving. Nodes are named
    ``<name>-001`` onwards, static ones first, unless the provider names them (``hosts``:
    existing machines, static ones first).
    """

    name: str
    count: int
    gpu_type: str | None
    gpu_count: int
    elastic_count: int = 0
    shape: str | None = None
    hosts: tuple[str, ...] = ()

    def _generated(self, first: int, n: int) -> list[str]:
        return [f"{self.name}-{i:03d}" for i in range(first, first + n)]

    def static_names(self) -> list[str]:
        if self.hosts:
            return list(self.hosts[:self.count])
        return self._generated(1, self.count)

    def elastic_names(self) -> list[str]:
        if self.hosts:
            return list(self.hosts[self.count:self.count + self.elastic_count])
        return self._generated(self.count + 1, self.elastic_count)

    def node_names(self) -> list[str]:
        return self.static_names() + self.elastic_names()


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
class ElasticSettings:
    """Slurm power saving for the pools' elastic nodes (seconds, nodes per minute)."""

    suspend_time: int
    suspend_timeout: int
    resume_timeout: int
    resume_rate: int
    suspend_rate: int
    boot_time: int
    reconcile_interval: int


@dataclass(frozen=True)
class StorageSettings:
    """Shared file systems: NFS exports of ``paths`` from ``server``, or none."""

    backend: str = "nfs"
    server: str = "nfs"
    paths: tuple[str, ...] = ("/home", "/shared")


@dataclass(frozen=True)
class Qos:
    """A Slurm QOS: ``limits`` are sacctmgr QOS fields (GrpTRESMins, MaxTRESPerUser, ...)."""

    name: str
    priority: int = 0
    limits: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""


@dataclass(frozen=True)
class Account:
    """A Slurm account (a team): its users, fair-share and QOS."""

    name: str
    users: tuple[str, ...] = ()
    fairshare: int = 1
    qos: tuple[str, ...] = ()
    default_qos: str | None = None
    description: str = ""


@dataclass(frozen=True)
class UnixUser:
    """A login created on every node, with the same UID everywhere."""

    name: str
    uid: int


@dataclass(frozen=True)
class AccountingSettings:
    """slurmdbd accounting: a database (MariaDB on the controller unless ``database_host``
    names an external one), accounts, users and QOS."""

    database_host: str | None = None
    database_port: int = 3306
    database_name: str = "slurm_acct_db"
    database_user: str = "slurm"
    accounts: tuple[Account, ...] = ()
    qos: tuple[Qos, ...] = ()
    prune: bool = True


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
    elastic: ElasticSettings
    storage: StorageSettings = field(default_factory=StorageSettings)
    accounting: AccountingSettings = field(default_factory=AccountingSettings)
    users: tuple[UnixUser, ...] = ()
    configure: bool = False
    byo: ByoSettings | None = None
    oci: OciSettings | None = None

    def compute_node_names(self) -> list[str]:
        return [n for pool in self.compute_pools for n in pool.node_names()]

    def elastic_node_names(self) -> list[str]:
        return [n for pool in self.compute_pools for n in pool.elastic_names()]


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
             "partitions", "slurmConf", "local", "elastic", "storage", "accounting", "users",
             "configure",
             "byo", "oci", "sshPrivateKey", "bmcCredentials")
_POOL_KEYS = ("name", "count", "elasticCount", "gpuType", "gpuCount", "shape")
_ELASTIC_KEYS = ("suspendTime", "suspendTimeout", "resumeTimeout", "resumeRate", "suspendRate",
                 "bootTime", "reconcileInterval")
_STORAGE_KEYS = ("backend", "server", "paths")
_ACCOUNTING_KEYS = ("database", "accounts", "qos", "prune")
_DATABASE_KEYS = ("host", "port", "name", "user")
_ACCOUNT_KEYS = ("name", "users", "fairshare", "qos", "defaultQos", "description")
_QOS_KEYS = ("name", "priority", "limits", "description")
# sacctmgr QOS fields metalslurm passes through; anything else is most likely a typo.
QOS_LIMIT_FIELDS = (
    "Flags", "GraceTime", "GrpJobs", "GrpJobsAccrue", "GrpSubmitJobs", "GrpTRES", "GrpTRESMins",
    "GrpTRESRunMins", "GrpWall", "MaxJobsAccruePerUser", "MaxJobsPerAccount", "MaxJobsPerUser",
    "MaxSubmitJobsPerAccount", "MaxSubmitJobsPerUser", "MaxTRESMinsPerJob", "MaxTRESPerAccount",
    "MaxTRESPerJob", "MaxTRESPerNode", "MaxTRESPerUser", "MaxWall", "MinPrioThreshold",
    "MinTRESPerJob", "Preempt", "PreemptExemptTime", "PreemptMode", "UsageFactor",
    "UsageThreshold")
# Directories a shared file system must never be mounted over.
SYSTEM_PATHS = ("/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/opt", "/proc",
                "/root", "/run", "/sbin", "/sys", "/tmp", "/usr", "/var")
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
        count = c.integer(item, "count", f"{pkey}.count", default=None, minimum=0,
                          maximum=MAX_NODES_PER_POOL)
        elastic = c.integer(item, "elasticCount", f"{pkey}.elasticCount", default=0, minimum=0,
                            maximum=MAX_NODES_PER_POOL)
        shape = c.string(item, "shape", f"{pkey}.shape", default="")
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
        if count is not None and elastic is not None and count + elastic > MAX_NODES_PER_POOL:
            c.problem(f"{pkey}.elasticCount", f"count + elasticCount is {count + elastic}; a "
                      f"pool has at most {MAX_NODES_PER_POOL} nodes (split it into two pools)")
        if (name is not None and count is not None and gpu_count is not None
                and elastic is not None):
            pools.append(ComputePool(name, count, gpu_type, gpu_count, elastic_count=elastic,
                                     shape=shape or None))
    c.duplicates(key, [p.name for p in pools], "pool name")
    if pools and sum(p.count + p.elastic_count for p in pools) == 0:
        c.problem(key, "the cluster needs at least one compute node (every count and "
                  "elasticCount is 0)")
    return pools


# The shared research cluster of the seed guide: a short debug queue (one node per job),
# the default train queue, and a priority queue whose jobs preempt (requeue) train and
# debug jobs (PreemptType=preempt/partition_prio compares PriorityTier).
DEFAULT_PARTITIONS = (
    Partition("debug", max_time="2:00:00", options={"MaxNodes": 1, "PriorityTier": 1}),
    Partition("train", default=True, max_time="7-00:00:00", options={"PriorityTier": 1}),
    Partition("priority", max_time="30-00:00:00",
              options={"PriorityTier": 2, "PriorityJobFactor": 2}),
)


def _parse_partitions(c: _Collector, raw: Mapping[str, Any],
                      pools: list[ComputePool]) -> list[Partition]:
    key = _key("partitions")
    value = raw.get("partitions")
    if value is None:
        return list(DEFAULT_PARTITIONS)
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


def _parse_elastic(c: _Collector, raw: Mapping[str, Any], provider: str | None,
                   pools: list[ComputePool]) -> ElasticSettings:
    key = _key("elastic")
    item = c.mapping(raw, "elastic", key)
    c.unknown_keys(item, _ELASTIC_KEYS, key)
    prov = provider if provider in PROVIDER_BOOT_SECONDS else "local"

    def seconds(name: str, default: int, minimum: int = 1, maximum: int = 86400 * 30) -> int:
        value = c.integer(item, name, f"{key}.{name}", default=default, minimum=minimum,
                          maximum=maximum)
        return default if value is None else value

    settings = ElasticSettings(
        suspend_time=seconds("suspendTime", 600),
        suspend_timeout=seconds("suspendTimeout", PROVIDER_SUSPEND_TIMEOUT[prov]),
        resume_timeout=seconds("resumeTimeout", PROVIDER_RESUME_TIMEOUT[prov]),
        resume_rate=seconds("resumeRate", 100, minimum=0, maximum=100000),
        suspend_rate=seconds("suspendRate", 100, minimum=0, maximum=100000),
        boot_time=seconds("bootTime", PROVIDER_BOOT_SECONDS[prov]),
        reconcile_interval=seconds("reconcileInterval", 60, minimum=10, maximum=3600),
    )
    if not any(p.elastic_count for p in pools):
        return settings
    if settings.resume_timeout <= settings.boot_time:
        c.problem(f"{key}.resumeTimeout", f"{settings.resume_timeout} s does not exceed the "
                  f"node boot time ({key}.bootTime {settings.boot_time} s): Slurm would mark "
                  "every resuming node DOWN before it boots; raise resumeTimeout")
    if settings.suspend_time < settings.boot_time:
        c.problem(f"{key}.suspendTime", f"{settings.suspend_time} s is below the node boot time "
                  f"({key}.bootTime {settings.boot_time} s): nodes would be powered off and on "
                  "again between jobs for longer than they are idle; raise suspendTime")
    return settings


def _parse_storage(c: _Collector, raw: Mapping[str, Any]) -> StorageSettings:
    key = _key("storage")
    item = c.mapping(raw, "storage", key)
    c.unknown_keys(item, _STORAGE_KEYS, key)
    backend = c.string(item, "backend", f"{key}.backend", default="nfs", choices=STORAGE_BACKENDS)
    server = c.string(item, "server", f"{key}.server", default="nfs", pattern=NODE_NAME_RE,
                      what="a host name: lower-case letters, digits and '-'")
    paths = item.get("paths", ["/home", "/shared"])
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        c.problem(f"{key}.paths", "must be a list of absolute directory paths")
        paths = []
    for p in paths:
        if not MOUNT_PATH_RE.match(p) or "//" in p or p.endswith("/") or "/." in p:
            c.problem(f"{key}.paths", f"{p!r} is not a plain absolute path such as /shared")
        elif p in SYSTEM_PATHS or any(p.startswith(f"{s}/") for s in SYSTEM_PATHS
                                      if s not in ("/", "/opt")):
            c.problem(f"{key}.paths", f"{p!r} is a system directory; share a path such as "
                      "/home, /shared or /data")
    c.duplicates(f"{key}.paths", list(paths), "path")
    for a in paths:
        for b in paths:
            if a != b and b.startswith(a + "/"):
                c.problem(f"{key}.paths", f"{b!r} is inside {a!r}: export one or the other")
    if backend == "nfs" and not paths:
        c.problem(f"{key}.paths", "backend nfs needs at least one path")
    return StorageSettings(backend=backend or "nfs", server=server or "nfs", paths=tuple(paths))


def _string_list(c: _Collector, item: Mapping[str, Any], name: str, key: str,
                 pattern: re.Pattern[str], what: str) -> tuple[str, ...]:
    value = item.get(name, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        c.problem(key, f"must be a list of {what}")
        return ()
    for v in value:
        if not pattern.match(v):
            c.problem(key, f"{v!r} is not a valid {what}")
    c.duplicates(key, list(value), what)
    return tuple(value)


def _parse_qos(c: _Collector, value: Any, key: str) -> list[Qos]:
    if value in (None, []):
        return []
    found = []
    for qkey, item in c.mappings(value, key, _QOS_KEYS, "QOS, each with a name"):
        name = c.string(item, "name", f"{qkey}.name", pattern=ACCOUNT_NAME_RE,
                        what="lower-case letters, digits, '_', '.' and '-'")
        priority = c.integer(item, "priority", f"{qkey}.priority", default=0, minimum=0,
                             maximum=2**31 - 1)
        limits = c.mapping(item, "limits", f"{qkey}.limits")
        for field_name, limit in limits.items():
            if field_name not in QOS_LIMIT_FIELDS:
                c.problem(f"{qkey}.limits.{field_name}", "not a QOS field metalslurm knows; "
                          f"use one of: {', '.join(QOS_LIMIT_FIELDS)}")
            elif (isinstance(limit, bool) or not isinstance(limit, (str, int))
                  or any(ch.isspace() for ch in str(limit)) or str(limit) == ""):
                c.problem(f"{qkey}.limits.{field_name}", f"{limit!r} must be a number or a "
                          "string without spaces, e.g. gres/gpu=43200")
        description = c.string(item, "description", f"{qkey}.description", default="")
        if name is not None and priority is not None:
            found.append(Qos(name, priority, dict(limits), description or ""))
    c.duplicates(key, [q.name for q in found], "QOS name")
    return found


def _parse_accounting(c: _Collector, raw: Mapping[str, Any]) -> AccountingSettings:
    key = _key("accounting")
    item = c.mapping(raw, "accounting", key)
    c.unknown_keys(item, _ACCOUNTING_KEYS, key)
    db = c.mapping(item, "database", f"{key}.database")
    c.unknown_keys(db, _DATABASE_KEYS, f"{key}.database")
    db_host = c.string(db, "host", f"{key}.database.host", default="",
                       pattern=re.compile(r"^[A-Za-z0-9.-]*$"), what="a host name or address")
    db_port = c.integer(db, "port", f"{key}.database.port", default=3306, minimum=1,
                        maximum=65535)
    db_name = c.string(db, "name", f"{key}.database.name", default="slurm_acct_db",
                       pattern=re.compile(r"^[A-Za-z0-9_]{1,64}$"),
                       what="letters, digits and '_'")
    db_user = c.string(db, "user", f"{key}.database.user", default="slurm",
                       pattern=re.compile(r"^[A-Za-z0-9_]{1,32}$"),
                       what="letters, digits and '_'")
    qos = _parse_qos(c, item.get("qos"), f"{key}.qos")
    known_qos = {q.name for q in qos} | {"normal"}
    accounts: list[Account] = []
    raw_accounts = item.get("accounts")
    if raw_accounts not in (None, []):
        for akey, acc in c.mappings(raw_accounts, f"{key}.accounts", _ACCOUNT_KEYS,
                                    "accounts, each with a name"):
            name = c.string(acc, "name", f"{akey}.name", pattern=ACCOUNT_NAME_RE,
                            what="lower-case letters, digits, '_', '.' and '-'")
            if name == "root":
                c.problem(f"{akey}.name", "'root' is Slurm's own top account; choose another "
                          "name")
            users = _string_list(c, acc, "users", f"{akey}.users", USER_NAME_RE, "user name")
            fairshare = c.integer(acc, "fairshare", f"{akey}.fairshare", default=1, minimum=1,
                                  maximum=2**31 - 1)
            acc_qos = _string_list(c, acc, "qos", f"{akey}.qos", ACCOUNT_NAME_RE, "QOS name")
            for q in acc_qos:
                if q not in known_qos:
                    c.problem(f"{akey}.qos", f"{q!r} is not defined in {key}.qos (defined: "
                              f"{', '.join(sorted(known_qos))})")
            default_qos = acc.get("defaultQos")
            if default_qos is not None and default_qos not in (acc_qos or ("normal",)):
                c.problem(f"{akey}.defaultQos", f"{default_qos!r} must be one of the account's "
                          f"qos: {', '.join(acc_qos or ('normal',))}")
            description = c.string(acc, "description", f"{akey}.description", default="")
            if name is not None and fairshare is not None:
                accounts.append(Account(name, users, fairshare, acc_qos, default_qos,
                                        description or ""))
        c.duplicates(f"{key}.accounts", [a.name for a in accounts], "account name")
    prune = c.boolean(item, "prune", f"{key}.prune", True)
    return AccountingSettings(database_host=db_host or None, database_port=db_port or 3306,
                              database_name=db_name or "slurm_acct_db",
                              database_user=db_user or "slurm", accounts=tuple(accounts),
                              qos=tuple(qos), prune=prune)


def _parse_users(c: _Collector, raw: Mapping[str, Any]) -> list[UnixUser]:
    key = _key("users")
    value = raw.get("users")
    if value in (None, []):
        return []
    users = []
    for ukey, item in c.mappings(value, key, ("name", "uid"), "users, each with name and uid"):
        name = c.string(item, "name", f"{ukey}.name", pattern=USER_NAME_RE,
                        what="a login name: lower-case letters, digits, '_' and '-'")
        uid = c.integer(item, "uid", f"{ukey}.uid", default=None, minimum=1000, maximum=59999)
        if name is not None and uid is not None:
            users.append(UnixUser(name, uid))
    c.duplicates(key, [u.name for u in users], "user name")
    c.duplicates(key, [str(u.uid) for u in users], "uid")
    return users


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
    elastic = _parse_elastic(c, raw, provider, pools)
    storage = _parse_storage(c, raw)
    accounting = _parse_accounting(c, raw)
    users = _parse_users(c, raw)
    configure = c.boolean(raw, "configure", _key("configure"), False)
    secrets = {k: _secret_present(c, raw, k) for k in SECRET_KEYS}
    byo, pools = _parse_byo(c, raw, provider, cidr, controller_name, storage, pools, secrets)
    oci, pools = _parse_oci(c, raw, provider, cidr, pools, secrets)

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
    if storage.backend == "nfs":
        node_names.append(storage.server)
    for dup in sorted({n for n in node_names if node_names.count(n) > 1}):
        c.problem(_key("computePools"), f"node name {dup!r} would be used by two nodes; "
                  "rename the controller, the storage server or the pool")
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
        elastic=elastic,
        storage=storage,
        accounting=accounting,
        users=tuple(users),
        configure=configure,
        byo=byo,
        oci=oci,
    )

# ---- provider byo (existing bare metal) and oci (OCI bare-metal GPU shapes) -------------

BYO_ROLES = ("controller", "nfs", "compute")
BMC_DRIVERS = ("redfish", "ipmi")
OCI_ELASTIC_MODES = ("launch-terminate", "start-stop")
# Stack keys that hold secrets: set with 'pulumi config set --secret', so a stack file
# holds them as {secure: v1:...}; the Pulumi program reads them with get_secret.
SECRET_KEYS = ("sshPrivateKey", "bmcCredentials")
# OCI bare-metal GPU shapes: (GPU type, GPUs per node). CPU shapes (VM./BM.Standard...)
# have no GPUs.
OCI_GPU_SHAPES: dict[str, tuple[str, int]] = {
    "BM.GPU.H100.8": ("h100", 8),
    "BM.GPU.H200.8": ("h200", 8),
    "BM.GPU.B200.8": ("b200", 8),
    "BM.GPU.A100-v2.8": ("a100", 8),
    "BM.GPU4.8": ("a100", 8),
    "BM.GPU.A10.4": ("a10", 4),
    "BM.GPU.L40S.4": ("l40s", 4),
    "BM.GPU.MI300X.8": ("mi300x", 8),
}
OCI_CPU_SHAPE_RE = re.compile(r"^(VM|BM)\.Standard[A-Za-z0-9.]*$")
OCID_RE = re.compile(r"^ocid1\.[a-z0-9]+\.[a-z0-9-]*\.[a-z0-9-]*\.[a-z0-9]+$")
OCI_REGION_RE = re.compile(r"^[a-z]{2}-[a-z]+-\d$")
_BYO_KEYS = ("sshUser", "bastion", "hosts", "checkHosts")
_BYO_BASTION_KEYS = ("address", "user")
_BYO_HOST_KEYS = ("name", "role", "address", "publicAddress", "pool", "elastic", "gpuType",
                  "gpuCount", "bmc")
_BMC_KEYS = ("driver", "endpoint", "systemId", "verifyTls", "address", "port")
_OCI_KEYS = ("region", "compartmentId", "availabilityDomain", "imageId", "vcnCidr",
             "bastionSubnetCidr", "adminCidr", "sshUser", "sshPublicKey", "controllerShape",
             "nfsShape", "bastionShape", "elasticMode", "bootVolumeGbs")
HOST_ADDRESS_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$")


@dataclass(frozen=True)
class BmcSettings:
    """How to power a bring-your-own host: its BMC, by Redfish or IPMI (no credentials)."""

    driver: str
    endpoint: str
    system_id: str | None = None
    verify_tls: bool = True
    port: int = 623

    def power(self) -> dict[str, Any]:
        """The inventory's ``metalslurm_power`` mapping (non-secret parameters only)."""
        if self.driver == "redfish":
            power: dict[str, Any] = {"driver": "redfish", "endpoint": self.endpoint,
                                     "verify_tls": self.verify_tls}
            if self.system_id:
                power["system_id"] = self.system_id
            return power
        return {"driver": "ipmi", "address": self.endpoint, "port": self.port}


@dataclass(frozen=True)
class ByoHost:
    """An existing machine, given by name and private address."""

    name: str
    role: str
    address: str
    public_address: str | None = None
    pool: str | None = None
    elastic: bool = False
    bmc: BmcSettings | None = None


@dataclass(frozen=True)
class ByoSettings:
    ssh_user: str = "root"
    bastion: str | None = None
    bastion_user: str | None = None
    hosts: tuple[ByoHost, ...] = ()
    check_hosts: bool = True

    def host(self, name: str) -> ByoHost:
        return next(h for h in self.hosts if h.name == name)


@dataclass(frozen=True)
class OciSettings:
    region: str
    compartment_id: str
    availability_domain: str
    image_id: str
    vcn_cidr: ipaddress.IPv4Network
    bastion_subnet_cidr: ipaddress.IPv4Network
    admin_cidr: ipaddress.IPv4Network
    ssh_public_key: str
    ssh_user: str = "ubuntu"
    controller_shape: str = "VM.Standard.E5.Flex"
    nfs_shape: str = "VM.Standard.E5.Flex"
    bastion_shape: str = "VM.Standard.E5.Flex"
    elastic_mode: str = "launch-terminate"
    boot_volume_gbs: int = 200


def _secret_present(c: _Collector, raw: Mapping[str, Any], name: str) -> bool:
    """A secret key is present as ``{secure: ...}`` (opaque here); plain text is refused."""
    if name not in raw or raw[name] is None:
        return False
    value = raw[name]
    if isinstance(value, Mapping) and set(value) == {"secure"} and isinstance(value["secure"], str):
        return True
    c.problem(_key(name), "is a secret but is stored in plain text; set it with "
              f"'pulumi config set --secret {_key(name)} ...'")
    return True


def _network(c: _Collector, item: Mapping[str, Any], name: str, key: str,
             private: bool = True) -> ipaddress.IPv4Network | None:
    value = c.string(item, name, key)
    if value is None:
        return None
    try:
        net = ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        c.problem(key, f"{value!r} is not a valid network in CIDR notation ({exc})")
        return None
    if not isinstance(net, ipaddress.IPv4Network):
        c.problem(key, f"{value!r} must be an IPv4 network")
        return None
    if private and not net.is_private:
        c.problem(key, f"{value!r} is not a private range")
        return None
    return net


def _parse_bmc(c: _Collector, value: Any, key: str) -> BmcSettings | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        c.problem(key, "must be a mapping with driver (redfish or ipmi) and endpoint/address")
        return None
    c.unknown_keys(value, _BMC_KEYS, key)
    driver = c.string(value, "driver", f"{key}.driver", choices=BMC_DRIVERS)
    verify = c.boolean(value, "verifyTls", f"{key}.verifyTls", True)
    if driver == "redfish":
        endpoint = c.string(value, "endpoint", f"{key}.endpoint",
                            pattern=re.compile(r"^https://[A-Za-z0-9.:\[\]-]+(:\d+)?/?$"),
                            what="the BMC's Redfish URL, e.g. https://10.0.1.21")
        system_id = c.string(value, "systemId", f"{key}.systemId", default="",
                             pattern=re.compile(r"^(/redfish/v1/Systems/[^\s]+)?$"),
                             what="a Redfish system path, e.g. /redfish/v1/Systems/1")
        if endpoint is None:
            return None
        return BmcSettings("redfish", endpoint.rstrip("/"), system_id or None, verify)
    if driver == "ipmi":
        address = c.string(value, "address", f"{key}.address", pattern=HOST_ADDRESS_RE,
                           what="the BMC's address or host name")
        port = c.integer(value, "port", f"{key}.port", default=623, minimum=1, maximum=65535)
        if address is None or port is None:
            return None
        return BmcSettings("ipmi", address, None, verify, port)
    return None


def _parse_byo(c: _Collector, raw: Mapping[str, Any], provider: str | None,
               cidr: ipaddress.IPv4Network | None, controller_name: str | None,
               storage: StorageSettings, pools: list[ComputePool],
               secrets: Mapping[str, bool]) -> tuple[ByoSettings | None, list[ComputePool]]:
    """Existing hosts; returns the pools with ``hosts`` set (static hosts first)."""
    key = _key("byo")
    has_key = secrets.get("sshPrivateKey", False)
    has_credentials = secrets.get("bmcCredentials", False)
    if provider != "byo":
        if raw.get("byo") is not None:
            c.problem(key, f"is only read when {_key('provider')} is byo (it is {provider!r})")
        return None, pools
    item = c.mapping(raw, "byo", key)
    if not item:
        c.problem(key, "is required when the provider is byo: list the hosts")
        return None, pools
    c.unknown_keys(item, _BYO_KEYS, key)
    ssh_user = c.string(item, "sshUser", f"{key}.sshUser", default="root", pattern=USER_NAME_RE,
                        what="a login name")
    check = c.boolean(item, "checkHosts", f"{key}.checkHosts", True)
    bastion = c.mapping(item, "bastion", f"{key}.bastion")
    c.unknown_keys(bastion, _BYO_BASTION_KEYS, f"{key}.bastion")
    bastion_address = None
    if bastion:
        bastion_address = c.string(bastion, "address", f"{key}.bastion.address",
                                   pattern=HOST_ADDRESS_RE, what="an address or host name")
    bastion_user = c.string(bastion, "user", f"{key}.bastion.user", default="",
                            pattern=re.compile(r"^([a-z_][a-z0-9_-]{0,31})?$"), what="a login")
    if not has_key:
        c.problem(_key("sshPrivateKey"), "is required for provider byo: 'pulumi config set "
                  f"--secret {_key('sshPrivateKey')} < ~/.ssh/id_ed25519'")
    hosts: list[ByoHost] = []
    pool_by_name = {p.name: p for p in pools}
    for hkey, h in c.mappings(item.get("hosts"), f"{key}.hosts", _BYO_HOST_KEYS,
                              "hosts, each with name, role and address"):
        name = c.string(h, "name", f"{hkey}.name", pattern=NODE_NAME_RE,
                        what="a host name: lower-case letters, digits and '-'")
        role = c.string(h, "role", f"{hkey}.role", default="compute", choices=BYO_ROLES)
        address = c.string(h, "address", f"{hkey}.address")
        if address is not None:
            try:
                ip = ipaddress.IPv4Address(address)
            except ValueError:
                c.problem(f"{hkey}.address", f"{address!r} is not an IPv4 address")
                address = None
            else:
                if cidr is not None and ip not in cidr:
                    c.problem(f"{hkey}.address", f"{address} is outside {_key('privateCidr')} "
                              f"{cidr}: every node must be in the private network")
        public = c.string(h, "publicAddress", f"{hkey}.publicAddress", default="",
                          pattern=re.compile(r"^([A-Za-z0-9][A-Za-z0-9.-]*)?$"),
                          what="an address or host name")
        if public and role == "compute":
            c.problem(f"{hkey}.publicAddress", "compute nodes get no public address: reach "
                      f"them through {key}.bastion or the controller")
        pool_name = h.get("pool")
        elastic = c.boolean(h, "elastic", f"{hkey}.elastic", False)
        bmc = _parse_bmc(c, h.get("bmc"), f"{hkey}.bmc")
        if role == "compute":
            pool = pool_by_name.get(pool_name) if isinstance(pool_name, str) else None
            if pool is None:
                c.problem(f"{hkey}.pool", f"{pool_name!r} is not a pool in "
                          f"{_key('computePools')}: {', '.join(pool_by_name) or 'none'}")
            else:
                gpu_type = h.get("gpuType", pool.gpu_type)
                gpu_count = h.get("gpuCount", pool.gpu_count)
                if gpu_type is not None and gpu_type not in GPU_TYPES:
                    c.problem(f"{hkey}.gpuType", f"{gpu_type!r} is not one of the allowed "
                              f"values: {', '.join(GPU_TYPES)}")
                elif (gpu_type, gpu_count) != (pool.gpu_type, pool.gpu_count):
                    c.problem(f"{hkey}.gpuCount", f"host has {gpu_count} x {gpu_type}, pool "
                              f"{pool.name!r} is {pool.gpu_count} x {pool.gpu_type}: a pool's "
                              "nodes are identical; put the host in a matching pool")
            if elastic and bmc is None:
                c.problem(f"{hkey}.bmc", "an elastic host needs a power driver: give its BMC "
                          "(driver redfish with endpoint, or ipmi with address)")
        else:
            for extra in ("pool", "elastic", "gpuType", "gpuCount", "bmc"):
                if extra in h:
                    c.problem(f"{hkey}.{extra}", f"only compute hosts have {extra}")
        if name is not None and role is not None and address is not None:
            hosts.append(ByoHost(name, role, address, public or None,
                                 pool_name if role == "compute" else None, elastic, bmc))
    hkey = f"{key}.hosts"
    c.duplicates(hkey, [h.name for h in hosts], "host name")
    c.duplicates(hkey, [h.address for h in hosts], "address")
    controllers = [h.name for h in hosts if h.role == "controller"]
    if len(controllers) != 1:
        c.problem(hkey, f"needs exactly one host with role controller, got {len(controllers)}"
                  + (f" ({', '.join(controllers)})" if controllers else ""))
    elif controller_name is not None and controllers[0] != controller_name:
        c.problem(hkey, f"the controller host is named {controllers[0]!r} but "
                  f"{_key('controller')}.name is {controller_name!r}; make them the same")
    nfs = [h.name for h in hosts if h.role == "nfs"]
    if storage.backend == "nfs" and nfs != [storage.server]:
        c.problem(hkey, f"{_key('storage')}.backend is nfs: give exactly one host with role nfs "
                  f"named {storage.server!r} (got {', '.join(nfs) or 'none'})")
    elif storage.backend != "nfs" and nfs:
        c.problem(hkey, f"hosts with role nfs ({', '.join(nfs)}) but {_key('storage')}.backend "
                  "is not nfs")
    if any(h.bmc for h in hosts) and not has_credentials:
        c.problem(_key("bmcCredentials"), "hosts have a BMC but no credentials are set: "
                  f"'pulumi config set --secret --path {_key('bmcCredentials')}.default.username"
                  " ...' (and .password)")
    out = []
    for i, pool in enumerate(pools):
        static = tuple(h.name for h in hosts if h.pool == pool.name and not h.elastic)
        elastic_hosts = tuple(h.name for h in hosts if h.pool == pool.name and h.elastic)
        if len(static) != pool.count:
            c.problem(f"{_key('computePools')}[{i}].count", f"is {pool.count} but {hkey} has "
                      f"{len(static)} static host(s) in pool {pool.name!r}")
        if len(elastic_hosts) != pool.elastic_count:
            c.problem(f"{_key('computePools')}[{i}].elasticCount", f"is {pool.elastic_count} "
                      f"but {hkey} has {len(elastic_hosts)} elastic host(s) in pool "
                      f"{pool.name!r}")
        out.append(replace(pool, hosts=static + elastic_hosts))
    return ByoSettings(ssh_user or "root", bastion_address, bastion_user or None, tuple(hosts),
                       check), out


def oci_shape_gpus(shape: str) -> tuple[str | None, int] | None:
    """(GPU type, count) of an OCI shape metalslurm knows, else None."""
    if shape in OCI_GPU_SHAPES:
        return OCI_GPU_SHAPES[shape]
    if OCI_CPU_SHAPE_RE.match(shape):
        return None, 0
    return None


def _parse_oci(c: _Collector, raw: Mapping[str, Any], provider: str | None,
               cidr: ipaddress.IPv4Network | None, pools: list[ComputePool],
               secrets: Mapping[str, bool]) -> tuple[OciSettings | None, list[ComputePool]]:
    """OCI network plan and shapes; returns the pools with ``shape`` filled in."""
    key = _key("oci")
    if provider != "oci":
        if raw.get("oci") is not None:
            c.problem(key, f"is only read when {_key('provider')} is oci (it is {provider!r})")
        return None, pools
    item = c.mapping(raw, "oci", key)
    c.unknown_keys(item, _OCI_KEYS, key)
    if not secrets.get("sshPrivateKey", False):
        c.problem(_key("sshPrivateKey"), "is required for provider oci (the private half of "
                  f"{key}.sshPublicKey): 'pulumi config set --secret {_key('sshPrivateKey')} "
                  "< ~/.ssh/id_ed25519'")
    region = c.string(item, "region", f"{key}.region", pattern=OCI_REGION_RE,
                      what="an OCI region such as eu-frankfurt-1")
    compartment = c.string(item, "compartmentId", f"{key}.compartmentId", pattern=OCID_RE,
                           what="a compartment OCID (ocid1.compartment.oc1..xxxx)")
    ad = c.string(item, "availabilityDomain", f"{key}.availabilityDomain",
                  pattern=re.compile(r"^[A-Za-z0-9]+:[A-Z0-9-]+-AD-\d$"),
                  what="an availability domain such as Uocm:EU-FRANKFURT-1-AD-1")
    image = c.string(item, "imageId", f"{key}.imageId", pattern=OCID_RE,
                     what="an image OCID (ocid1.image.oc1.<region>.xxxx)")
    ssh_user = c.string(item, "sshUser", f"{key}.sshUser", default="ubuntu",
                        pattern=USER_NAME_RE, what="a login name")
    pubkey = c.string(item, "sshPublicKey", f"{key}.sshPublicKey",
                      pattern=re.compile(r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-\S+) \S+"),
                      what="an OpenSSH public key line")
    shapes = {}
    for name in ("controllerShape", "nfsShape", "bastionShape"):
        shapes[name] = c.string(item, name, f"{key}.{name}", default="VM.Standard.E5.Flex",
                                pattern=OCI_CPU_SHAPE_RE,
                                what="a CPU shape such as VM.Standard.E5.Flex")
    mode = c.string(item, "elasticMode", f"{key}.elasticMode", default="launch-terminate",
                    choices=OCI_ELASTIC_MODES)
    boot = c.integer(item, "bootVolumeGbs", f"{key}.bootVolumeGbs", default=200, minimum=50,
                     maximum=32768)
    vcn = _network(c, item, "vcnCidr", f"{key}.vcnCidr")
    bastion_net = _network(c, item, "bastionSubnetCidr", f"{key}.bastionSubnetCidr")
    admin = _network(c, item, "adminCidr", f"{key}.adminCidr", private=False)
    if vcn is not None and vcn.prefixlen < 16:
        c.problem(f"{key}.vcnCidr", f"{vcn} is larger than OCI allows for a VCN (/16 at most)")
    if vcn is not None and cidr is not None and not cidr.subnet_of(vcn):
        c.problem(f"{key}.vcnCidr", f"{vcn} does not contain {_key('privateCidr')} {cidr}: the "
                  "private subnet must be inside the VCN")
    if bastion_net is not None:
        if vcn is not None and not bastion_net.subnet_of(vcn):
            c.problem(f"{key}.bastionSubnetCidr", f"{bastion_net} is not inside "
                      f"{key}.vcnCidr {vcn}")
        if cidr is not None and bastion_net.overlaps(cidr):
            c.problem(f"{key}.bastionSubnetCidr", f"{bastion_net} overlaps "
                      f"{_key('privateCidr')} {cidr}: the bastion's public subnet must be "
                      "separate from the private one")
        if bastion_net.prefixlen > 29:
            c.problem(f"{key}.bastionSubnetCidr", f"{bastion_net} is too small: use a /29 or "
                      "larger")
    if admin is not None:
        if admin.prefixlen == 0:
            c.problem(f"{key}.adminCidr", "0.0.0.0/0 would open SSH to the whole internet; "
                      "give your office or VPN range")
        elif vcn is not None and admin.overlaps(vcn):
            c.problem(f"{key}.adminCidr", f"{admin} overlaps {key}.vcnCidr {vcn}: it is where "
                      "operators connect from, outside the VCN")
    out = []
    for i, pool in enumerate(pools):
        pkey = f"{_key('computePools')}[{i}]"
        shape = pool.shape
        if shape is None:
            shape = next((s for s, g in OCI_GPU_SHAPES.items()
                          if g == (pool.gpu_type, pool.gpu_count)), None)
            if shape is None:
                c.problem(f"{pkey}.shape", f"no OCI shape has {pool.gpu_count} x "
                          f"{pool.gpu_type}; set shape (GPU shapes: "
                          f"{', '.join(OCI_GPU_SHAPES)})")
                continue
        gpus = oci_shape_gpus(shape)
        if gpus is None:
            c.problem(f"{pkey}.shape", f"{shape!r} is not a shape metalslurm knows: "
                      f"{', '.join(OCI_GPU_SHAPES)} or a VM./BM.Standard CPU shape")
        elif gpus != (pool.gpu_type, pool.gpu_count):
            c.problem(f"{pkey}.gpuCount", f"pool says {pool.gpu_count} x {pool.gpu_type}, but "
                      f"shape {shape} has {gpus[1]} x {gpus[0]}")
        out.append(replace(pool, shape=shape))
    if c.problems or None in (region, compartment, ad, image, pubkey, vcn, bastion_net, admin):
        return None, out
    assert region and compartment and ad and image and pubkey and vcn and bastion_net and admin
    return OciSettings(
        region=region, compartment_id=compartment, availability_domain=ad, image_id=image,
        vcn_cidr=vcn, bastion_subnet_cidr=bastion_net, admin_cidr=admin,
        ssh_public_key=pubkey, ssh_user=ssh_user or "ubuntu",
        controller_shape=shapes["controllerShape"] or "VM.Standard.E5.Flex",
        nfs_shape=shapes["nfsShape"] or "VM.Standard.E5.Flex",
        bastion_shape=shapes["bastionShape"] or "VM.Standard.E5.Flex",
        elastic_mode=mode or "launch-terminate", boot_volume_gbs=boot or 200), out


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
