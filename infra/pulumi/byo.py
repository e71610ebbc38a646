"""The byo provider: existing bare-metal servers, given by address in the stack config.

Nothing is created: each host the cluster needs right away (controller, NFS server,
static compute nodes) is adopted by a ``pulumi_command.remote.Command`` that checks it is
reachable, runs a supported OS, and, when ``nvidia-smi`` exists, shows the GPU count
the config expects. Elastic hosts may be powered off, so they are not contacted; Slurm
powers them on through their BMC (Redfish or IPMI; the credentials are a stack secret
that reaches the controller only through ``slurm_elastic_credentials_file``).
"""

from __future__ import annotations

import shlex

import pulumi
import pulumi_command as command
from ansible_collections.metalslurm.cluster.plugins.module_utils.operating_systems import by_id

from infra.pulumi.machines import ClusterArgs, Machines
from infra.stack.byo_hosts import byo_settings, connection_vars, jump_host, node_specs


def host_check_script(name: str, gpu_count: int, os_name: str,
                      os_release: str = "/etc/os-release") -> str:
    """A POSIX shell script that fails with a sentence naming the host when it is unfit:
    it must run the stack's ``metalslurm:os`` (every node the same OS, so the same Slurm
    release) and, when ``nvidia-smi`` exists, show the configured GPU count."""
    release = by_id(os_name)
    os_id, version = release.distribution, release.version
    n = shlex.quote(name)
    return f"""set -u
. {shlex.quote(os_release)} 2>/dev/null ||
  {{ echo "host {n}: cannot read {os_release}" >&2; exit 1; }}
if [ "$ID:$VERSION_ID" != "{os_id}:{version}" ]; then
  echo "host {n}: runs $ID $VERSION_ID; metalslurm:os is {os_name} ({os_id} {version})" >&2
  exit 1
fi
if command -v nvidia-smi >/dev/null 2>&1; then
  found=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -c .)
  if [ "$found" -ne {gpu_count} ]; then
    echo "host {n}: nvidia-smi shows $found GPUs, the config says {gpu_count}" >&2; exit 1
  fi
fi
echo "host {n}: $ID $VERSION_ID ok"
"""


def byo_machines(name: str, args: ClusterArgs, parent: pulumi.Resource) -> Machines:
    cfg = args.config
    byo = byo_settings(cfg)
    specs = node_specs(cfg)
    checks: list[pulumi.Resource] = []
    if byo.check_hosts and args.ssh_private_key is not None:
        proxy = None
        jump = jump_host(cfg)
        if jump:
            user, _, host = jump.partition("@")
            proxy = command.remote.ProxyConnectionArgs(host=host, user=user,
                                                       private_key=args.ssh_private_key)
        for spec in specs:
            if spec.node_state == "cloud":
                continue  # may be powered off; Slurm resumes it through its BMC
            connection = command.remote.ConnectionArgs(
                host=spec.ansible_host or spec.address, user=byo.ssh_user,
                private_key=args.ssh_private_key,
                proxy=None if spec.ansible_host else proxy)
            checks.append(command.remote.Command(
                f"{name}-check-{spec.name}", connection=connection,
                create=host_check_script(spec.name, spec.gpu_count, cfg.os),
                triggers=[spec.address, spec.gpu_count, cfg.os],
                opts=pulumi.ResourceOptions(parent=parent)))
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
        ready=checks,
    )
