"""``metalslurm local``: a cluster of podman nodes on this machine, from a stack file.

The orchestration behind ``local up`` (images, nodes, inventory, configure, verify, each
phase timed), ``down``, ``status``, ``exec`` and ``image build``; :mod:`infra.cli` parses
the arguments and calls these, and bench/bench_up.py runs :func:`local_up` itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from infra.ops.output import phase, say
from infra.stack.config import ClusterConfig, ConfigError, load_stack_file
from infra.stack.inputs import InputError
from infra.stack.state import StateDir

if TYPE_CHECKING:
    from infra.providers.local import LocalCluster


def stack_name(stack_file: Path) -> str:
    """``Pulumi.local.yaml`` -> ``local`` (Pulumi's own naming)."""
    name = stack_file.name
    if name.startswith("Pulumi.") and name.endswith((".yaml", ".yml")):
        return name[len("Pulumi."):].rsplit(".", 1)[0]
    return stack_file.stem


def state_dir_for(stack_file: Path) -> Path:
    return Path(".metalslurm") / stack_name(stack_file)


def local_stack(stack_file: Path, needs: str, check_artifacts: bool = False) -> ClusterConfig:
    """The parsed config of a stack file given with --stack for a local cluster; ``needs``
    says why another provider's will not do. ``check_artifacts``: see
    :func:`infra.stack.config.parse_config`."""
    cfg = load_stack_file(stack_file, "--stack", check_artifacts=check_artifacts)
    if cfg.provider != "local":
        raise ConfigError([f"metalslurm:provider is {cfg.provider!r}: {needs}"], "--stack",
                          str(stack_file))
    return cfg


def local_cluster(stack_file: Path,
                   check_artifacts: bool = False) -> tuple[ClusterConfig, LocalCluster]:
    """The stack's parsed config and its local cluster (a config error stops here, before
    podman is touched). ``check_artifacts``: 'up' also checks the container artifacts
    kept on this machine; down, status and exec do not need them."""
    from infra.providers.local import LocalCluster, LocalPlan

    cfg = local_stack(stack_file, "'metalslurm local' needs provider: local", check_artifacts)
    return cfg, LocalCluster(plan=LocalPlan.from_config(cfg),
                             state=StateDir(state_dir_for(stack_file)), log=say)


def storage_summary(cfg: ClusterConfig, cluster: LocalCluster) -> str:
    mode = cluster.plan.shared_storage
    paths = ", ".join(cluster.plan.shared_paths)
    if mode == "nfs":
        return f"nfs from node {cfg.storage.server} ({paths})"
    if mode == "host-bind":
        return (f"host-bind: this kernel has no NFS, so {paths} are host directories under "
                f"{cluster.state.shared} bind-mounted into every node")
    return "none"


def node_images(cfg: ClusterConfig, cluster: LocalCluster, *,
                prepared: bool) -> tuple[str, dict[str, str] | None]:
    """The bare node image, and with ``prepared`` each node kind's prepared image (kind ->
    image), each built first where missing."""
    from infra.ops.image import ensure_prepared_images, stack_kinds
    from infra.providers.images import ensure_image

    image = ensure_image(cfg.os, cfg.local.image_source, cfg.local.mirror, log=say)
    if not prepared:
        return image, None
    return image, ensure_prepared_images(cfg, image, stack_kinds(cluster.specs()))


def local_up(cfg: ClusterConfig, cluster: LocalCluster, *, configure: bool = True,
             verify: bool = True, verbose: bool = False,
             drain_wait: float | None = None) -> tuple[int, dict[str, float]]:
    """Image, nodes, inventory, configure, verify: what 'metalslurm local up' does, with the
    time of each phase (bench/bench_up.py runs the same steps). Nodes the config no longer
    has leave only once no job runs there (``drain_wait``: LocalCluster.provision, its
    default when None)."""
    from ansible_collections.metalslurm.cluster.plugins.module_utils.slurm_leaving import (
        DRAIN_WAIT_S,
    )

    from infra.ops.configure import heartbeat_for, print_summary, run_playbook, stack_run_vars
    from infra.ops.verify import run_verify
    from infra.providers.local import write_local_inventory
    from infra.stack.state import (
        ensure_cluster_secrets,
        write_alert_secrets_file,
        write_credentials_file,
    )

    cluster.preflight()
    timings: dict[str, float] = {}
    with phase("image", timings):
        image, images = node_images(cfg, cluster, prepared=cfg.local.prepared_images)
    with phase("nodes", timings):
        cluster.provision(image, images,
                          drain_wait=DRAIN_WAIT_S if drain_wait is None else drain_wait)
        secret_files = ensure_cluster_secrets(cluster.state)
        if cfg.containers.enabled and cfg.containers.credentials_file:
            secret_files |= write_credentials_file(cluster.state, cfg.containers.credentials_file)
        if cfg.monitoring.enabled and cfg.monitoring.secrets_file:
            secret_files |= write_alert_secrets_file(cluster.state, cfg.monitoring.secrets_file)
        inventory = write_local_inventory(cfg, cluster, secret_files)
        for row in cluster.status():
            say(f"    {row['node']:<12} {row['address']:<15} {row['gpus']:<9} {row['state']}")
        say(f"    shared storage: {storage_summary(cfg, cluster)}")
        say(f"    inventory: {inventory}")
    rc = 0
    if configure:
        with phase("configure", timings):
            started = cluster.prepare_elastic_nodes_for_configure()
            if started:
                say(f"    elastic nodes powered up to be configured: {', '.join(started)}")
            configured = cluster.running_elastic_nodes()
            # The controller play drains and waits for leaving nodes too (a node Slurm
            # still knows whose machine is already gone): with the same wait.
            result = run_playbook(inventory, out=say if verbose else None,
                                  heartbeat=heartbeat_for(say),
                                  extra_vars=stack_run_vars(drain_wait))
            print_summary(result, out=say)
        rc = result.rc
        if rc == 0:
            cluster.mark_elastic_nodes_configured(configured)
            idle = cluster.power_down_idle_elastic_nodes()
            stopped = [n for n in configured if not cluster.running(n)] + idle
            if stopped:
                say(f"    elastic nodes powered down until Slurm needs them: {', '.join(stopped)}")
        if rc == 0 and verify:
            with phase("verify", timings):
                rc = run_verify(inventory, out=say)
    return rc, timings


def up(stack_file: Path, *, configure: bool = True, verify: bool = True,
       verbose: bool = False, drain_wait: float | None = None) -> int:
    """``metalslurm local up``: :func:`local_up` on the stack's cluster, then its timings."""
    from infra.ops.preflight import checked_drain_wait

    wait = checked_drain_wait(drain_wait)
    cfg, cluster = local_cluster(stack_file, check_artifacts=True)  # errors stop here
    rc, timings = local_up(cfg, cluster, configure=configure, verify=verify, verbose=verbose,
                           drain_wait=wait)
    total = sum(timings.values())
    say("timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items())
        + f", total {total:.1f} s")
    if rc != 0:
        say("local up did not complete; fix the problem above and run it again "
            "(every step is safe to repeat)")
    return rc


def image_build(stack_file: Path) -> int:
    """``metalslurm image build``: the stack's prepared node images, built if missing (the
    local provider's; other providers: docs/how-to/images.md)."""
    cfg, cluster = local_cluster(stack_file, check_artifacts=True)
    node_images(cfg, cluster, prepared=True)
    return 0


def down(stack_file: Path) -> int:
    """``metalslurm local down``: remove the stack's node containers."""
    cfg, cluster = local_cluster(stack_file)
    removed = cluster.destroy()
    say(f"removed {removed} node container(s) of cluster {cfg.cluster_name}")
    return 0


def status(stack_file: Path) -> int:
    """``metalslurm local status``: one line per node; 1 unless every node is up or
    powered down by Slurm."""
    _cfg, cluster = local_cluster(stack_file)
    rows = cluster.status()
    say(f"{'node':<12} {'groups':<26} {'address':<15} {'gpus':<9} {'container':<28} state")
    for r in rows:
        say(f"{r['node']:<12} {r['groups']:<26} {r['address']:<15} {r['gpus']:<9} "
            f"{r['container']:<28} {r['state']}")
    return 0 if all(r["state"] in ("running", "powered-down") for r in rows) else 1


def exec_words(stack_file: Path, words: list[str], *, interactive: bool) -> int:
    """``exec NODE -- COMMAND``, or ``exec -- COMMAND`` on the submit host (the first
    login node, else the controller)."""
    node = None if words[:1] == ["--"] else (words.pop(0) if words else None)
    command = words[1:] if words[:1] == ["--"] else words
    if not command:
        raise InputError("COMMAND", "is missing; write: metalslurm local exec [NODE] -- "
                         "COMMAND [ARGS...] (no NODE: the login node, else the controller)")
    cfg, cluster = local_cluster(stack_file)
    target = cfg.submit_host if node is None else node
    nodes = [spec.name for spec in cluster.specs()]
    if target not in nodes:
        raise InputError("NODE", f"is not a node of cluster {cfg.cluster_name} (--stack "
                         f"{stack_file}); give one of: {', '.join(nodes)}", repr(target))
    return cluster.exec(target, command, interactive=interactive)
