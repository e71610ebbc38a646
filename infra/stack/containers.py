"""``metalslurm:containers``: the stack key of Enroot and Pyxis in jobs.

Parsed here (:func:`parse_containers`) into ``metalslurm_containers`` for the inventory;
the rules for artifacts, credentials and Pyxis options are the enroot_pyxis role's own
(``metalslurm.cluster`` collection, ``module_utils/containers.py``), applied here to the
stack config and by the role to its inventory.

Artifacts (the Enroot .deb files and the Pyxis source) come from a URL or a path, each
with a pinned sha256; a mirror (a directory or URL holding them under their file names)
replaces the upstream URLs, which is how air-gapped sites and the tests install them.
Those kept on this machine (a mirror directory, an artifact's path) are checked here, by
the rule the role applies (:func:`check_local_artifacts`): a missing file or one whose
sha256 differs from its pin stops the config before an image is built or a node started,
instead of the role stopping minutes later.
"""

from __future__ import annotations

import hashlib
import json
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.metalslurm.cluster.plugins.module_utils.containers import (
    ARTIFACT_NAMES,
    DEFAULT_RUN_SIZE,
    DEFAULT_STORAGE_DIR,
    SHA256_RE,
    ContainersError,
    artifact_sources,
    credentials_problems,
)

from infra.stack.schema import Collector, key

CONTAINER_SCOPES = ("global", "job")

# The role's artifacts, each one's upstream URL and file name: the enroot_pyxis role's
# defaults own them; a mirror directory is checked for the same file names.
ROLE_DEFAULTS = Path(__file__).resolve().parents[2] / "roles/enroot_pyxis/defaults/main.yml"
# What to do instead of a mirror this machine does not have.
WITHOUT_MIRROR = ("or remove mirror to download from upstream, pinned by upstream's own sha256 "
                  "(docs/how-to/containers.md has the stanza)")


# Pyxis plugstack options metalslurm writes (pyxis config.c); values are checked here.
PYXIS_OPTION_KEYS = ("runtimePath", "containerScope", "sbatchSupport", "executeEntrypoint")


# A /run size: what tmpfs's size= takes (bytes with a k/m/g suffix, or a per cent).
RUN_SIZE_RE = re.compile(r"^(\d+[kKmMgG]?|\d{1,2}%)$")


ABSOLUTE_PATH_RE = re.compile(r"^/[A-Za-z0-9._/+-]*$")


_CONTAINER_KEYS = ("enabled", "mirror", "pinnedOnly", "artifacts", "storageDir", "cacheDir",
                   "runSize", "pyxis", "credentialsFile")


_ARTIFACT_KEYS = ("url", "sha256")


@dataclass(frozen=True)
class Artifact:
    url: str = ""  # empty: the role's upstream URL (or the mirror's copy)
    sha256: str = ""


@dataclass(frozen=True)
class ContainerSettings:
    """``metalslurm:containers``: Enroot and Pyxis on every node that runs or submits jobs."""

    enabled: bool = True
    mirror: str = ""
    pinned_only: bool = False
    artifacts: Mapping[str, Artifact] = field(default_factory=dict)
    storage_dir: str = DEFAULT_STORAGE_DIR
    cache_dir: str = ""
    run_size: str = DEFAULT_RUN_SIZE
    pyxis: Mapping[str, Any] = field(default_factory=dict)
    credentials_file: str = ""

    def inventory_vars(self) -> dict[str, Any]:
        """``metalslurm_containers`` as the role reads it."""
        return {
            "enabled": self.enabled,
            "mirror": self.mirror,
            "require_pinned": self.pinned_only,
            "artifacts": {ARTIFACT_NAMES[n]: {k: v for k, v in
                                              (("url", a.url), ("sha256", a.sha256)) if v}
                          for n, a in self.artifacts.items()},
            "storage_dir": self.storage_dir,
            "cache_dir": self.cache_dir,
            "run_size": self.run_size,
            "pyxis": dict(self.pyxis),
        }


def _location(c: Collector, value: str, where: str, base_dir: Path | None) -> str:
    """A URL as given, or a path made absolute against the stack file's directory."""
    if re.match(r"^https?://[^\s]+$", value):
        return value.rstrip("/")
    if value.startswith("file://"):
        value = value[len("file://"):]
    if "://" in value or any(ch.isspace() for ch in value):
        c.problem(where, f"{value!r} is neither an http(s) URL nor a path")
        return ""
    path = Path(value)
    if not path.is_absolute():
        if base_dir is None:
            c.problem(where, f"{value!r} is a relative path; give an absolute one")
            return ""
        path = (base_dir / path).resolve()
    return str(path)


def _parse_artifacts(c: Collector, item: Mapping[str, Any], where: str,
                     base_dir: Path | None) -> dict[str, Artifact]:
    raw = c.mapping(item, "artifacts", where)
    c.unknown_keys(raw, tuple(ARTIFACT_NAMES), where)
    artifacts = {}
    for name in ARTIFACT_NAMES:
        if name not in raw:
            continue
        awhere = f"{where}.{name}"
        spec = c.mapping(raw, name, awhere)
        c.unknown_keys(spec, _ARTIFACT_KEYS, awhere)
        url = c.string(spec, "url", f"{awhere}.url", default="")
        sha = c.string(spec, "sha256", f"{awhere}.sha256", default="")
        if sha and not SHA256_RE.fullmatch(sha.lower()):
            c.problem(f"{awhere}.sha256", f"{sha!r} is not a sha256 (64 hexadecimal digits)")
            sha = ""
        location = _location(c, url, f"{awhere}.url", base_dir) if url else ""
        artifacts[name] = Artifact(location, (sha or "").lower())
    return artifacts


def _parse_pyxis(c: Collector, item: Mapping[str, Any], where: str) -> dict[str, Any]:
    raw = c.mapping(item, "pyxis", where)
    c.unknown_keys(raw, PYXIS_OPTION_KEYS, where)
    options: dict[str, Any] = {}
    if "runtimePath" in raw:
        path = c.string(raw, "runtimePath", f"{where}.runtimePath", pattern=ABSOLUTE_PATH_RE,
                        what="an absolute path such as /run/pyxis")
        if path:
            options["runtime_path"] = path
    if "containerScope" in raw:
        scope = c.string(raw, "containerScope", f"{where}.containerScope",
                         choices=CONTAINER_SCOPES)
        if scope:
            options["container_scope"] = scope
    for name, var in (("sbatchSupport", "sbatch_support"),
                      ("executeEntrypoint", "execute_entrypoint")):
        if name in raw:
            options[var] = c.boolean(raw, name, f"{where}.{name}", False)
    return options


def _under(path: str, shared: tuple[str, ...]) -> str | None:
    return next((s for s in shared if path == s or path.startswith(s.rstrip("/") + "/")), None)


def parse_containers(c: Collector, raw: Mapping[str, Any], shared_paths: tuple[str, ...],
                     base_dir: Path | None, check_artifacts: bool = True) -> ContainerSettings:
    """``check_artifacts``: also check the artifacts kept on this machine (a mirror
    directory, an artifact's path): each must be there, with its pinned sha256."""
    where = key("containers")
    item = c.mapping(raw, "containers", where)
    c.unknown_keys(item, _CONTAINER_KEYS, where)
    enabled = c.boolean(item, "enabled", f"{where}.enabled", True)
    mirror_raw = c.string(item, "mirror", f"{where}.mirror", default="")
    mirror = _location(c, mirror_raw, f"{where}.mirror", base_dir) if mirror_raw else ""
    pinned_only = c.boolean(item, "pinnedOnly", f"{where}.pinnedOnly", False)
    artifacts = _parse_artifacts(c, item, f"{where}.artifacts", base_dir)
    if pinned_only:
        for name in ARTIFACT_NAMES:
            if not (artifacts.get(name) or Artifact()).sha256:
                c.problem(f"{where}.artifacts.{name}.sha256", "is not given, and pinnedOnly "
                          "refuses unpinned artifacts: give the artifact's sha256")
    dirs = {}
    for name, default in (("storageDir", DEFAULT_STORAGE_DIR), ("cacheDir", "")):
        value = c.string(item, name, f"{where}.{name}", default=default,
                         pattern=ABSOLUTE_PATH_RE if name in item else None,
                         what="an absolute path on local disk")
        dirs[name] = value or ""
        inside = _under(value or "", shared_paths) if value else None
        if inside:
            c.problem(f"{where}.{name}", f"{value} is on shared storage ({inside}): Enroot's "
                      "data and cache must be on each node's local disk (multi-node jobs "
                      "break and imports crawl on NFS); choose a local path such as "
                      "/var/lib/enroot or an NVMe mount")
    run_size = c.string(item, "runSize", f"{where}.runSize", default=DEFAULT_RUN_SIZE,
                        pattern=RUN_SIZE_RE,
                        what="a tmpfs size such as 50% or 64g")
    pyxis = _parse_pyxis(c, item, f"{where}.pyxis")
    creds_raw = c.string(item, "credentialsFile", f"{where}.credentialsFile", default="")
    creds = ""
    if creds_raw:
        creds = _location(c, creds_raw, f"{where}.credentialsFile", base_dir)
        if creds.startswith("http"):
            c.problem(f"{where}.credentialsFile", "must be a file on this machine")
            creds = ""
        elif creds:
            _check_credentials_file(c, Path(creds), f"{where}.credentialsFile")
    settings = ContainerSettings(enabled=enabled, mirror=mirror, pinned_only=pinned_only,
                                 artifacts=artifacts, storage_dir=dirs["storageDir"],
                                 cache_dir=dirs["cacheDir"], run_size=run_size or DEFAULT_RUN_SIZE,
                                 pyxis=pyxis, credentials_file=creds)
    if check_artifacts and enabled:
        check_local_artifacts(c, settings)
    return settings


def role_artifacts(defaults: Path = ROLE_DEFAULTS) -> dict[str, dict[str, str]]:
    """The role's artifacts by its names: {url, file} (its defaults/main.yml)."""
    return dict(yaml.safe_load(defaults.read_text())["enroot_pyxis_artifacts"])


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def check_local_artifacts(c: Collector, settings: ContainerSettings,
                          artifacts: Mapping[str, Mapping[str, str]] | None = None) -> None:
    """Every artifact the role would copy from this machine (a mirror directory, or an
    artifact whose url is a path) is a readable file with its pinned sha256.

    Where each artifact comes from is the role's own rule (``artifact_sources``); an
    http(s) mirror or URL cannot be checked without fetching it and is left to the role.
    Hashing costs about 2 ms per MB (the artifacts are a few MB).
    """
    where = key("containers")
    config_names = {role: name for name, role in ARTIFACT_NAMES.items()}
    overrides = {ARTIFACT_NAMES[n]: {"url": a.url, "sha256": a.sha256}
                 for n, a in settings.artifacts.items()}
    try:
        sources = artifact_sources(artifacts or role_artifacts(), overrides, settings.mirror)
    except ContainersError as exc:
        c.problem(where, str(exc))
        return
    local = [s for s in sources if not s["remote"]]
    mirror = Path(settings.mirror) if settings.mirror else None
    from_mirror = [s for s in local if not overrides.get(s["name"], {}).get("url")]
    if mirror is not None and from_mirror and not mirror.is_dir():
        files = [s["file"] for s in from_mirror]
        what = "is not a directory" if mirror.exists() else "does not exist on this machine"
        c.problem(f"{where}.mirror", f"{mirror} {what}; it should hold {_and(files)}: put "
                  f"{'them' if len(files) > 1 else 'it'} there, point mirror at a directory "
                  f"that has {'them' if len(files) > 1 else 'it'}, {WITHOUT_MIRROR}")
        local = [s for s in local if s not in from_mirror]
    for s in local:
        name = config_names[s["name"]]
        path = Path(s["location"])
        if s in from_mirror:
            at = f"{where}.mirror"
            missing = (f"{mirror} has no {s['file']} (the {name} artifact): put {s['file']} "
                       f"there, point mirror at a directory that has it, {WITHOUT_MIRROR}")
        else:
            at = f"{where}.artifacts.{name}.url"
            missing = (f"{path} does not exist on this machine: put the file there, or give "
                       "its path or http(s) URL")
        if not path.exists():
            c.problem(at, missing)
            continue
        if not path.is_file():
            c.problem(at, f"{path} is not a file")
            continue
        try:
            digest = _sha256(path)
        except OSError as exc:
            c.problem(at, f"cannot read {path}: {exc.strerror}")
            continue
        if s["sha256"] and digest != s["sha256"]:
            c.problem(f"{where}.artifacts.{name}.sha256",
                      f"{path} has sha256 {digest}, not the pinned {s['sha256']}: put the "
                      "pinned file there, or correct the pin")


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _check_credentials_file(c: Collector, path: Path, where: str) -> None:
    try:
        mode = path.stat().st_mode
        text = path.read_text()
    except OSError as exc:
        c.problem(where, f"cannot read {path}: {exc.strerror}")
        return
    except UnicodeDecodeError:
        c.problem(where, f"{path} is not UTF-8 text (a binary file?); give the YAML or JSON "
                  "list of {host, login, password}")
        return
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        c.problem(where, f"{path} is readable by other users (mode {stat.S_IMODE(mode):o}); "
                  f"run 'chmod 600 {path}'")
    try:
        entries = yaml.safe_load(text)
    except yaml.YAMLError:
        c.problem(where, f"{path} is not YAML or JSON")
        return
    for problem in credentials_problems(entries):
        c.problem(where, problem)


def checked_credentials(text: str) -> str:
    """The secret file's content (JSON) for registry credentials given as YAML or JSON."""
    try:
        entries = yaml.safe_load(text)
    except yaml.YAMLError:
        raise ContainersError("metalslurm:registryCredentials: not YAML or JSON") from None
    problems = credentials_problems(entries)
    if problems:
        raise ContainersError("metalslurm:registryCredentials: " + "; ".join(problems))
    return json.dumps(entries, sort_keys=True) + "\n"
