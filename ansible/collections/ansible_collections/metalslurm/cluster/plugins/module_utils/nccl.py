"""NCCL settings of a node, derived from its HCA facts (``roles/nccl_ib/library/hca_facts.py``).

The result goes to ``/etc/nccl.conf`` (NCCL reads it at startup; the job's environment wins,
since NCCL sets the file's values without overwriting variables already set) and to a shell
file jobs can source. What is derived, and why:

- ``NCCL_IB_HCA``: the ACTIVE ports whose role is compute, as ``=dev:port,...``. The leading
  ``=`` makes NCCL match names exactly; without it each entry is a prefix and ``mlx5_1``
  would also select ``mlx5_10`` and ``mlx5_11``. Down compute ports are left out (NCCL skips
  them at startup anyway, so the file names what NCCL will use) and named in a warning; if
  no compute port is ACTIVE, all of them are listed with a warning, so the node still keeps
  NCCL off its storage and front-end ports once the links come up.
- ``NCCL_SOCKET_IFNAME``: ``=<interface>`` (exact) when the caller names the interface
  NCCL's bootstrap should use (the node's private-network interface); omitted otherwise.
- ``NCCL_IB_GID_INDEX``: only when the compute ports are RoCE (link layer Ethernet): the
  index of their IPv4-mapped RoCE v2 GID (3 on mlx5: 0/1 link-local v1/v2, 2/3 IPv4 v1/v2),
  if it is the same on every compute port; otherwise omitted with a warning (NCCL then picks
  a GID itself). Never on InfiniBand, where the GID index has no such meaning.
- GPUDirect RDMA (``gpudirect`` is ``peermem`` or ``dmabuf``; the node's driver setup says
  which): ``NCCL_NET_GDR_LEVEL=PXB`` when the compute ports share a PCIe switch with the
  GPUs, the distance NCCL's documentation names for "connected through PCI switches
  (potentially multiple hops)". PIX would be too strict: on a DGX H100 the path from a GPU to
  its ConnectX-7 crosses two switches, and PIX would turn GPUDirect RDMA off. When the
  compute ports only share a NUMA node with the GPUs, no level is written and a warning says
  so (the path crosses the CPU; set ``NCCL_NET_GDR_LEVEL=PHB`` in overrides if measurements
  favour it). ``NCCL_NET_GDR_READ=1`` (the documented default on NVLink platforms such as
  HGX H100, written so it holds on every node). ``NCCL_DMABUF_ENABLE=1`` with ``dmabuf``
  (the kernel's DMA-BUF path instead of the nvidia-peermem module).
- No compute port at all: only ``NCCL_SOCKET_IFNAME``. ``NCCL_IB_DISABLE`` is not forced:
  NCCL finds no RDMA device on such nodes by itself, and where storage HCAs exist a warning
  says NCCL may pick them unless overrides set ``NCCL_IB_HCA`` or ``NCCL_IB_DISABLE=1``.

Overrides (from the cluster configuration) win over everything derived. A key NCCL does not
read is a problem, and so is an ``NCCL_IB_HCA`` override naming a device or port the node
does not have.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# Every variable metalslurm may write, with what it means. Names and meanings from NVIDIA's
# NCCL documentation, "Environment Variables"
# (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html), checked against the
# NCCL_PARAM names in NCCL's source (src/transport/net_ib, src/init.cc, src/transport/nvls.cc).
NCCL_VARIABLES: dict[str, str] = {
    "NCCL_ALGO": "collective algorithms NCCL may use (Ring, Tree, NVLS, ...; debugging only)",
    "NCCL_BUFFSIZE": "size of the buffer NCCL uses per channel between a pair of ranks",
    "NCCL_COLLNET_ENABLE": "use the CollNet (in-network reduction, e.g. SHARP) plugin",
    "NCCL_CROSS_NIC": "whether rings/trees may use different NICs on different nodes",
    "NCCL_CUMEM_ENABLE": "use the CUDA cuMem* virtual memory API for NCCL buffers",
    "NCCL_DEBUG": "log level: VERSION, WARN, INFO or TRACE",
    "NCCL_DEBUG_FILE": "file NCCL writes its debug log to (%h host, %p pid)",
    "NCCL_DEBUG_SUBSYS": "subsystems INFO logging covers (INIT, NET, GRAPH, ...)",
    "NCCL_DMABUF_ENABLE": "GPUDirect RDMA through Linux DMA-BUF instead of nvidia-peermem",
    "NCCL_IB_ADAPTIVE_ROUTING": "enable InfiniBand adaptive routing on the QPs",
    "NCCL_IB_ADDR_FAMILY": "address family (AF_INET or AF_INET6) of the RoCE GID NCCL picks",
    "NCCL_IB_AR_THRESHOLD": "message size from which adaptive routing is used",
    "NCCL_IB_DISABLE": "1 turns off the IB/RoCE transport; NCCL falls back to sockets",
    "NCCL_IB_GID_INDEX": "GID index used for RoCE (3: RoCE v2 IPv4 on mlx5)",
    "NCCL_IB_HCA": "RDMA devices and ports NCCL uses (=exact names, ^exclusions, :port)",
    "NCCL_IB_PCI_RELAXED_ORDERING": "PCIe relaxed ordering for IB memory registrations",
    "NCCL_IB_QPS_PER_CONNECTION": "queue pairs per connection between two ranks",
    "NCCL_IB_RETRY_CNT": "InfiniBand retry count of the QPs",
    "NCCL_IB_ROCE_VERSION_NUM": "RoCE version of the GID NCCL picks itself (default 2)",
    "NCCL_IB_SL": "InfiniBand service level of the QPs",
    "NCCL_IB_SPLIT_DATA_ON_QPS": "split each message over all QPs (1) or use one QP each (0)",
    "NCCL_IB_TC": "InfiniBand traffic class (RoCE: DSCP and ECN bits) of the QPs",
    "NCCL_IB_TIMEOUT": "InfiniBand Verbs timeout exponent (4.096 us * 2^n)",
    "NCCL_IGNORE_CPU_AFFINITY": "ignore the job's CPU affinity and bind to the GPU's",
    "NCCL_MAX_NCHANNELS": "most channels (SMs) NCCL uses",
    "NCCL_MIN_NCHANNELS": "fewest channels (SMs) NCCL uses",
    "NCCL_NET": "network plugin or transport to use by name (IB, Socket, ...)",
    "NCCL_NET_GDR_LEVEL": "largest GPU-NIC distance for GPUDirect RDMA (LOC PIX PXB PHB SYS)",
    "NCCL_NET_GDR_READ": "send data with GPUDirect RDMA reads of GPU memory (1) or not (0)",
    "NCCL_NET_PLUGIN": "network plugin library to load (none: the built-in transports)",
    "NCCL_NSOCKS_PERTHREAD": "sockets per helper thread of the socket transport",
    "NCCL_NVLS_ENABLE": "NVLink SHARP (NVSwitch reductions): 0 off, 1 on, 2 automatic",
    "NCCL_P2P_DISABLE": "1 turns off peer-to-peer GPU transfers (NVLink/PCIe)",
    "NCCL_P2P_LEVEL": "largest GPU-GPU distance for peer-to-peer transfers",
    "NCCL_PROTO": "protocols NCCL may use (LL, LL128, Simple; debugging only)",
    "NCCL_SHM_DISABLE": "1 turns off the shared-memory transport",
    "NCCL_SOCKET_FAMILY": "address family of the socket interfaces (AF_INET or AF_INET6)",
    "NCCL_SOCKET_IFNAME": "IP interfaces for bootstrap and the socket transport (=exact)",
    "NCCL_SOCKET_NTHREADS": "helper threads per connection of the socket transport",
    "NCCL_TOPO_DUMP_FILE": "file NCCL writes the topology it detected to",
    "NCCL_TOPO_FILE": "XML topology file NCCL loads before detecting the node's own",
}

# ``metalslurm_nccl`` (the stack config's ``metalslurm:nccl``) for what it leaves out:
# nccl.conf is written; no settings over the derived ones; the bootstrap interface is the one
# carrying the node's private address. infra/stack/nccl.py fills the stack's keys from here,
# the nccl_ib role merges a hand-written inventory's value over it (filter ``nccl_config``).
DEFAULTS: dict[str, Any] = {"enabled": True, "settings": {}, "socket_ifname": ""}


def nccl_config(value: Mapping[str, Any] | None) -> dict[str, Any]:
    """``metalslurm_nccl`` over :data:`DEFAULTS` (a key it gives stays its own)."""
    merged = {k: (dict(v) if isinstance(v, dict) else v) for k, v in DEFAULTS.items()}
    merged.update(value or {})
    return merged


GPUDIRECT_MODES = ("peermem", "dmabuf")


@dataclass
class NcclSettings:
    """Derived settings (variable -> value), problems (refuse to configure) and warnings."""

    settings: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _natural_key(name: str) -> tuple[str, int]:
    stem, _, number = name.rpartition("_")
    return (stem, int(number)) if number.isdigit() else (name, -1)


def _port_key(hca: Mapping[str, Any]) -> tuple[tuple[str, int], int]:
    return _natural_key(str(hca["device"])), int(hca["port"])


def _names(hcas: Sequence[Mapping[str, Any]]) -> list[str]:
    return [f"{h['device']}:{h['port']}" for h in sorted(hcas, key=_port_key)]


def hca_override_problems(host: str, hcas: Sequence[Mapping[str, Any]], value: str) -> list[str]:
    """Problems with an ``NCCL_IB_HCA`` value on ``host``: each entry (after an optional
    ``^`` and ``=``) must name a device the node has (exactly with ``=``, as a prefix of at
    least one device without it), and a ``:port`` the device has."""
    ports: dict[str, set[int]] = {}
    for hca in hcas:
        ports.setdefault(str(hca["device"]), set()).add(int(hca["port"]))
    have = ", ".join(sorted(ports, key=_natural_key)) or "no RDMA device"
    spec = value.strip()
    spec = spec[1:] if spec.startswith("^") else spec
    exact = spec.startswith("=")
    spec = spec[1:] if exact else spec
    problems = []
    for entry in (e.strip() for e in spec.split(",")):
        if not entry:
            problems.append(f"{host}: NCCL_IB_HCA override {value!r} has an empty entry")
            continue
        name, _, port = entry.partition(":")
        matches = [d for d in ports if (d == name if exact else d.startswith(name))]
        if not matches:
            problems.append(f"{host}: NCCL_IB_HCA override names {name}, which this node does "
                            f"not have (it has {have})")
        elif port and (not port.isdigit() or not any(int(port) in ports[d] for d in matches)):
            problems.append(f"{host}: NCCL_IB_HCA override names port {port} of {name}, which "
                            f"this node does not have")
    return problems


def _prefix_warnings(host: str, hcas: Sequence[Mapping[str, Any]], value: str) -> list[str]:
    """An ``NCCL_IB_HCA`` without ``=`` whose entries each match several devices."""
    spec = value.strip().lstrip("^")
    if spec.startswith("="):
        return []
    devices = sorted({str(h["device"]) for h in hcas}, key=_natural_key)
    warnings = []
    for entry in (e.partition(":")[0].strip() for e in spec.split(",")):
        matches = [d for d in devices if d.startswith(entry)] if entry else []
        if len(matches) > 1:
            warnings.append(f"{host}: NCCL_IB_HCA entry {entry} has no '=' in front, so NCCL "
                            f"reads it as a prefix and selects {', '.join(matches)}; write "
                            f"'={entry}' to name one device")
    return warnings


def _gid_index(host: str, compute: Sequence[Mapping[str, Any]], result: NcclSettings) -> None:
    """``NCCL_IB_GID_INDEX`` for RoCE compute ports (none on InfiniBand)."""
    layers = {h.get("link_layer") for h in compute}
    if layers != {"Ethernet"}:
        if "Ethernet" in layers:
            result.warnings.append(f"{host}: compute ports mix InfiniBand and RoCE; "
                                   f"NCCL_IB_GID_INDEX is not set")
        return
    indexes = {h.get("roce_v2_ipv4_gid_index") for h in compute}
    if len(indexes) == 1 and None not in indexes:
        result.settings["NCCL_IB_GID_INDEX"] = str(indexes.pop())
        return
    by_port = ", ".join(f"{h['device']}:{h['port']}={h.get('roce_v2_ipv4_gid_index')}"
                        for h in sorted(compute, key=_port_key))
    result.warnings.append(f"{host}: the compute ports have no common RoCE v2 IPv4 GID index "
                           f"({by_port}); NCCL_IB_GID_INDEX is not set and NCCL picks one")


def _gpudirect(host: str, compute: Sequence[Mapping[str, Any]], gpudirect: str,
               result: NcclSettings) -> None:
    if all(h.get("gpu_affinity") == "pcie-switch" for h in compute):
        result.settings["NCCL_NET_GDR_LEVEL"] = "PXB"
    else:
        result.warnings.append(f"{host}: GPUDirect RDMA is on, but the compute ports do not "
                               f"share a PCIe switch with the GPUs; NCCL_NET_GDR_LEVEL is "
                               f"left to NCCL (set PHB in overrides if measurements favour it)")
    result.settings["NCCL_NET_GDR_READ"] = "1"
    if gpudirect == "dmabuf":
        result.settings["NCCL_DMABUF_ENABLE"] = "1"


def derive_nccl_settings(hcas: Sequence[Mapping[str, Any]], *, host: str = "node",
                         socket_ifname: str | None, gpudirect: str | None,
                         overrides: Mapping[str, str]) -> NcclSettings:
    """NCCL settings for one node from its ``metalslurm_hcas`` facts (see the module
    docstring for each rule). ``host`` names the node in messages."""
    result = NcclSettings()
    compute = [h for h in hcas if h.get("role") == "compute"]
    if compute:
        active = [h for h in compute if h.get("state") == "ACTIVE"]
        down = [h for h in compute if h.get("state") != "ACTIVE"]
        if not active:
            result.warnings.append(f"{host}: no compute port is ACTIVE "
                                   f"({', '.join(_names(compute))}); NCCL_IB_HCA lists them "
                                   f"all, and NCCL uses sockets until their links come up")
            active = compute
        elif down:
            result.warnings.append(f"{host}: compute ports not ACTIVE, left out of NCCL_IB_HCA: "
                                   f"{', '.join(_names(down))}")
        result.settings["NCCL_IB_HCA"] = "=" + ",".join(_names(active))
        _gid_index(host, active, result)
        if gpudirect is not None and gpudirect in GPUDIRECT_MODES:
            _gpudirect(host, active, gpudirect, result)
    elif hcas:
        result.warnings.append(f"{host}: no compute HCA port; NCCL may use the others "
                               f"({', '.join(_names(hcas))}) unless overrides set NCCL_IB_HCA "
                               f"or NCCL_IB_DISABLE=1")
    if gpudirect is not None and gpudirect not in GPUDIRECT_MODES:
        result.problems.append(f"{host}: gpudirect is {gpudirect!r}; it must be one of "
                               f"{', '.join(GPUDIRECT_MODES)}, or unset")
    if socket_ifname:
        result.settings["NCCL_SOCKET_IFNAME"] = "=" + socket_ifname.lstrip("=")
    for key, value in overrides.items():
        problem = _setting_problem(key, value)
        if problem:
            result.problems.append(f"{host}: override {key} {problem}")
            continue
        if key == "NCCL_IB_HCA":
            result.problems.extend(hca_override_problems(host, hcas, value))
            result.warnings.extend(_prefix_warnings(host, hcas, value))
        result.settings[key] = value
    return result


def render_nccl_conf(settings: Mapping[str, str]) -> str:
    """``/etc/nccl.conf``: a header comment, then ``KEY=VALUE`` lines sorted by key. NCCL
    takes each value verbatim up to the end of the line (no quotes). The header has no '=',
    so NCCL versions that do not skip '#' lines still ignore it."""
    header = ("# NCCL settings of this node, written by metalslurm (roles/nccl_ib) from its HCAs.\n"
              "# Variables set in a job's environment win over this file.\n")
    return header + "".join(f"{key}={settings[key]}\n" for key in sorted(settings))


def render_nccl_env(settings: Mapping[str, str]) -> str:
    """A shell file jobs can source: ``export KEY=VALUE`` lines, values shell-quoted."""
    header = ("# NCCL settings of this node, written by metalslurm (roles/nccl_ib) from its HCAs.\n"
              "# Jobs source it (. <file>) to carry them into their environment.\n")
    return header + "".join(f"export {key}={shlex.quote(settings[key])}\n"
                            for key in sorted(settings))


def _setting_problem(name: str, value: Any) -> str | None:
    """What is wrong with setting NCCL variable ``name`` to ``value`` (the end of a
    sentence), or None: the one rule the stack config, the role and the derivation share."""
    if name not in NCCL_VARIABLES:
        return ("is not a variable NCCL reads (the list, with its source, is NCCL_VARIABLES "
                "in module_utils/nccl.py)")
    if value is None or isinstance(value, (dict, list)) or "\n" in str(value) \
            or "\r" in str(value) or len(str(value)) > 1023:
        return (f"must be one value on one line of at most 1023 characters (NCCL reads "
                f"nccl.conf line by line), got {value!r}")
    return None


def setting_problems(settings: Mapping[str, Any] | None) -> list[str]:
    """One sentence per setting that is not a variable NCCL reads or not one line."""
    problems = []
    for name, value in (settings or {}).items():
        problem = _setting_problem(name, value)
        if problem:
            problems.append(f"metalslurm:nccl.settings.{name} {problem}")
    return problems


