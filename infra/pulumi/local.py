"""Pulumi resources of the local provider: podman nodes as ``pulumi_command`` commands.

Each command runs one step of :mod:`infra.providers.local_resources`, which calls the
same :class:`~infra.providers.local.LocalCluster` methods as ``metalslurm local up``:
the image, the network (with the cluster's SSH key and shared directories), one
command per node (create: start it and wait for sshd; delete: remove its container),
and the known_hosts file. Deleting the network command removes whatever is left.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from functools import partial

import pulumi
import pulumi_command as command

from infra.providers.local import LocalCluster, LocalPlan, spec_to_json
from infra.providers.podman_proxy import LAUNCH_TERMINATE
from infra.pulumi.machines import ClusterArgs, Machines
from infra.stack.schema import ConfigError, key
from infra.stack.state import StateDir

MODULE = "infra.providers.local_resources"


def _node_step(step: Callable[..., str], spec_json: str, image: str) -> str:
    return step("node", "--spec", spec_json, "--image", image)


def local_machines(name: str, args: ClusterArgs, parent: pulumi.Resource) -> Machines:
    cfg = args.config
    if cfg.local.elastic_mode == LAUNCH_TERMINATE and cfg.elastic_node_names():
        # Its nodes are made by the power driver from the prepared image, which only
        # 'metalslurm local up' builds (this program's steps start from the bare image).
        raise ConfigError([f"{key('local')}.elasticMode: launch-terminate is made by "
                           "'metalslurm local up'; with pulumi up, use start-stop"])
    plan = LocalPlan.from_config(cfg)  # the config was parsed once, by the program
    cluster = LocalCluster(plan=plan, state=StateDir(args.state_dir))
    specs = cluster.specs()
    state_dir = str(args.state_dir.resolve())
    env = {"METALSLURM_PLAN": plan.to_json(with_specs=False)}

    def step(*words: str) -> str:
        return shlex.join([sys.executable, "-m", MODULE, "--state-dir", state_dir, *words])

    def opts(*deps: pulumi.Resource) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=parent, depends_on=list(deps))

    image = command.local.Command(f"{name}-image", create=step("image"),
                                  dir=str(args.repo_root), environment=env,
                                  triggers=[cfg.os, cfg.local.image_source], opts=opts())
    network = command.local.Command(
        f"{name}-network", create=step("network"),
        delete=step("destroy", "--cluster", cfg.cluster_name),
        dir=str(args.repo_root), environment=env,
        triggers=[str(cfg.private_cidr), cfg.cluster_name], opts=opts())
    nodes = []
    for spec in specs:
        # Replaced when what the container is made from changes (not, say, the host's
        # memory that an elastic node's inventory entry carries).
        trigger = json.dumps({"name": spec.name, "address": spec.address,
                              "groups": list(spec.groups), "gpus": spec.gpu_count,
                              "state": spec.node_state}, sort_keys=True)
        nodes.append(command.local.Command(
            f"{name}-node-{spec.name}",
            create=image.stdout.apply(partial(_node_step, step, spec_to_json(spec))),
            delete=step("remove-node", "--cluster", cfg.cluster_name, spec.name),
            dir=str(args.repo_root), environment=env, triggers=[trigger],
            opts=opts(network)))
    known_hosts = command.local.Command(
        f"{name}-known-hosts", create=step("known-hosts"), dir=str(args.repo_root),
        environment={**env, "METALSLURM_KNOWN_HOSTS": pulumi.Output.all(
            *[n.stdout for n in nodes]).apply(lambda lines: "\n".join(lines))},
        opts=opts(*nodes))
    connection = cluster.connection_vars()
    controller = plan.spec(plan.controller)
    ctl_container = cluster.container(controller.name)
    return Machines(
        specs=specs,
        connection_vars=pulumi.Output.from_input(connection),
        controller_address=pulumi.Output.from_input(controller.address),
        bastion_address=pulumi.Output.from_input(None),
        ssh_hint=pulumi.Output.from_input(
            f"ssh -i {cluster.state.ssh_key.resolve()} -o UserKnownHostsFile="
            f"{cluster.state.known_hosts.resolve()} root@{controller.address}   "
            f"(or: podman exec -it {ctl_container} bash)"),
        ready=[known_hosts, *nodes],
    )
