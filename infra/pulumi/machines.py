"""What a provider hands the ``Cluster`` component, and what it gets from it.

Kept apart from :mod:`infra.pulumi.cluster` so the providers (``infra/providers/{byo,oci}.py``,
``infra/pulumi/local.py``) and the component import this module, never each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi

from infra.stack.config import ClusterConfig
from infra.stack.inventory import NodeSpec


@dataclass(frozen=True)
class ClusterArgs:
    """What the component needs: the parsed config and where operator-side files go."""

    config: ClusterConfig
    stack: str
    repo_root: Path
    state_dir: Path
    ssh_private_key: pulumi.Input[str] | None = None
    bmc_credentials: pulumi.Input[Any] | None = None
    # Registry logins for Enroot: the secret metalslurm:registryCredentials, or the content
    # of metalslurm:containers.credentialsFile.
    registry_credentials: pulumi.Input[Any] | None = None
    # The alert receivers' credentials: the secret metalslurm:alertSecrets, or the content
    # of metalslurm:monitoring.secretsFile.
    alert_secrets: pulumi.Input[Any] | None = None


@dataclass
class Machines:
    """What a provider hands back to the component."""

    specs: list[NodeSpec]
    connection_vars: pulumi.Output[dict[str, Any]]
    controller_address: pulumi.Output[str]
    bastion_address: pulumi.Output[str | None]
    ssh_hint: pulumi.Output[str]
    # node name -> metalslurm_power mapping known only after creation (e.g. instance ids)
    power: pulumi.Output[dict[str, dict[str, Any]]] = field(
        default_factory=lambda: pulumi.Output.from_input({}))
    ready: list[pulumi.Resource] = field(default_factory=list)
    # The private half of the key the controller logs in with to configure a machine made
    # anew (launch-terminate; infra/stack/join_kit.py), a secret Output: only for a provider
    # that puts the public half into the machines it launches itself (oci).
    join_key: pulumi.Output[str] | None = None
