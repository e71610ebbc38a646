#!/usr/bin/python
"""Ansible module: the node's NVIDIA GPUs as the driver sees them, for gres.conf.

``nvidia-smi -q -x`` gives each GPU's index order, product name, UUID, PCI bus ID, device
minor number (``/dev/nvidiaN``), MIG mode and NVLink state; ``nvidia-smi topo -m`` gives
each GPU's CPU and NUMA affinity as OS CPU numbers. gres.conf's ``Cores=`` wants Slurm's
core indices, not OS CPU numbers: Slurm numbers the cores socket by socket, each socket's
cores in ``core_id`` order, and hyperthread siblings share their core's index. The OS CPU
numbers are mapped to them through ``/sys/devices/system/cpu/cpu*/topology``.

Slurm (24.11 at least) sets a node INVALID when a GPU's ``Cores=`` do not cover whole
sockets ("GRES core specification ... doesn't match socket boundaries"), which a GPU's
affinity to one NUMA node of a socket (AMD EPYC in NPS2/NPS4, some cloud bare-metal
shapes) or to part of a small socket would do. So each GPU's cores are widened to the
whole sockets its affinity touches: a DGX H100's (one socket per four GPUs) is unchanged.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

DOCUMENTATION = r"""
module: nvidia_gpu_facts
short_description: NVIDIA GPUs (nvidia-smi) with their Slurm core affinity, as facts
description:
  - Runs C(nvidia-smi -q -x) and C(nvidia-smi topo -m) (read only) and reads
    C(<sysfs_root>/sys/devices/system/cpu/cpu*/topology). Returns
    C(ansible_facts.metalslurm_gpus), one entry per GPU in nvidia-smi's order, with
    C(index), C(name), C(uuid), C(pci_bus_id), C(minor), C(mig_mode), C(numa_node) (-1
    unknown), C(nvlink_peers) (GPUs reached over NVLink), C(nvlinks) (links per peer),
    C(cpus) (OS CPU list, as topo -m prints it) and C(cores) (Slurm core indices of the
    whole sockets those CPUs are on, a range list such as 0-55, empty when unknown).
options:
  nvidia_smi:
    description: The nvidia-smi program.
    type: str
    default: nvidia-smi
  sysfs_root:
    description: Root the CPU topology is read under.
    type: path
    default: /
"""


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _text(node: ET.Element | None, path: str, default: str = "") -> str:
    found = node.find(path) if node is not None else None
    return (found.text or "").strip() if found is not None and found.text else default


def parse_smi_xml(text: str) -> list[dict[str, Any]]:
    """The GPUs of ``nvidia-smi -q -x``, in its order."""
    gpus = []
    for index, gpu in enumerate(ET.fromstring(text).findall("gpu")):
        minor = _text(gpu, "minor_number")
        gpus.append({
            "index": index, "name": _text(gpu, "product_name"), "uuid": _text(gpu, "uuid"),
            "pci_bus_id": _text(gpu, "pci/pci_bus_id") or gpu.get("id", ""),
            "minor": int(minor) if minor.isdigit() else index,
            "mig_mode": _text(gpu, "mig_mode/current_mig", "N/A")})
    return gpus


def parse_topo(text: str) -> dict[int, dict[str, Any]]:
    """GPU index -> {cpus, numa_node, nvlink_peers, nvlinks} from ``nvidia-smi topo -m``'s
    matrix: the affinity columns, and the GPUs this one reaches over NVLink (``NV18``: a
    bonded set of 18 links, an H100 SXM's full complement)."""
    # nvidia-smi underlines the header row with terminal escapes even into a pipe or a file
    # (seen on driver 580, tests/fixtures/gpu/h100-vm-topo.txt): without them removed the
    # first GPU column would be no GPU column and its NVLinks would not count.
    lines = [line for line in ANSI_ESCAPE.sub("", text).splitlines() if line.strip()]
    if not lines:
        return {}
    header = [h.strip() for h in re.split(r"\t+", lines[0].strip())]
    try:
        cpu_col = header.index("CPU Affinity")
    except ValueError:
        return {}
    numa_col = header.index("NUMA Affinity") if "NUMA Affinity" in header else None
    found = {}
    for line in lines[1:]:
        cells = [c.strip() for c in re.split(r"\t+", line.strip())]
        m = re.match(r"^GPU(\d+)$", cells[0])
        if not m:
            continue
        values = cells[1:]  # the row label has no header cell
        cpus = values[cpu_col] if cpu_col < len(values) else ""
        numa = values[numa_col] if numa_col is not None and numa_col < len(values) else ""
        gpu_cells = [c for h, c in zip(header, values, strict=False) if re.match(r"^GPU\d+$", h)]
        links = [int(n) for n in re.findall(r"^NV(\d+)$", "\n".join(gpu_cells), re.M)]
        found[int(m[1])] = {"cpus": cpus if re.match(r"^[0-9,-]+$", cpus) else "",
                            "numa_node": int(numa) if numa.isdigit() else -1,
                            "nvlink_peers": len(links), "nvlinks": max(links, default=0)}
    return found


def expand(cpu_list: str) -> list[int]:
    """``0-2,8`` -> [0, 1, 2, 8]."""
    out: list[int] = []
    for part in filter(None, cpu_list.split(",")):
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return out


def compress(numbers: list[int]) -> str:
    """[0, 1, 2, 8] -> ``0-2,8``."""
    parts: list[str] = []
    run: list[int] = []
    for n in sorted(set(numbers)):
        if run and n != run[-1] + 1:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(n)
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(parts)


def cpu_topology(sysfs_root: str) -> dict[int, tuple[int, int]]:
    """OS CPU number -> (socket, Slurm's core index): sockets in order, cores by core_id."""
    cpus: dict[int, tuple[int, int]] = {}
    for topo in Path(sysfs_root, "sys/devices/system/cpu").glob("cpu[0-9]*/topology"):
        try:
            package = int((topo / "physical_package_id").read_text())
            core = int((topo / "core_id").read_text())
        except (OSError, ValueError):
            continue
        cpus[int(topo.parent.name[3:])] = (package, core)
    order = {pc: i for i, pc in enumerate(sorted(set(cpus.values())))}
    return {cpu: (pc[0], order[pc]) for cpu, pc in cpus.items()}


def socket_cores(cpus: str, topology: dict[int, tuple[int, int]]) -> str:
    """An OS CPU list -> the Slurm core indices of every socket it touches (see the
    module's docstring), as a range list; empty when none of the CPUs is known."""
    sockets = {topology[c][0] for c in expand(cpus) if c in topology}
    return compress([core for socket, core in topology.values() if socket in sockets])


def gpu_facts(smi_xml: str, topo: str, sysfs_root: str) -> list[dict[str, Any]]:
    gpus = parse_smi_xml(smi_xml)
    affinity = parse_topo(topo)
    topology = cpu_topology(sysfs_root)
    for gpu in gpus:
        found = affinity.get(gpu["index"], {})
        gpu["cpus"] = found.get("cpus", "")
        gpu["numa_node"] = found.get("numa_node", -1)
        gpu["nvlink_peers"] = found.get("nvlink_peers", 0)
        gpu["nvlinks"] = found.get("nvlinks", 0)
        gpu["cores"] = socket_cores(gpu["cpus"], topology)
    return gpus


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(argument_spec={
        "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
        "sysfs_root": {"type": "path", "default": "/"}}, supports_check_mode=True)
    smi = module.get_bin_path(module.params["nvidia_smi"], required=True)
    rc, xml, err = module.run_command([smi, "-q", "-x"])
    if rc != 0:
        module.fail_json(msg=f"nvidia-smi -q -x failed ({rc}): {(err or xml).strip()}")
    rc, topo, err = module.run_command([smi, "topo", "-m"])
    if rc != 0:
        module.fail_json(msg=f"nvidia-smi topo -m failed ({rc}): {(err or topo).strip()}")
    try:
        gpus = gpu_facts(xml, topo, module.params["sysfs_root"])
    except ET.ParseError as exc:
        module.fail_json(msg=f"nvidia-smi -q -x printed no XML this module can read: {exc}")
    module.exit_json(changed=False, ansible_facts={"metalslurm_gpus": gpus})


if __name__ == "__main__":
    main()
