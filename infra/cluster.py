"""The ``Cluster`` component: secrets, machines from one provider, the inventory, configure.

Data flows one way: the parsed stack config gives node specs (provider functions), the
provider creates or adopts the machines, and the inventory is built from the specs by
:func:`infra.inventory.build_inventory` and :func:`infra.inventory.cluster_vars` (the
schema every provider shares). Secrets are made with pulumi-random, exported only as
secret outputs, and reach Ansible only through operator-side files (mode 0600) that the
``{name}-configure`` (or ``{name}-operator-files``) command writes; the inventory names
those files and never holds a secret.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pulumi
import pulumi_command as command
import pulumi_random as random
import yaml

from infra.config import ClusterConfig
from infra.inventory import NodeSpec, build_inventory, cluster_vars

MUNGE_KEY_BYTES = 1024
JWT_KEY_BYTES = 32  # Slurm's auth/jwt HS256 key: 32 random bytes, as its docs make it
# libyaml's emitter when PyYAML has it: the same YAML as SafeDumper, ~5x faster on the
# inventory of a 1,000-node cluster.
YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@dataclass(frozen=True)
class ClusterArgs:
    """What the component needs: the parsed config and where operator-side files go."""

    config: ClusterConfig
    stack: str
    repo_root: Path
    state_dir: Path
    raw_config: Mapping[str, Any] = field(default_factory=dict)
    ssh_private_key: pulumi.Input[str] | None = None
    bmc_credentials: pulumi.Input[Any] | None = None


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


def secret_files(state_dir: Path, ssh_key: bool, bmc: bool) -> dict[str, str]:
    """Inventory vars naming the operator-side secret files (never their contents)."""
    secrets = state_dir.resolve() / "secrets"
    files = {
        "munge_key_b64_file": str(secrets / "munge.key.b64"),
        "slurmdbd_password_file": str(secrets / "slurmdbd.password"),
        "slurm_jwt_key_b64_file": str(secrets / "jwt.key.b64"),
    }
    if ssh_key:
        files["ansible_ssh_private_key_file"] = str(secrets / "ssh_key")
    if bmc:
        files["slurm_elastic_credentials_file"] = str(secrets / "bmc-credentials.json")
    return files


def make_inventory(cfg: ClusterConfig, specs: list[NodeSpec], connection: Mapping[str, Any],
                   power: Mapping[str, Mapping[str, Any]],
                   files: Mapping[str, str]) -> dict[str, Any]:
    """The foundation's inventory for these specs; raises InventoryError if it is invalid."""
    specs = [replace(s, power=dict(power[s.name])) if s.name in power else s for s in specs]
    all_vars = cluster_vars(cfg, specs)
    all_vars.update(connection)
    all_vars.update(files)
    return build_inventory(specs, all_vars)


def _machines(name: str, args: ClusterArgs, parent: pulumi.Resource) -> Machines:
    provider = args.config.provider
    if provider == "local":
        from infra.pulumi_local import local_machines
        return local_machines(name, args, parent)
    if provider == "byo":
        from infra.providers.byo import byo_machines
        return byo_machines(name, args, parent)
    if provider == "oci":
        from infra.providers.oci import oci_machines
        return oci_machines(name, args, parent)
    raise ValueError(f"unknown provider {provider!r}")


class Cluster(pulumi.ComponentResource):
    """One Slurm cluster: secrets, network, controller, NFS server, compute pools."""

    inventory: pulumi.Output[dict[str, Any]]
    controller_address: pulumi.Output[str]
    bastion_address: pulumi.Output[str | None]
    ssh_hint: pulumi.Output[str]
    munge_key_b64: pulumi.Output[str]
    slurmdbd_password: pulumi.Output[str]
    jwt_key_b64: pulumi.Output[str]

    def __init__(self, name: str, args: ClusterArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("metalslurm:index:Cluster", name, None, opts)
        cfg = args.config
        child = pulumi.ResourceOptions(parent=self)

        munge = random.RandomBytes(f"{name}-munge-key", length=MUNGE_KEY_BYTES, opts=child)
        password = random.RandomPassword(f"{name}-slurmdbd-password", length=32,
                                         special=False, opts=child)
        jwt = random.RandomBytes(f"{name}-jwt-key", length=JWT_KEY_BYTES, opts=child)
        self.munge_key_b64 = pulumi.Output.secret(munge.base64)
        self.slurmdbd_password = pulumi.Output.secret(password.result)
        self.jwt_key_b64 = pulumi.Output.secret(jwt.base64)

        machines = _machines(name, args, self)
        self.specs = machines.specs
        files = secret_files(args.state_dir, args.ssh_private_key is not None,
                             args.bmc_credentials is not None)
        self.inventory = pulumi.Output.all(machines.connection_vars, machines.power).apply(
            lambda v: make_inventory(cfg, machines.specs, v[0], v[1], files))
        self.inventory_file = args.state_dir.resolve() / "inventory.yml"
        self.controller_address = machines.controller_address
        self.bastion_address = machines.bastion_address
        self.ssh_hint = machines.ssh_hint

        inventory_yaml = self.inventory.apply(
            lambda inv: yaml.dump(inv, Dumper=YAML_DUMPER, sort_keys=False))
        environment: dict[str, pulumi.Input[str]] = {
            "METALSLURM_INVENTORY": inventory_yaml,
            "METALSLURM_FILES": json.dumps(files, sort_keys=True),
            "METALSLURM_MUNGE_KEY_B64": self.munge_key_b64,
            "METALSLURM_SLURMDBD_PASSWORD": self.slurmdbd_password,
            "METALSLURM_JWT_KEY_B64": self.jwt_key_b64,
        }
        if args.ssh_private_key is not None:
            environment["METALSLURM_SSH_PRIVATE_KEY"] = pulumi.Output.secret(
                args.ssh_private_key)
        if args.bmc_credentials is not None:
            environment["METALSLURM_BMC_CREDENTIALS"] = pulumi.Output.secret(
                pulumi.Output.from_input(args.bmc_credentials).apply(
                    lambda c: json.dumps(c, sort_keys=True)))
        run = [sys.executable, "-m", "infra.pulumi_configure", "--inventory",
               str(self.inventory_file)]
        if cfg.configure:
            run.append("--playbook")
        # Writes the inventory and the secret files (0600); with configure: true also runs
        # the playbook. Replaced, so run again, whenever the inventory changes.
        self.configure = command.local.Command(
            f"{name}-configure" if cfg.configure else f"{name}-operator-files",
            create=shlex.join(run), dir=str(args.repo_root), environment=environment,
            triggers=[inventory_yaml],
            opts=pulumi.ResourceOptions(parent=self, depends_on=machines.ready))

        self.register_outputs({
            "inventory": self.inventory,
            "controllerAddress": self.controller_address,
            "bastionAddress": self.bastion_address,
            "sshHint": self.ssh_hint,
            "mungeKey": self.munge_key_b64,
            "slurmdbdPassword": self.slurmdbd_password,
            "slurmJwtKey": self.jwt_key_b64,
        })
