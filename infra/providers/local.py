"""The local provider: a cluster of privileged systemd containers on one podman network.

The podman network is the cluster's private subnet; every node is a container running
systemd and sshd, reached by Ansible and testinfra over SSH exactly as a real node is.
GPU nodes get fake ``/dev/nvidia*`` device nodes (created at boot by a unit in the
image), so Slurm's GRES scheduling and device cgroups are real.

The stack config is parsed once into a :class:`LocalPlan` (names, addresses, shared
storage, image); ``metalslurm local up`` and the Pulumi ``local`` stack's steps
(:mod:`infra.providers.local_resources`, which receive the plan as JSON) drive the same
:class:`LocalCluster` methods with it: one implementation, two drivers. Files go to the
stack's state directory through :class:`infra.stack.state.StateDir`.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils import (
    operating_systems,
    slurm_leaving,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.cluster_defaults import (
    HA_STATE_MOUNT,  # where both controllers share slurmctld's state (backup controller)
    SLURM_GID,  # the slurm group on every node (roles/common)
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.slurm_upgrade import (
    SLURMD_BOOT_TIME_SINCE,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.slurm_versions import (
    SlurmVersion,
)

from infra.providers.host_ca import (
    NODE_HOST_CA_DIR,
    host_bundles,
    host_ca_digest,
    host_extra_certificates,
    write_host_ca_dir,
)
from infra.providers.node_container import Mount, NodeContainer
from infra.providers.podman import (
    PodmanError,
    containers,
    networks,
    podman,
    podman_path,
    remove_containers,
)
from infra.providers.podman_proxy import LAUNCH_TERMINATE, Allowed, allow_file_text
from infra.providers.prepared import hold, kind_of, release
from infra.stack.config import ClusterConfig
from infra.stack.inventory import (
    BACKUP_GROUP,
    NodeSpec,
    backup_controller_specs,
    build_inventory,
    cluster_vars,
    login_specs,
    with_switches,
)
from infra.stack.join_kit import with_join
from infra.stack.state import StateDir

CONTROLLER_HOST_INDEX = 10  # controller gets <network>.10, compute nodes .11 onwards
LABEL = "metalslurm.cluster"
# How long a new node's sshd may take to answer: seven systemd containers booting at once
# on two busy cores (lint beside a second cluster's tests) took over 90 s.
SSH_WAIT_SECONDS = 300
LOCAL_CONNECT_TIMEOUT_S = 30
ULIMITS = ("nofile=8192:8192", "nproc=8192:8192")  # at or below this host's hard limits
# How node containers are made; a node container made another way is made again. Version
# 2: compute nodes get a private cgroup namespace, so the cgroup paths a job sees in
# /proc/self/cgroup are the ones mounted at /sys/fs/cgroup (Enroot's cgroups hook mounts a
# job's cgroup by them). On this host's hybrid cgroup v1 layout the node's systemd then
# leaves the name=systemd cgroup podman made for it, and 'podman exec' into the node
# fails: the local cluster reaches its nodes over SSH (as Ansible does), and reads files
# from a node with 'podman cp'. Version 3: every node mounts the host's extra CA
# certificates read-only (infra/providers/host_ca.py). Version 4: a node's hardware address
# is fixed by its IP address (node_container.node_mac). Version 5: a static node's
# container is started again when it exits (podman's --restart=always), so a reboot Slurm
# asks for ('scontrol reboot', 'metalslurm maintain') brings the node back as a server's
# firmware would.
CONTAINER_SPEC = "5"


class LocalProviderError(RuntimeError):
    pass


class LeavingNodesBusy(LocalProviderError):
    """Jobs still run on nodes that are leaving the cluster: nothing was removed."""


# How 'local up' speaks of its nodes' source and is run again (module_utils/slurm_leaving.py).
WORDS = slurm_leaving.Words(source="stack config", rerun="'local up'",
                            wait_hint="--drain-wait SECONDS")


def leaving_refusal(nodes: list[str], jobs: list[str], wait_s: float) -> str:
    """'local up''s refusal for ``jobs`` still on the leaving ``nodes`` after ``wait_s``."""
    return slurm_leaving.refusal(nodes, jobs, wait_s, WORDS)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


# Where `python -m infra...` finds this package (the proxy runs that way).
REPO_ROOT = Path(__file__).resolve().parents[2]


def _podman_api_answers(sock: Path) -> bool:
    """True when podman's REST API answers on the unix socket ``sock``."""
    if not sock.is_socket():
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(2)
            conn.connect(str(sock))
            conn.sendall(b"GET /_ping HTTP/1.0\r\nHost: d\r\n\r\n")
            return b" 200 " in conn.recv(64)
    except OSError:
        return False


def kernel_has_nfs(proc_filesystems: Path = Path("/proc/filesystems")) -> bool:
    """True when this kernel can serve and mount NFS (nfsd and nfs4 registered).

    Containers cannot load kernel modules, so only what is registered already counts.
    """
    try:
        names = {line.split()[-1] for line in proc_filesystems.read_text().splitlines()
                 if line.strip()}
    except OSError:
        return False
    return {"nfsd", "nfs4"} <= names


def storage_mode(cfg: ClusterConfig, proc_filesystems: Path = Path("/proc/filesystems")) -> str:
    """How the local cluster shares ``cfg.storage.paths``: nfs, host-bind or none.

    ``nfs`` runs a real NFS server node when the host kernel has NFS; on kernels without
    it the same paths are one host directory each, bind-mounted into every node.
    """
    if cfg.storage.backend == "none":
        return "none"
    return "nfs" if kernel_has_nfs(proc_filesystems) else "host-bind"


def node_specs(cfg: ClusterConfig, shared_storage: str) -> list[NodeSpec]:
    """Controller first, then every compute node, then the login nodes, with addresses in
    the private subnet.

    With NFS storage the NFS server node takes the last address of the subnet.
    """
    hosts = list(cfg.private_cidr.hosts())
    specs = [NodeSpec(name=cfg.controller_name, address=str(hosts[CONTROLLER_HOST_INDEX - 1]),
                      groups=("slurm_controller", "slurmdbd"))]
    if shared_storage == "nfs":
        specs.append(NodeSpec(name=cfg.storage.server, address=str(hosts[-1]),
                              groups=("nfs_server",)))
    index = CONTROLLER_HOST_INDEX
    for pool in cfg.compute_pools:
        elastic = set(pool.elastic_names())
        for name in pool.node_names():
            specs.append(NodeSpec(
                name=name, address=str(hosts[index]), groups=("slurm_compute",),
                gpu_type=pool.gpu_type, gpu_count=pool.gpu_count,
                node_state="cloud" if name in elastic else "static",
                power={"driver": "local", "container": container_name(cfg.cluster_name, name)}
                | ({"mode": LAUNCH_TERMINATE} if name in elastic
                   and cfg.local.elastic_mode == LAUNCH_TERMINATE else {})))
            index += 1
    return specs + login_specs(cfg) + backup_controller_specs(cfg, CONTROLLER_HOST_INDEX)


def host_hardware(cpuinfo: str, meminfo: str, reserve_percent: int = 3) -> dict[str, int]:
    """NodeName hardware of a node container (containers see the host's CPUs and memory).

    Elastic nodes are powered down when the playbook runs, so their slurm.conf line cannot
    come from gathered facts: it is computed here the way the roles compute it from facts
    (sockets, cores per socket, threads per core; MemTotal in MiB less the OS reserve).
    """
    sockets: set[str] = set()
    cores: set[tuple[str, str]] = set()
    cpus = 0
    physical, core = "0", "0"
    for line in cpuinfo.splitlines() + [""]:
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "processor":
            cpus += 1
        elif key == "physical id":
            physical = value
        elif key == "core id":
            core = value
        elif not key and cpus:
            sockets.add(physical)
            cores.add((physical, core))
    mem_kib = int(next(line.split()[1] for line in meminfo.splitlines()
                       if line.startswith("MemTotal:")))
    n_sockets = max(len(sockets), 1)
    cores_per_socket = max(len(cores) // n_sockets, 1)
    return {"Sockets": n_sockets, "CoresPerSocket": cores_per_socket,
            "ThreadsPerCore": max(cpus // (n_sockets * cores_per_socket), 1),
            "CPUs": cpus,
            "RealMemory": (mem_kib // 1024) * (100 - reserve_percent) // 100}


def spec_to_json(spec: NodeSpec) -> str:
    return json.dumps(asdict(spec), sort_keys=True)


def spec_from_json(text: str) -> NodeSpec:
    data = json.loads(text)
    return NodeSpec(**{**data, "groups": tuple(data["groups"])})


def container_name(cluster_name: str, node: str) -> str:
    return f"{cluster_name}-{node}"


def network_name(cluster_name: str) -> str:
    return f"{cluster_name}-net"


@dataclass(frozen=True)
class LocalPlan:
    """Everything the local provider needs, computed once from the parsed stack config.

    The Pulumi ``local`` stack hands it to its steps as JSON (:meth:`to_json`), so a
    config is parsed once whichever driver runs it.
    """

    cluster_name: str
    private_cidr: str
    os: str
    image_source: str
    mirror: str | None
    shared_storage: str  # nfs, host-bind or none (decided once, from the host's kernel)
    shared_paths: tuple[str, ...]
    controller: str
    elastic_nodes: tuple[str, ...]
    specs: tuple[NodeSpec, ...]

    @classmethod
    def from_config(cls, cfg: ClusterConfig,
                    proc_filesystems: Path = Path("/proc/filesystems")) -> LocalPlan:
        shared = storage_mode(cfg, proc_filesystems)
        specs = node_specs(cfg, shared)
        if cfg.elastic_node_names():
            hardware = host_hardware(Path("/proc/cpuinfo").read_text(),
                                     Path("/proc/meminfo").read_text())
            specs = [replace(s, extra_vars={**s.extra_vars, "metalslurm_node_options": hardware})
                     if s.node_state == "cloud" else s for s in specs]
        return cls(cluster_name=cfg.cluster_name, private_cidr=str(cfg.private_cidr),
                   os=cfg.os, image_source=cfg.local.image_source, mirror=cfg.local.mirror,
                   shared_storage=shared, shared_paths=tuple(cfg.storage.paths),
                   controller=cfg.controller_name,
                   elastic_nodes=tuple(s.name for s in specs if s.node_state == "cloud"),
                   specs=tuple(specs))

    def to_json(self, with_specs: bool = True) -> str:
        """The plan as JSON; without the node specs it stays small for any cluster size
        (each node's step gets its own spec, :func:`spec_to_json`)."""
        data = asdict(self)
        if not with_specs:
            data["specs"] = []
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> LocalPlan:
        data = json.loads(text)
        for name in ("shared_paths", "elastic_nodes"):
            data[name] = tuple(data[name])
        data["specs"] = tuple(spec_from_json(json.dumps(s)) for s in data["specs"])
        return cls(**data)

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(self.private_cidr)

    def spec(self, node: str) -> NodeSpec:
        found = next((s for s in self.specs if s.name == node), None)
        if found is None:
            raise LocalProviderError(f"no node {node!r} in cluster {self.cluster_name}; nodes: "
                                     f"{', '.join(s.name for s in self.specs)}")
        return found


@dataclass
class LocalCluster:
    plan: LocalPlan
    state: StateDir
    log: Callable[[str], None] = print

    def container(self, node: str) -> str:
        return container_name(self.plan.cluster_name, node)

    @property
    def network_name(self) -> str:
        return network_name(self.plan.cluster_name)

    @property
    def has_elastic_nodes(self) -> bool:
        return bool(self.plan.elastic_nodes)

    def specs(self) -> list[NodeSpec]:
        return list(self.plan.specs)

    @staticmethod
    def launched(spec: NodeSpec) -> bool:
        """An elastic node the power driver makes anew on resume (launch-terminate): it has
        no container while powered down, and ``up`` makes none."""
        return spec.node_state == "cloud" and (spec.power or {}).get("mode") == LAUNCH_TERMINATE

    def bind_mounts(self) -> list[tuple[Path, str]]:
        """(host directory, node path) for every shared path in host-bind mode."""
        if self.plan.shared_storage != "host-bind":
            return []
        return [(self.state.shared / p.strip("/").replace("/", "_"), p)
                for p in self.plan.shared_paths]

    # ---- checks that run before anything is created ---------------------------------

    def preflight(self) -> None:
        """Fail, before creating anything, on what would break half-way."""
        for tool in ("podman", "runc", "ssh", "ssh-keygen"):
            if shutil.which(tool) is None:
                raise LocalProviderError(f"{tool} is not installed: run 'make deps'")
        if os.geteuid() != 0:
            raise LocalProviderError("the local cluster needs root (privileged podman containers)")
        want = self.plan.network
        for net in networks():
            for sub in net.get("subnets") or []:
                try:
                    theirs = ipaddress.ip_network(sub["subnet"])
                except (KeyError, ValueError):
                    continue
                if net["name"] == self.network_name:
                    if theirs != want:
                        raise LocalProviderError(
                            f"podman network {net['name']} exists with subnet {theirs}, the "
                            f"config says {want}: run 'metalslurm local down' first")
                elif theirs.overlaps(want):
                    raise LocalProviderError(
                        f"metalslurm:privateCidr {want} overlaps podman network {net['name']} "
                        f"({theirs}); choose another range")

    # ---- provisioning ------------------------------------------------------------------

    def ensure_ssh_key(self) -> None:
        """The SSH key Ansible and testinfra log in to the nodes with: made once, root only."""
        key = self.state.ssh_key
        key.parent.mkdir(parents=True, exist_ok=True)
        key.parent.chmod(0o700)
        for path, comment in ((key, f"metalslurm-{self.plan.cluster_name}"),
                              (self.state.join_key, f"metalslurm-join-{self.plan.cluster_name}")):
            if not path.exists():
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment,
                                "-f", str(path)], check=True)

    def ensure_shared_dirs(self) -> None:
        """One host directory per shared path (host-bind mode): /home 0755, others 1777."""
        for host_dir, path in self.bind_mounts():
            if not host_dir.exists():
                host_dir.mkdir(parents=True)
                host_dir.chmod(0o755 if path == "/home" else 0o1777)
        if self.has_backup_controller and self.plan.shared_storage != "nfs":
            # Only the controllers mount it; slurm_controller makes the state directory in it.
            self.ha_state_dir.mkdir(mode=0o755, exist_ok=True)

    def ensure_host_ca(self) -> str:
        """The host's extra CA certificates (a TLS-inspecting proxy's, a company CA) as
        files under the state directory, which every node mounts and trusts; their digest."""
        return write_host_ca_dir(self.state.host_ca, host_extra_certificates(host_bundles()))

    def ensure_network(self) -> None:
        name = self.network_name
        if podman("network", "exists", name, check=False).returncode == 0:
            return
        gateway = next(self.plan.network.hosts())
        podman("network", "create", "--subnet", self.plan.private_cidr, "--gateway",
               str(gateway), "--label", f"{LABEL}={self.plan.cluster_name}", name)

    def container_address(self, name: str) -> str | None:
        """The address a node container has on the cluster network (None: unknown)."""
        proc = podman("inspect", "--format", "{{(index .NetworkSettings.Networks "
                      f'"{self.network_name}").IPAddress}}}}', name, check=False)
        return proc.stdout.strip() or None if proc.returncode == 0 else None

    @property
    def has_backup_controller(self) -> bool:
        return any(BACKUP_GROUP in s.groups for s in self.plan.specs)

    @property
    def ha_state_dir(self) -> Path:
        """The host directory both controllers mount at HA_STATE_MOUNT when the stack has a
        backup controller: the local stand-in for the NFS export real clusters use."""
        return self.state.root / "ha-state"

    def node_mounts(self, spec: NodeSpec) -> list[tuple[Path, str]]:
        """(host directory, node path) mounted into ``spec``'s container besides its files."""
        mounts = self.bind_mounts()
        controller = "slurm_controller" in spec.groups or BACKUP_GROUP in spec.groups
        if controller and self.has_backup_controller and self.plan.shared_storage != "nfs":
            # With an NFS server node, nfs_client mounts its export there, as on real machines.
            mounts = [*mounts, (self.ha_state_dir, HA_STATE_MOUNT)]
        if controller and self.has_elastic_nodes:
            # The power programs on the controllers start and stop elastic node containers
            # through podman's REST API (the socket's directory, mounted at /run/podman).
            mounts = [*mounts, (self.state.podman_socket_dir, "/run/podman")]
        return mounts

    def node_files(self, spec: NodeSpec) -> tuple[str, str]:
        """The node's own files (node.env, authorized_keys), as its container sees them."""
        # The host's CAs are part of the node's files: a node is made again when they change.
        self.state.host_ca.mkdir(parents=True, exist_ok=True)
        node_env = (f"METALSLURM_FAKE_GPUS={spec.gpu_count}\n"
                    f"METALSLURM_SHARED={','.join(p for _d, p in self.node_mounts(spec))}\n"
                    f"METALSLURM_HOST_CA={host_ca_digest(self.state.host_ca)}\n")
        keys = self.state.ssh_key.with_suffix(".pub").read_text()
        if self.launched(spec):
            # The controller's join key: a machine made anew is configured from there.
            keys += self.state.join_key.with_suffix(".pub").read_text()
        return node_env, keys

    def create_node(self, spec: NodeSpec, image: str) -> None:
        """Start one node container (or leave a running one as it is). A launch-terminate
        elastic node gets its files only: the power driver makes its container."""
        name = self.container(spec.name)
        found = containers([f"{LABEL}={self.plan.cluster_name}", f"metalslurm.node={spec.name}"])
        node_dir = self.state.node_dir(spec.name)
        mounts = self.node_mounts(spec)
        node_env, public_key = self.node_files(spec)
        current = (_read(node_dir / "node.env"), _read(node_dir / "authorized_keys"))
        if self.launched(spec):
            if current != (node_env, public_key):
                node_dir.mkdir(parents=True, exist_ok=True)
                (node_dir / "node.env").write_text(node_env)
                (node_dir / "authorized_keys").write_text(public_key)
            # Powered down: no machine (made again on resume). One just created, not yet
            # started, is a resume's: left to it.
            if found and found[0].get("State") in ("exited", "stopped"):
                remove_containers([name])
            return
        made_as = (found[0].get("Labels") or {}).get("metalslurm.spec") if found else None
        moved = bool(found) and self.container_address(name) not in (None, spec.address)
        if found and current == (node_env, public_key) and made_as == CONTAINER_SPEC \
                and not moved:
            if found[0].get("State") != "running" and spec.node_state != "cloud":
                podman("start", name)  # a powered-down elastic node stays down
            return
        if found:
            # Its bind-mounted files are gone or stale (state directory removed, GPU
            # count changed), or it was made another way: a node container is cheap,
            # make it again.
            self.log(f"recreating {name}: " + (
                f"its address is now {spec.address}" if moved
                else "its node files changed" if made_as == CONTAINER_SPEC
                else "it was made by an older metalslurm"))
            remove_containers([name])
        node_dir.mkdir(parents=True, exist_ok=True)
        (node_dir / "node.env").write_text(node_env)
        (node_dir / "authorized_keys").write_text(public_key)
        podman(*self.node_container(spec, image, mounts).run_args())

    def node_container(self, spec: NodeSpec, image: str,
                       mounts: list[tuple[Path, str]]) -> NodeContainer:
        """The container of node ``spec``, with its node files and ``mounts``."""
        shared = {path for _d, path in self.bind_mounts()}
        return NodeContainer(
            name=self.container(spec.name), image=image, hostname=spec.name,
            network=self.network_name, address=spec.address,
            labels={"metalslurm.spec": CONTAINER_SPEC, LABEL: self.plan.cluster_name,
                    "metalslurm.node": spec.name, "metalslurm.groups": ",".join(spec.groups)},
            mounts=(Mount(self.state.node_dir(spec.name).resolve(), "/etc/metalslurm", ("ro",)),
                    Mount(self.state.host_ca.resolve(), NODE_HOST_CA_DIR, ("ro",)),
                    # Users write to the shared paths: no set-uid program or device node
                    # there counts (as nfs_client mounts them on real clusters).
                    *(Mount(host_dir.resolve(), path,
                            ("nosuid", "nodev") if path in shared else ())
                      for host_dir, path in mounts)),
            ulimits=ULIMITS, private_cgroupns="slurm_compute" in spec.groups,
            restart_always=spec.node_state != "cloud")

    def running(self, node: str) -> bool:
        found = containers([f"{LABEL}={self.plan.cluster_name}", f"metalslurm.node={node}"])
        return bool(found) and found[0].get("State") == "running"

    def write_allow_file(self, image_of: Callable[[NodeSpec], str] | None = None) -> None:
        """The proxy's allow file: the elastic nodes, and for a launch-terminate one the
        container the proxy creates for it (from the image ``image_of`` names). Without
        launch-terminate nodes, one name a line (the format an older proxy reads).

        A launch-terminate node's image is held for this cluster (prepared.hold): no
        container uses it while the node is powered down, and another cluster's image
        build, which removes the older images of a kind that no container uses, would
        otherwise leave the next resume nothing to make the machine from."""
        elastic = [s for s in self.specs() if s.node_state == "cloud"]
        launched = [s for s in elastic if self.launched(s)]
        if launched:
            if image_of is None:
                raise LocalProviderError("launch-terminate nodes need their image to be known")
            held = hold(self.plan.cluster_name, sorted({image_of(s) for s in launched}))
            text = allow_file_text({self.container(s.name): Allowed(
                LAUNCH_TERMINATE, self.node_container(s, held[image_of(s)], self.node_mounts(s))
                .create_body()) if self.launched(s) else Allowed() for s in elastic})
        else:
            release(self.plan.cluster_name)
            text = "".join(f"{self.container(s.name)}\n" for s in elastic)
        # The proxy reads it on every request: it sees the old file or the new one.
        fd, tmp = tempfile.mkstemp(dir=self.allow_file.parent, prefix=".podman-proxy-allow.")
        with os.fdopen(fd, "w") as out:  # mkstemp: 0600
            out.write(text)
        os.replace(tmp, self.allow_file)

    @property
    def allow_file(self) -> Path:
        return self.state.root / "podman-proxy-allow"

    def ensure_podman_service(self, image_of: Callable[[NodeSpec], str] | None = None) -> None:
        """Run ``podman system service`` for the power programs, behind the proxy that
        passes on only the power driver's calls for this cluster's elastic nodes
        (infra/providers/podman_proxy.py), unless both already answer.

        There is no systemd on the host: each runs in its own session, its PID in the state
        directory; ``destroy`` stops them. Podman's own socket is in a root-only directory
        no node mounts; the proxy's, which the controller mounts, is root:slurm 0660 (Slurm
        runs the power programs as SlurmUser, GID 64030 on every node).
        """
        self._stop_unproxied_service()
        self.write_allow_file(image_of)
        api_dir = self.state.root / "podman-api"
        api = api_dir / "podman.sock"
        if not _podman_api_answers(api):
            api_dir.mkdir(parents=True, exist_ok=True)
            api_dir.chmod(0o700)
            api.unlink(missing_ok=True)
            self._start_daemon("podman-service", [
                podman_path(), "system", "service", "--time=0", f"unix://{api.resolve()}"], api)
        sock_dir = self.state.podman_socket_dir
        sock = sock_dir / "podman.sock"
        if _podman_api_answers(sock):
            return
        sock_dir.mkdir(parents=True, exist_ok=True)
        os.chown(sock_dir, 0, SLURM_GID)
        sock_dir.chmod(0o750)
        sock.unlink(missing_ok=True)
        self._start_daemon("podman-proxy", [
            sys.executable, "-m", "infra.providers.podman_proxy", "--listen",
            str(sock.resolve()), "--upstream", str(api.resolve()), "--allow",
            str(self.allow_file.resolve())], sock)
        os.chown(sock, 0, SLURM_GID)
        sock.chmod(0o660)

    def _stop_unproxied_service(self) -> None:
        """A podman service started before the proxy listens where the proxy must (a cluster
        made by an older metalslurm): stopped, so the proxy takes its place."""
        sock = str((self.state.podman_socket_dir / "podman.sock").resolve())
        try:
            pid = int((self.state.root / "podman-service.pid").read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except (OSError, ValueError):
            return
        if "service" in cmdline and f"unix://{sock}" in cmdline:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 15
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.2)

    def _start_daemon(self, name: str, argv: list[str], sock: Path) -> None:
        """``argv`` in its own session, its PID in ``<name>.pid``, until ``sock`` answers."""
        log = open(self.state.root / f"{name}.log", "ab")  # noqa: SIM115 - child owns it
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True, cwd=REPO_ROOT)
        log.close()
        (self.state.root / f"{name}.pid").write_text(f"{proc.pid}\n")
        deadline = time.monotonic() + 30
        while not _podman_api_answers(sock):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise LocalProviderError(f"{name} did not start; see {self.state.root}/"
                                         f"{name}.log")
            time.sleep(0.2)


    def _configured_marker(self, node: str) -> Path:
        return self.state.node_dir(node) / "configured"

    def prepare_elastic_nodes_for_configure(self) -> list[str]:
        """Power up the elastic nodes that were never configured (a first configure that
        failed half-way leaves some), so this run configures them, and pause the power
        reconciler meanwhile (it would take them for orphans); the playbook's last play
        starts it again."""
        todo = [s for s in self.specs() if s.node_state == "cloud" and not self.launched(s)
                and not self._configured_marker(s.name).exists() and not self.running(s.name)]
        if not todo:
            return []
        subprocess.run([podman_path(), "exec",
                        self.container(self.plan.controller), "systemctl",
                        "stop", "metalslurm-power-reconcile.timer"],
                       capture_output=True, check=False)
        podman("start", *[self.container(s.name) for s in todo], timeout=180)
        for spec in todo:
            self.wait_for_ssh(spec)
        return [s.name for s in todo]

    def running_elastic_nodes(self) -> list[str]:
        """The elastic nodes whose machines are up now (before a configure: those it will
        configure)."""
        return [s.name for s in self.specs() if s.node_state == "cloud" and self.running(s.name)]

    def mark_elastic_nodes_configured(self, nodes: list[str]) -> None:
        """After a successful configure: ``nodes``, the elastic nodes that were up for it,
        have been configured (the playbook may have powered them off since)."""
        for node in nodes:
            self._configured_marker(node).touch()

    def power_down_idle_elastic_nodes(self) -> list[str]:
        """Hand the elastic nodes that are up and idle after a configure to Slurm's own
        power down (its SuspendProgram stops them); nodes with jobs stay up. (The playbook's
        last play has already powered off those Slurm holds powered down, which were up only
        to be configured: roles/slurm_elastic/tasks/service.yml.)"""
        elastic = self.running_elastic_nodes()
        if not elastic:
            return []
        ctl = self.container(self.plan.controller)
        states = subprocess.run(
            [podman_path(), "exec", ctl, "sinfo", "--noheader", "--Node", "--format=%N %T",
             f"--nodes={','.join(elastic)}"], capture_output=True, text=True,
            check=False).stdout
        state_of = dict(line.split(maxsplit=1) for line in states.splitlines() if " " in line)
        idle = [n for n in elastic if state_of.get(n, "").strip() == "idle"]
        if idle:
            podman("exec", ctl, "scontrol", "update", f"nodename={','.join(idle)}",
                   "state=POWER_DOWN", "reason=metalslurm local up: idle after configure")
        return idle

    def leaving_nodes(self, specs: list[NodeSpec]) -> list[str]:
        """The nodes of this cluster's containers that the config no longer has."""
        wanted = {s.name for s in specs}
        return sorted({node for c in containers([f"{LABEL}={self.plan.cluster_name}"])
                       if (node := c.get("Labels", {}).get("metalslurm.node"))
                       and node not in wanted})

    def drain_leaving_nodes(self, specs: list[NodeSpec],
                            wait_s: float = slurm_leaving.DRAIN_WAIT_S,
                            poll_s: float = slurm_leaving.DRAIN_POLL_S) -> list[str]:
        """Before a node's machine is removed: drain the leaving nodes Slurm knows, so no new
        job starts there, and wait up to ``wait_s`` for the jobs on them to end; raise
        LeavingNodesBusy naming the jobs left (nothing removed, the nodes stay drained for
        the next run). A node back in the config that this drained is resumed. Nothing to
        ask without a running controller (a cluster being made, or taken down)."""
        leaving = self.leaving_nodes(specs)
        if not self.running(self.plan.controller):
            return leaving
        ctl = self.container(self.plan.controller)

        def run(argv: list[str]) -> tuple[int, str, str]:
            done = podman("exec", ctl, *argv, check=False)
            return done.returncode, done.stdout, done.stderr

        try:
            slurm_leaving.drain_leaving(run, (s.name for s in specs), wait_s,
                                        candidates=leaving, poll_s=poll_s, words=WORDS,
                                        log=self.log)
        except slurm_leaving.LeavingNodesBusy as err:
            raise LeavingNodesBusy(str(err)) from None
        except slurm_leaving.LeavingError as err:
            raise LocalProviderError(str(err)) from None
        return leaving

    def remove_nodes_not_in(self, specs: list[NodeSpec]) -> list[str]:
        """Remove this cluster's containers for nodes the config no longer has."""
        wanted = {s.name for s in specs}
        stale = [c["Names"][0] for c in containers([f"{LABEL}={self.plan.cluster_name}"])
                 if c.get("Labels", {}).get("metalslurm.node") not in wanted]
        if stale:
            self.log(f"removing nodes no longer in the config: {', '.join(stale)}")
            remove_containers(stale)
        return stale

    def wait_for_ssh(self, spec: NodeSpec) -> str:
        """Wait until sshd answers; return the node's known_hosts line."""
        name = self.container(spec.name)
        deadline = time.monotonic() + SSH_WAIT_SECONDS
        last = ""
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((spec.address, 22), timeout=2):
                    pass
                key = self.read_node_file(spec.name, "/etc/ssh/ssh_host_ed25519_key.pub")
                key_type, key_data = key.split()[:2]
                return f"{spec.name},{spec.address} {key_type} {key_data}"
            except (OSError, PodmanError, ValueError) as exc:
                last = str(exc)
                time.sleep(0.5)
        raise LocalProviderError(f"node {spec.name} ({spec.address}): sshd did not answer in "
                                 f"{SSH_WAIT_SECONDS} s ({last}); see 'podman logs {name}'")

    def provision(self, image: str, images: Mapping[str, str] | None = None,
                  drain_wait: float = slurm_leaving.DRAIN_WAIT_S) -> None:
        """Create network and nodes (in parallel) and known_hosts. Safe to re-run.

        ``images``: a prepared image per node kind (infra/providers/prepared.py); a node
        whose kind has none starts from ``image``. Nodes the config no longer has are
        drained first and removed once no job runs there (``drain_wait``: how long to wait
        for their jobs before refusing, with nothing changed)."""
        specs = self.specs()
        self.drain_leaving_nodes(specs, drain_wait)
        self.ensure_ssh_key()
        self.ensure_shared_dirs()
        self.ensure_host_ca()
        self.ensure_network()
        if self.has_elastic_nodes:
            self.ensure_podman_service(lambda s: (images or {}).get(kind_of(s.groups), image))
        else:
            release(self.plan.cluster_name)  # images held for elastic nodes it had
        self.remove_nodes_not_in(specs)
        known = {line.split(",", 1)[0]: line for line in
                 (_read(self.state.known_hosts) or "").splitlines() if "," in line}
        with ThreadPoolExecutor(max_workers=len(specs)) as pool:
            list(pool.map(lambda s: self.create_node(
                s, (images or {}).get(kind_of(s.groups), image)), specs))
            # A powered-down elastic node keeps the host key it made at its first boot; a
            # launch-terminate one has none until it is made (and a new one each time).
            waiting = [s for s in specs
                       if not (s.node_state == "cloud" and (s.name in known or self.launched(s))
                               and not self.running(s.name))]
            lines = dict(zip((s.name for s in waiting), pool.map(self.wait_for_ssh, waiting),
                             strict=True))
        self.state.known_hosts.write_text("".join(
            (lines.get(s.name) or known[s.name]) + "\n" for s in specs
            if s.name in lines or (s.name in known and not self.launched(s))))

    def connection_vars(self) -> dict[str, Any]:
        """How Ansible reaches the nodes, and how they share storage (inventory ``all`` vars)."""
        return {
            "ansible_user": "root",
            # Mitogen's connection timeout covers SSH and its bootstrap: a node of one local
            # cluster answering while another cluster's cold configure holds both cores took
            # over Ansible's default 10 s in CI ("Connection timed out").
            "ansible_ssh_timeout": LOCAL_CONNECT_TIMEOUT_S,
            "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_ssh_private_key_file": str(self.state.ssh_key.resolve()),
            "ansible_ssh_common_args": (
                f"-o UserKnownHostsFile={self.state.known_hosts.resolve()} "
                "-o StrictHostKeyChecking=yes"),
            "metalslurm_shared_storage": self.plan.shared_storage,
        }

    # ---- teardown and status -----------------------------------------------------------

    def destroy(self) -> int:
        """Remove every container and the network of this cluster, and its state dir."""
        return destroy_cluster(self.plan.cluster_name, self.state)

    def status(self) -> list[dict[str, str]]:
        rows = []
        by_node = {c["Labels"].get("metalslurm.node"): c
                   for c in containers([f"{LABEL}={self.plan.cluster_name}"])}
        for spec in self.specs():
            c = by_node.get(spec.name)
            state = c.get("State", "?") if c else "absent"
            if spec.node_state == "cloud" and (state in ("exited", "stopped", "created")
                                               or (self.launched(spec) and not c)):
                state = "powered-down"
            rows.append({"node": spec.name, "groups": ",".join(spec.groups),
                         "address": spec.address,
                         "gpus": f"{spec.gpu_count}x{spec.gpu_type}" if spec.gpu_count else "-",
                         "container": self.container(spec.name),
                         "state": state})
        return rows

    def read_node_file(self, node: str, path: str) -> str:
        """A file of a node's file system, read without entering the node (podman cp)."""
        with tempfile.TemporaryDirectory() as tmp:
            podman("cp", f"{self.container(node)}:{path}", f"{tmp}/file")
            return Path(tmp, "file").read_text()

    def exec(self, node: str, command: list[str], interactive: bool = False) -> int:
        """Run ``command`` on ``node`` as root, over SSH (see CONTAINER_SPEC)."""
        spec = self.plan.spec(node)  # an unknown node is an error naming the cluster's nodes
        args = ["ssh", "-i", str(self.state.ssh_key), "-o", "BatchMode=yes",
                "-o", f"UserKnownHostsFile={self.state.known_hosts}",
                "-o", "StrictHostKeyChecking=yes", "-o", "LogLevel=ERROR",
                "-t" if interactive else "-T", f"root@{spec.address}", "--", shlex.join(command)]
        return subprocess.run(args, check=False).returncode


def boot_time_stand_in(os_id: str) -> bool:
    """Whether the node containers of ``os_id`` report a reboot to Slurm as a server does: a
    container shares the host's uptime, so slurmd reads no reboot from it. With the stand-in
    slurmd runs with '-b' and the time the container started (slurm_compute's
    slurm_compute_boot_time_stand_in), which Slurm takes from 24.11 on."""
    release = SlurmVersion.parse(operating_systems.by_id(os_id).slurm_package)
    return release >= SLURMD_BOOT_TIME_SINCE


def write_local_inventory(cfg: ClusterConfig, cluster: LocalCluster,
                          secret_vars: dict[str, str]) -> Path:
    """The inventory of a local cluster: the schema every provider shares, the local
    connection settings, and the names (never the contents) of its secret files."""
    specs = with_switches(cfg, cluster.specs())
    all_vars = cluster_vars(cfg, specs)
    all_vars.update(cluster.connection_vars())
    all_vars.update(secret_vars)
    all_vars["slurm_compute_boot_time_stand_in"] = boot_time_stand_in(cfg.os)
    header = (f"# Written by 'metalslurm local up' for cluster {cfg.cluster_name}.\n"
              "# Regenerated on every 'up'; edit the stack config instead.\n")
    # The controller configures the machines the power driver makes anew (join kit).
    inventory = with_join(build_inventory(specs, all_vars), REPO_ROOT, cluster.state.join_kit,
                          cluster.state.join_key)
    return cluster.state.write_inventory(inventory, header)


def stop_podman_service(state: StateDir) -> None:
    """Stop the ``podman system service`` and its proxy a local cluster started (their PIDs
    are in the state directory; a PID that is now another process is left alone)."""
    root = str(state.root.resolve()).encode()
    for name, word in (("podman-proxy", b"podman_proxy"), ("podman-service", b"service")):
        try:
            pid = int((state.root / f"{name}.pid").read_text())
            cmdline = b" ".join(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"))
        except (OSError, ValueError):
            continue
        if word in cmdline and root in cmdline:
            os.kill(pid, signal.SIGTERM)


def destroy_cluster(cluster_name: str, state: StateDir) -> int:
    """Remove every container and the network of a local cluster, and its state directory.

    Needs only the cluster's name, so it works for any cluster whatever its config became
    (the Pulumi stack's delete step runs it with the name alone)."""
    names = [c["Names"][0] for c in containers([f"{LABEL}={cluster_name}"])]
    if names:
        remove_containers(names, stop_seconds=0)  # nothing of them is kept
    stop_podman_service(state)
    release(cluster_name)
    network = network_name(cluster_name)
    if podman("network", "exists", network, check=False).returncode == 0:
        podman("network", "rm", "-f", network)
    state.remove()
    return len(names)
