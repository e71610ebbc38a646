"""The byo provider: existing bare-metal servers, given by address in the stack config.

Nothing is created. Before anything is changed on them, the hosts are checked by the
pre-flight (``metalslurm preflight``, infra/ops/preflight.py), which the component's
operator-files command runs on the inventory it writes (``metalslurm:byo.checkHosts``, on
by default): the same code ``metalslurm up`` runs. Elastic hosts may be powered off, so
they are not contacted; Slurm powers them on through their BMC (Redfish or IPMI; the
credentials are a stack secret that reaches the controller only through
``slurm_elastic_credentials_file``).
"""

from __future__ import annotations

import pulumi

from infra.pulumi.machines import ClusterArgs, Machines
from infra.stack.byo_hosts import byo_settings, connection_vars, jump_host, node_specs


def byo_machines(name: str, args: ClusterArgs, parent: pulumi.Resource) -> Machines:
    cfg = args.config
    byo = byo_settings(cfg)
    specs = node_specs(cfg)
    ctl = next(s for s in specs if "slurm_controller" in s.groups)
    jump = jump_host(cfg)
    hint = (f"ssh -J {jump} {byo.ssh_user}@{ctl.address}" if jump and not ctl.ansible_host
            else f"ssh {byo.ssh_user}@{ctl.ansible_host or ctl.address}")
    return Machines(
        specs=specs,
        connection_vars=pulumi.Output.from_input(connection_vars(cfg)),
        controller_address=pulumi.Output.from_input(ctl.address),
        bastion_address=pulumi.Output.from_input(byo.bastion),
        ssh_hint=pulumi.Output.from_input(hint),
    )
