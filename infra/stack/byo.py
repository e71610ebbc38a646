"""Stack config of the byo provider: existing hosts given by address, and their BMCs.

``metalslurm:byo`` names every machine (controller, NFS server, compute hosts by pool,
static or elastic) and, for elastic hosts, how to power them (Redfish or IPMI; the
credentials are the secret ``metalslurm:bmcCredentials``). Parsed with the core schema's
collector, so its problems are reported together with the rest of the file.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from infra.stack.schema import (
    HOST_ADDRESS_RE,
    NODE_NAME_RE,
    USER_NAME_RE,
    Collector,
    gpu_type_problem,
    key,
)

if TYPE_CHECKING:
    from infra.stack.cluster_types import ComputePool, StorageSettings
    from infra.stack.login import LoginSettings

BYO_ROLES = ("controller", "controller-backup", "nfs", "compute", "login")
BMC_DRIVERS = ("redfish", "ipmi")
_BYO_KEYS = ("sshUser", "bastion", "hosts", "checkHosts", "openFirewall")
_BASTION_KEYS = ("address", "user")
_HOST_KEYS = ("name", "role", "address", "publicAddress", "pool", "elastic", "gpuType",
              "gpuCount", "bmc", "openFirewall")
_BMC_KEYS = ("driver", "endpoint", "systemId", "verifyTls", "address", "port")


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
    # Whether the run puts the cluster's openings into the host's nftables firewall (the
    # host_firewall role); None: as metalslurm:byo.openFirewall says, else the role's default.
    open_firewall: bool | None = None


@dataclass(frozen=True)
class ByoSettings:
    ssh_user: str = "root"
    bastion: str | None = None
    bastion_user: str | None = None
    hosts: tuple[ByoHost, ...] = ()
    check_hosts: bool = True
    open_firewall: bool | None = None  # every host's, unless the host gives its own

    def host(self, name: str) -> ByoHost:
        return next(h for h in self.hosts if h.name == name)

    def open_firewall_of(self, name: str) -> bool | None:
        """Whether the run opens host ``name``'s firewall: the host's own openFirewall,
        else byo's, else None (the host_firewall role's default, which owns it)."""
        own = self.host(name).open_firewall
        return self.open_firewall if own is None else own

    def login_hosts(self) -> tuple[str, ...]:
        """The hosts with role login, in the order the config lists them."""
        return tuple(h.name for h in self.hosts if h.role == "login")


def _parse_bmc(c: Collector, value: Any, where: str) -> BmcSettings | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        c.problem(where, "must be a mapping with driver (redfish or ipmi) and endpoint/address")
        return None
    c.unknown_keys(value, _BMC_KEYS, where)
    driver = c.string(value, "driver", f"{where}.driver", choices=BMC_DRIVERS)
    verify = c.boolean(value, "verifyTls", f"{where}.verifyTls", True)
    if driver == "redfish":
        endpoint = c.string(value, "endpoint", f"{where}.endpoint",
                            pattern=re.compile(r"^https://[A-Za-z0-9.:\[\]-]+(:\d+)?/?$"),
                            what="the BMC's Redfish URL, e.g. https://10.0.1.21")
        system_id = c.string(value, "systemId", f"{where}.systemId", default="",
                             pattern=re.compile(r"^(/redfish/v1/Systems/[^\s]+)?$"),
                             what="a Redfish system path, e.g. /redfish/v1/Systems/1")
        if endpoint is None:
            return None
        return BmcSettings("redfish", endpoint.rstrip("/"), system_id or None, verify)
    if driver == "ipmi":
        address = c.string(value, "address", f"{where}.address", pattern=HOST_ADDRESS_RE,
                           what="the BMC's address or host name")
        port = c.integer(value, "port", f"{where}.port", default=623, minimum=1, maximum=65535)
        if address is None or port is None:
            return None
        return BmcSettings("ipmi", address, None, verify, port)
    return None


def _parse_address(c: Collector, h: Mapping[str, Any], where: str,
                   cidr: ipaddress.IPv4Network | None) -> str | None:
    address = c.string(h, "address", where)
    if address is None:
        return None
    try:
        ip = ipaddress.IPv4Address(address)
    except ValueError:
        c.problem(where, f"{address!r} is not an IPv4 address")
        return None
    if cidr is not None and ip not in cidr:
        c.problem(where, f"{address} is outside {key('privateCidr')} {cidr}: every node must "
                  "be in the private network")
    return address


def _check_compute_host(c: Collector, h: Mapping[str, Any], hkey: str, elastic: bool,
                        bmc: BmcSettings | None, pools: Mapping[str, ComputePool]) -> None:
    pool_name = h.get("pool")
    pool = pools.get(pool_name) if isinstance(pool_name, str) else None
    if pool is None:
        c.problem(f"{hkey}.pool", f"{pool_name!r} is not a pool in {key('computePools')}: "
                  f"{', '.join(pools) or 'none'}")
    else:
        gpu_type = h.get("gpuType", pool.gpu_type)
        gpu_count = h.get("gpuCount", pool.gpu_count)
        if gpu_type is not None and gpu_type_problem(gpu_type):
            c.problem(f"{hkey}.gpuType", str(gpu_type_problem(gpu_type)))
        elif (gpu_type, gpu_count) != (pool.gpu_type, pool.gpu_count):
            c.problem(f"{hkey}.gpuCount", f"host has {gpu_count} x {gpu_type}, pool "
                      f"{pool.name!r} is {pool.gpu_count} x {pool.gpu_type}: a pool's nodes "
                      "are identical; put the host in a matching pool")
    if elastic and bmc is None:
        c.problem(f"{hkey}.bmc", "an elastic host needs a power driver: give its BMC (driver "
                  "redfish with endpoint, or ipmi with address)")


def _parse_host(c: Collector, h: Mapping[str, Any], hkey: str,
                cidr: ipaddress.IPv4Network | None,
                pools: Mapping[str, ComputePool]) -> ByoHost | None:
    name = c.string(h, "name", f"{hkey}.name", pattern=NODE_NAME_RE,
                    what="a host name: lower-case letters, digits and '-'")
    role = c.string(h, "role", f"{hkey}.role", default="compute", choices=BYO_ROLES)
    address = _parse_address(c, h, f"{hkey}.address", cidr)
    public = c.string(h, "publicAddress", f"{hkey}.publicAddress", default="",
                      pattern=re.compile(r"^([A-Za-z0-9][A-Za-z0-9.-]*)?$"),
                      what="an address or host name")
    if public and role == "compute":
        c.problem(f"{hkey}.publicAddress", "compute nodes get no public address: reach them "
                  f"through {key('byo')}.bastion or the controller")
    elastic = c.boolean(h, "elastic", f"{hkey}.elastic", False)
    bmc = _parse_bmc(c, h.get("bmc"), f"{hkey}.bmc")
    if role == "compute":
        _check_compute_host(c, h, hkey, elastic, bmc, pools)
    else:
        for extra in ("pool", "elastic", "gpuType", "gpuCount", "bmc"):
            if extra in h:
                c.problem(f"{hkey}.{extra}", f"only compute hosts have {extra}")
    open_firewall = _optional_boolean(c, h, "openFirewall", f"{hkey}.openFirewall")
    if name is None or role is None or address is None:
        return None
    pool = h.get("pool") if role == "compute" else None
    return ByoHost(name, role, address, public or None, pool, elastic, bmc, open_firewall)


def _optional_boolean(c: Collector, raw: Mapping[str, Any], name: str, where: str) -> bool | None:
    """``raw[name]`` as true or false, or None where it is not given."""
    if name not in raw:
        return None
    return c.boolean(raw, name, where, True)


def _check_roles(c: Collector, hosts: list[ByoHost], controller_name: str | None,
                 storage: StorageSettings, login: LoginSettings,
                 backup_name: str | None = None) -> None:
    hkey = f"{key('byo')}.hosts"
    logins = [h.name for h in hosts if h.role == "login"]
    if login.count and len(logins) != login.count:
        c.problem(f"{key('login')}.count", f"is {login.count} but {hkey} has {len(logins)} "
                  "host(s) with role login: give the login hosts there (or leave count out)")
    c.duplicates(hkey, [h.name for h in hosts], "host name")
    c.duplicates(hkey, [h.address for h in hosts], "address")
    controllers = [h.name for h in hosts if h.role == "controller"]
    if len(controllers) != 1:
        c.problem(hkey, f"needs exactly one host with role controller, got {len(controllers)}"
                  + (f" ({', '.join(controllers)})" if controllers else ""))
    elif controller_name is not None and controllers[0] != controller_name:
        c.problem(hkey, f"the controller host is named {controllers[0]!r} but "
                  f"{key('controller')}.name is {controller_name!r}; make them the same")
    backups = [h.name for h in hosts if h.role == "controller-backup"]
    if backups != ([backup_name] if backup_name else []):
        got = ", ".join(backups) or "none"
        c.problem(hkey, (f"{key('controller')}.backup is {backup_name!r}: give exactly one host "
                         f"with role controller-backup named so (got {got})")
                  if backup_name else
                  f"hosts with role controller-backup ({', '.join(backups)}) but "
                  f"{key('controller')}.backup is not set: name the backup there too")
    nfs = [h.name for h in hosts if h.role == "nfs"]
    if storage.backend == "nfs" and nfs != [storage.server]:
        c.problem(hkey, f"{key('storage')}.backend is nfs: give exactly one host with role nfs "
                  f"named {storage.server!r} (got {', '.join(nfs) or 'none'})")
    elif storage.backend != "nfs" and nfs:
        c.problem(hkey, f"hosts with role nfs ({', '.join(nfs)}) but {key('storage')}.backend "
                  "is not nfs")


def _hosts_by_pool(c: Collector, hosts: list[ByoHost],
                   pools: Sequence[ComputePool]) -> dict[str, tuple[str, ...]]:
    """Each pool's host names, static ones first; counts must match the pool's."""
    hkey = f"{key('byo')}.hosts"
    by_pool = {}
    for i, pool in enumerate(pools):
        static = tuple(h.name for h in hosts if h.pool == pool.name and not h.elastic)
        elastic = tuple(h.name for h in hosts if h.pool == pool.name and h.elastic)
        if len(static) != pool.count:
            c.problem(f"{key('computePools')}[{i}].count", f"is {pool.count} but {hkey} has "
                      f"{len(static)} static host(s) in pool {pool.name!r}")
        if len(elastic) != pool.elastic_count:
            c.problem(f"{key('computePools')}[{i}].elasticCount", f"is {pool.elastic_count} "
                      f"but {hkey} has {len(elastic)} elastic host(s) in pool {pool.name!r}")
        by_pool[pool.name] = static + elastic
    return by_pool


def parse_byo(c: Collector, raw: Mapping[str, Any], provider: str | None,
              cidr: ipaddress.IPv4Network | None, controller_name: str | None,
              storage: StorageSettings, pools: Sequence[ComputePool],
              secrets: Mapping[str, bool], login: LoginSettings,
              backup_name: str | None = None
              ) -> tuple[ByoSettings | None, dict[str, tuple[str, ...]]]:
    """``metalslurm:byo``; returns the settings and each pool's host names."""
    where = key("byo")
    item = c.provider_section(raw, "byo", provider)
    if item is None:
        return None, {}
    if not item:
        c.problem(where, "is required when the provider is byo: list the hosts")
        return None, {}
    c.unknown_keys(item, _BYO_KEYS, where)
    ssh_user = c.string(item, "sshUser", f"{where}.sshUser", default="root",
                        pattern=USER_NAME_RE, what="a login name")
    check = c.boolean(item, "checkHosts", f"{where}.checkHosts", True)
    open_firewall = _optional_boolean(c, item, "openFirewall", f"{where}.openFirewall")
    bastion = c.mapping(item, "bastion", f"{where}.bastion")
    c.unknown_keys(bastion, _BASTION_KEYS, f"{where}.bastion")
    bastion_address = None
    if bastion:
        bastion_address = c.string(bastion, "address", f"{where}.bastion.address",
                                   pattern=HOST_ADDRESS_RE, what="an address or host name")
    bastion_user = c.string(bastion, "user", f"{where}.bastion.user", default="",
                            pattern=re.compile(r"^([a-z_][a-z0-9_-]{0,31})?$"), what="a login")
    if not secrets.get("sshPrivateKey", False):
        c.problem(key("sshPrivateKey"), "is required for provider byo: 'pulumi config set "
                  f"--secret {key('sshPrivateKey')} < ~/.ssh/id_ed25519'")
    pool_by_name = {p.name: p for p in pools}
    hosts = [h for hkey, spec in c.mappings(item.get("hosts"), f"{where}.hosts", _HOST_KEYS,
                                            "hosts, each with name, role and address")
             if (h := _parse_host(c, spec, hkey, cidr, pool_by_name)) is not None]
    _check_roles(c, hosts, controller_name, storage, login, backup_name)
    if any(h.bmc for h in hosts) and not secrets.get("bmcCredentials", False):
        c.problem(key("bmcCredentials"), "hosts have a BMC but no credentials are set: "
                  f"'pulumi config set --secret --path {key('bmcCredentials')}.default.username"
                  " ...' (and .password)")
    by_pool = _hosts_by_pool(c, hosts, pools)
    return ByoSettings(ssh_user or "root", bastion_address, bastion_user or None, tuple(hosts),
                       check, open_firewall), by_pool
