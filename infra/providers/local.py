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
import socket
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infra.config import ClusterConfig
from infra.inventory import NodeSpec, build_inventory, cluster_vars
from infra.providers.podman import PodmanError, containers, networks, podman

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
        for name in pool.node_names():
            specs.append(NodeSpec(
                name=name, address=str(hosts[index]), groups=("slurm_compute",),
                gpu_type=pool.gpu_type, gpu_count=pool.gpu_count, node_state="static",
                power={"driver": "local", "container": container_name(cfg, name)}))
            index += 1
    return specs


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

    def specs(self) -> list[NodeSpec]:
        return node_specs(self.cfg, self.shared_storage)

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
        node_env = (f"METALSLURM_FAKE_GPUS={spec.gpu_count}\n"
                    f"METALSLURM_SHARED={','.join(p for _d, p in mounts)}\n")
        public_key = self.ssh_key.with_suffix(".pub").read_text()
        current = (_read(node_dir / "node.env"), _read(node_dir / "authorized_keys"))
        if found and current == (node_env, public_key):
            if found[0].get("State") != "running":
                podman("start", name)
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
        self.remove_nodes_not_in(specs)
        with ThreadPoolExecutor(max_workers=len(specs)) as pool:
            list(pool.map(lambda s: self.create_node(s, image), specs))
            lines = list(pool.map(self.wait_for_ssh, specs))
        self.known_hosts.write_text("\n".join(lines) + "\n")
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
            rows.append({"node": spec.name, "groups": ",".join(spec.groups),
                         "address": spec.address,
                         "gpus": f"{spec.gpu_count}x{spec.gpu_type}" if spec.gpu_count else "-",
                         "container": container_name(self.cfg, spec.name),
                         "state": c.get("State", "?") if c else "absent"})
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
