"""The cluster's ports are reachable between the hosts that talk over them, whatever firewall
a host came with (roles/host_firewall opens them in nftables): each host reaches the daemons
it is a client of, at their private addresses, and slurmctld reaches every slurmd."""

from __future__ import annotations

from ansible_collections.metalslurm.cluster.plugins.module_utils.cluster_defaults import (
    SLURMCTLD_PORT,
    SLURMD_PORT,
    SLURMDBD_PORT,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.firewall import NFS_PORT


def unreachable(host, targets: list[tuple[str, str, int]]) -> list[str]:
    """The (name, address, port) of ``targets`` that ``host`` cannot open a TCP connection to
    within 3 s (one command for all of them)."""
    script = "; ".join(f"timeout 3 bash -c 'exec 3<>/dev/tcp/{a}/{p}' 2>/dev/null "
                       f"|| echo '{n} {a}:{p}'" for n, a, p in targets)
    return host.check_output(script).splitlines() if targets else []


def address(cluster, name: str) -> str:
    return str(cluster.hostvars[name]["metalslurm_address"])


def test_this_host_reaches_the_daemons_it_talks_to(host, host_name, cluster):
    groups = cluster.groups_of(host_name)
    targets = [(cluster.controller, address(cluster, cluster.controller), SLURMCTLD_PORT)]
    if "login" in groups or "slurm_controller" in groups:
        targets += [(dbd, address(cluster, dbd), SLURMDBD_PORT)
                    for dbd in cluster.hosts_in("slurmdbd")]
    if cluster.shared_storage == "nfs" and "nfs_server" not in groups:
        targets += [(nfs, address(cluster, nfs), NFS_PORT)
                    for nfs in cluster.hosts_in("nfs_server")]
    assert unreachable(host, targets) == []


def test_the_controller_reaches_every_slurmd(controller, cluster):
    live = [h for h in cluster.compute if h not in cluster.powered_down]
    assert unreachable(controller, [(h, address(cluster, h), SLURMD_PORT) for h in live]) == []
