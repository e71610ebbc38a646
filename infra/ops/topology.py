"""``metalslurm topology``: topology.conf from the fabric, on the cluster or from a file."""

from __future__ import annotations

import sys
from pathlib import Path

from infra.ops.inventory_file import hosts_in_group
from infra.ops.output import say
from infra.stack.inputs import InputError, parse_hostlist, read_text_argument

PREVIOUS_FILE = "the topology.conf in use, or no --previous"


def discover(inventory: Path, *, check: bool) -> int:
    """The slurm_topology role alone, on the controller: ibnetdiscover, then topology.conf
    (and an 'scontrol reconfigure' only when it changed)."""
    from infra.ops.configure import heartbeat_for, print_summary, run_playbook

    hosts_in_group(inventory, "slurm_controller")
    result = run_playbook(inventory, limit="slurm_controller", tags="topology",
                          check=check, out=say, heartbeat=heartbeat_for(say))
    print_summary(result, out=say)
    return result.rc


def from_file(ibnetdiscover: Path, *, inventory: Path | None, nodes: str | None,
              previous_file: Path | None, plugin: str) -> int:
    """topology.conf from a saved ibnetdiscover output, printed; the report on stderr."""
    from ansible_collections.metalslurm.cluster.plugins.module_utils.topology import TopologyError
    from ansible_collections.metalslurm.cluster.plugins.module_utils.topology_conf import (
        parse_topology_conf,
    )
    from ansible_collections.metalslurm.cluster.plugins.module_utils.topology_fabric import (
        discovered_topology,
    )

    fabric_file = "the saved output of ibnetdiscover (ibnetdiscover > fabric.txt)"
    fabric = read_text_argument(ibnetdiscover, "IBNETDISCOVER_OUTPUT", fabric_file)
    names = (hosts_in_group(inventory, "slurm_compute") if inventory
             else parse_hostlist(nodes or "", "--nodes"))
    previous = ""
    if previous_file:
        previous = read_text_argument(previous_file, "--previous", PREVIOUS_FILE,
                                      allow_empty=True)
        try:
            if previous.strip():
                parse_topology_conf(previous)
        except TopologyError as exc:
            raise InputError("--previous", f"{exc}; give {PREVIOUS_FILE}",
                             previous_file) from None
    try:
        found = discovered_topology(fabric, names, previous, plugin)
    except TopologyError as exc:
        raise InputError("IBNETDISCOVER_OUTPUT", f"{exc}; give {fabric_file}",
                         ibnetdiscover) from None
    sys.stdout.write(found["content"])
    for warning in found["warnings"]:
        print(f"WARNING: {warning}", file=sys.stderr)
    return 0
