"""Prepared node images: the roles' install phase applied once per node kind, kept as an image.

A node kind is what a node is for (controller, nfs, compute, login: its inventory groups).
Everything every node of a kind shares -- packages, built artifacts such as Pyxis, pinned
downloads -- comes from running ``ansible/image.yml --tags install`` (the install phase of
``site.yml``, then a seal that removes what belongs to one machine: host keys, machine-id,
the munge key a package made, logs) on a *builder*: a small throw-away cluster (one node
per kind) made from the stack's install settings only; each builder node is committed as
its kind's image.
Nothing of the cluster it will serve is in it: no name, address, user or secret.

An image is named by a hash of its inputs (:func:`image_inputs`): the base image, the OS,
the kind, the install settings of the stack, and the roles' task, default, variable and
file contents. A change to any of them names another image, which is built on first use.
A prepared image only saves time: the configure still runs every role on every node, and
a package a role wants that an image lacks is installed then (see docs/how-to/images.md).
"""

from __future__ import annotations

import copy
import fcntl
import hashlib
import ipaddress
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.containers import ARTIFACT_NAMES
from ansible_collections.metalslurm.cluster.plugins.module_utils.inventory_contract import (
    BACKUP_GROUP,
)

from infra.providers.podman import image_exists, networks, podman

REPO_ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_DIR = REPO_ROOT / "ansible"
PREPARED_REPO = "localhost/metalslurm-prepared"
RECIPE_VERSION = "1"  # bump to rebuild every prepared image when the recipe changes here
# The role folders the install phase never reads: a change there does not rebuild an image.
IGNORED_PARTS = frozenset({"templates", "handlers", "tests", "__pycache__", "molecule"})
# A node's kind: the first of its inventory groups found here.
KIND_OF_GROUP = {"slurm_controller": "controller", BACKUP_GROUP: "controller",
                 "nfs_server": "nfs", "slurm_compute": "compute", "login": "login"}
# The stack sections whose settings decide what the install phase puts on a node. Anything
# else (names, users, partitions, timings, receivers) is left out of the builder's stack,
# so clusters that differ only there share their images.
INSTALL_SECTIONS = ("os", "storage", "containers", "gpu", "nccl", "accept")
# Parts of those sections that name files on this machine or cluster-specific secrets.
DROPPED_KEYS = {"containers": ("credentialsFile",), "storage": ("server",)}
# Where a builder's subnet is chosen: 10.79.0.0/24 .. 10.79.255.0/24, the first one free.
BUILDER_SUPERNET = ipaddress.IPv4Network("10.79.0.0/16")


class PreparedImageError(RuntimeError):
    pass


@dataclass(frozen=True)
class ImageKind:
    kind: str
    ref: str  # the image's tag: its inputs' hash


def kind_of(groups: Sequence[str]) -> str:
    for group, kind in KIND_OF_GROUP.items():
        if group in groups:
            return kind
    raise PreparedImageError(f"no node kind for groups {', '.join(groups)}")


def builder_config(raw: Mapping[str, Any], base_dir: Path | None = None) -> dict[str, Any]:
    """The stack config of the builder cluster: the install sections of ``raw`` (a stack
    file's ``config:`` mapping), one node per kind the stack has, a fixed name. The
    container mirror is given by its real path (a relative one read from ``base_dir``, the
    stack file's directory).

    The name and subnet are placeholders here (:func:`with_network` sets the real ones), so
    the config hashes the same whichever cluster asks for the images.
    """
    given = {k.split(":", 1)[1]: v for k, v in raw.items() if k.startswith("metalslurm:")}
    out: dict[str, Any] = {"metalslurm:clusterName": "msimage", "metalslurm:provider": "local",
                           "metalslurm:privateCidr": str(next(BUILDER_SUPERNET.subnets(8)))}
    for section in INSTALL_SECTIONS:
        if section not in given or given[section] is None:
            continue
        value = copy.deepcopy(given[section])
        if isinstance(value, dict):
            for dropped in DROPPED_KEYS.get(section, ()):
                value.pop(dropped, None)
        out[f"metalslurm:{section}"] = value
    containers = out.get("metalslurm:containers")
    if isinstance(containers, dict) and isinstance(containers.get("mirror"), str):
        # Its real path: checkouts that reach one mirror by other links share images.
        containers["mirror"] = str(((base_dir or Path.cwd())
                                    / Path(containers["mirror"]).expanduser()).resolve())
    local = given.get("local") or {}
    out["metalslurm:local"] = {k: v for k, v in local.items() if k in ("imageSource", "mirror")}
    for section in ("monitoring", "rest"):  # on or off decides what is installed, not how
        if isinstance(given.get(section), dict) and "enabled" in given[section]:
            out[f"metalslurm:{section}"] = {"enabled": given[section]["enabled"]}
    pools = given.get("computePools")
    first = pools[0] if isinstance(pools, list) and pools and isinstance(pools[0], dict) else {}
    elastic = isinstance(pools, list) and any(
        isinstance(p, dict) and (p.get("elasticCount") or 0) > 0 for p in pools)
    # One compute node; an elastic one where the stack has elastic nodes (the controller
    # then gets the power programs' packages too).
    pool = {"name": "gpu", "count": 0 if elastic else 1, "elasticCount": 1 if elastic else 0}
    pool.update({k: first[k] for k in ("gpuType", "gpuCount") if k in first})
    out["metalslurm:computePools"] = [pool]
    login = given.get("login")
    if isinstance(login, dict) and (login.get("count") or 0) > 0:
        out["metalslurm:login"] = {"count": 1}
    return out


def digest_files(root: Path = ANSIBLE_DIR) -> list[Path]:
    """Every file under ansible/ the install phase can read, the roles' folder (a link)
    followed, each once by its shortest name."""
    found: dict[Path, Path] = {}
    for folder, dirs, files in os.walk(root, followlinks=True):
        rel_dir = Path(folder).relative_to(root)
        # Hidden folders and build records are tools' caches (ruff's, mypy's, pip's
        # egg-info), which lint or an install writes while a cluster asks for its images.
        dirs[:] = sorted(d for d in dirs if d not in IGNORED_PARTS and not d.startswith(".")
                         and not d.endswith(".egg-info"))
        for name in files:
            path = Path(folder) / name
            rel, real = rel_dir / name, path.resolve()
            if path.suffix in (".md", ".pyc") or not path.is_file():
                continue
            if real not in found or len(rel.parts) < len(found[real].parts):
                found[real] = rel  # the shortest of its names
    return sorted(found.values())


def roles_digest(root: Path = ANSIBLE_DIR) -> str:
    """Hash of :func:`digest_files`, names and contents."""
    h = hashlib.sha256()
    for rel in digest_files(root):
        h.update(str(rel).encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    return h.hexdigest()


def short_hash(*parts: str) -> str:
    """12 hex digits of the parts' sha256, each part ended by a NUL."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:12]


def hashed_settings(builder: Mapping[str, Any]) -> str:
    """The builder's settings as its images' names hash them. Where every container
    artifact is pinned by sha256, the mirror holding them is left out: what the image gets
    is the same bytes from any mirror, so checkouts at other paths, or with the offline
    mirror somewhere else (a CI machine's), share their images instead of building their
    own. An unpinned artifact is whatever its mirror holds: its mirror stays in."""
    containers = builder.get("metalslurm:containers")
    if isinstance(containers, dict) and "mirror" in containers:
        artifacts = containers.get("artifacts")
        if isinstance(artifacts, dict) and all(
                isinstance(artifacts.get(name), dict) and artifacts[name].get("sha256")
                for name in ARTIFACT_NAMES):
            builder = {**builder, "metalslurm:containers": {
                k: v for k, v in containers.items() if k != "mirror"}}
    return json.dumps(builder, sort_keys=True)


def image_inputs(base_ref: str, builder: Mapping[str, Any], kind: str,
                 digest: str | None = None) -> str:
    """The hash that names a kind's prepared image."""
    return short_hash(RECIPE_VERSION, base_ref, kind, hashed_settings(builder),
                      digest or roles_digest())


def image_line(builder: Mapping[str, Any], kind: str) -> str:
    """What an image of ``kind`` is for, its roles and base image left out: the builder's
    stack (the install settings) and the kind. A build replaces the older images of its own
    line only (:func:`prune_older`), so two stacks with other install settings keep theirs
    side by side instead of rebuilding each other's at every switch."""
    return short_hash(RECIPE_VERSION, kind, hashed_settings(builder))


def image_ref(suite: str, kind: str, inputs: str) -> str:
    return f"{PREPARED_REPO}:{suite}-{kind}-{inputs}"


def plan_images(base_ref: str, builder: Mapping[str, Any], kinds: Sequence[str],
                suite: str) -> list[ImageKind]:
    """The image each of ``kinds`` needs (built or not), for a :func:`builder_config`."""
    digest = roles_digest()
    return [ImageKind(kind, image_ref(suite, kind, image_inputs(base_ref, builder, kind, digest)))
            for kind in kinds]


def missing(images: Sequence[ImageKind]) -> list[ImageKind]:
    return [i for i in images if not image_exists(i.ref)]


def free_builder_subnet(used: Sequence[str] | None = None) -> str:
    """The first /24 of BUILDER_SUPERNET no podman network uses."""
    if used is None:
        used = [s.get("subnet", "") for n in networks() for s in (n.get("subnets") or [])]
    taken = [ipaddress.IPv4Network(s) for s in used if s and ":" not in s]
    for net in BUILDER_SUPERNET.subnets(8):
        if not any(net.overlaps(t) for t in taken):
            return str(net)
    raise PreparedImageError(f"no free /24 left in {BUILDER_SUPERNET} for an image builder; "
                             "remove stale networks with 'podman network prune'")


def with_network(builder: Mapping[str, Any], name: str, cidr: str) -> dict[str, Any]:
    return {**builder, "metalslurm:clusterName": name, "metalslurm:privateCidr": cidr}


LINE_LABEL = "metalslurm.line"


def commit(container: str, ref: str, kind: str, inputs: str, line: str) -> None:
    """Stop a sealed builder node and keep its file system as ``ref``, labelled with its
    kind, inputs and line (:func:`image_line`)."""
    podman("stop", "--time", "20", container, timeout=120)
    podman("commit", "--quiet", "--change", "CMD=/sbin/init",
           "--change", f"LABEL metalslurm.kind={kind}",
           "--change", f"LABEL metalslurm.inputs={inputs}",
           "--change", f"LABEL {LINE_LABEL}={line}", container, ref, timeout=900)


def line_of(image_id: str) -> str:
    """An image's line label ('' for an image made before there was one)."""
    out = podman("image", "inspect", "--format", f'{{{{index .Labels "{LINE_LABEL}"}}}}',
                 image_id, check=False)
    line = out.stdout.strip() if out.returncode == 0 else ""
    return "" if line == "<no value>" else line


def prune_older(ref: str, line: str) -> list[str]:
    """Remove the other prepared images of the same OS, kind and line (:func:`image_line`;
    one without a line label counts as the same) that nothing uses: no container (running
    or not) is made from it and no cluster holds it (:func:`hold`).
    Checked here, not left to ``podman rmi``: an image with a second name loses only the
    name it is removed by, used or not."""
    prefix = ref.rsplit("-", 1)[0] + "-"
    names: dict[str, list[str]] = {}
    for row in podman("images", "--no-trunc", "--format", "{{.ID}} {{.Repository}}:{{.Tag}}",
                      check=False).stdout.splitlines():
        image_id, _, name = row.partition(" ")
        names.setdefault(image_id.removeprefix("sha256:"), []).append(name)
    used = {i.removeprefix("sha256:") for i in podman(
        "ps", "-a", "--no-trunc", "--format", "{{.ImageID}}", check=False).stdout.split()}
    removed = []
    for image_id, its_names in names.items():
        if image_id in used or any(n.startswith(f"{HELD_REPO}:") for n in its_names):
            continue
        older = [n for n in its_names if n != ref and n.startswith(prefix)]
        if not older or line_of(image_id) not in ("", line):
            continue
        removed += [n for n in older if podman("rmi", n, check=False).returncode == 0]
    return removed


# A cluster's hold on an image no container of it uses yet: the image a launch-terminate
# node's machine is made from on resume (infra/providers/local.py, write_allow_file). Held
# under a second name, so prune_older, which removes by name, only takes the other one.
HELD_REPO = "localhost/metalslurm-held"


def held_ref(cluster_name: str, ref: str) -> str:
    """The name ``cluster_name`` holds image ``ref`` by (each a podman name part)."""
    repo, _, tag = ref.rpartition(":")
    return f"{HELD_REPO}:{cluster_name}_{repo.rsplit('/', 1)[-1]}_{tag}"


def hold(cluster_name: str, refs: Sequence[str]) -> dict[str, str]:
    """Hold ``refs`` for ``cluster_name`` (each also tagged under its held name) and let go
    of the images it held before and no longer names; returns each ref's held name."""
    held = {ref: held_ref(cluster_name, ref) for ref in refs}
    for ref, name in held.items():
        podman("tag", ref, name)
    release(cluster_name, keep=held.values())
    return held


def release(cluster_name: str, keep: Iterable[str] = ()) -> list[str]:
    """Let go of the images ``cluster_name`` holds, but ``keep``: their held names removed
    (an image no other name or container keeps goes with it)."""
    listed = podman("images", "--format", "{{.Repository}}:{{.Tag}}", HELD_REPO,
                    check=False).stdout.split()
    kept, gone = set(keep), []
    for name in listed:
        if name.startswith(f"{HELD_REPO}:{cluster_name}_") and name not in kept and \
                podman("rmi", name, check=False).returncode == 0:
            gone.append(name)
    return gone


# Podman's own storage (root's, where the images the lock guards are kept): one build at a
# time on the machine, whichever checkout runs it.
PODMAN_STORAGE = Path("/var/lib/containers")


@contextmanager
def build_lock(fallback_dir: Path) -> Iterator[None]:
    """One image build at a time on this machine: a second cluster waits for the first
    one's images instead of building them twice (or on the same builder subnet). The lock
    file is in podman's storage, else in ``fallback_dir``; never followed through a link."""
    lock_dir = PODMAN_STORAGE if PODMAN_STORAGE.is_dir() else fallback_dir
    lock_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_dir / "metalslurm-image-build.lock",
                 os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
