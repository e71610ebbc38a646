"""A stack's prepared node images: the build ``local up`` and ``metalslurm image build`` run.

The builder is a throw-away local cluster (one node per kind, from the stack's install
settings: :func:`infra.providers.prepared.builder_config`); ``ansible/image.yml --tags
install`` runs the roles' install phase on it and seals it, and each node is committed as
its kind's image. The builder is removed whatever happens; an interrupted
build leaves nothing the next one does not remove first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ansible_collections.metalslurm.cluster.plugins.module_utils.operating_systems import by_id

from infra.ops.output import say
from infra.providers.prepared import (
    ImageKind,
    PreparedImageError,
    build_lock,
    builder_config,
    commit,
    free_builder_subnet,
    image_line,
    kind_of,
    missing,
    plan_images,
    prune_older,
    with_network,
)
from infra.stack.config import ClusterConfig, parse_config
from infra.stack.state import StateDir

IMAGES_DIR = Path(".metalslurm") / "images"


def stack_kinds(specs: Sequence) -> list[str]:
    """The node kinds of a cluster's node specs, in their order, each once."""
    kinds: list[str] = []
    for spec in specs:
        kind = kind_of(spec.groups)
        if kind not in kinds:
            kinds.append(kind)
    return kinds


def ensure_prepared_images(cfg: ClusterConfig, base_ref: str, kinds: Sequence[str],
                           log: Callable[[str], None] = say) -> dict[str, str]:
    """The prepared image of each kind (kind -> image), building the missing ones first."""
    builder = builder_config(cfg.source, cfg.base_dir)
    images = plan_images(base_ref, builder, kinds, by_id(cfg.os).codename)
    if missing(images):
        with build_lock(IMAGES_DIR):  # another cluster may have built them meanwhile
            todo = missing(images)
            if todo:
                build(cfg, builder, base_ref, images, log)
    for image in images:
        log(f"image {image.ref} ({image.kind})")
    return {i.kind: i.ref for i in images}


def build(cfg: ClusterConfig, builder: dict, base_ref: str, images: Sequence[ImageKind],
          log: Callable[[str], None]) -> None:
    """Build ``images`` on a builder cluster made from ``builder``; raise
    PreparedImageError naming what failed."""
    from infra.ops.configure import heartbeat_for, run_playbook
    from infra.providers.local import (
        LocalCluster,
        LocalPlan,
        destroy_cluster,
        write_local_inventory,
    )
    from infra.stack.state import ensure_cluster_secrets

    name = "msimg-" + images[0].ref.rsplit("-", 1)[1][:8]
    state = StateDir(IMAGES_DIR / name)
    destroy_cluster(name, state)  # what an interrupted build of the same images left
    started = time.monotonic()
    bcfg = parse_config(with_network(builder, name, free_builder_subnet()),
                        source=f"the image builder of {cfg.cluster_name}",
                        base_dir=cfg.base_dir)
    cluster = LocalCluster(plan=LocalPlan.from_config(bcfg), state=state, log=log)
    log(f"building prepared images ({', '.join(i.kind for i in images)}) on builder "
        f"{name}: the roles' install phase, once")
    try:
        cluster.preflight()
        cluster.provision(base_ref)
        inventory = write_local_inventory(bcfg, cluster, ensure_cluster_secrets(state))
        result = run_playbook(inventory, tags="install", playbook="image.yml", out=None,
                              heartbeat=heartbeat_for(log))
        if result.rc != 0:
            raise PreparedImageError(f"image.yml --tags install failed on the image builder "
                                     f"{name}: " + "; ".join(result.failures)[-1500:])
        by_kind = {kind_of(s.groups): s.name for s in cluster.specs()}
        for image in images:
            node = by_kind.get(image.kind)
            if node is None:
                raise PreparedImageError(f"the image builder has no {image.kind} node")
            line = image_line(builder, image.kind)
            commit(cluster.container(node), image.ref, image.kind,
                   image.ref.rsplit("-", 1)[1], line)
            for old in prune_older(image.ref, line):
                log(f"removed the older prepared image {old}")
    finally:
        destroy_cluster(name, state)
    log(f"prepared images built in {time.monotonic() - started:.0f} s")

