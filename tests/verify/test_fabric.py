"""The fabric: RDMA packages and NCCL settings on compute nodes (roles/nccl_ib), and the
switch topology Slurm schedules with (roles/slurm_topology).

NCCL's settings are checked against what the node itself shows (sysfs, its addresses),
not against the role's own derivation. Port states and rates need real HCAs: on nodes
without one (the local cluster) those checks skip, saying so.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

ROLE_DEFAULTS = Path(__file__).resolve().parents[2] / "roles/nccl_ib/defaults/main.yml"
# Where slurmd keeps the files a configless controller serves (Debian's slurmd runs with
# RuntimeDirectory=slurm; older releases cache them in the spool directory).
CONFIGLESS_CACHES = ("/run/slurm/conf", "/var/lib/slurm/slurmd/conf-cache")
# Each port of each HCA: "<device>:<port> <state> <rate Gb/s> <link layer>".
PORTS = r"""for p in /sys/class/infiniband/*/ports/*; do
  [ -e "$p/state" ] || continue
  d=${p%/ports/*}
  echo "${d##*/}:${p##*/} $(cut -d' ' -f2 $p/state) $(cut -d' ' -f1 $p/rate) $(cat $p/link_layer)"
done"""


@pytest.fixture(autouse=True)
def _only_compute_nodes(request: pytest.FixtureRequest, cluster) -> None:
    if "host" in request.fixturenames:
        name = str(request.getfixturevalue("host").backend.host)
        if "slurm_compute" not in cluster.groups_of(name):
            pytest.skip(f"{name} runs no jobs")


def _nccl(cluster) -> dict:
    return cluster.var("metalslurm_nccl") or {}


def _key_values(text: str, prefix: str = "") -> dict[str, str]:
    pairs = {}
    for line in text.splitlines():
        if line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.removeprefix(prefix).partition("=")
        pairs[name] = value
    return pairs


def _ports(host) -> dict[str, tuple[str, int, str]]:
    out = host.check_output(PORTS)
    return {f[0]: (f[1], int(f[2]), " ".join(f[3:])) for f in map(str.split, out.splitlines())}


def _conf(host, cluster) -> dict[str, str]:
    if not _nccl(cluster).get("enabled", True):
        pytest.skip("metalslurm:nccl.enabled is false: no nccl.conf is written")
    return _key_values(host.file("/etc/nccl.conf").content_string)


@pytest.mark.parametrize("package", yaml.safe_load(ROLE_DEFAULTS.read_text())["nccl_ib_packages"])
def test_the_rdma_packages_are_installed(host, package):
    assert host.package(package).is_installed


def test_nccl_bootstraps_over_the_private_network_interface(host, cluster):
    conf = _conf(host, cluster)
    name = str(host.backend.host)
    address = cluster.hostvars[name]["metalslurm_address"]
    interface = _nccl(cluster).get("socket_ifname") or \
        host.check_output(f"ip -o -4 addr show to {address}").split()[1]
    assert conf["NCCL_SOCKET_IFNAME"] == f"={interface}"


def test_nccl_uses_exactly_the_active_ports_of_this_nodes_hcas(host, cluster):
    ports = _ports(host)
    if not ports:
        pytest.skip(f"{host.backend.host} has no HCA (/sys/class/infiniband is empty)")
    conf = _conf(host, cluster)
    listed = conf["NCCL_IB_HCA"]
    assert listed.startswith("="), "without '=' NCCL matches mlx5_1 to mlx5_10 as well"
    for port in listed[1:].split(","):
        assert port in ports, f"{port} is not a port of this node: {sorted(ports)}"
        assert ports[port][0] == "ACTIVE", f"{port} is {ports[port][0]}"


def test_the_gid_index_is_set_only_for_roce(host, cluster):
    ports = _ports(host)
    if not ports:
        pytest.skip(f"{host.backend.host} has no HCA (/sys/class/infiniband is empty)")
    conf = _conf(host, cluster)
    layers = {ports[p][2] for p in conf["NCCL_IB_HCA"][1:].split(",") if p in ports}
    if "NCCL_IB_GID_INDEX" in (_nccl(cluster).get("settings") or {}):
        pytest.skip("NCCL_IB_GID_INDEX is set in metalslurm:nccl.settings")
    assert ("NCCL_IB_GID_INDEX" in conf) == (layers == {"Ethernet"}), layers


def test_every_compute_port_is_active_at_the_same_full_rate(host, cluster):
    """Real hardware only: a port that trained to a lower rate (a bad cable or transceiver)
    slows every collective the node takes part in."""
    ports = _ports(host)
    if not ports:
        pytest.skip(f"{host.backend.host} has no HCA: port states and rates are checked on "
                    "real hardware only")
    compute = _conf(host, cluster)["NCCL_IB_HCA"][1:].split(",")
    rates = {p: ports[p][1] for p in compute if p in ports}
    assert all(ports[p][0] == "ACTIVE" for p in compute), {p: ports[p][0] for p in compute}
    assert len(set(rates.values())) == 1, f"ports at different rates (Gb/s): {rates}"


def test_jobs_can_source_the_same_settings(host, cluster):
    conf = _conf(host, cluster)
    exported = _key_values(host.file("/etc/nccl.env").content_string, "export ")
    assert {k: " ".join(shlex.split(v)) for k, v in exported.items()} == conf


def _served_topology(host) -> str | None:
    for cache in CONFIGLESS_CACHES:
        file = host.file(f"{cache}/topology.conf")
        if file.exists:
            return file.content_string
    return None


def test_slurm_schedules_with_the_topology_the_inventory_describes(controller, cluster):
    source = (cluster.var("metalslurm_topology") or {}).get("source", "none")
    plugin = controller.check_output("scontrol show config | grep -E '^TopologyPlugin '")
    conf = controller.file("/etc/slurm/topology.conf")
    if source == "none":
        assert not conf.exists
        # No plugin set: 24.11 shows topology/flat or (null), 22.05 topology/none.
        assert plugin.split("=", 1)[1].strip() in ("topology/flat", "topology/default",
                                                   "topology/none", "(null)")
        return
    wanted = (cluster.var("metalslurm_topology") or {}).get("plugin", "tree")
    assert plugin.split("=", 1)[1].strip() == f"topology/{wanted}"
    # Every compute node is under a switch Slurm knows (none dropped from the tree).
    shown = controller.check_output("scontrol show topology")
    leaves = [line for line in shown.splitlines() if " Level=0 " in line or "BlockName=" in line]
    listed = controller.check_output("scontrol show hostnames " + shlex.quote(
        ",".join(line.split("Nodes=")[1].split()[0] for line in leaves)))
    assert sorted(listed.split()) == sorted(cluster.compute)


def test_slurmd_has_the_topology_conf_the_controller_serves(host, controller, cluster):
    source = (cluster.var("metalslurm_topology") or {}).get("source", "none")
    if source == "none":
        pytest.skip("no topology.conf in this inventory")
    assert _served_topology(host) == controller.file("/etc/slurm/topology.conf").content_string
