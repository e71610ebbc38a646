"""The inventory contract's rules: groups, host names and addresses, GPUs, node states.

Every provider's inventory (infra/stack/inventory.py builds it) and every hand-written one is held
to :func:`inventory_problems`: on the operator's side before an inventory is written, and by
the cluster_validate role in the playbook's first play, before any host is touched.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.monitoring import (
    MonitoringSettingsError,
    monitoring_settings,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.rest import (
    RestSettingsError,
    jwt_os_problem,
    rest_settings,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.users import (
    admin_lockout_problem,
    reserved_name_problem,
    ssh_key_problem,
)

# slurm_controller_backup: zero or one host running a backup slurmctld (SlurmctldHost's
# second line) that shares slurmctld's state with the controller (docs/how-to/failover.md).
BACKUP_GROUP = "slurm_controller_backup"
GROUPS = ("slurm_controller", "slurmdbd", "nfs_server", "slurm_compute", "login", BACKUP_GROUP)
NODE_STATES = ("static", "cloud")
# nfs: exported by the nfs_server host, mounted by the others; host-bind: the local
# provider bind-mounts one host directory per path into every node (kernels without
# NFS); none: no shared file system.
SHARED_STORAGE = ("nfs", "host-bind", "none")
# The inventory's shared storage when it names none.
DEFAULT_SHARED_STORAGE = "none"
# The paths every node shares when there is shared storage and the inventory does not list
# them: also the stack config's default (infra/stack/config.py reads it from here), so a
# hand-written inventory and a parsed stack share the same ones.
DEFAULT_SHARED_PATHS = ("/home", "/shared")
# RFC 1123 host label, lower case: what Slurm, DNS and podman all accept as a node name.
NODE_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
# The GPU types the roles serve: NVIDIA data-centre GPUs (gres.conf's /dev/nvidiaN files,
# the nvidia_gpu role's driver stack, the health checker's nvidia-smi checks).
GPU_TYPES = ("a100", "a10", "a30", "b200", "gh200", "h100", "h200", "l4", "l40s")
MAX_GPUS_PER_NODE = 16

# The variables an inventory may carry, each with what it is: every provider's inventory
# builder writes only these, and the roles read only these of the inventory (tests/lint keeps
# both true). Under group ``all``:
CLUSTER_VARS = {
    "metalslurm_cluster_name": "Slurm's ClusterName",
    "metalslurm_provider": "local, byo or oci",
    "metalslurm_os": "the stack's operating system (debian12, ubuntu24.04, ...)",
    "metalslurm_private_cidr": "the private network every node is on",
    "metalslurm_shared_storage": "nfs, host-bind or none",
    "metalslurm_shared_paths": "the shared directories (/home, /shared)",
    "metalslurm_partitions": "[{name, nodes, default, max_time, default_time, options}]",
    "metalslurm_users": "[{name, uid, ssh_keys, admin, groups}]: cluster users, the same UID "
                        "on every node",
    "metalslurm_groups": "[{name, gid}]: Unix groups, the same GID on every node",
    "metalslurm_access": "{admin_group, admin_gid}: the group the users' admin flag gives",
    "metalslurm_accounting": "{accounts, qos, prune}",
    "metalslurm_slurm_conf": "slurm.conf settings over the defaults",
    "metalslurm_elastic": "power saving timings and rates",
    "metalslurm_join": "machines made anew: {dir, kit, secrets: [{src, dest}]} (launch-terminate)",
    "metalslurm_containers": "Enroot and Pyxis",
    "metalslurm_topology": "the switch topology's source and plugin",
    "metalslurm_nccl": "NCCL settings over the derived ones",
    "metalslurm_gpu": "the NVIDIA driver stack",
    "metalslurm_health": "the node health checker",
    "metalslurm_monitoring": "Prometheus, Alertmanager, the exporters and the alert receivers",
    "metalslurm_rest": "Slurm's REST API (slurmrestd with JWT tokens)",
    "metalslurm_accept": "the acceptance gate: gate (the roles drain new nodes and nodes "
                         "rebooted onto a new driver into it) and the settings of "
                         "'metalslurm accept'",
    "metalslurm_drain_wait": "seconds the configure waits for the jobs on nodes leaving the "
                             "cluster before refusing (default 0; --drain-wait)",
    "metalslurm_slurm_upgrade": "true to upgrade Slurm to the newer build the apt sources "
                                "offer, in SchedMD's order (default false; --upgrade-slurm)",
    "metalslurm_leaving_max_share": "the largest share of Slurm's nodes one configure may take "
                                    "out (default 0.5; 1 for no bound)",
    "metalslurm_image_build": "true only while ansible/image.yml builds a prepared image (that "
                              "playbook sets it; an inventory leaves it out): handlers stand "
                              "aside",
}
# Per host (compute hosts: the GPU, state, switch, power and node option variables):
HOST_VARS = {
    "metalslurm_address": "the private address",
    "metalslurm_gpu_type": "h100, ...",
    "metalslurm_gpu_count": "GPUs per node",
    "metalslurm_node_state": "static or cloud (elastic)",
    "metalslurm_switch": "the leaf switch (topology from the stack)",
    "metalslurm_power": "{driver, non-secret parameters}: how an elastic node is powered",
    "metalslurm_node_options": "NodeName settings that replace the gathered facts",
}
# Secrets reach the roles as paths of 0600 files on the operator's machine, never as values:
SECRET_FILE_VARS = {
    "munge_key_b64_file": "the munge key, base64",
    "slurmdbd_password_file": "the accounting database's password",
    "slurm_jwt_key_b64_file": "Slurm's JWT key, base64",
    "slurm_elastic_credentials_file": "BMC logins of the power drivers",
    "registry_credentials_file": "container registry logins",
    "monitoring_password_file": "the password of the monitoring web UIs (user 'metalslurm')",
    "monitoring_alert_secrets_file": "the alert receivers' credentials (Slack URLs, SMTP "
                                     "passwords)",
}


def gpu_type_problem(gpu_type: Any) -> str | None:
    """What is wrong with a GPU type (the end of a sentence), or None."""
    if gpu_type in GPU_TYPES:
        return None
    return (f"{gpu_type!r} is not a GPU type metalslurm serves; it supports NVIDIA GPUs: "
            f"{', '.join(GPU_TYPES)}")


def shared_paths(paths: list[str] | None, storage: str | None) -> list[str]:
    """The paths every node shares (metalslurm_shared_paths): the inventory's list when it
    has one, else :data:`DEFAULT_SHARED_PATHS` when it has shared storage, else none. The
    NFS server exports them, every other node mounts them, the health checker checks them
    and jobs read their list."""
    if paths is not None:
        return list(paths)
    if (storage or DEFAULT_SHARED_STORAGE) == "none":
        return []
    return list(DEFAULT_SHARED_PATHS)


def submit_host(groups: Mapping[str, list[str]]) -> str:
    """The host users submit from, whose srun ports stay open and that serves the REST API:
    the first login node, else the controller ('' in an inventory with neither)."""
    for group in ("login", "slurm_controller"):
        hosts = groups.get(group) or []
        if hosts:
            return str(hosts[0])
    return ""


def _get(hostvars: Mapping[str, Any], host: str, key: str, default: Any = None) -> Any:
    try:
        return hostvars[host].get(key, default)
    except (KeyError, AttributeError):
        return default


def _group_problems(groups: Mapping[str, list[str]]) -> list[str]:
    """One controller, at least one compute host, a login node that is nothing else, at most
    one NFS server."""
    problems: list[str] = []
    controllers = list(groups.get("slurm_controller") or [])
    if not controllers:
        problems.append("group slurm_controller is empty: put exactly one host in it")
    elif len(controllers) > 1:
        problems.append(f"group slurm_controller has {len(controllers)} hosts "
                        f"({', '.join(controllers)}): put exactly one host in it")
    if not groups.get("slurm_compute"):
        problems.append("group slurm_compute is empty: add at least one compute host")
    # A login node runs no slurmd and no Slurm daemon: users' shells there must not compete
    # with jobs or with slurmctld (the controller is the submit host when there is none).
    for h in groups.get("login") or []:
        also = [g for g in ("slurm_controller", "slurmdbd", "slurm_compute")
                if h in (groups.get(g) or [])]
        if also:
            problems.append(f"host {h!r} is in group login and in {', '.join(also)}: a login "
                            "node runs no Slurm daemon and takes no jobs; give it its own "
                            "host, or leave group login empty (the controller is then the "
                            "submit host)")
    backups = list(groups.get(BACKUP_GROUP) or [])
    if len(backups) > 1:
        problems.append(f"group {BACKUP_GROUP} has {len(backups)} hosts ({', '.join(backups)}):"
                        " use zero or one")
    for h in backups:
        also = [g for g in GROUPS if g != BACKUP_GROUP and h in (groups.get(g) or [])]
        if also:
            problems.append(f"host {h!r} is in group {BACKUP_GROUP} and in {', '.join(also)}: "
                            "the backup controller must be a machine of its own (it takes over "
                            "when the controller's machine is lost)")
    if backups and not controllers:
        problems.append(f"group {BACKUP_GROUP} has a host but slurm_controller is empty")
    nfs = list(groups.get("nfs_server") or [])
    if len(nfs) > 1:
        problems.append(f"group nfs_server has {len(nfs)} hosts ({', '.join(nfs)}): "
                        "use zero or one")
    return problems


def _storage_problems(storage: Any, nfs: list[str]) -> list[str]:
    """metalslurm_shared_storage must be known, and nfs needs its one NFS server."""
    if storage not in SHARED_STORAGE:
        return [f"metalslurm_shared_storage {storage!r} is not one of "
                f"{', '.join(SHARED_STORAGE)}"]
    if storage == "nfs" and len(nfs) != 1:
        return ["metalslurm_shared_storage is nfs but group nfs_server is empty: put "
                "the NFS server host in it, or set metalslurm_shared_storage: none"]
    return []


def _private_network(hostvars: Mapping[str, Any], all_hosts: list[str],
                     problems: list[str]) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """The private network (the first host's metalslurm_private_cidr that is set), or None
    when none is set or it is not a network (a problem then)."""
    cidr_text = None
    for h in all_hosts:
        cidr_text = cidr_text or _get(hostvars, h, "metalslurm_private_cidr")
    try:
        return ipaddress.ip_network(cidr_text) if cidr_text else None
    except ValueError:
        problems.append(f"metalslurm_private_cidr {cidr_text!r} is not a network in CIDR "
                        "notation (example: 10.77.0.0/24)")
        return None


def _host_problems(hostvars: Mapping[str, Any], all_hosts: list[str],
                   cidr: ipaddress.IPv4Network | ipaddress.IPv6Network | None) -> list[str]:
    """Each host's name must suit Slurm and DNS and be unique ignoring case; its address
    must be set, an IP address, unique and inside the private network."""
    problems: list[str] = []
    seen_lower: dict[str, str] = {}
    seen_addr: dict[str, str] = {}
    for h in all_hosts:
        if not NODE_NAME_RE.match(h):
            problems.append(f"host {h!r}: Slurm and DNS reject this name; use lower-case "
                            "letters, digits and '-' (at most 63, not starting or ending "
                            "with '-')")
        other = seen_lower.setdefault(h.lower(), h)
        if other != h:
            problems.append(f"hosts {other!r} and {h!r} differ only in case: host names "
                            "are case-insensitive, rename one")
        address = _get(hostvars, h, "metalslurm_address")
        if address is None:
            problems.append(f"host {h!r}: metalslurm_address (its private address) is not set")
            continue
        try:
            ip = ipaddress.ip_address(str(address))
        except ValueError:
            problems.append(f"host {h!r}: metalslurm_address {address!r} is not an IP address")
            continue
        prev = seen_addr.setdefault(str(ip), h)
        if prev != h:
            problems.append(f"hosts {prev!r} and {h!r} have the same address {ip}")
        if cidr is not None and ip not in cidr:
            problems.append(f"host {h!r}: address {ip} is outside the private network {cidr}")
    return problems


def _partition_problems(partitions: Any, compute: list[str]) -> list[str]:
    """Every node a partition names must be a compute host."""
    problems: list[str] = []
    for i, part in enumerate(partitions or []):
        for node in part.get("nodes", []) if isinstance(part, Mapping) else []:
            if node not in compute:
                problems.append(f"metalslurm_partitions[{i}] ({part.get('name')}): node "
                                f"{node!r} is not in group slurm_compute")
    return problems


def _monitoring_problems(monitoring: Any, hostvars: Mapping[str, Any],
                         all_hosts: list[str]) -> list[str]:
    """metalslurm_monitoring's settings, and its host a static host of the inventory."""
    problems: list[str] = []
    try:
        if not isinstance(monitoring, Mapping):
            raise MonitoringSettingsError(f"metalslurm_monitoring: {monitoring!r} is not a "
                                          "mapping of monitoring settings")
        monitoring_settings(monitoring)
    except MonitoringSettingsError as exc:
        problems.append(str(exc))
    host = monitoring.get("host") if isinstance(monitoring, Mapping) else None
    if isinstance(host, str) and host and host not in all_hosts:
        problems.append(f"metalslurm_monitoring.host {host!r} is not a host of this inventory; "
                        "name one of its hosts, or leave it empty (the controller)")
    elif isinstance(host, str) and _get(hostvars, host, "metalslurm_node_state") == "cloud":
        problems.append(f"metalslurm_monitoring.host {host!r} is an elastic node (Slurm powers "
                        "it down when idle, and Prometheus with it); name a static host")
    return problems


def inventory_problems(view: Mapping[str, Any]) -> list[str]:
    """Every rule the inventory contract states, as one sentence per broken rule.

    ``view`` is ``{"groups": {group: [host, ...]}, "hostvars": {host: {var: value}}}``:
    what :func:`inventory_view` returns, or what Ansible has as ``groups``/``hostvars``.
    """
    groups: Mapping[str, list[str]] = view["groups"]
    hostvars: Mapping[str, Any] = view["hostvars"]
    problems = _group_problems(groups)

    controllers = list(groups.get("slurm_controller") or [])
    compute = list(groups.get("slurm_compute") or [])
    first = (controllers or compute or [""])[0]
    problems += _storage_problems(
        _get(hostvars, first, "metalslurm_shared_storage", DEFAULT_SHARED_STORAGE),
        list(groups.get("nfs_server") or []))

    all_hosts = sorted({h for g in GROUPS for h in (groups.get(g) or [])})
    cidr = _private_network(hostvars, all_hosts, problems)
    problems += _host_problems(hostvars, all_hosts, cidr)
    for h in compute:
        problems += _compute_host_problems(h, hostvars)
    problems += _partition_problems(
        _get(hostvars, (compute or all_hosts or [""])[0], "metalslurm_partitions", []),
        compute)

    # The cluster-wide settings, read from the first host.
    def cluster_var(name: str, default: Any = None) -> Any:
        return _get(hostvars, (all_hosts or [""])[0], name, default)

    problems += _monitoring_problems(cluster_var("metalslurm_monitoring", {}) or {}, hostvars,
                                     all_hosts)
    problems += _user_problems(cluster_var("metalslurm_users", []),
                               cluster_var("metalslurm_groups", []),
                               cluster_var("metalslurm_access", {}))
    problems += _rest_problems(cluster_var("metalslurm_rest", {}), cluster_var("metalslurm_os"),
                               cluster_var("metalslurm_private_cidr"))
    problems += _accept_problems(cluster_var("metalslurm_accept", {}))
    return problems


def _accept_problems(accept: Any) -> list[str]:
    """The part of metalslurm_accept the roles read (gate); 'metalslurm accept' checks the
    rest of it (infra/stack/accept.py) before it touches a node."""
    if not isinstance(accept, Mapping):
        return [f"metalslurm_accept: {accept!r} is not a mapping of acceptance gate settings"]
    gate = accept.get("gate", False)
    if not isinstance(gate, bool):
        return [f"metalslurm_accept.gate is {gate!r}; give true (new nodes and nodes rebooted "
                "onto a new driver wait in the acceptance gate) or false"]
    return []


def _user_problems(users: Any, groups: Any, access: Any) -> list[str]:
    """Each user's SSH keys must be OpenSSH public key lines, no user, group or admin group
    may take a name the nodes already have, and with pam_slurm_adopt on a user must be an
    admin (module_utils/users.py)."""
    access = dict(access) if isinstance(access, Mapping) else {}
    lockout = admin_lockout_problem(users, access)
    problems = [f"metalslurm_access.pam_slurm_adopt {lockout}"] if lockout else []
    for i, user in enumerate(users if isinstance(users, list) else []):
        user = user if isinstance(user, Mapping) else {}
        reserved = reserved_name_problem(user.get("name"))
        if reserved:
            problems.append(f"metalslurm_users[{i}].name: {reserved}")
        keys = user.get("ssh_keys") or []
        for j, line in enumerate(keys if isinstance(keys, list) else [keys]):
            problem = ssh_key_problem(line)
            if problem:
                problems.append(f"metalslurm_users[{i}].ssh_keys[{j}]: {problem}")
    for i, group in enumerate(groups if isinstance(groups, list) else []):
        reserved = reserved_name_problem(group.get("name") if isinstance(group, Mapping)
                                         else None)
        if reserved:
            problems.append(f"metalslurm_groups[{i}].name: {reserved}")
    reserved = reserved_name_problem(access.get("admin_group"), admin_group=True)
    if reserved:
        problems.append(f"metalslurm_access.admin_group: {reserved}")
    return problems


def _rest_problems(rest: Any, os_name: Any, cidr: Any) -> list[str]:
    if not isinstance(rest, Mapping):
        return [f"metalslurm_rest: {rest!r} is not a mapping of REST API settings"]
    try:
        settings = rest_settings(rest, str(cidr) if cidr else None)
    except RestSettingsError as exc:
        return [str(exc)]
    problem = jwt_os_problem(str(os_name)) if os_name and settings["enabled"] else None
    return [f"metalslurm_rest.enabled is true (the default), but {problem}"] if problem else []


def _compute_host_problems(h: str, hostvars: Mapping[str, Any]) -> list[str]:
    problems = []
    count = _get(hostvars, h, "metalslurm_gpu_count", 0)
    gtype = _get(hostvars, h, "metalslurm_gpu_type")
    if isinstance(count, str) and count.isdigit():
        count = int(count)
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_GPUS_PER_NODE:
        problems.append(f"host {h!r}: metalslurm_gpu_count must be a whole number from 0 to "
                        f"{MAX_GPUS_PER_NODE}, got {count!r}")
    elif count > 0 and not gtype:
        problems.append(f"host {h!r}: has {count} GPUs but no metalslurm_gpu_type; set one of "
                        f"{', '.join(GPU_TYPES)}")
    elif gtype and count == 0:
        problems.append(f"host {h!r}: has metalslurm_gpu_type {gtype!r} but no "
                        "metalslurm_gpu_count; set how many GPUs it has")
    if gtype and gpu_type_problem(gtype):
        problems.append(f"host {h!r}: metalslurm_gpu_type {gpu_type_problem(gtype)}")
    state = _get(hostvars, h, "metalslurm_node_state", "static")
    if state not in NODE_STATES:
        problems.append(f"host {h!r}: metalslurm_node_state {state!r} is not one of "
                        f"{', '.join(NODE_STATES)}")
    return problems
