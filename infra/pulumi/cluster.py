"""The ``Cluster`` component: secrets, machines from one provider, the inventory, configure.

Data flows one way: the parsed stack config gives node specs (provider functions), the
provider creates or adopts the machines, and the inventory is built from the specs by
:func:`infra.stack.inventory.build_inventory` and :func:`infra.stack.inventory.cluster_vars` (the
schema every provider shares). Secrets are made with pulumi-random, exported only as
secret outputs, and reach Ansible only through operator-side files (mode 0600) that the
``{name}-configure`` (or ``{name}-operator-files``) command writes; the inventory names
those files and never holds a secret.
"""

from __future__ import annotations

import json
import shlex
import sys
from typing import Any

import pulumi
import pulumi_command as command
import pulumi_random as random

from infra.pulumi.byo import byo_machines
from infra.pulumi.local import local_machines
from infra.pulumi.machines import ClusterArgs
from infra.pulumi.oci import oci_machines
from infra.stack.inventory import make_inventory
from infra.stack.join_kit import kit_inputs_digest
from infra.stack.state import (
    CLUSTER_SECRETS,
    JWT_KEY_BYTES,
    KEY_TEXT_SPECIAL,
    MUNGE_KEY_BYTES,
    StateDir,
    key_b64_from_text,
    key_text_chars,
)

PROVIDERS = {"local": local_machines, "byo": byo_machines, "oci": oci_machines}
# How long the pre-flight waits for oci machines just launched: a bare-metal shape takes
# minutes to boot, then cloud-init's first apt run holds apt's lock.
OCI_BOOT_WAIT_S = 900


def secret_vars(args: ClusterArgs) -> dict[str, str]:
    """Inventory vars naming the operator-side secret files (never their contents)."""
    names = list(CLUSTER_SECRETS)
    if args.ssh_private_key is not None:
        names.append("ansible_ssh_private_key_file")
    if args.bmc_credentials is not None:
        names.append("slurm_elastic_credentials_file")
    if args.registry_credentials is not None:
        names.append("registry_credentials_file")
    if args.alert_secrets is not None:
        names.append("monitoring_alert_secrets_file")
    return StateDir(args.state_dir).secret_vars(names)


# What makes a stack's key text: an imported key (docs/how-to/providers.md, "Keys of older
# stacks") comes with other values of these, which must not replace it.
KEY_TEXT_SETTINGS = ["length", "special", "overrideSpecial", "upper", "lower", "numeric",
                     "number", "minUpper", "minLower", "minNumeric", "minSpecial"]


def stack_key(name: str, nbytes: int, opts: pulumi.ResourceOptions) -> pulumi.Output[str]:
    """``nbytes`` random bytes, base64, made once and kept secret in the stack's state: a
    RandomPassword over base64's alphabet. Not a RandomBytes: pulumi-random makes a
    RandomBytes' value its resource ID, which Pulumi cannot keep secret (a password's ID is
    "none")."""
    text = random.RandomPassword(
        name, length=key_text_chars(nbytes), special=True, override_special=KEY_TEXT_SPECIAL,
        opts=pulumi.ResourceOptions.merge(
            opts, pulumi.ResourceOptions(ignore_changes=KEY_TEXT_SETTINGS)))
    return pulumi.Output.secret(text.result.apply(lambda t: key_b64_from_text(t, name)))


class Cluster(pulumi.ComponentResource):
    """One Slurm cluster: secrets, network, controller, NFS server, compute pools."""

    inventory: pulumi.Output[dict[str, Any]]
    controller_address: pulumi.Output[str]
    bastion_address: pulumi.Output[str | None]
    ssh_hint: pulumi.Output[str]
    munge_key_b64: pulumi.Output[str]
    slurmdbd_password: pulumi.Output[str]
    jwt_key_b64: pulumi.Output[str]
    monitoring_password: pulumi.Output[str]

    def __init__(self, name: str, args: ClusterArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("metalslurm:index:Cluster", name, None, opts)
        cfg = args.config
        child = pulumi.ResourceOptions(parent=self)

        # The cluster's munge key is made here, once, and kept in the stack's state (shared by
        # the team's backend); 'metalslurm local up', which has no Pulumi state, makes its
        # own with infra/stack/state.py's new_munge_key. Why not one generator for both, and why
        # a key file is never replaced by another key: infra/stack/state.py's docstring.
        self.munge_key_b64 = stack_key(f"{name}-munge-key-b64", MUNGE_KEY_BYTES, child)
        password = random.RandomPassword(f"{name}-slurmdbd-password", length=32,
                                         special=False, opts=child)
        self.jwt_key_b64 = stack_key(f"{name}-jwt-key-b64", JWT_KEY_BYTES, child)
        monitoring = random.RandomPassword(f"{name}-monitoring-password", length=32,
                                           special=False, opts=child)
        self.slurmdbd_password = pulumi.Output.secret(password.result)
        self.monitoring_password = pulumi.Output.secret(monitoring.result)

        machines = PROVIDERS[cfg.provider](name, args, self)
        self.specs = machines.specs
        files = secret_vars(args)
        self.inventory = pulumi.Output.all(machines.connection_vars, machines.power).apply(
            lambda v: make_inventory(cfg, machines.specs, v[0], v[1], files))
        self.inventory_file = StateDir(args.state_dir.resolve()).inventory
        self.controller_address = machines.controller_address
        self.bastion_address = machines.bastion_address
        self.ssh_hint = machines.ssh_hint

        inventory_json = self.inventory.apply(lambda inv: json.dumps(inv, sort_keys=False))
        environment: dict[str, pulumi.Input[str]] = {
            "METALSLURM_INVENTORY": inventory_json,
            "METALSLURM_SECRET_VARS": json.dumps(sorted(files)),
            "METALSLURM_MUNGE_KEY_B64": self.munge_key_b64,
            "METALSLURM_SLURMDBD_PASSWORD": self.slurmdbd_password,
            "METALSLURM_JWT_KEY_B64": self.jwt_key_b64,
            "METALSLURM_MONITORING_PASSWORD": self.monitoring_password,
        }
        if args.ssh_private_key is not None:
            environment["METALSLURM_SSH_PRIVATE_KEY"] = pulumi.Output.secret(
                args.ssh_private_key)
        if args.bmc_credentials is not None:
            environment["METALSLURM_BMC_CREDENTIALS"] = pulumi.Output.secret(
                pulumi.Output.from_input(args.bmc_credentials).apply(
                    lambda c: json.dumps(c, sort_keys=True)))
        if args.registry_credentials is not None:
            environment["METALSLURM_REGISTRY_CREDENTIALS"] = pulumi.Output.secret(
                pulumi.Output.from_input(args.registry_credentials).apply(
                    lambda c: c if isinstance(c, str) else json.dumps(c, sort_keys=True)))
        triggers: list[pulumi.Input[str]] = [inventory_json]
        if machines.join_key is not None:
            # The join key for the controller's copy, and the join kit built again (so the
            # command run again) whenever the roles it carries change.
            environment["METALSLURM_JOIN_SSH_KEY"] = machines.join_key
            triggers.append(kit_inputs_digest(args.repo_root))
        if args.alert_secrets is not None:
            environment["METALSLURM_ALERT_SECRETS"] = pulumi.Output.secret(
                pulumi.Output.from_input(args.alert_secrets).apply(
                    lambda c: c if isinstance(c, str) else json.dumps(c, sort_keys=True)))
        run = [sys.executable, "-m", "infra.pulumi.configure", "--state-dir",
               str(args.state_dir.resolve())]
        # Every host checked before the playbook touches one: byo hosts unless the stack
        # turns it off; oci machines always, waiting for them to boot (sshd, then
        # cloud-init's first apt run).
        if cfg.provider == "byo" and cfg.byo is not None and cfg.byo.check_hosts:
            run.append("--preflight")
        elif cfg.provider == "oci":
            run += ["--preflight", "--preflight-wait", str(OCI_BOOT_WAIT_S)]
        if cfg.configure:
            run.append("--playbook")
        # Writes the inventory and the secret files (0600); with configure: true also runs
        # the playbook. Replaced, so run again, whenever the inventory changes.
        self.configure = command.local.Command(
            f"{name}-configure" if cfg.configure else f"{name}-operator-files",
            create=shlex.join(run), dir=str(args.repo_root), environment=environment,
            triggers=triggers,
            opts=pulumi.ResourceOptions(parent=self, depends_on=machines.ready))

        self.register_outputs({
            "inventory": self.inventory,
            "controllerAddress": self.controller_address,
            "bastionAddress": self.bastion_address,
            "sshHint": self.ssh_hint,
            "mungeKey": self.munge_key_b64,
            "slurmdbdPassword": self.slurmdbd_password,
            "slurmJwtKey": self.jwt_key_b64,
            "monitoringPassword": self.monitoring_password,
        })
