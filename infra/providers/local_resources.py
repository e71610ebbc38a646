"""Command-line steps of the local provider, for the Pulumi ``local`` stack.

``metalslurm local up`` calls :class:`infra.providers.local.LocalCluster` directly; the
Pulumi program's ``pulumi_command.local.Command`` resources run these steps instead,
one per resource, so both drivers create and delete the same podman nodes through the
same functions. The Pulumi program parsed the stack config once; its
:class:`~infra.providers.local.LocalPlan` arrives as JSON in ``METALSLURM_PLAN``. The
cluster's secrets are not made here: the Pulumi program's configure step writes them.

    python -m infra.providers.local_resources --state-dir DIR image
    python -m infra.providers.local_resources --state-dir DIR network
    python -m infra.providers.local_resources --state-dir DIR node --spec JSON --image IMAGE
    python -m infra.providers.local_resources --state-dir DIR remove-node --cluster NAME NODE
    python -m infra.providers.local_resources --state-dir DIR known-hosts
    python -m infra.providers.local_resources --state-dir DIR destroy --cluster NAME
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from infra.providers.local import (
    LocalCluster,
    LocalPlan,
    LocalProviderError,
    container_name,
    destroy_cluster,
    spec_from_json,
)
from infra.providers.podman import PodmanError, remove_containers
from infra.stack.state import StateDir


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cluster_from_env(state_dir: Path) -> LocalCluster:
    text = os.environ.get("METALSLURM_PLAN")
    if not text:
        raise LocalProviderError("METALSLURM_PLAN is not set: these steps are run by the "
                                 "Pulumi program's local provider")
    return LocalCluster(plan=LocalPlan.from_json(text), state=StateDir(state_dir), log=_log)


def run(args: argparse.Namespace) -> None:
    # Deleting needs only names: it works whatever the plan of a stack's past update held.
    if args.step == "remove-node":
        remove_containers([container_name(args.cluster, args.name)])
        return
    if args.step == "destroy":
        destroy_cluster(args.cluster, StateDir(args.state_dir))
        return
    cluster = cluster_from_env(args.state_dir)
    if args.step == "image":
        from infra.providers.images import ensure_image

        plan = cluster.plan
        print(ensure_image(plan.os, plan.image_source, plan.mirror, log=_log))
    elif args.step == "network":
        cluster.preflight()
        cluster.ensure_ssh_key()
        cluster.ensure_shared_dirs()
        cluster.ensure_host_ca()
        cluster.ensure_network()
        if cluster.has_elastic_nodes:
            cluster.ensure_podman_service()
    elif args.step == "node":
        spec = spec_from_json(args.spec)
        cluster.create_node(spec, args.image)
        print(cluster.wait_for_ssh(spec))  # its known_hosts line
    elif args.step == "known-hosts":
        lines = [ln for ln in os.environ.get("METALSLURM_KNOWN_HOSTS", "").splitlines() if ln]
        cluster.state.known_hosts.parent.mkdir(parents=True, exist_ok=True)
        cluster.state.known_hosts.write_text("\n".join(sorted(lines)) + "\n")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m infra.providers.local_resources")
    parser.add_argument("--state-dir", type=Path, required=True)
    sub = parser.add_subparsers(dest="step", required=True)
    sub.add_parser("image", help="build or find the node image; prints its name")
    sub.add_parser("network", help="secrets, shared directories and the podman network")
    node = sub.add_parser("node", help="start one node and wait for sshd")
    node.add_argument("--spec", required=True, help="the node's spec as JSON")
    node.add_argument("--image", required=True)
    rm = sub.add_parser("remove-node", help="remove one node's container")
    rm.add_argument("--cluster", required=True)
    rm.add_argument("name")
    sub.add_parser("known-hosts", help="write known_hosts from METALSLURM_KNOWN_HOSTS")
    destroy = sub.add_parser("destroy", help="remove every node, the network and the state "
                             "directory")
    destroy.add_argument("--cluster", required=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        run(args)
    except (LocalProviderError, PodmanError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
