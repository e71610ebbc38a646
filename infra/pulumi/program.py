"""The Pulumi program behind ``__main__.py``: read the stack config, build one Cluster, export.

The stack config is read from the Pulumi engine and handed to the same parser
(:func:`infra.stack.config.parse_config`) that ``metalslurm config validate`` and
``metalslurm local up`` use, so a bad stack fails here, with every problem named,
before any resource is registered. Secret keys reach the parser as ``{secure: ...}``,
exactly as they appear in a stack file; their values are read with ``get_secret``.
"""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import config as runtime_config

from infra.stack.config import ClusterConfig, parse_config
from infra.stack.schema import NAMESPACE

REPO_ROOT = Path(__file__).resolve().parents[2]

# The cycle collector's young-generation threshold while the program runs (CPython's
# default is 700 allocations). A Pulumi program's heap only grows until the engine is
# done: every resource keeps an Output, an asyncio future and a coroutine per property
# (about 50 for an OCI instance), so almost nothing a collection scans is garbage.
# With the default, collections took 40-55% of the run for 1,000 compute nodes
# (bench/bench_pulumi.py); at 50,000 they take 10-25%. Cyclic garbage is still
# collected, in larger batches (20-50 MB more peak memory at 1,000 nodes).
GC_YOUNG_THRESHOLD = 50_000


def _engine_keys() -> set[str]:
    """Every ``metalslurm:*`` key the engine passed (the known ones and any typo, which the
    parser reports by name)."""
    keys = set(pulumi.runtime.get_config_env()) | set(runtime_config.CONFIG.get())
    return {k for k in keys if str(k).startswith(f"{NAMESPACE}:")}


def _is_secret(full_key: str) -> bool:
    return (pulumi.runtime.is_config_secret(full_key)
            or full_key in pulumi.runtime.get_config_secret_keys_env())


def _decode(value: Any) -> Any:
    """Pulumi hands object, array, number and boolean config values over as JSON text."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def raw_stack_config() -> dict[str, Any]:
    """The stack config as the parser sees it in a stack file (secrets stay opaque)."""
    return {k: {"secure": "<secret>"} if _is_secret(k) else _decode(pulumi.runtime.get_config(k))
            for k in sorted(_engine_keys())}


def load_cluster_config() -> ClusterConfig:
    return parse_config(raw_stack_config(), source=f"stack {pulumi.get_stack()}",
                        base_dir=Path.cwd())


def main() -> None:
    from infra.pulumi.cluster import Cluster, ClusterArgs

    young, older, oldest = gc.get_threshold()
    gc.set_threshold(max(GC_YOUNG_THRESHOLD, young), older, oldest)
    cfg = load_cluster_config()  # a bad config stops here, before any resource exists
    conf = pulumi.Config(NAMESPACE)
    ssh_key = conf.get_secret("sshPrivateKey")
    bmc = conf.get_secret_object("bmcCredentials")
    registry = conf.get_secret_object("registryCredentials")
    if registry is None and cfg.containers.credentials_file:
        registry = pulumi.Output.secret(Path(cfg.containers.credentials_file).read_text())
    alerts = conf.get_secret_object("alertSecrets")
    if alerts is None and cfg.monitoring.secrets_file:
        alerts = pulumi.Output.secret(Path(cfg.monitoring.secrets_file).read_text())
    stack = pulumi.get_stack()
    cluster = Cluster(cfg.cluster_name, ClusterArgs(
        config=cfg, stack=stack, repo_root=REPO_ROOT,
        state_dir=REPO_ROOT / ".metalslurm" / stack,
        ssh_private_key=ssh_key, bmc_credentials=bmc, registry_credentials=registry,
        alert_secrets=alerts))
    pulumi.export("inventory", cluster.inventory)
    pulumi.export("controllerAddress", cluster.controller_address)
    pulumi.export("bastionAddress", cluster.bastion_address)
    pulumi.export("sshHint", cluster.ssh_hint)
    pulumi.export("inventoryFile", str(cluster.inventory_file))
    pulumi.export("mungeKey", cluster.munge_key_b64)
    pulumi.export("slurmdbdPassword", cluster.slurmdbd_password)
    pulumi.export("slurmJwtKey", cluster.jwt_key_b64)
    pulumi.export("monitoringPassword", cluster.monitoring_password)
