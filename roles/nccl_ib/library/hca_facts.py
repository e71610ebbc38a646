#!/usr/bin/python
"""Ansible module: the node's RDMA ports (HCAs), their GPUs and their role, read from sysfs.

Which port does what, decided per node from the PCI topology:

- ``frontend``: the port's net device (or the bond it is enslaved to) carries the IPv4
  default route (``/proc/net/route``, destination 00000000). Never compute, even when it
  sits next to a GPU.
- ``compute`` on a node with NVIDIA GPUs: RDMA-capable (InfiniBand, or Ethernet with a
  RoCE v2 GID type) and sharing a PCIe switch with a GPU. If no port on the node shares a
  switch with a GPU (flat PCIe, as in many VMs), the ports on a GPU's NUMA node are compute
  instead. These are the ports NCCL should use: GPUDirect RDMA is fast through a PCIe switch
  and slow through the CPU's root complex.
- ``compute`` on a node without GPUs: every RDMA-capable port that is not front end (no GPU
  to pair with; MPI and RDMA tests still want the fabric).
- ``storage``: everything else (storage or in-band networks, ports far from every GPU,
  Ethernet ports without RoCE v2). NCCL should not use them.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: hca_facts
short_description: RDMA ports, their GPUs and their role (compute, storage, frontend) as facts
description:
  - Reads C(<sysfs_root>/sys/class/infiniband), C(<sysfs_root>/sys/class/net),
    C(<sysfs_root>/sys/bus/pci/devices) and C(<sysfs_root>/proc/net/route). Nothing is
    run; files that are missing or unreadable read as unknown (null), never as a failure.
  - Returns C(ansible_facts.metalslurm_hcas), one entry per HCA device and port, sorted by
    device name in natural order (mlx5_2 before mlx5_10), then port. Each entry has
    C(device), C(port), C(link_layer) (InfiniBand or Ethernet), C(state) (ACTIVE, DOWN, ...),
    C(phys_state) (LinkUp, ...), C(rate) (raw, e.g. "400 Gb/sec (4X NDR)"), C(rate_gbps),
    C(roce_v2_gid_indexes) (GID indexes of type RoCE v2 with a non-zero GID; empty on
    InfiniBand), C(roce_v2_ipv4_gid_index) (the one among them holding an IPv4-mapped
    address, or null), C(netdev), C(numa_node) (-1 unknown), C(pci_address),
    C(gpu_affinity) (pcie-switch, numa or none), C(gpu_adjacent) (true unless none) and
    C(role).
  - C(gpu_affinity) is pcie-switch when an NVIDIA GPU (PCI vendor 0x10de, class 0x0300xx or
    0x0302xx) and the HCA have a common PCI bridge below their root port (in the chain of
    the device's real path under /sys/devices/pci*), numa when a GPU is on the HCA's NUMA
    node, none otherwise.
  - C(role) is frontend when the port's net device, or the bond it is enslaved to, carries
    the IPv4 default route. On a node with GPUs it is compute when the port can do RDMA
    (InfiniBand, or Ethernet with a RoCE v2 GID type) and shares a PCIe switch with a GPU;
    when no port on the node shares a switch with a GPU, RDMA ports on a GPU's NUMA node are
    compute instead. On a node without GPUs every RDMA port that is not frontend is compute.
    Every other port is storage (storage or in-band networks; NCCL should not use it).
  - Also returns C(metalslurm_gpu_pci) (the NVIDIA GPUs' PCI addresses) and
    C(metalslurm_hca_present) (false when the node has no RDMA device at all, e.g. no
    C(/sys/class/infiniband)).
options:
  sysfs_root:
    description: Directory that holds C(sys) and C(proc); tests point it at a fixture tree.
    type: path
    default: /
"""

EXAMPLES = r"""
- name: Read the node's HCAs and GPUs
  hca_facts:

- name: Read a recorded or built tree instead of this machine
  hca_facts:
    sysfs_root: /srv/fixtures/sysfs/dgx-h100
"""

RETURN = r"""
ansible_facts:
  description: C(metalslurm_hcas), C(metalslurm_gpu_pci) and C(metalslurm_hca_present).
  returned: always
  type: dict
"""

import os
import re
from typing import Any

from ansible.module_utils.basic import AnsibleModule

NVIDIA_VENDOR = "0x10de"
GPU_CLASS_PREFIXES = ("0x0300", "0x0302")  # VGA controller, 3D controller
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
IPV4_MAPPED_PREFIX = "0000:0000:0000:0000:0000:ffff:"


def natural_key(name: str) -> tuple[Any, ...]:
    """``mlx5_2`` sorts before ``mlx5_10``: digit runs compare as numbers."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part)
                 for part in re.split(r"(\d+)", name) if part)


def read_text(path: str) -> str | None:
    """The stripped contents of a file, or None when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def parse_state(text: str | None) -> str | None:
    """``4: ACTIVE`` -> ``ACTIVE``; ``5: LinkUp`` -> ``LinkUp``."""
    if not text:
        return None
    return text.split(":", 1)[1].strip() if ":" in text else text


def parse_rate(text: str | None) -> int | None:
    """``400 Gb/sec (4X NDR)`` -> 400 (whole Gb/s)."""
    match = re.match(r"\s*(\d+(?:\.\d+)?)\s*Gb/sec", text or "")
    return int(float(match.group(1))) if match else None


def parse_int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def default_route_interfaces(route_text: str | None) -> set[str]:
    """Interfaces of the IPv4 default routes in ``/proc/net/route``."""
    interfaces = set()
    for line in (route_text or "").splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[1] == "00000000" and fields[7] == "00000000":
            interfaces.add(fields[0])
    return interfaces


def pci_chain(root: str, device_path: str) -> list[str]:
    """PCI addresses from the root port down to the device, from the real path of a sysfs
    device directory (``/sys/devices/pci0000:15/0000:15:01.0/.../0000:18:00.0``); [] when
    the path is not below ``<root>/sys/devices/pci*``."""
    real = os.path.realpath(device_path)
    devices = os.path.realpath(os.path.join(root, "sys", "devices"))
    rel = os.path.relpath(real, devices)
    parts = rel.split(os.sep)
    if rel.startswith("..") or len(parts) < 2 or not parts[0].startswith("pci"):
        return []
    return [p for p in parts[1:] if re.fullmatch(r"[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.\d", p)]


def read_gpus(root: str) -> list[dict[str, Any]]:
    """NVIDIA GPUs on the PCI bus: ``{pci_address, numa_node, chain}``."""
    base = os.path.join(root, "sys", "bus", "pci", "devices")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    gpus = []
    for name in names:
        path = os.path.join(base, name)
        vendor = (read_text(os.path.join(path, "vendor")) or "").lower()
        cls = (read_text(os.path.join(path, "class")) or "").lower()
        if vendor == NVIDIA_VENDOR and cls.startswith(GPU_CLASS_PREFIXES):
            gpus.append({"pci_address": name,
                         "numa_node": parse_int(read_text(os.path.join(path, "numa_node")), -1),
                         "chain": pci_chain(root, path)})
    return gpus


def gpu_affinity(chain: list[str], numa_node: int, gpus: list[dict[str, Any]]) -> str:
    """``pcie-switch`` when the device and a GPU share a bridge below their root port,
    ``numa`` when a GPU is on the same (known) NUMA node, ``none`` otherwise."""
    bridges = set(chain[1:-1])
    if bridges and any(bridges & set(gpu["chain"][1:-1]) for gpu in gpus):
        return "pcie-switch"
    if numa_node >= 0 and any(gpu["numa_node"] == numa_node for gpu in gpus):
        return "numa"
    return "none"


def port_netdev(device_dir: str, port_dir: str, port: int) -> str | None:
    """The net device of a port: the one under the HCA's PCI device (``device/net/*``; with
    several, the one whose ``dev_port`` is port - 1), else the first GID's ``ndevs`` entry."""
    net_dir = os.path.join(device_dir, "device", "net")
    try:
        names = sorted(os.listdir(net_dir), key=natural_key)
    except OSError:
        names = []
    for name in names:
        if parse_int(read_text(os.path.join(net_dir, name, "dev_port")), -1) == port - 1:
            return name
    if names:
        return names[0]
    ndevs = os.path.join(port_dir, "gid_attrs", "ndevs")
    try:
        indexes = sorted(os.listdir(ndevs), key=natural_key)
    except OSError:
        return None
    for index in indexes:
        ndev = read_text(os.path.join(ndevs, index))
        if ndev:
            return ndev
    return None


def roce_v2_gids(port_dir: str) -> tuple[list[int], int | None]:
    """GID indexes of type RoCE v2 with a non-zero GID, and the one that is IPv4-mapped."""
    types_dir = os.path.join(port_dir, "gid_attrs", "types")
    try:
        entries = [e for e in os.listdir(types_dir) if e.isdigit()]
    except OSError:
        return [], None
    indexes, ipv4 = [], None
    for index in sorted(entries, key=int):
        if read_text(os.path.join(types_dir, index)) != "RoCE v2":
            continue
        gid = (read_text(os.path.join(port_dir, "gids", index)) or ZERO_GID).lower()
        if gid == ZERO_GID:
            continue
        indexes.append(int(index))
        if ipv4 is None and gid.startswith(IPV4_MAPPED_PREFIX):
            ipv4 = int(index)
    return indexes, ipv4


def has_roce_v2_type(port_dir: str) -> bool:
    types_dir = os.path.join(port_dir, "gid_attrs", "types")
    try:
        entries = os.listdir(types_dir)
    except OSError:
        return False
    return any(read_text(os.path.join(types_dir, e)) == "RoCE v2" for e in entries)


def carries_default_route(root: str, netdev: str | None, default_ifaces: set[str]) -> bool:
    """The net device, or the bond/bridge it is enslaved to, has the default route."""
    if netdev is None:
        return False
    if netdev in default_ifaces:
        return True
    master = os.path.join(root, "sys", "class", "net", netdev, "master")
    return os.path.islink(master) and os.path.basename(os.path.realpath(master)) in default_ifaces


def assign_roles(ports: list[dict[str, Any]], have_gpus: bool) -> None:
    """Set ``role`` on each port (see the module docstring). Ports carry the private keys
    ``_frontend`` and ``_rdma``, removed here."""
    candidates = [p for p in ports if p["_rdma"] and not p["_frontend"]]
    via_switch = any(p["gpu_affinity"] == "pcie-switch" for p in candidates)
    wanted = "pcie-switch" if via_switch else "numa"
    for port in ports:
        frontend, rdma = port.pop("_frontend"), port.pop("_rdma")
        if frontend:
            port["role"] = "frontend"
        elif rdma and (not have_gpus or port["gpu_affinity"] == wanted):
            port["role"] = "compute"
        else:
            port["role"] = "storage"


def read_hcas(root: str, gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dict per HCA device and port; see DOCUMENTATION for the keys."""
    base = os.path.join(root, "sys", "class", "infiniband")
    try:
        devices = sorted(os.listdir(base), key=natural_key)
    except OSError:
        return []
    default_ifaces = default_route_interfaces(read_text(os.path.join(root, "proc", "net",
                                                                      "route")))
    ports = []
    for device in devices:
        device_dir = os.path.join(base, device)
        pci_dir = os.path.join(device_dir, "device")
        known = os.path.exists(pci_dir)
        chain = pci_chain(root, pci_dir) if known else []
        pci_address = os.path.basename(os.path.realpath(pci_dir)) if known else None
        numa_node = parse_int(read_text(os.path.join(pci_dir, "numa_node")), -1)
        affinity = gpu_affinity(chain, numa_node, gpus)
        try:
            port_names = sorted((p for p in os.listdir(os.path.join(device_dir, "ports"))
                                 if p.isdigit()), key=int)
        except OSError:
            port_names = []
        for port_name in port_names:
            port_dir = os.path.join(device_dir, "ports", port_name)
            link_layer = read_text(os.path.join(port_dir, "link_layer"))
            rate = read_text(os.path.join(port_dir, "rate"))
            gid_indexes, ipv4_index = (roce_v2_gids(port_dir) if link_layer == "Ethernet"
                                       else ([], None))
            netdev = port_netdev(device_dir, port_dir, int(port_name))
            ports.append({
                "device": device, "port": int(port_name), "link_layer": link_layer,
                "state": parse_state(read_text(os.path.join(port_dir, "state"))),
                "phys_state": parse_state(read_text(os.path.join(port_dir, "phys_state"))),
                "rate": rate, "rate_gbps": parse_rate(rate),
                "roce_v2_gid_indexes": gid_indexes, "roce_v2_ipv4_gid_index": ipv4_index,
                "netdev": netdev, "numa_node": numa_node, "pci_address": pci_address,
                "gpu_affinity": affinity, "gpu_adjacent": affinity != "none",
                "_frontend": carries_default_route(root, netdev, default_ifaces),
                "_rdma": link_layer == "InfiniBand" or (
                    link_layer == "Ethernet" and has_roce_v2_type(port_dir)),
            })
    assign_roles(ports, bool(gpus))
    return ports


def hca_facts(root: str) -> dict[str, Any]:
    """The facts this module returns, for a tree rooted at ``root``."""
    gpus = read_gpus(root)
    try:
        present = bool(os.listdir(os.path.join(root, "sys", "class", "infiniband")))
    except OSError:
        present = False
    return {"metalslurm_hcas": read_hcas(root, gpus),
            "metalslurm_gpu_pci": sorted(gpu["pci_address"] for gpu in gpus),
            "metalslurm_hca_present": present}


def main() -> None:
    module = AnsibleModule(argument_spec={"sysfs_root": {"type": "path", "default": "/"}},
                           supports_check_mode=True)
    module.exit_json(changed=False, ansible_facts=hca_facts(module.params["sysfs_root"]))


if __name__ == "__main__":
    main()
