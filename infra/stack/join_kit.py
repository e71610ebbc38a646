"""The join kit: what the controller needs to configure a machine made anew.

An elastic node in ``launch-terminate`` mode has no machine until Slurm resumes it; the
power driver then makes one (from the prepared image) and no operator's configure reaches
it. The controller configures it instead, with the same playbook and roles, limited to that
node (``metalslurm-join``, installed by the slurm_elastic role). The kit is one
reproducible tarball the role copies to the controller (``JOIN_DIR``):

- ``ansible/`` and ``roles/`` of this checkout (no tests, no caches);
- ``inventory.yml``: the cluster's inventory as the controller reaches the nodes: as the
  provider's login user (root, or a sudo user with become) with the join key, the
  controller itself by a local connection, the secrets a compute
  node needs (the munge key, the registry credentials) at their place in ``JOIN_DIR`` and
  the others left out;
- ``mirror/``: the artifacts of the containers' mirror, when the stack names one;
- ``ansible/collections/``: besides the project's own collection, the modules of other
  collections the roles name (``community.general.modprobe``, ``community.mysql.*``) and
  the module_utils they import, from this machine's Ansible: the controller has
  Debian's ``ansible-core``, without them, and Ansible resolves every task's module when
  it loads the playbook.

The secrets are never in the tarball: the role copies them beside it (root, 0600).
"""

from __future__ import annotations

import ast
import base64
import copy
import gzip
import hashlib
import importlib.util
import io
import re
import tarfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.metalslurm.cluster.plugins.module_utils.elastic import (
    JOIN_DIR,
    LAUNCH_TERMINATE,
)

# The secrets a compute node's roles read (munge, enroot_pyxis); the join inventory names
# their copies on the controller and leaves every other secret out.
JOIN_SECRETS = {"munge_key_b64_file": "munge.key.b64",
                "registry_credentials_file": "registry-credentials.json"}
_SKIP_DIRS = {"tests", "__pycache__", ".pytest_cache", ".mypy_cache"}
# A module of another collection, as a task names it (FQCN).
_FQCN = re.compile(r"^\s*-?\s*(?P<ns>[a-z_]+)\.(?P<coll>[a-z_]+)\.(?P<name>[a-z_0-9]+):", re.M)
# Ansible's own modules, and this project's collection (in the kit whole).
_OWN = {("ansible", "builtin"), ("ansible", "legacy"), ("metalslurm", "cluster")}
# How the node's login user becomes root: kept from the operator's inventory (the join key
# is in that user's authorized_keys, as the provider put the operator's key there).
_LOGIN_VARS = ("ansible_user", "ansible_become", "ansible_become_method", "ansible_become_user")


def join_inventory(inventory: Mapping[str, Any], controller: str) -> dict[str, Any]:
    """``inventory`` as the controller uses it to configure its cluster's new machines."""
    doc = copy.deepcopy(dict(inventory))
    top = doc["all"]
    cluster = top["vars"]
    login = {var: cluster[var] for var in _LOGIN_VARS if var in cluster}
    for var in list(cluster):
        if var.startswith("ansible_") or var.endswith("_file") or var == "metalslurm_join":
            cluster.pop(var)
    cluster.update({
        "ansible_user": "root",
        **login,
        "ansible_python_interpreter": "/usr/bin/python3",
        "ansible_ssh_private_key_file": f"{JOIN_DIR}/id_ed25519",
        # A machine made anew has a new host key each time: accepted on first use, over
        # the private network, into a file the runner empties for each machine it joins.
        "ansible_ssh_common_args": (f"-o UserKnownHostsFile={JOIN_DIR}/known_hosts "
                                    "-o StrictHostKeyChecking=accept-new"),
    })
    for var, name in JOIN_SECRETS.items():
        if var in inventory["all"]["vars"]:
            cluster[var] = f"{JOIN_DIR}/secrets/{name}"
    containers = cluster.get("metalslurm_containers")
    if isinstance(containers, dict) and str(containers.get("mirror") or "").startswith("/"):
        containers["mirror"] = f"{JOIN_DIR}/kit/mirror"  # a directory on this machine
    top["hosts"][controller] = {**(top["hosts"].get(controller) or {}),
                                "ansible_connection": "local"}
    return doc


def _files(root: Path, sub: str) -> Iterable[Path]:
    """The files of ``root/sub`` a run reads: no tests, and nothing a tool leaves in a
    checkout (caches, hidden folders, a package's egg-info), which would change the kit's
    bytes, and with them the configure's result, without any change to the roles."""
    for path in sorted((root / sub).rglob("*")):
        parts = path.relative_to(root).parts
        if path.is_file() and not path.is_symlink() and not (_SKIP_DIRS & set(parts)) \
                and not any(p.startswith(".") or p.endswith(".egg-info") for p in parts) \
                and path.suffix != ".pyc":
            yield path


def _imported_utils(path: Path, root: Path) -> list[Path]:
    """The files of ``root``'s collections' module_utils that ``path`` imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] != "ansible_collections" or parts[4:5] != ["module_utils"]:
                continue
            target = root.joinpath(*parts[1:])
            found += [c for c in (target.with_suffix(".py"), target / "__init__.py")
                      if c.is_file()]
    return found


def collection_modules(repo: Path) -> dict[str, Path]:
    """Kit path -> file on this machine, for every module of another collection the roles
    and playbooks name, and the module_utils those import (transitively)."""
    named = set()
    for sub in ("ansible", "roles"):
        for path in _files(repo, sub):
            if path.suffix in (".yml", ".yaml"):
                named |= {(m["ns"], m["coll"], m["name"]) for m in _FQCN.finditer(path.read_text())
                          if (m["ns"], m["coll"]) not in _OWN}
    spec = importlib.util.find_spec("ansible_collections")
    roots = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    todo = [(root, root / ns / coll / "plugins" / "modules" / f"{name}.py")
            for ns, coll, name in sorted(named) for root in roots
            if (root / ns / coll / "plugins" / "modules" / f"{name}.py").is_file()]
    found: dict[str, Path] = {}
    while todo:
        root, path = todo.pop()
        kit_name = f"ansible/collections/ansible_collections/{path.relative_to(root)}"
        if kit_name not in found:
            found[kit_name] = path
            todo += [(root, util) for util in _imported_utils(path, root)]
    return found


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    tar.addfile(info, io.BytesIO(data))


def build_kit(repo: Path, inventory: Mapping[str, Any], mirror: Path | None,
              out: Path) -> Path:
    """Write the kit to ``out`` (the same bytes for the same inputs); returns ``out``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for sub in ("ansible", "roles"):
            for path in _files(repo, sub):
                executable = path.stat().st_mode & 0o111
                _add(tar, str(path.relative_to(repo)), path.read_bytes(),
                     0o755 if executable else 0o644)
        for kit_name, path in sorted(collection_modules(repo).items()):
            _add(tar, kit_name, path.read_bytes())
        _add(tar, "inventory.yml", yaml.safe_dump(dict(inventory), sort_keys=True).encode(),
             0o600)
        for path in sorted(mirror.iterdir()) if mirror is not None and mirror.is_dir() else []:
            if path.is_file() and not path.is_symlink():
                _add(tar, f"mirror/{path.name}", path.read_bytes())
    data = gzip.compress(buf.getvalue(), mtime=0)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.exists() or out.read_bytes() != data:
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(out)
    out.chmod(0o600)
    return out


def join_vars(cluster_vars: Mapping[str, Any], kit: Path, join_key: Path) -> dict[str, Any]:
    """``metalslurm_join``, the inventory var the slurm_elastic role reads: where the kit
    and the secrets go on the controller, and the operator's files they come from."""
    secrets = [{"src": str(join_key.resolve()), "dest": f"{JOIN_DIR}/id_ed25519"}]
    secrets += [{"src": str(cluster_vars[var]), "dest": f"{JOIN_DIR}/secrets/{name}"}
                for var, name in JOIN_SECRETS.items() if cluster_vars.get(var)]
    return {"dir": JOIN_DIR, "kit": str(kit.resolve()), "secrets": secrets}


def launched_nodes(inventory: Mapping[str, Any]) -> list[str]:
    """The inventory's elastic nodes that the power driver makes anew (launch-terminate)."""
    return [name for name, hv in (inventory["all"].get("hosts") or {}).items()
            if ((hv or {}).get("metalslurm_power") or {}).get("mode") == LAUNCH_TERMINATE]


def with_join(inventory: Mapping[str, Any], repo: Path, kit: Path,
              join_key: Path) -> dict[str, Any]:
    """``inventory`` with ``metalslurm_join`` when it has a launch-terminate node: the kit
    (re)built at ``kit`` from ``repo``, and the controller's copy of ``join_key``. Without
    such a node, ``inventory`` as it is (the role then removes an earlier join)."""
    doc = dict(inventory)
    if not launched_nodes(doc):
        return doc
    cluster = doc["all"]["vars"]
    controller = next(iter(doc["all"]["children"]["slurm_controller"]["hosts"]))
    mirror = str((cluster.get("metalslurm_containers") or {}).get("mirror") or "")
    build_kit(repo, join_inventory(doc, controller),
              Path(mirror) if mirror.startswith("/") else None, kit)
    doc["all"] = {**doc["all"], "vars": {**cluster,
                                         "metalslurm_join": join_vars(cluster, kit, join_key)}}
    return doc


def kit_inputs_digest(repo: Path) -> str:
    """A digest of the files the kit takes from ``repo`` (roles, playbooks, the modules of
    other collections) and of this module: a Pulumi stack configures again, and so rebuilds
    the kit, when it changes. The containers' mirror is left out (its artifacts are pinned
    by sha256 in the inventory, which the command's other trigger is)."""
    digest = hashlib.sha256()
    paths = [(str(p.relative_to(repo)), p) for sub in ("ansible", "roles")
             for p in _files(repo, sub)]
    # This module too: how the kit and its inventory are made.
    paths.append(("infra/stack/join_kit.py", Path(__file__)))
    for name, path in paths + sorted(collection_modules(repo).items()):
        # Executable or not, as the kit keeps it (not the operator's umask).
        digest.update(f"{name}\0{bool(path.stat().st_mode & 0o111)}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _ssh_string(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def ed25519_key_pair(seed: bytes, comment: str) -> tuple[str, str]:
    """(OpenSSH private key file, ``authorized_keys`` line) of the Ed25519 key made from the
    32-byte ``seed``: the same text for the same seed (a Pulumi stack keeps the seed as a
    secret in its state, so every operator of the stack writes the same key file, and the
    configure command, which runs again when its inputs change, does not see a new key at
    each run; ssh-keygen's own files carry a random check number)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    if len(seed) != 32:
        raise ValueError(f"an Ed25519 seed has 32 bytes, not {len(seed)}")
    public = Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes(
        Encoding.Raw, PublicFormat.Raw)
    kind = b"ssh-ed25519"
    public_blob = _ssh_string(kind) + _ssh_string(public)
    check = hashlib.sha256(b"metalslurm-join-check" + seed).digest()[:4]
    private = (check + check + public_blob + _ssh_string(seed + public)
               + _ssh_string(comment.encode()))
    private += bytes(range(1, 1 + (-len(private)) % 8))
    body = (b"openssh-key-v1\0" + _ssh_string(b"none") + _ssh_string(b"none")
            + _ssh_string(b"") + (1).to_bytes(4, "big") + _ssh_string(public_blob)
            + _ssh_string(private))
    text = base64.b64encode(body).decode()
    lines = [text[i:i + 70] for i in range(0, len(text), 70)]
    private_file = "\n".join(["-----BEGIN OPENSSH PRIVATE KEY-----", *lines,
                              "-----END OPENSSH PRIVATE KEY-----", ""])
    return private_file, f"ssh-ed25519 {base64.b64encode(public_blob).decode()} {comment}"
