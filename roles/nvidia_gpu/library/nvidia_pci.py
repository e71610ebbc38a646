#!/usr/bin/python
"""Ansible module: the NVIDIA GPUs and NVSwitches on the node's PCI bus, from ``lspci``.

The driver stack needs this before any NVIDIA software is installed (nvidia-smi comes with
the driver): whether the node has NVIDIA GPUs at all (nodes without one skip the role), and
whether it has NVSwitches (the fabric manager is installed only there: an 8-GPU HGX/DGX
board, whose NVSwitches lspci lists as NVIDIA bridges, class 0680).
"""

from __future__ import annotations

import re
from typing import Any

DOCUMENTATION = r"""
module: nvidia_pci
short_description: NVIDIA GPUs and NVSwitches on the PCI bus, as facts
description:
  - Runs C(lspci -nn -D) (read only) and returns C(ansible_facts.metalslurm_nvidia_pci) with
    C(gpus) (vendor 10de, class 0300 VGA or 0302 3D controller) and C(nvswitches) (vendor
    10de, class 0680 bridge), each a list of C({slot, device, name}) in bus order.
options:
  lspci:
    description: The lspci program.
    type: str
    default: lspci
"""

NVIDIA = "10de"
GPU_CLASSES = ("0300", "0302")
NVSWITCH_CLASS = "0680"
# 0000:18:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)
LINE_RE = re.compile(r"^(?P<slot>[0-9a-f:.]+)\s+(?P<klass>.*?)\s+\[(?P<code>[0-9a-f]{4})\]:\s+"
                     r"(?P<name>.*)\s+\[(?P<vendor>[0-9a-f]{4}):(?P<device>[0-9a-f]{4})\]"
                     r"(?:\s+\(rev [0-9a-f]+\))?\s*$")


def parse_lspci(text: str) -> dict[str, list[dict[str, str]]]:
    """GPUs and NVSwitches in ``lspci -nn [-D]`` output; other lines are ignored."""
    found: dict[str, list[dict[str, str]]] = {"gpus": [], "nvswitches": []}
    for line in text.splitlines():
        m = LINE_RE.match(line.strip())
        if not m or m["vendor"] != NVIDIA:
            continue
        slot = m["slot"] if m["slot"].count(":") == 2 else f"0000:{m['slot']}"
        entry = {"slot": slot, "device": m["device"],
                 "name": re.sub(r"^NVIDIA Corporation\s+", "", m["name"])}
        if m["code"] in GPU_CLASSES:
            found["gpus"].append(entry)
        elif m["code"] == NVSWITCH_CLASS:
            found["nvswitches"].append(entry)
    return found


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(argument_spec={"lspci": {"type": "str", "default": "lspci"}},
                           supports_check_mode=True)
    lspci = module.get_bin_path(module.params["lspci"], required=True)
    rc, out, err = module.run_command([lspci, "-nn", "-D"])
    if rc != 0:
        module.fail_json(msg=f"{lspci} -nn -D failed ({rc}): {err.strip()}")
    facts: dict[str, Any] = parse_lspci(out)
    module.exit_json(changed=False, ansible_facts={"metalslurm_nvidia_pci": facts})


if __name__ == "__main__":
    main()
