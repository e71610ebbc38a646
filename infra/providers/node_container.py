"""What a local node's container is, in one place: the ``podman run`` arguments ``local up``
uses, and the same container as the create body of podman's REST API, which the podman
proxy sends when the power driver launches an elastic node in ``launch-terminate`` mode
(infra/providers/podman_proxy.py). One description, two renderings: a node launched by
the power driver is the container ``local up`` would have made."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RUNTIME = "runc"  # crun refuses --systemd=always on this host's hybrid cgroup layout


def node_mac(address: str) -> str:
    """The hardware address of the node at IPv4 ``address``: fixed, so a container made
    again at that address is reached at once through the neighbour entries others hold
    (podman's random one changes with every container), and set, so the node's udev leaves
    it alone (its MACAddressPolicy=persistent rewrites a random one while the node boots,
    and peers then send to the old one until their entry goes stale: about 30 s). A
    locally administered unicast address: 02:6d ('m') and the four bytes of ``address``."""
    try:
        octets = ipaddress.IPv4Address(address).packed
    except ValueError:
        raise ValueError(f"not an IPv4 address: {address!r}") from None
    return ":".join(f"{b:02x}" for b in (0x02, 0x6D, *octets))


@dataclass(frozen=True)
class Mount:
    source: Path
    destination: str
    options: tuple[str, ...] = ()  # "ro", "nosuid", "nodev"


@dataclass(frozen=True)
class NodeContainer:
    name: str
    image: str
    hostname: str
    network: str
    address: str
    labels: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    ulimits: tuple[str, ...] = ()  # "nofile=8192:8192"
    # Compute nodes: the cgroup paths a job sees are the ones mounted at /sys/fs/cgroup
    # (infra/providers/local.py, CONTAINER_SPEC).
    private_cgroupns: bool = False
    # Static nodes: started again when their systemd exits on a reboot (Slurm's
    # RebootProgram, 'metalslurm maintain'), as firmware boots a server again; podman leaves
    # a container it was told to stop stopped. Elastic nodes: the power driver's.
    restart_always: bool = False
    command: tuple[str, ...] = ("/sbin/init",)  # systemd as PID 1

    def run_args(self, verb: str = "run") -> list[str]:
        """``podman`` arguments that run it (detached, systemd as PID 1), or with ``verb``
        "create", that create it stopped."""
        args = ["--runtime", RUNTIME, *((verb, "-d") if verb == "run" else (verb,)),
                "--privileged", "--systemd=always",
                "--name", self.name, "--hostname", self.hostname, "--no-hosts",
                "--network", self.network, "--ip", self.address,
                "--mac-address", node_mac(self.address)]
        for name, value in self.labels.items():
            args += ["--label", f"{name}={value}"]
        for m in self.mounts:
            args += ["-v", f"{m.source}:{m.destination}"
                     + (f":{','.join(m.options)}" if m.options else "")]
        for limit in self.ulimits:
            args += ["--ulimit", limit]
        if self.private_cgroupns:
            args.append("--cgroupns=private")
        if self.restart_always:
            args.append("--restart=always")
        return [*args, self.image, *self.command]

    def create_body(self) -> dict[str, Any]:
        """The same container as podman's libpod create body (``POST /containers/create``)."""
        limits = []
        for limit in self.ulimits:
            kind, _, values = limit.partition("=")
            soft, _, hard = values.partition(":")
            limits.append({"type": kind, "soft": int(soft), "hard": int(hard or soft)})
        return {
            "name": self.name, "image": self.image, "command": list(self.command),
            "hostname": self.hostname, "privileged": True, "systemd": "always",
            "oci_runtime": RUNTIME, "use_image_hosts": True, "sdnotifyMode": "container",
            "labels": dict(self.labels),
            "netns": {"nsmode": "bridge"},
            "Networks": {self.network: {"static_ips": [self.address],
                                         "static_mac": node_mac(self.address)}},
            "mounts": [{"type": "bind", "source": str(m.source), "destination": m.destination,
                        "options": ["rbind", *m.options]} for m in self.mounts],
            "r_limits": limits,
            "httpproxy": True,  # the host's proxy variables, as 'podman run' passes them
            # Otherwise podman's default, as 'podman run' without --cgroupns.
            **({"cgroupns": {"nsmode": "private"}} if self.private_cgroupns else {}),
            **({"restart_policy": "always"} if self.restart_always else {}),
        }
