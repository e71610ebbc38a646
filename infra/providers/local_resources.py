"""Command-line steps of the local provider, for the Pulumi ``local`` stack.

``metalslurm local up`` calls :class:`infra.providers.local.LocalCluster` directly; the
Pulumi program's ``pulumi_command.local.Command`` resources run these steps instead,
one per resource, so both drivers create and delete the same podman nodes through the
same functions. The stack config arrives as JSON in ``METALSLURM_CONFIG`` (the
non-secret ``metalslurm:*`` keys, as in the stack file).

    python -m infra.providers.local_resources --state-dir DIR image
    python -m infra.providers.local_resources --state-dir DIR network
    python -m infra.providers.local_resources --state-dir DIR node NAME --image IMAGE
    python -m infra.providers.local_resources --state-dir DIR remove-node NAME
    python -m infra.providers.local_resources --state-dir DIR known-hosts
    python -m infra.providers.local_resources --state-dir DIR destroy
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from infra.config import ConfigError, parse_config
from infra.providers.local import LocalCluster, LocalProviderError, container_name
from infra.providers.podman import PodmanError, podman


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cluster_from_env(state_dir: Path) -> LocalCluster:
    raw = json.loads(os.environ.get("METALSLURM_CONFIG", "{}"))
    return LocalCluster(cfg=parse_config(raw, source="METALSLURM_CONFIG"), state_dir=state_dir,
                        log=_log)


def run(args: argparse.Namespace) -> None:
    cluster = cluster_from_env(args.state_dir)
    if args.step == "image":
        from infra.providers.images import ensure_image

        cfg = cluster.cfg
        print(ensure_image(cfg.os, cfg.local.image_source, cfg.local.mirror, log=_log))
    elif args.step == "network":
        cluster.preflight()
        cluster.ensure_secrets()
        cluster.ensure_shared_dirs()
        cluster.ensure_network()
    elif args.step == "node":
        spec = next((s for s in cluster.specs() if s.name == args.name), None)
        if spec is None:
            raise LocalProviderError(f"no node {args.name!r} in the stack config")
        cluster.create_node(spec, args.image)
        print(cluster.wait_for_ssh(spec))  # its known_hosts line
    elif args.step == "remove-node":
        podman("rm", "-f", "-t", "2", "--ignore", container_name(cluster.cfg, args.name),
               timeout=180)
    elif args.step == "known-hosts":
        lines = [ln for ln in os.environ.get("METALSLURM_KNOWN_HOSTS", "").splitlines() if ln]
        cluster.known_hosts.parent.mkdir(parents=True, exist_ok=True)
        cluster.known_hosts.write_text("\n".join(sorted(lines)) + "\n")
    elif args.step == "destroy":
        cluster.destroy()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m infra.providers.local_resources")
    parser.add_argument("--state-dir", type=Path, required=True)
    sub = parser.add_subparsers(dest="step", required=True)
    sub.add_parser("image", help="build or find the node image; prints its name")
    sub.add_parser("network", help="secrets, shared directories and the podman network")
    node = sub.add_parser("node", help="start one node and wait for sshd")
    node.add_argument("name")
    node.add_argument("--image", required=True)
    rm = sub.add_parser("remove-node", help="remove one node's container")
    rm.add_argument("name")
    sub.add_parser("known-hosts", help="write known_hosts from METALSLURM_KNOWN_HOSTS")
    sub.add_parser("destroy", help="remove every node, the network and the state directory")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        run(args)
    except (ConfigError, LocalProviderError, PodmanError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
