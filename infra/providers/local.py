"""The local provider: a cluster of privileged systemd containers on one podman network.

The podman network is the cluster's private subnet; every node is a container running
systemd and sshd, reached by Ansible and testinfra over SSH exactly as a real node is.
GPU nodes get fake ``/dev/nvidia*`` device nodes (created at boot by a unit in the
image), so Slurm's GRES scheduling and device cgroups are real.

The functions here are shared by ``metalslurm local up`` and (later) the Pulumi
``local`` stack: one implementation, two drivers.
"""

from __future__ import annotations

import base64
import ipaddress
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from infra.config import ClusterConfig
from infra.inventory import NodeSpec, build_inventory, cluster_vars
from infra.providers.podman import PodmanError, containers, networks, podman, podman_path

SLURM_GID = 64030  # the slurm group on every node (roles/common)
CONTROLLER_HOST_INDEX = 10  # controller gets <network>.10, compute nodes .11 onwards
LABEL = "metalslurm.cluster"
SSH_WAIT_SECONDS = 90
ULIMITS = ("nofile=8192:8192", "nproc=8192:8192")  # at or below this host's hard limits


class LocalProviderError(RuntimeError):
    pass


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def _write_secret(path: Path, make: Callable[[], str]) -> None:
    """Create ``path`` (mode 0600 from the start) holding ``make()``, unless it exists."""
    if path.exists():
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(make() + "\n")


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


def node_specs(cfg: ClusterConfig, shared_storage: str | None = None) -> list[NodeSpec]:
    """Controller first, then every compute node, with addresses in the private subnet.

    With NFS storage the NFS server node takes the last address of the subnet.
    """
    if shared_storage is None:
        shared_storage = storage_mode(cfg)
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
                power={"driver": "local", "container": container_name(cfg, name)}))
            index += 1
    return specs


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


def container_name(cfg: ClusterConfig, node: str) -> str:
    return f"{cfg.cluster_name}-{node}"


def network_name(cfg: ClusterConfig) -> str:
    return f"{cfg.cluster_name}-net"


@dataclass
class LocalCluster:
    cfg: ClusterConfig
    state_dir: Path
    log: Callable[[str], None] = print

    @property
    def inventory_path(self) -> Path:
        return self.state_dir / "inventory.yml"

    @property
    def ssh_key(self) -> Path:
        return self.state_dir / "ssh" / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.state_dir / "ssh" / "known_hosts"

    @property
    def munge_key_file(self) -> Path:
        return self.state_dir / "secrets" / "munge.key.b64"

    @property
    def slurmdbd_password_file(self) -> Path:
        return self.state_dir / "secrets" / "slurmdbd.password"

    @property
    def shared_dir(self) -> Path:
        return self.state_dir / "shared"

    @property
    def shared_storage(self) -> str:
        return storage_mode(self.cfg)

    @property
    def podman_socket_dir(self) -> Path:
        return self.state_dir / "podman"

    @property
    def has_elastic_nodes(self) -> bool:
        return bool(self.cfg.elastic_node_names())

    def specs(self) -> list[NodeSpec]:
        specs = node_specs(self.cfg, self.shared_storage)
        if not self.has_elastic_nodes:
            return specs
        hardware = host_hardware(Path("/proc/cpuinfo").read_text(),
                                 Path("/proc/meminfo").read_text())
        return [replace(s, extra_vars={**s.extra_vars, "metalslurm_node_options": hardware})
                if s.node_state == "cloud" else s for s in specs]

    def bind_mounts(self) -> list[tuple[Path, str]]:
        """(host directory, node path) for every shared path in host-bind mode."""
        if self.shared_storage != "host-bind":
            return []
        return [(self.shared_dir / p.strip("/").replace("/", "_"), p)
                for p in self.cfg.storage.paths]

    # ---- checks that run before anything is created ---------------------------------

    def preflight(self) -> None:
        """Fail, before creating anything, on what would break half-way."""
        for tool in ("podman", "runc", "ssh", "ssh-keygen"):
            if shutil.which(tool) is None:
                raise LocalProviderError(f"{tool} is not installed: run 'make deps'")
        if os.geteuid() != 0:
            raise LocalProviderError("the local cluster needs root (privileged podman containers)")
        want = self.cfg.private_cidr
        for net in networks():
            for sub in net.get("subnets") or []:
                try:
                    theirs = ipaddress.ip_network(sub["subnet"])
                except (KeyError, ValueError):
                    continue
                if net["name"] == network_name(self.cfg):
                    if theirs != want:
                        raise LocalProviderError(
                            f"podman network {net['name']} exists with subnet {theirs}, the "
                            f"config says {want}: run 'metalslurm local down' first")
                elif theirs.overlaps(want):
                    raise LocalProviderError(
                        f"metalslurm:privateCidr {want} overlaps podman network {net['name']} "
                        f"({theirs}); choose another range")

    # ---- provisioning ------------------------------------------------------------------

    def ensure_secrets(self) -> None:
        """SSH key and munge key for this cluster, generated once, readable by root only."""
        for d in (self.ssh_key.parent, self.munge_key_file.parent):
            d.mkdir(parents=True, exist_ok=True)
            d.chmod(0o700)
        if not self.ssh_key.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C",
                            f"metalslurm-{self.cfg.cluster_name}", "-f", str(self.ssh_key)],
                           check=True)
        _write_secret(self.munge_key_file,
                      lambda: base64.b64encode(secrets.token_bytes(1024)).decode())
        _write_secret(self.slurmdbd_password_file, lambda: secrets.token_urlsafe(32))

    def ensure_shared_dirs(self) -> None:
        """One host directory per shared path (host-bind mode): /home 0755, others 1777."""
        for host_dir, path in self.bind_mounts():
            if not host_dir.exists():
                host_dir.mkdir(parents=True)
                host_dir.chmod(0o755 if path == "/home" else 0o1777)

    def ensure_network(self) -> None:
        name = network_name(self.cfg)
        if podman("network", "exists", name, check=False).returncode == 0:
            return
        gateway = next(self.cfg.private_cidr.hosts())
        podman("network", "create", "--subnet", str(self.cfg.private_cidr), "--gateway",
               str(gateway), "--label", f"{LABEL}={self.cfg.cluster_name}", name)

    def _node_dir(self, node: str) -> Path:
        return self.state_dir / "nodes" / node

    def create_node(self, spec: NodeSpec, image: str) -> None:
        """Start one node container (or leave a running one as it is)."""
        name = container_name(self.cfg, spec.name)
        found = containers([f"{LABEL}={self.cfg.cluster_name}", f"metalslurm.node={spec.name}"])
        node_dir = self._node_dir(spec.name)
        mounts = self.bind_mounts()
        if "slurm_controller" in spec.groups and self.has_elastic_nodes:
            # The power programs on the controller start and stop elastic node containers
            # through podman's REST API (the socket's directory, mounted at /run/podman).
            mounts = [*mounts, (self.podman_socket_dir, "/run/podman")]
        node_env = (f"METALSLURM_FAKE_GPUS={spec.gpu_count}\n"
                    f"METALSLURM_SHARED={','.join(p for _d, p in mounts)}\n")
        public_key = self.ssh_key.with_suffix(".pub").read_text()
        current = (_read(node_dir / "node.env"), _read(node_dir / "authorized_keys"))
        if found and current == (node_env, public_key):
            if found[0].get("State") != "running" and spec.node_state != "cloud":
                podman("start", name)  # a powered-down elastic node stays down
            return
        if found:
            # Its bind-mounted files are gone or stale (state directory removed, GPU
            # count changed): a node container is cheap, make it again.
            self.log(f"recreating {name}: its node files changed")
            podman("rm", "-f", "-t", "2", name, timeout=180)
        node_dir.mkdir(parents=True, exist_ok=True)
        (node_dir / "node.env").write_text(node_env)
        (node_dir / "authorized_keys").write_text(public_key)
        args = ["--runtime", "runc", "run", "-d", "--privileged", "--systemd=always",
                "--name", name, "--hostname", spec.name, "--no-hosts",
                "--network", network_name(self.cfg), "--ip", spec.address,
                "--label", f"{LABEL}={self.cfg.cluster_name}",
                "--label", f"metalslurm.node={spec.name}",
                "--label", f"metalslurm.groups={','.join(spec.groups)}",
                "-v", f"{node_dir.resolve()}:/etc/metalslurm:ro"]
        for host_dir, path in mounts:
            args += ["-v", f"{host_dir.resolve()}:{path}"]
        for limit in ULIMITS:
            args += ["--ulimit", limit]
        podman(*args, image, "/sbin/init")

    def running(self, node: str) -> bool:
        found = containers([f"{LABEL}={self.cfg.cluster_name}", f"metalslurm.node={node}"])
        return bool(found) and found[0].get("State") == "running"

    def ensure_podman_service(self) -> None:
        """Run ``podman system service`` for the power programs, unless it already answers.

        There is no systemd on the host: the service runs in its own session, its PID in
        the state directory; ``destroy`` stops it. The socket is root:slurm 0660 (Slurm runs
        the power programs as SlurmUser, GID 64030 on every node).
        """
        sock_dir = self.podman_socket_dir
        sock = sock_dir / "podman.sock"
        if _podman_api_answers(sock):
            return
        sock_dir.mkdir(parents=True, exist_ok=True)
        os.chown(sock_dir, 0, SLURM_GID)
        sock_dir.chmod(0o750)
        sock.unlink(missing_ok=True)
        log = open(self.state_dir / "podman-service.log", "ab")  # noqa: SIM115 - child owns it
        proc = subprocess.Popen([podman_path(), "system", "service", "--time=0",
                                 f"unix://{sock.resolve()}"], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log, start_new_session=True)
        log.close()
        (self.state_dir / "podman-service.pid").write_text(f"{proc.pid}\n")
        deadline = time.monotonic() + 30
        while not _podman_api_answers(sock):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise LocalProviderError(
                    f"podman system service did not start; see {self.state_dir}/"
                    "podman-service.log")
            time.sleep(0.2)
        os.chown(sock, 0, SLURM_GID)
        sock.chmod(0o660)

    def stop_podman_service(self) -> None:
        pid_file = self.state_dir / "podman-service.pid"
        try:
            pid = int(pid_file.read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            return
        if b"service" in cmdline and str(self.podman_socket_dir.resolve()).encode() in b" ".join(
                cmdline):
            os.kill(pid, signal.SIGTERM)

    def _configured_marker(self, node: str) -> Path:
        return self._node_dir(node) / "configured"

    def prepare_elastic_nodes_for_configure(self) -> list[str]:
        """Power up the elastic nodes that were never configured (a first configure that
        failed half-way leaves some), so this run configures them, and pause the power
        reconciler meanwhile (it would take them for orphans); the playbook's last play
        starts it again."""
        todo = [s for s in self.specs() if s.node_state == "cloud"
                and not self._configured_marker(s.name).exists() and not self.running(s.name)]
        if not todo:
            return []
        subprocess.run([podman_path(), "exec",
                        container_name(self.cfg, self.cfg.controller_name), "systemctl",
                        "stop", "metalslurm-power-reconcile.timer"],
                       capture_output=True, check=False)
        podman("start", *[container_name(self.cfg, s.name) for s in todo], timeout=180)
        for spec in todo:
            self.wait_for_ssh(spec)
        return [s.name for s in todo]

    def mark_elastic_nodes_configured(self) -> None:
        """After a successful configure: every elastic node that is up has been configured."""
        for spec in self.specs():
            if spec.node_state == "cloud" and self.running(spec.name):
                self._configured_marker(spec.name).touch()

    def power_down_idle_elastic_nodes(self) -> list[str]:
        """Power down the elastic nodes that are up without work after a configure.

        A node Slurm holds powered down (all of them on the first 'up': they ran only to be
        configured) is stopped here; an idle one that Slurm had powered up is handed to
        Slurm's own power down (its SuspendProgram stops it); nodes with jobs stay up.
        """
        elastic = [s.name for s in self.specs() if s.node_state == "cloud"
                   and self.running(s.name)]
        if not elastic:
            return []
        ctl = container_name(self.cfg, self.cfg.controller_name)
        states = subprocess.run(
            [podman_path(), "exec", ctl, "sinfo", "--noheader", "--Node", "--format=%N %T",
             f"--nodes={','.join(elastic)}"], capture_output=True, text=True,
            check=False).stdout
        state_of = dict(line.split(maxsplit=1) for line in states.splitlines() if " " in line)
        off = [n for n in elastic if state_of.get(n, "idle~").strip().endswith("~")]
        idle = [n for n in elastic if state_of.get(n, "").strip() == "idle"]
        if off:
            podman("stop", "-t", "10", *[container_name(self.cfg, n) for n in off],
                   timeout=180)
        if idle:
            podman("exec", ctl, "scontrol", "update", f"nodename={','.join(idle)}",
                   "state=POWER_DOWN", "reason=metalslurm local up: idle after configure")
        return off + idle

    def remove_nodes_not_in(self, specs: list[NodeSpec]) -> list[str]:
        """Remove this cluster's containers for nodes the config no longer has."""
        wanted = {s.name for s in specs}
        stale = [c["Names"][0] for c in containers([f"{LABEL}={self.cfg.cluster_name}"])
                 if c.get("Labels", {}).get("metalslurm.node") not in wanted]
        if stale:
            self.log(f"removing nodes no longer in the config: {', '.join(stale)}")
            podman("rm", "-f", "-t", "2", *stale, timeout=180)
        return stale

    def wait_for_ssh(self, spec: NodeSpec) -> str:
        """Wait until sshd answers; return the node's known_hosts line."""
        name = container_name(self.cfg, spec.name)
        deadline = time.monotonic() + SSH_WAIT_SECONDS
        last = ""
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((spec.address, 22), timeout=2):
                    pass
                key = podman("exec", name, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout
                key_type, key_data = key.split()[:2]
                return f"{spec.name},{spec.address} {key_type} {key_data}"
            except (OSError, PodmanError, ValueError) as exc:
                last = str(exc)
                time.sleep(0.5)
        raise LocalProviderError(f"node {spec.name} ({spec.address}): sshd did not answer in "
                                 f"{SSH_WAIT_SECONDS} s ({last}); see 'podman logs {name}'")

    def provision(self, image: str) -> Path:
        """Create network and nodes (in parallel) and write the inventory. Safe to re-run."""
        specs = self.specs()
        self.ensure_secrets()
        self.ensure_shared_dirs()
        self.ensure_network()
        if self.has_elastic_nodes:
            self.ensure_podman_service()
        self.remove_nodes_not_in(specs)
        known = {line.split(",", 1)[0]: line for line in
                 (_read(self.known_hosts) or "").splitlines() if "," in line}
        with ThreadPoolExecutor(max_workers=len(specs)) as pool:
            list(pool.map(lambda s: self.create_node(s, image), specs))
            # A powered-down elastic node keeps the host key it made at its first boot.
            waiting = [s for s in specs
                       if not (s.node_state == "cloud" and s.name in known
                               and not self.running(s.name))]
            lines = dict(zip((s.name for s in waiting), pool.map(self.wait_for_ssh, waiting),
                             strict=True))
        self.known_hosts.write_text(
            "\n".join(lines.get(s.name) or known[s.name] for s in specs) + "\n")
        self.write_inventory(specs)
        return self.inventory_path

    def connection_vars(self) -> dict[str, Any]:
        return {
            "ansible_user": "root",
            "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_ssh_private_key_file": str(self.ssh_key.resolve()),
            "ansible_ssh_common_args": (f"-o UserKnownHostsFile={self.known_hosts.resolve()} "
                                        "-o StrictHostKeyChecking=yes"),
            # Operator-side files (mode 0600) with the munge key (base64) and the
            # accounting database password; the secrets themselves are never written
            # into the inventory.
            "munge_key_b64_file": str(self.munge_key_file.resolve()),
            "slurmdbd_password_file": str(self.slurmdbd_password_file.resolve()),
        }

    def write_inventory(self, specs: list[NodeSpec]) -> None:
        all_vars = cluster_vars(self.cfg, specs)
        all_vars["metalslurm_shared_storage"] = self.shared_storage
        all_vars.update(self.connection_vars())
        inventory = build_inventory(specs, all_vars)
        header = (f"# Written by 'metalslurm local up' for cluster {self.cfg.cluster_name}.\n"
                  "# Regenerated on every 'up'; edit the stack config instead.\n")
        self.inventory_path.write_text(header + yaml.safe_dump(inventory, sort_keys=False))

    # ---- teardown and status -----------------------------------------------------------

    def destroy(self) -> int:
        """Remove every container and the network of this cluster, and its state dir."""
        found = containers([f"{LABEL}={self.cfg.cluster_name}"])
        names = [c["Names"][0] for c in found]
        if names:
            podman("rm", "-f", "-t", "2", *names, timeout=180)
        self.stop_podman_service()
        if podman("network", "exists", network_name(self.cfg), check=False).returncode == 0:
            podman("network", "rm", "-f", network_name(self.cfg))
        if self.state_dir.exists():
            shutil.rmtree(self.state_dir)
        return len(names)

    def status(self) -> list[dict[str, str]]:
        rows = []
        by_node = {c["Labels"].get("metalslurm.node"): c
                   for c in containers([f"{LABEL}={self.cfg.cluster_name}"])}
        for spec in self.specs():
            c = by_node.get(spec.name)
            state = c.get("State", "?") if c else "absent"
            if spec.node_state == "cloud" and state in ("exited", "stopped", "created"):
                state = "powered-down"
            rows.append({"node": spec.name, "groups": ",".join(spec.groups),
                         "address": spec.address,
                         "gpus": f"{spec.gpu_count}x{spec.gpu_type}" if spec.gpu_count else "-",
                         "container": container_name(self.cfg, spec.name),
                         "state": state})
        return rows

    def exec(self, node: str, command: list[str], interactive: bool = False) -> int:
        if node not in {s.name for s in self.specs()}:
            raise LocalProviderError(f"no node {node!r} in cluster {self.cfg.cluster_name}; "
                                     f"nodes: {', '.join(s.name for s in self.specs())}")
        args = ["podman", "exec"]
        if interactive:
            args.append("-it")
        args += [container_name(self.cfg, node), *command]
        return subprocess.run(args, check=False).returncode
