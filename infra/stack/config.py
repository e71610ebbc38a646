"""Stack configuration: parse a ``Pulumi.<stack>.yaml`` file into frozen dataclasses.

One parser serves the Pulumi program, ``metalslurm config validate`` and ``metalslurm
local up``. Every top-level key, its default and its description live in one table,
:data:`STACK_KEYS`: the parser fills absent keys from it, ``Pulumi.yaml`` declares the
defaults Pulumi can type from it (``tests/pulumi/test_reference.py`` keeps them equal),
and docs/reference/config.md documents it. Every problem in a config is collected and reported
together (:class:`~infra.stack.schema.ConfigError`), each naming the key that has to change,
and every check that can run before a machine exists runs here.

Each section has its module beside this one (``infra/stack/<section>.py``), the
providers' sections too (``local.py``, ``byo.py``, ``oci.py``); the types those sections
share with this module (compute pools, partitions, elastic, storage) are in
``cluster_types.py``, which imports no section, so no section imports this module.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.cluster_defaults import (
    ACCEPT_DEFAULTS,
    DEFAULT_JOB_TIME,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.elastic import (
    PROVIDER_DEFAULTS as ELASTIC_DEFAULTS,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.operating_systems import (
    OS_IDS,
    by_id,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.slurmconf import (
    SlurmConfError,
    shorter_time,
    slurm_time_seconds,
    slurm_value,
)

from infra.stack.accept import parse_accept
from infra.stack.accounting import AccountingSettings, parse_accounting
from infra.stack.byo import ByoSettings, parse_byo
from infra.stack.cluster_types import (
    ComputePool,
    ElasticSettings,
    Partition,
    StorageSettings,
)
from infra.stack.containers import ContainerSettings, parse_containers
from infra.stack.gpu import GpuSettings, parse_gpu
from infra.stack.health import HealthSettings, parse_health
from infra.stack.inputs import InputError, load_yaml_argument, text_file_problem, type_name
from infra.stack.local import LocalSettings, parse_local
from infra.stack.login import LoginSettings, parse_login
from infra.stack.monitoring import MonitoringSettings, parse_monitoring
from infra.stack.nccl import NcclConfig, parse_nccl
from infra.stack.oci import OciSettings, parse_oci
from infra.stack.rest import RestSettings, parse_rest
from infra.stack.schema import (
    GPU_TYPES,
    MAX_GPUS_PER_NODE,
    MAX_NODES_PER_POOL,
    NAMESPACE,
    NODE_NAME_RE,
    Collector,
    ConfigError,
    gpu_type_problem,
    key,
)
from infra.stack.topology import TopologySettings, parse_topology_settings
from infra.stack.users import (
    AccessSettings,
    UnixGroup,
    UnixUser,
    check_login_user,
    parse_users,
)

__all__ = ["ClusterConfig", "ConfigError", "STACK_KEYS", "load_stack_file", "parse_config"]

PROVIDERS = ("local", "byo", "oci")

# Slurm ClusterName doubles as a prefix for accounting tables and container names.
CLUSTER_NAME_RE = re.compile(r"^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$")
POOL_NAME_RE = re.compile(r"^[a-z]([a-z0-9-]{0,14}[a-z0-9])?$")
PARTITION_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,30}$")
# Shared file systems are mounted at absolute paths without spaces.
MOUNT_PATH_RE = re.compile(r"^/[A-Za-z0-9._/-]+$")
STORAGE_BACKENDS = ("nfs", "none")
# The power-saving timings' defaults, by provider, are the collection's table
# (module_utils/elastic.py, imported here as ELASTIC_DEFAULTS), which the roles read for
# hand-written inventories too.
# First host addresses kept free in the private subnet (gateway and friends).
RESERVED_HOST_ADDRESSES = 9
# DEFAULT_JOB_TIME (module_utils/cluster_defaults.py, as slurm_controller_default_time for
# hand-written inventories): the time limit of a job submitted without --time to a partition
# whose defaultTime is not given (capped at the partition's maxTime).
# Stack keys that hold secrets: set with 'pulumi config set --secret', so a stack file
# holds them as {secure: v1:...}; the Pulumi program reads them with get_secret.
SECRET_KEYS = ("sshPrivateKey", "bmcCredentials", "registryCredentials", "alertSecrets")
# The secrets 'pulumi up' reads from the stack that 'metalslurm up' (a byo stack without the
# engine) takes as files on its command line instead (--ssh-key, --bmc-credentials).
SECRETS_AS_FILES = ("sshPrivateKey", "bmcCredentials")

# The shared research cluster of the seed guide: a short debug queue (one node per job),
# the default train queue, and a priority queue whose jobs preempt (requeue) train and
# debug jobs (PreemptType=preempt/partition_prio compares PriorityTier). Every partition
# has a DefaultTime, so a job without --time gets a bounded limit that GPU-minute budgets
# (AccountingStorageEnforce=safe) can be checked against.
DEFAULT_PARTITIONS: list[dict[str, Any]] = [
    {"name": "debug", "maxTime": "2:00:00", "defaultTime": "30:00",
     "options": {"MaxNodes": 1, "PriorityTier": 1}},
    {"name": "train", "default": True, "maxTime": "7-00:00:00", "defaultTime": "1-00:00:00",
     "options": {"PriorityTier": 1}},
    {"name": "priority", "maxTime": "30-00:00:00", "defaultTime": "1-00:00:00",
     "options": {"PriorityTier": 2, "PriorityJobFactor": 2}},
]
DEFAULT_POOLS: list[dict[str, Any]] = [{"name": "gpu", "count": 2, "gpuType": "h100",
                                        "gpuCount": 8}]


@dataclass(frozen=True)
class StackKey:
    """A top-level ``metalslurm:<name>`` key.

    ``default`` is in stack-file form (what the parser reads when the key is absent;
    None: no default). ``pulumi_type`` is set for the keys Pulumi's project schema can
    declare (string, integer and boolean; it has no object type, and arrays of objects
    cannot be typed), so ``Pulumi.yaml`` declares exactly those, with these defaults.
    """

    name: str
    description: str
    default: Any = None
    pulumi_type: str | None = None
    secret: bool = False


STACK_KEYS: tuple[StackKey, ...] = (
    StackKey("clusterName", "Slurm ClusterName and prefix of every machine; lower-case "
             "letters, digits and '-'.", "metalslurm", "string"),
    StackKey("provider", "Where the machines come from - local (podman nodes on this machine), "
             "byo (existing bare metal), oci (OCI bare-metal GPU shapes).", "local", "string"),
    StackKey("privateCidr", "Private IPv4 network of the cluster (/28 or larger). The "
             "controller gets host .10 (a backup controller .9), compute nodes .11 onwards.",
             "10.77.0.0/24", "string"),
    StackKey("os", f"Node operating system - {', '.join(OS_IDS)}. "
             "local: the image it builds (Debian only); byo: what every host must run; oci: "
             "what the imageId image is.", "debian13", "string"),
    StackKey("controller", "The controller - name (host name, default ctl), backup (the host "
             "name of a backup slurmctld that takes over when the controller is lost; none by "
             "default; docs/how-to/failover.md).", {}),
    StackKey("login", "Login nodes users SSH to and submit from - count, name (prefix), "
             "shape (oci). byo: its hosts with role login.", {}),
    StackKey("computePools", "Compute pools - name, count, elasticCount, gpuType, gpuCount, "
             "shape.", DEFAULT_POOLS),
    StackKey("partitions", "Slurm partitions - name, pools, default, maxTime, defaultTime, "
             "options.", DEFAULT_PARTITIONS),
    StackKey("slurmConf", "Extra slurm.conf settings merged over the defaults (null removes "
             "one).", {}),
    StackKey("local", "Local provider only - imageSource, mirror.", {}),
    StackKey("elastic", "Power saving for elastic nodes - suspendTime, suspendTimeout, "
             "resumeTimeout, bootTime, resumeRate, suspendRate, reconcileInterval, "
             "orphanAfter.", {}),
    StackKey("storage", "Shared file systems - backend, server, paths.", {}),
    StackKey("accounting", "slurmdbd accounting - database, accounts, qos, prune.", {}),
    StackKey("users", "Unix users with one UID everywhere - [{name, uid, sshKeys, admin, "
             "groups}].", []),
    StackKey("groups", "Unix groups with one GID everywhere - [{name, gid}].", []),
    StackKey("access", "Who may log in where - adminGroup, adminGid.", {}),
    StackKey("containers", "Enroot and Pyxis (containers in jobs) - enabled, mirror, "
             "pinnedOnly, artifacts, storageDir, cacheDir, runSize, pyxis, credentialsFile.",
             {}),
    StackKey("topology", "Slurm's switch topology (topology.conf) - plugin, source (config or "
             "ibnetdiscover), leaves, spines, blockSizes, discovery."),
    StackKey("nccl", "NCCL settings written to /etc/nccl.conf over the ones derived from each "
             "node's HCAs - enabled, settings, socketIfname (GPUDirect RDMA follows "
             "metalslurm:gpu's gpudirect).", {}),
    StackKey("health", "The node health checker Slurm runs (HealthCheckProgram) - enabled, "
             "interval, nodeState, checkTimeout, xidWindow, maxEccUncorrected, ibRateGbps, "
             "minFreeTmpMib, minFreeCacheMib.", {}),
    StackKey("monitoring", "Prometheus, Alertmanager and the exporters - enabled, host, "
             "scrapeInterval, exporterInterval, retentionTime, retentionSize, "
             "pendingThreshold, diskFreeRatio, groupWait, groupInterval, repeatInterval, "
             "receivers (webhook, slack, email), secretsFile.", {}),
    StackKey("rest", "Slurm's REST API (slurmrestd, JWT tokens) - enabled, port, "
             "listenAddress, maxTokenLifespan.", {}),
    StackKey("accept", "The acceptance gate (metalslurm accept) - gate, level, "
             "historyDays, fleetFraction, minSamples, maxRounds, hcaType, hcas, gpudirect, "
             "path, timeouts, thresholds.", {}),
    StackKey("gpu", "The NVIDIA driver stack on GPU nodes - mode (install, preinstalled, off), "
             "branch, version, fabricManager, fabricManagerVersion, dcgm, dcgmVersion, "
             "dcgmExporterVersion, gpudirect, "
             "containerToolkit, mig, rebootPolicy, repository, containerToolkitRepository.", {}),
    StackKey("configure", "Run ansible/site.yml on the exported inventory after provisioning "
             "(and again when it changes).", False, "boolean"),
    StackKey("byo", "byo provider only - sshUser, bastion, checkHosts, openFirewall, hosts."),
    StackKey("oci", "oci provider only - region, compartmentId, availabilityDomain, imageId, "
             "networks, shapes, elasticMode, bootVolumeGbs."),
    StackKey("sshPrivateKey", "byo and oci - the SSH private key Pulumi and Ansible log in "
             "with.", secret=True),
    StackKey("bmcCredentials", "byo - BMC logins, {<node> or default: {username, password}}.",
             secret=True),
    StackKey("registryCredentials", "Container registry logins written into each cluster "
             "user's Enroot credentials - [{host, login, password}].", secret=True),
    StackKey("alertSecrets", "The alert receivers' credentials - {<receiver>: {url} for a "
             "webhook or Slack, {password} for e-mail with a username}.", secret=True),
)
TOP_KEYS = tuple(k.name for k in STACK_KEYS)
DEFAULTS: dict[str, Any] = {k.name: k.default for k in STACK_KEYS if k.default is not None}

_POOL_KEYS = ("name", "count", "elasticCount", "gpuType", "gpuCount", "shape")
_PARTITION_KEYS = ("name", "pools", "default", "maxTime", "defaultTime", "options")
# PartitionName settings metalslurm writes from the partition's own keys.
_PARTITION_MANAGED = {"PartitionName": "name", "Nodes": "pools", "Default": "default",
                      "MaxTime": "maxTime", "DefaultTime": "defaultTime"}
_ELASTIC_KEYS = ("suspendTime", "suspendTimeout", "resumeTimeout", "resumeRate", "suspendRate",
                 "bootTime", "reconcileInterval", "orphanAfter")
_STORAGE_KEYS = ("backend", "server", "paths")
# Directories a shared file system must never be mounted over.
SYSTEM_PATHS = ("/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/opt", "/proc",
                "/root", "/run", "/sbin", "/sys", "/tmp", "/usr", "/var")



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
    groups: tuple[UnixGroup, ...] = ()
    access: AccessSettings = field(default_factory=AccessSettings)
    containers: ContainerSettings = field(default_factory=ContainerSettings)
    topology: TopologySettings | None = None
    nccl: NcclConfig = field(default_factory=NcclConfig)
    health: HealthSettings = field(default_factory=HealthSettings)
    gpu: GpuSettings = field(default_factory=GpuSettings)
    monitoring: MonitoringSettings = field(default_factory=MonitoringSettings)
    rest: RestSettings = field(default_factory=RestSettings)
    login: LoginSettings = field(default_factory=LoginSettings)
    configure: bool = False
    # metalslurm:controller.backup: the backup slurmctld's host name, or None.
    controller_backup: str | None = None
    byo: ByoSettings | None = None
    oci: OciSettings | None = None
    # metalslurm:accept, checked, as the inventory's metalslurm_accept (infra/stack/accept.py)
    accept: Mapping[str, Any] = field(default_factory=lambda: dict(ACCEPT_DEFAULTS))
    # The ``config:`` mapping it was parsed from and the directory its relative paths are
    # read from (a prepared image's builder stack is made from its install sections).
    source: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    base_dir: Path | None = field(default=None, compare=False, repr=False)

    def elastic_node_names(self) -> list[str]:
        return [n for pool in self.compute_pools for n in pool.elastic_names()]

    @property
    def submit_host(self) -> str:
        """Where users submit jobs: the first login node, else the controller."""
        return (self.login.names() or [self.controller_name])[0]


def _parse_cidr(c: Collector, raw: Mapping[str, Any]) -> ipaddress.IPv4Network | None:
    where = key("privateCidr")
    value = c.string(raw, "privateCidr", where)
    if value is None:
        return None
    try:
        net = ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        c.problem(where, f"{value!r} is not a valid network in CIDR notation ({exc}); "
                  "example: 10.77.0.0/24")
        return None
    if not isinstance(net, ipaddress.IPv4Network):
        c.problem(where, f"{value!r} must be an IPv4 network")
        return None
    if not net.is_private:
        c.problem(where, f"{value!r} is not a private range (use 10.0.0.0/8, 172.16.0.0/12 or "
                  "192.168.0.0/16)")
        return None
    if net.prefixlen > 28:
        c.problem(where, f"{value!r} is too small: use a /28 or larger")
        return None
    return net


def _parse_pool(c: Collector, pkey: str, item: Mapping[str, Any]) -> ComputePool | None:
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
    if gpu_type is not None and gpu_type_problem(gpu_type):
        c.problem(f"{pkey}.gpuType", str(gpu_type_problem(gpu_type)))
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
    if name is None or count is None or gpu_count is None or elastic is None:
        return None
    return ComputePool(name, count, gpu_type, gpu_count, elastic_count=elastic,
                       shape=shape or None)


def _parse_pools(c: Collector, raw: Mapping[str, Any]) -> list[ComputePool]:
    where = key("computePools")
    pools = [p for pkey, item in c.mappings(raw.get("computePools"), where, _POOL_KEYS,
                                            "pools, each with name and count")
             if (p := _parse_pool(c, pkey, item)) is not None]
    c.duplicates(where, [p.name for p in pools], "pool name")
    if pools and sum(p.count + p.elastic_count for p in pools) == 0:
        c.problem(where, "the cluster needs at least one compute node (every count and "
                  "elasticCount is 0)")
    return pools


def _time(c: Collector, item: Mapping[str, Any], name: str, where: str,
          default: str | None) -> tuple[str | None, int | None]:
    """A Slurm time limit and its seconds (None for UNLIMITED)."""
    value = c.string(item, name, where, default=default)
    if value is None:
        return None, None
    try:
        return value, slurm_time_seconds(value)
    except SlurmConfError:
        c.problem(where, f"{value!r} is not valid: a Slurm time such as 30 (minutes), 2:00:00, "
                  "7-00:00:00 or UNLIMITED")
        return None, None


def _check_options(c: Collector, options: Mapping[str, Any], where: str,
                   managed: Mapping[str, str] | None = None) -> None:
    """Every key a Slurm setting name, every value one slurm.conf can hold unquoted."""
    for name, value in options.items():
        if not isinstance(name, str) or not name.isidentifier():
            c.problem(where, f"{name!r} is not a Slurm setting name")
        elif managed and name.lower() in {m.lower() for m in managed}:
            own = next(v for m, v in managed.items() if m.lower() == name.lower())
            c.problem(f"{where}.{name}", f"is written from the partition's own {own!r}; set "
                      "that instead")
        elif value is not None:
            try:
                slurm_value(value)
            except SlurmConfError as exc:
                c.problem(f"{where}.{name}", str(exc))


def _parse_partition(c: Collector, pkey: str, item: Mapping[str, Any],
                     pool_names: set[str], budgets: list[str]) -> Partition | None:
    name = c.string(item, "name", f"{pkey}.name", pattern=PARTITION_NAME_RE,
                    what="lower-case letters, digits, '-' and '_', starting with a letter")
    default = c.boolean(item, "default", f"{pkey}.default", False)
    max_time, max_seconds = _time(c, item, "maxTime", f"{pkey}.maxTime", "UNLIMITED")
    fallback = shorter_time(DEFAULT_JOB_TIME, max_time or "UNLIMITED")
    default_time, default_seconds = _time(c, item, "defaultTime", f"{pkey}.defaultTime",
                                          fallback)
    if default_time is not None and max_time is not None and max_seconds is not None and (
            default_seconds is None or default_seconds > max_seconds):
        c.problem(f"{pkey}.defaultTime", f"{default_time} is longer than maxTime {max_time}: a "
                  "job that gives no --time would get more than the partition allows")
    elif default_time in ("UNLIMITED", "INFINITE") and budgets:
        c.problem(f"{pkey}.defaultTime", f"is {default_time} but QOS {', '.join(budgets)} limit "
                  "TRES-minutes: a job submitted without --time would be held forever; give a "
                  "time such as 1-00:00:00")
    options = c.mapping(item, "options", f"{pkey}.options")
    _check_options(c, options, f"{pkey}.options", _PARTITION_MANAGED)
    raw_pools = item.get("pools", [])
    if not isinstance(raw_pools, list) or not all(isinstance(p, str) for p in raw_pools):
        c.problem(f"{pkey}.pools", "must be a list of pool names")
        raw_pools = []
    for p in raw_pools:
        if p not in pool_names:
            c.problem(f"{pkey}.pools", f"{p!r} is not a pool in {key('computePools')}: "
                      f"{', '.join(sorted(pool_names)) or 'none'}")
    if name is None or max_time is None or default_time is None:
        return None
    return Partition(name, tuple(raw_pools), default, max_time, default_time, dict(options))


def _parse_partitions(c: Collector, raw: Mapping[str, Any], pools: list[ComputePool],
                      budgets: list[str]) -> list[Partition]:
    where = key("partitions")
    pool_names = {p.name for p in pools}
    parts = [p for pkey, item in c.mappings(raw.get("partitions"), where, _PARTITION_KEYS,
                                            "partitions, each with a name")
             if (p := _parse_partition(c, pkey, item, pool_names, budgets)) is not None]
    c.duplicates(where, [p.name for p in parts], "partition name")
    defaults = [p.name for p in parts if p.default]
    if len(defaults) > 1:
        c.problem(where, f"only one partition may be the default, got {', '.join(defaults)}")
    return parts


def _parse_elastic(c: Collector, raw: Mapping[str, Any], provider: str | None,
                   pools: list[ComputePool]) -> ElasticSettings:
    where = key("elastic")
    item = c.mapping(raw, "elastic", where)
    c.unknown_keys(item, _ELASTIC_KEYS, where)
    d = ELASTIC_DEFAULTS[provider if provider in ELASTIC_DEFAULTS else "local"]

    def seconds(name: str, default: int, minimum: int = 1, maximum: int = 86400 * 30) -> int:
        value = c.integer(item, name, f"{where}.{name}", default=default, minimum=minimum,
                          maximum=maximum)
        return default if value is None else value

    resume_timeout = seconds("resumeTimeout", d["resume_timeout"])
    settings = ElasticSettings(
        suspend_time=seconds("suspendTime", d["suspend_time"]),
        suspend_timeout=seconds("suspendTimeout", d["suspend_timeout"]),
        resume_timeout=resume_timeout,
        resume_rate=seconds("resumeRate", d["resume_rate"], minimum=0, maximum=100000),
        suspend_rate=seconds("suspendRate", d["suspend_rate"], minimum=0, maximum=100000),
        boot_time=seconds("bootTime", d["boot_time"]),
        reconcile_interval=seconds("reconcileInterval", d["reconcile_interval"], minimum=10,
                                   maximum=3600),
        # Left out, it follows the resumeTimeout in force (module_utils/elastic.py).
        orphan_after=seconds("orphanAfter", resume_timeout, minimum=0),
    )
    if not any(p.elastic_count for p in pools):
        return settings
    if settings.resume_timeout <= settings.boot_time:
        c.problem(f"{where}.resumeTimeout", f"{settings.resume_timeout} s does not exceed the "
                  f"node boot time ({where}.bootTime {settings.boot_time} s): Slurm would mark "
                  "every resuming node DOWN before it boots; raise resumeTimeout")
    if settings.suspend_time < settings.boot_time:
        c.problem(f"{where}.suspendTime", f"{settings.suspend_time} s is below the node boot "
                  f"time ({where}.bootTime {settings.boot_time} s): nodes would be powered off "
                  "and on again between jobs for longer than they are idle; raise suspendTime")
    if settings.orphan_after < settings.boot_time:
        c.problem(f"{where}.orphanAfter", f"{settings.orphan_after} s is below the node boot "
                  f"time ({where}.bootTime {settings.boot_time} s): the reconciler would stop "
                  "a machine started by hand before its slurmd can register; raise orphanAfter")
    return settings


def _check_storage_paths(c: Collector, paths: list[str], where: str) -> None:
    for p in paths:
        if not MOUNT_PATH_RE.match(p) or "//" in p or p.endswith("/") or "/." in p:
            c.problem(where, f"{p!r} is not a plain absolute path such as /shared")
        elif p in SYSTEM_PATHS or any(p.startswith(f"{s}/") for s in SYSTEM_PATHS
                                      if s not in ("/", "/opt")):
            c.problem(where, f"{p!r} is a system directory; share a path such as /home, "
                      "/shared or /data")
    c.duplicates(where, list(paths), "path")
    for a in paths:
        for b in paths:
            if a != b and b.startswith(a + "/"):
                c.problem(where, f"{b!r} is inside {a!r}: export one or the other")


def _parse_storage(c: Collector, raw: Mapping[str, Any]) -> StorageSettings:
    where = key("storage")
    item = c.mapping(raw, "storage", where)
    c.unknown_keys(item, _STORAGE_KEYS, where)
    d = StorageSettings()
    backend = c.string(item, "backend", f"{where}.backend", default=d.backend,
                       choices=STORAGE_BACKENDS)
    server = c.string(item, "server", f"{where}.server", default=d.server, pattern=NODE_NAME_RE,
                      what="a host name: lower-case letters, digits and '-'")
    paths = item.get("paths", list(d.paths))
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        c.problem(f"{where}.paths", "must be a list of absolute directory paths")
        paths = []
    _check_storage_paths(c, paths, f"{where}.paths")
    if backend == "nfs" and not paths:
        c.problem(f"{where}.paths", "backend nfs needs at least one path")
    return StorageSettings(backend=backend or d.backend, server=server or d.server,
                           paths=tuple(paths))


def _time_budgets(accounting: AccountingSettings) -> list[str]:
    """The QOS that limit TRES-minutes: 'safe' enforcement holds forever a job whose time
    limit is unbounded under them."""
    return [q.name for q in accounting.qos if any("TRESMins" in f or "TRESRunMins" in f
                                                  for f in q.limits)]


def _check_node_names(c: Collector, pools: list[ComputePool], controller: str | None,
                      storage: StorageSettings, cidr: ipaddress.IPv4Network | None,
                      login: LoginSettings, backup: str | None = None) -> None:
    node_names = [n for p in pools for n in p.node_names()] + login.names()
    if controller is not None:
        node_names.append(controller)
    if backup is not None:
        node_names.append(backup)
    if storage.backend == "nfs":
        node_names.append(storage.server)
    for dup in sorted({n for n in node_names if node_names.count(n) > 1}):
        c.problem(key("computePools"), f"node name {dup!r} would be used by two nodes; "
                  "rename the controller, the storage server, the login nodes or the pool")
    for n in node_names:
        if not NODE_NAME_RE.fullmatch(n):
            c.problem(key("computePools"), f"node name {n!r} is not a valid Slurm node/host "
                      "name")
    if cidr is not None:
        usable = cidr.num_addresses - 2 - RESERVED_HOST_ADDRESSES
        # Login nodes are placed below the last address, which stays the NFS server's.
        needed = len(node_names) + (1 if login.names() and storage.backend != "nfs" else 0)
        if needed > usable:
            c.problem(key("privateCidr"), f"{cidr} has room for {usable} nodes, the config "
                      f"asks for {needed}"
                      + (" (login nodes leave the last address free)"
                         if needed > len(node_names) else "")
                      + "; use a larger network")


def stack_keys(raw_config: Mapping[str, Any]) -> dict[str, Any]:
    """The ``metalslurm:*`` keys of a ``config:`` mapping, by name; other namespaces
    (``oci:region``, ...) belong to providers' own packages and are left out."""
    raw: dict[str, Any] = {}
    for full_key, value in raw_config.items():
        ns, _, name = str(full_key).partition(":")
        if ns == NAMESPACE and name:
            raw[name] = value
    return raw


def parse_config(raw_config: Mapping[str, Any], source: str = "stack config",
                 base_dir: Path | None = None, value: str | None = None,
                 check_artifacts: bool = True,
                 secrets_given: Collection[str] = ()) -> ClusterConfig:
    """Parse the ``config:`` mapping of a stack file (keys ``metalslurm:<name>``).

    ``base_dir``: what relative paths in the config (the container artifacts' mirror) are
    relative to: the stack file's directory (the project directory under Pulumi).
    ``source`` and ``value`` name the config in a :class:`ConfigError` (``--stack`` and
    the file). ``check_artifacts``: check the container artifacts kept on this machine (a
    mirror directory) too; commands that only reach a cluster that exists leave it off.
    ``secrets_given``: secret keys the command line gives as files instead (``metalslurm up``
    without the Pulumi engine: ``--ssh-key``, ``--bmc-credentials``), so the stack need not
    hold them; the command checks its files itself.
    """
    c = Collector()
    given = stack_keys(raw_config)
    c.unknown_keys(given, TOP_KEYS, NAMESPACE)
    raw = {**DEFAULTS, **{k: v for k, v in given.items() if v is not None or k not in DEFAULTS}}

    cluster_name = c.string(raw, "clusterName", key("clusterName"), pattern=CLUSTER_NAME_RE,
                            what="lower-case letters, digits and '-', starting with a letter, "
                            "at most 32 characters")
    provider = c.string(raw, "provider", key("provider"), choices=PROVIDERS)
    # The collection's OS table (module_utils/operating_systems.py) owns the list.
    os_name = c.string(raw, "os", key("os"), choices=OS_IDS)
    cidr = _parse_cidr(c, raw)
    controller = c.mapping(raw, "controller", key("controller"))
    c.unknown_keys(controller, ("name", "backup"), key("controller"))
    controller_name = c.string(controller, "name", f"{key('controller')}.name", default="ctl",
                               pattern=NODE_NAME_RE,
                               what="a host name: lower-case letters, digits and '-'")
    backup_name = _parse_backup_controller(c, controller, raw)

    pools = _parse_pools(c, raw)
    accounting = parse_accounting(c, raw)
    partitions = _parse_partitions(c, raw, pools, _time_budgets(accounting))
    slurm_conf = c.mapping(raw, "slurmConf", key("slurmConf"))
    _check_options(c, slurm_conf, key("slurmConf"))
    elastic = _parse_elastic(c, raw, provider, pools)
    storage = _parse_storage(c, raw)
    if backup_name and provider in ("byo", "oci") and storage.backend != "nfs":
        c.problem(f"{key('controller')}.backup", f"needs the NFS server ({key('storage')}."
                  "backend nfs): the controllers share slurmctld's state over it; set the "
                  "backend to nfs or leave the backup out")
    users, groups, access = parse_users(c, raw)
    containers = parse_containers(c, raw, storage.paths if storage.backend != "none" else (),
                                  base_dir, check_artifacts)
    configure = c.boolean(raw, "configure", key("configure"), False)
    # secret_present first: a secret in plain text is refused whoever gives it as a file.
    secrets = {k: c.secret_present(raw, k) or k in secrets_given for k in SECRET_KEYS}
    if secrets["registryCredentials"] and containers.credentials_file:
        c.problem(key("registryCredentials"), f"and {key('containers')}.credentialsFile are "
                  "both set: keep one")
    local = parse_local(c, raw, provider, os_name)
    login = parse_login(c, raw, provider)
    byo, hosts_by_pool = parse_byo(c, raw, provider, cidr, controller_name, storage, pools,
                                   secrets, login, backup_name)
    if byo is not None:
        login = replace(login, count=len(byo.login_hosts()), hosts=byo.login_hosts())
    oci, shapes = parse_oci(c, raw, provider, cidr, pools, secrets)
    if byo is not None:
        check_login_user(c, users, byo.ssh_user, f"{key('byo')}.sshUser")
    if oci is not None:
        check_login_user(c, users, oci.ssh_user, f"{key('oci')}.sshUser")
    pools = [replace(p, hosts=hosts_by_pool.get(p.name, p.hosts),
                     shape=shapes.get(p.name, p.shape)) for p in pools]
    _check_node_names(c, pools, controller_name, storage, cidr, login, backup_name)
    topology = parse_topology_settings(c, raw, [n for p in pools for n in p.node_names()])
    if topology is not None:
        topology = _resolve_simulator(c, topology, provider, base_dir)
    nccl = parse_nccl(c, raw)
    health = parse_health(c, raw)
    gpu = parse_gpu(c, raw, os_name, sorted({p.gpu_type for p in pools if p.gpu_type}))
    machines = ([n for p in pools for n in p.node_names()] + [controller_name or "ctl"]
                + login.names() + ([backup_name] if backup_name else []))
    if storage.backend == "nfs":
        machines.append(storage.server)
    monitoring = parse_monitoring(c, raw, machines,
                                  [n for p in pools for n in p.elastic_names()], base_dir,
                                  secrets["alertSecrets"])
    rest = parse_rest(c, raw, os_name, cidr)
    accept = parse_accept(c, raw)

    if c.problems:
        raise ConfigError(c.problems, source, value)
    assert cluster_name and provider and os_name and cidr and controller_name
    return ClusterConfig(
        cluster_name=cluster_name, provider=provider, private_cidr=cidr, os=os_name,
        controller_name=controller_name, compute_pools=tuple(pools),
        partitions=tuple(partitions), slurm_conf=dict(slurm_conf), local=local,
        elastic=elastic, storage=storage, accounting=accounting, users=tuple(users),
        groups=tuple(groups), access=access,
        containers=containers, topology=topology, nccl=nccl, health=health, gpu=gpu,
        monitoring=monitoring, rest=rest, login=login, configure=configure, byo=byo,
        oci=oci, accept=accept, controller_backup=backup_name, source=dict(raw_config),
        base_dir=base_dir)


def _parse_backup_controller(c: Collector, controller: Mapping[str, Any],
                             raw: Mapping[str, Any]) -> str | None:
    """``metalslurm:controller.backup``: the backup slurmctld's host name, or None. Its
    StateSaveLocation is shared with the controller's (docs/how-to/failover.md): over NFS on
    real machines, so the stack needs the NFS server (``metalslurm:storage.backend`` nfs)."""
    where = f"{key('controller')}.backup"
    if controller.get("backup") is None:
        return None
    name = c.string(controller, "backup", where, pattern=NODE_NAME_RE,
                    what="a host name: lower-case letters, digits and '-'")
    if name is not None and name == controller.get("name", "ctl"):
        c.problem(where, f"is the controller's own name {name!r}: give the backup another "
                  "host")
    return name


def _resolve_simulator(c: Collector, topology: TopologySettings, provider: str | None,
                       base_dir: Path | None) -> TopologySettings:
    """The simulated fabric's file, relative to the stack file, must exist; a simulator is
    for clusters without InfiniBand hardware (the local provider) only."""
    if not topology.discovery_simulator:
        return topology
    where = f"{key('topology')}.discovery.simulator"
    if provider != "local":
        c.problem(where, f"simulates a fabric for clusters without InfiniBand hardware; the "
                  f"{provider} provider's machines have a real one: remove it")
        return topology
    path = Path(topology.discovery_simulator).expanduser()
    if not path.is_absolute():
        path = (base_dir or Path.cwd()) / path
    if not path.is_file():
        c.problem(where, f"{path} is not a file (an ibnetdiscover output, read relative to "
                  "the stack file)")
        return topology
    problem = text_file_problem(path)
    if problem is not None:
        c.problem(where, f"{problem}; give an ibnetdiscover output (a text file)")
        return topology
    return replace(topology, discovery_simulator=str(path.resolve()))


STACK_FILE = "the YAML stack config file (Pulumi.<stack>.yaml, with a 'config:' mapping)"


def load_stack_file(path: str | Path, argument: str = "stack file",
                    check_artifacts: bool = True,
                    secrets_given: Collection[str] = ()) -> ClusterConfig:
    """Read a ``Pulumi.<stack>.yaml`` file and parse its ``config:`` section.

    ``secrets_given``: see :func:`parse_config`. ``argument`` names where the file came from
    in every error (``--stack`` on the command line): a file that cannot be read as YAML
    text, or is not a mapping with a ``config:`` mapping, is an
    :class:`~infra.stack.inputs.InputError`; a config with problems a :class:`ConfigError`
    listing them all. A file without any ``metalslurm:`` key is
    refused: it would silently describe the default cluster, which is never what a stack
    file that was meant for a real one wants. ``check_artifacts``: see :func:`parse_config`.
    """
    path = Path(path)
    try:
        document = load_yaml_argument(path, argument, STACK_FILE, allow_empty=True)
    except InputError as exc:  # one error type for whatever is wrong with a stack file
        raise ConfigError([exc.problem], argument, str(path)) from None
    if document is not None and not isinstance(document, Mapping):
        raise ConfigError([f"the file is {type_name(document)} in YAML; it must be a mapping "
                           "with a 'config:' mapping inside"], argument, str(path))
    config = (document or {}).get("config") or {}
    if not isinstance(config, Mapping):
        raise ConfigError([f"'config:' is {type_name(config)}; the file must be a mapping with "
                           "a 'config:' mapping inside (metalslurm:<key>: value)"],
                          argument, str(path))
    if not stack_keys(config):
        raise ConfigError([f"the file has no {NAMESPACE}: config, so it would describe the "
                           "default cluster without saying so; add 'config:' with at least "
                            f"'{key('provider')}' (see Pulumi.example-local.yaml)"],
                           argument, str(path))
    return parse_config(config, source=argument, base_dir=path.resolve().parent,
                        value=str(path), check_artifacts=check_artifacts,
                        secrets_given=secrets_given)


def config_summary(cfg: ClusterConfig) -> str:
    """One line: cluster, provider, OS and its Slurm, network, controller, pools, partitions
    (what ``metalslurm config validate`` prints for a valid stack)."""
    pools = ", ".join(
        f"{p.name}: {p.count}{f' + {p.elastic_count} elastic' if p.elastic_count else ''} x "
        f"{p.gpu_count or 'no'} {p.gpu_type or ''} GPUs".replace("  ", " ")
        for p in cfg.compute_pools)
    return (f"cluster {cfg.cluster_name}, provider {cfg.provider}, "
            f"os {cfg.os} (Slurm {by_id(cfg.os).slurm_release}), network {cfg.private_cidr}, "
            f"controller {cfg.controller_name}"
            + (f" (backup {cfg.controller_backup})" if cfg.controller_backup else "") + ", "
            f"pools [{pools}], partitions {', '.join(p.name for p in cfg.partitions)}")
