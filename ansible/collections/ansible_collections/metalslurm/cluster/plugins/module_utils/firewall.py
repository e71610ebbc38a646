"""What a host firewall on each node must let in for the cluster to work (roles/host_firewall).

A rented server often comes with its own nftables ruleset whose input chain drops what it
does not name. :func:`openings` lists, for one host of the inventory, the cluster's traffic
it receives, by who sends it: every daemon's port from the private network, the exporters'
from the monitoring host, and all of the job traffic between compute nodes (MPI, NCCL's
sockets and PMIx pick their ports at run time, so those are opened host by host, not port by
port). The role's ``metalslurm-firewall`` program puts these rules at the top of each input
chain of the host's own ruleset (an accept in a table of its own would not do: nftables
still runs every other input chain, and their drop policy). The pre-flight
(infra/ops/preflight.py) prints :func:`summary` to the operator of a host it cannot open.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.cluster_defaults import (
    SLURMCTLD_PORT,
    SLURMD_PORT,
    SLURMDBD_PORT,
    SRUN_PORT_RANGE,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.inventory_contract import (
    BACKUP_GROUP,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.monitoring import PORTS

__all__ = ["NFS_PORT", "SSH_PORT", "TAG", "FirewallError", "openings", "summary"]

SSH_PORT = 22
NFS_PORT = 2049  # NFSv4 only (roles/nfs_server): no rpcbind, statd or mountd
# The first word of every rule's comment: metalslurm-firewall replaces the rules it finds
# with it and touches no other.
TAG = "metalslurm"


class FirewallError(ValueError):
    """The inventory gives no address to open a rule to."""


def _address(addresses: Mapping[str, Any], host: str) -> str:
    address = addresses.get(host)
    try:
        return str(ipaddress.IPv4Address(str(address)))
    except ValueError:
        raise FirewallError(f"{host}: metalslurm_address {address!r} is not an IPv4 address; "
                            "give each host its private address") from None


def _ports(ports: Sequence[int | str]) -> str:
    unique = sorted({str(p) for p in ports}, key=lambda p: int(p.split("-")[0]))
    return unique[0] if len(unique) == 1 else "{ " + ", ".join(unique) + " }"


def _saddr(sources: Sequence[str]) -> str:
    unique = sorted(set(sources), key=lambda a: ipaddress.ip_network(a, strict=False))
    return unique[0] if len(unique) == 1 else "{ " + ", ".join(unique) + " }"


def _rule(why: str, body: str) -> dict[str, str]:
    # The comment carries a digest of the rule, so a rule whose text changed is told from
    # one that is still right by its comment alone (nft -j does not give rules back as text).
    digest = hashlib.sha256(body.encode()).hexdigest()[:8]
    return {"rule": body, "comment": f"{TAG} {digest}: {why}"[:120]}


def openings(host: str, groups: Mapping[str, Any], addresses: Mapping[str, Any], cidr: str,
             monitoring_host: str = "", rest_port: int | None = None,
             submit_host: str = "") -> list[dict[str, str]]:
    """The rules (nft rule text, comment) that let the cluster's traffic into ``host``.

    ``addresses`` maps each host to its private address (metalslurm_address); ``cidr`` is
    the private network; ``monitoring_host`` the host running Prometheus ('' when
    monitoring is off); ``rest_port`` slurmrestd's port when the REST API is on (it runs on
    ``submit_host``, as srun does where no login node exists)."""
    try:
        network = str(ipaddress.IPv4Network(str(cidr), strict=False))
    except ValueError:
        raise FirewallError(f"metalslurm_private_cidr {cidr!r} is not an IPv4 network in CIDR "
                            "notation (e.g. 10.0.0.0/24)") from None

    def member(group: str) -> bool:
        return host in (groups.get(group) or [])

    private: list[int | str] = [SSH_PORT]
    private_why = ["ssh"]
    if member("slurm_controller") or member(BACKUP_GROUP):
        private.append(SLURMCTLD_PORT)
        private_why.append("slurmctld")
    if member("slurmdbd"):
        private.append(SLURMDBD_PORT)
        private_why.append("slurmdbd")
    if member("nfs_server"):
        private.append(NFS_PORT)
        private_why.append("nfs")
    if member("slurm_compute") or member("login"):
        # slurmd; sackd on login nodes takes slurmctld's configuration pushes on it too.
        private.append(SLURMD_PORT)
        private_why.append("slurmd" if member("slurm_compute") else "sackd")
    # srun runs on login nodes, in batch scripts on compute nodes, and on the controller
    # (verify, the acceptance gate, admins): slurmctld and the steps connect back to it.
    if member("slurm_compute") or member("login") or member("slurm_controller") \
            or member(BACKUP_GROUP) or host == submit_host:
        private.append(SRUN_PORT_RANGE)
        private_why.append("srun")
    if rest_port and host == submit_host:
        private.append(int(rest_port))
        private_why.append("slurmrestd")
    if monitoring_host and host == monitoring_host:
        private += [PORTS["prometheus"], PORTS["alertmanager"]]
        private_why += ["prometheus", "alertmanager"]
    rules = [
        _rule("replies to this host's own connections",
              f"ip saddr {network} ct state established,related accept"),
        _rule(" ".join(private_why) + " from the private network",
              f"ip saddr {network} tcp dport {_ports(private)} accept"),
    ]
    if monitoring_host:
        scraped: list[int | str] = [PORTS["node_exporter"]]
        if member("slurm_controller") or member(BACKUP_GROUP):
            scraped.append(PORTS["slurm_exporter"])
        if member("slurm_compute"):
            scraped.append(PORTS["dcgm_exporter"])
        rules.append(_rule("exporters from the monitoring host",
                           f"ip saddr {_address(addresses, monitoring_host)} "
                           f"tcp dport {_ports(scraped)} accept"))
    if member("slurm_compute"):
        peers = [_address(addresses, h) for h in groups.get("slurm_compute") or [] if h != host]
        if peers:
            rules.append(_rule("job traffic between compute nodes (MPI, NCCL, PMIx)",
                               f"ip saddr {_saddr(peers)} accept"))
    return rules


def summary() -> str:
    """The cluster's ports in words, for an operator opening them by hand."""
    return (f"SSH {SSH_PORT}/tcp, slurmctld {SLURMCTLD_PORT}/tcp, slurmd and sackd "
            f"{SLURMD_PORT}/tcp, slurmdbd {SLURMDBD_PORT}/tcp, srun {SRUN_PORT_RANGE}/tcp, "
            f"NFS {NFS_PORT}/tcp from the private network; the exporters "
            f"({PORTS['node_exporter']}, {PORTS['slurm_exporter']}, {PORTS['dcgm_exporter']}/tcp) "
            "from the monitoring host; any port between compute nodes")
