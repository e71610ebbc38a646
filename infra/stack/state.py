"""The operator-side state of one stack, ``.metalslurm/<stack>/``, written by this module only.

What lives there::

    inventory.yml          the Ansible inventory (no secret in it, only the names of files)
    secrets/               0700; one 0600 file per secret the inventory names:
                           munge key, slurmdbd password, JWT key, SSH key (byo, oci),
                           BMC credentials (byo), the alert receivers' credentials;
                           each replaced whole, synced (:func:`_write_private`)
    ssh/                   the local provider's own SSH key and known_hosts
    nodes/<node>/          files the local provider bind-mounts into a node container
    shared/                host directories shared by bind mounts (local, no kernel NFS)
    host-ca/               the host's extra CA certificates, mounted read-only into the
                           local cluster's nodes (infra/providers/host_ca.py)
    podman/                the podman API socket the local power driver talks to

``metalslurm local up`` makes the secrets here (:func:`ensure_cluster_secrets`); ``pulumi
up`` hands its pulumi-random secrets to :meth:`StateDir.write_secret`; either way the
files, their modes and their checks are this module's.

The munge key: where it is made, and why there. A cluster's key must never change between
runs: a node the run does not reach (an elastic node powered down) keeps the old one and
can no longer talk to Slurm. So it is made once, on the operator's side, by whatever keeps
the cluster's state, and nodes never make one (roles/munge refuses an inventory without
``munge_key_b64_file``):

- a Pulumi stack: a pulumi-random ``RandomPassword`` over base64's alphabet holding the
  key's base64 (infra/pulumi/cluster.py), generated when the resource is created and kept,
  secret, in the stack's state, which a team shares through its backend; every ``pulumi up``,
  from any checkout, gets the same key (:func:`key_b64_from_text` reads it). A key made here
  instead would live in one operator's checkout, and a teammate's fresh checkout would make
  another. Not a ``RandomBytes``: pulumi-random makes a RandomBytes' value its resource ID,
  which Pulumi cannot keep secret (stacks made before 2026-12 had theirs there; moving one
  keeps its key: docs/how-to/providers.md).
- ``metalslurm local up`` (no Pulumi engine, no Pulumi state): :func:`new_munge_key`, kept
  in ``secrets/`` for the life of the cluster (``local down`` removes it with the nodes).

Both make the same thing (:data:`MUNGE_KEY_BYTES` random bytes, base64), and both reach the
nodes through the one file this module writes, which is never replaced by a different key
(:data:`KEPT_SECRETS`): a Pulumi stack run over a cluster 'local up' made, or a stack
re-created over machines that outlived it, is refused with a sentence instead of re-keying
the nodes. The controller refuses a key other than the one it holds too (roles/munge,
``munge_key_rotate``), for an operator whose checkout has no file yet.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.metalslurm.cluster.plugins.module_utils.cluster_defaults import (
    MUNGE_MIN_KEY_BYTES,
)

from infra.stack.containers import ContainersError, checked_credentials
from infra.stack.monitoring import read_alert_secrets

# Inventory variable naming a secret file -> the file's name under secrets/.
SECRET_FILES = {
    "munge_key_b64_file": "munge.key.b64",
    "slurmdbd_password_file": "slurmdbd.password",
    "slurm_jwt_key_b64_file": "jwt.key.b64",
    "ansible_ssh_private_key_file": "ssh_key",
    "slurm_elastic_credentials_file": "bmc-credentials.json",
    "registry_credentials_file": "registry-credentials.json",
    "monitoring_password_file": "monitoring.password",
    "monitoring_alert_secrets_file": "alert-secrets.json",
}
# The secrets every cluster has; the others depend on the provider.
CLUSTER_SECRETS = ("munge_key_b64_file", "slurmdbd_password_file", "slurm_jwt_key_b64_file",
                   "monitoring_password_file")
MUNGE_KEY_BYTES = 1024
# MUNGE_MIN_KEY_BYTES: munged refuses shorter keys (module_utils/cluster_defaults.py; the
# collection's key_file module checks the same on the node).
# Secrets a cluster keeps for its life: a file already holding another value is never
# replaced (a new munge key would cut off every node a run does not reach).
KEPT_SECRETS = ("munge_key_b64_file",)
JWT_KEY_BYTES = 32  # Slurm's auth/jwt HS256 key: 32 random bytes, as its docs make it
# A Pulumi stack's keys are RandomPasswords over this alphabet (upper, lower, digits and
# these two): base64's, so the password's text is the key's base64 (key_b64_from_text).
KEY_TEXT_SPECIAL = "+/"
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
        if var == "munge_key_b64_file" and len(raw) < MUNGE_MIN_KEY_BYTES:
            raise SecretError(f"{var}: a munge key needs at least {MUNGE_MIN_KEY_BYTES} bytes")
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
    if var == "monitoring_alert_secrets_file":
        try:
            secrets = read_alert_secrets(value)
        except ValueError:
            raise SecretError("metalslurm:alertSecrets: not YAML or JSON") from None
        if not isinstance(secrets, Mapping) or not all(
                isinstance(v, Mapping) and all(isinstance(x, str) for x in v.values())
                for v in secrets.values()):
            raise SecretError("metalslurm:alertSecrets: must map each receiver's name to "
                              "{field: text} (url for webhook and slack, password for "
                              "email)")
        return json.dumps(secrets, sort_keys=True) + "\n"
    if var in ("slurmdbd_password_file", "monitoring_password_file"):
        return value.strip() + "\n"
    raise SecretError(f"{var}: not a secret file metalslurm knows")


def _write_private(path: Path, content: str) -> None:
    """Write ``content`` so that no other user can read it at any moment, a reader never sees
    half a file, and a crash (of this process or of the machine) leaves the old file or the
    new one: a new file in the same directory, 0600 and exclusive from its creation, synced
    to disk, renamed into place, then the directory synced so the rename lasts."""
    directory = path.parent
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    # mkstemp: a name no one can guess or take first, O_CREAT | O_EXCL, mode 0600.
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


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
    def join_key(self) -> Path:
        """The key the controller logs in with to configure a machine made anew (an elastic
        node in launch-terminate mode): its public half is in the machine's authorized_keys,
        the private one goes to the controller only."""
        return self.root / "ssh" / "join_ed25519"

    @property
    def join_kit(self) -> Path:
        """The join kit the configure builds for the controller (infra/stack/join_kit.py)."""
        return self.root / "join-kit.tar.gz"

    def write_join_key(self, private_key: str) -> Path:
        """The join key a Pulumi stack made (its public half is in the launch metadata)."""
        _write_private(self.join_key, private_key)
        return self.join_key

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

    def checked_secret(self, var: str, value: str) -> str:
        """The file content for secret ``var``, or SecretError: a bad value, or one that
        would replace a kept secret (:data:`KEPT_SECRETS`) already here with another."""
        content = checked_secret(var, value)
        path = self.secret_file(var)
        if var in KEPT_SECRETS and path.exists() and path.read_text() != content:
            raise SecretError(
                f"{var}: {path} already holds this cluster's munge key, and this run brings "
                "another; the nodes use the one in the file, so it is kept and nothing is "
                "written. Two ways to this: 'metalslurm local up' and 'pulumi up' on the same "
                "stack (each makes its own key: use one of them, or 'metalslurm local down' "
                "first), or a Pulumi stack made again over machines that outlived the old one "
                "(adopt the file's key into the stack: docs/how-to/providers.md, 'Keys of "
                "older stacks'). If the cluster that key belonged to is gone, delete the file "
                "and run again.")
        return content

    def write_secret(self, var: str, value: str) -> Path:
        content = self.checked_secret(var, value)
        path = self.secret_file(var)
        _write_private(path, content)
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


def write_alert_secrets_file(state: StateDir, source: str) -> dict[str, str]:
    """The receivers' credentials of ``metalslurm:monitoring.secretsFile`` as a secret file
    (checked, 0600); returns the inventory var naming it."""
    state.write_secret("monitoring_alert_secrets_file", Path(source).read_text())
    return state.secret_vars(["monitoring_alert_secrets_file"])


def key_text_chars(nbytes: int) -> int:
    """How many base64 characters hold ``nbytes`` random bytes (6 bits each, rounded up)."""
    return -(-nbytes * 8 // 6)


def key_b64_from_text(text: str, name: str) -> str:
    """The canonical base64 of the key a Pulumi stack keeps as the text of RandomPassword
    ``name``: random characters of base64's alphabet (a new stack; the last character's
    spare bits are dropped), or a key's base64 with its padding (an older stack's key,
    imported into the password). SecretError when the text is not base64."""
    bare = "".join(text.split()).rstrip("=")
    try:
        raw = base64.b64decode(bare + "=" * (-len(bare) % 4), validate=True)
    except binascii.Error:
        raise SecretError(f"{name}: the stack's key text is not base64 (an imported key must "
                          "be the base64 of the key's bytes)") from None
    return base64.b64encode(raw).decode()


def new_munge_key() -> str:
    """A new munge key, base64: what a cluster without Pulumi state gets, once (a Pulumi
    stack's is a RandomPassword of key_text_chars(MUNGE_KEY_BYTES); the module's docstring)."""
    return base64.b64encode(secrets.token_bytes(MUNGE_KEY_BYTES)).decode()


def ensure_cluster_secrets(state: StateDir) -> dict[str, str]:
    """Munge key, slurmdbd password, JWT key and monitoring password for a cluster without
    Pulumi (the local cluster): made once, kept across runs; returns the inventory vars
    naming them."""
    makers = {
        "munge_key_b64_file": new_munge_key,
        "slurmdbd_password_file": lambda: secrets.token_urlsafe(32),
        "slurm_jwt_key_b64_file": lambda: base64.b64encode(
            secrets.token_bytes(JWT_KEY_BYTES)).decode(),
        "monitoring_password_file": lambda: secrets.token_urlsafe(24),
    }
    for var, make in makers.items():
        state.ensure_secret(var, make)
    return state.secret_vars(CLUSTER_SECRETS)
