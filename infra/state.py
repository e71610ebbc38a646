"""The operator-side state of one stack, ``.metalslurm/<stack>/``, written by this module only.

What lives there::

    inventory.yml          the Ansible inventory (no secret in it, only the names of files)
    secrets/               0700; one 0600 file per secret the inventory names:
                           munge key, slurmdbd password, JWT key, SSH key (byo, oci),
                           BMC credentials (byo)
    ssh/                   the local provider's own SSH key and known_hosts
    nodes/<node>/          files the local provider bind-mounts into a node container
    shared/                host directories shared by bind mounts (local, no kernel NFS)
    host-ca/               the host's extra CA certificates, mounted read-only into the
                           local cluster's nodes (infra/providers/host_ca.py)
    podman/                the podman API socket the local power driver talks to

``metalslurm local up`` makes the secrets here (:func:`ensure_cluster_secrets`); ``pulumi
up`` hands its pulumi-random secrets to :meth:`StateDir.write_secret`; either way the
files, their modes and their checks are this module's.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infra.containers_config import ContainersError, checked_credentials

# Inventory variable naming a secret file -> the file's name under secrets/.
SECRET_FILES = {
    "munge_key_b64_file": "munge.key.b64",
    "slurmdbd_password_file": "slurmdbd.password",
    "slurm_jwt_key_b64_file": "jwt.key.b64",
    "ansible_ssh_private_key_file": "ssh_key",
    "slurm_elastic_credentials_file": "bmc-credentials.json",
    "registry_credentials_file": "registry-credentials.json",
}
# The secrets every cluster has; the others depend on the provider.
CLUSTER_SECRETS = ("munge_key_b64_file", "slurmdbd_password_file", "slurm_jwt_key_b64_file")
MUNGE_KEY_BYTES = 1024
JWT_KEY_BYTES = 32  # Slurm's auth/jwt HS256 key: 32 random bytes, as its docs make it
# libyaml's emitter when PyYAML has it: the same YAML as SafeDumper, ~5x faster on the
# inventory of a 1,000-node cluster.
YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class SecretError(ValueError):
    """A secret value that would break the node that reads it."""


def checked_secret(var: str, value: str) -> str:
    """The file content for secret ``var``, or SecretError naming what is wrong."""
    if var in ("munge_key_b64_file", "slurm_jwt_key_b64_file"):
        try:
            raw = base64.b64decode(value, validate=True)
        except binascii.Error:
            raise SecretError(f"{var}: the key is not valid base64") from None
        if var == "munge_key_b64_file" and len(raw) < 32:
            raise SecretError(f"{var}: a munge key needs at least 32 bytes")
        return value.strip() + "\n"
    if var == "slurm_elastic_credentials_file":
        try:
            creds = json.loads(value)
        except ValueError:
            creds = None
        if not isinstance(creds, Mapping) or not all(
                isinstance(v, Mapping) and {"username", "password"} <= set(v)
                for v in creds.values()):
            raise SecretError("metalslurm:bmcCredentials: must map a node name or 'default' to "
                              "{username, password}")
        return json.dumps(creds, sort_keys=True) + "\n"
    if var == "registry_credentials_file":
        try:
            return checked_credentials(value)
        except ContainersError as exc:
            raise SecretError(str(exc)) from None
    if var == "ansible_ssh_private_key_file":
        return value.rstrip("\n") + "\n"  # OpenSSH refuses a key without a final newline
    if var == "slurmdbd_password_file":
        return value.strip() + "\n"
    raise SecretError(f"{var}: not a secret file metalslurm knows")


def _write_private(path: Path, content: str) -> None:
    """Write ``content`` so that no other user can read it at any moment (0600 from the
    start) and a reader never sees half a file (rename into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(content)
    os.replace(tmp, path)


@dataclass(frozen=True)
class StateDir:
    """``.metalslurm/<stack>/`` of one stack."""

    root: Path

    @property
    def inventory(self) -> Path:
        return self.root / "inventory.yml"

    @property
    def secrets(self) -> Path:
        return self.root / "secrets"

    @property
    def ssh_key(self) -> Path:
        return self.root / "ssh" / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.root / "ssh" / "known_hosts"

    @property
    def shared(self) -> Path:
        return self.root / "shared"

    @property
    def host_ca(self) -> Path:
        return self.root / "host-ca"

    @property
    def podman_socket_dir(self) -> Path:
        return self.root / "podman"

    def node_dir(self, node: str) -> Path:
        return self.root / "nodes" / node

    def secret_file(self, var: str) -> Path:
        return self.secrets.resolve() / SECRET_FILES[var]

    def secret_vars(self, names: Iterable[str]) -> dict[str, str]:
        """Inventory vars naming the secret files (never their contents)."""
        return {var: str(self.secret_file(var)) for var in names}

    def write_secret(self, var: str, value: str) -> Path:
        path = self.secret_file(var)
        _write_private(path, checked_secret(var, value))
        return path

    def ensure_secret(self, var: str, make: Callable[[], str]) -> Path:
        """The secret file for ``var``, made with ``make()`` unless it exists."""
        path = self.secret_file(var)
        if not path.exists():
            self.write_secret(var, make())
        return path

    def write_inventory(self, inventory: Mapping[str, Any], header: str) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        text = yaml.dump(dict(inventory), Dumper=YAML_DUMPER, sort_keys=False)
        tmp = self.inventory.with_name(".inventory.yml.tmp")
        tmp.write_text(header + text)
        os.replace(tmp, self.inventory)
        return self.inventory

    def remove(self) -> None:
        if self.root.exists():
            shutil.rmtree(self.root)


def write_credentials_file(state: StateDir, source: str) -> dict[str, str]:
    """The registry credentials of ``metalslurm:containers.credentialsFile`` as a secret
    file (checked, 0600); returns the inventory var naming it."""
    state.write_secret("registry_credentials_file", Path(source).read_text())
    return state.secret_vars(["registry_credentials_file"])


def ensure_cluster_secrets(state: StateDir) -> dict[str, str]:
    """Munge key, slurmdbd password and JWT key for a cluster without Pulumi (the local
    cluster): made once, kept across runs; returns the inventory vars naming them."""
    makers = {
        "munge_key_b64_file": lambda: base64.b64encode(
            secrets.token_bytes(MUNGE_KEY_BYTES)).decode(),
        "slurmdbd_password_file": lambda: secrets.token_urlsafe(32),
        "slurm_jwt_key_b64_file": lambda: base64.b64encode(
            secrets.token_bytes(JWT_KEY_BYTES)).decode(),
    }
    for var, make in makers.items():
        state.ensure_secret(var, make)
    return state.secret_vars(CLUSTER_SECRETS)
