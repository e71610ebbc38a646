"""Containers in jobs (Enroot + Pyxis): the rules the stack config and the role share.

The stack key ``metalslurm:containers`` is parsed here (:func:`parse_containers`); the
``enroot_pyxis`` role applies the same rules to its inventory through the playbook's
filters (:func:`artifact_sources`, :func:`artifact_problems`,
:func:`credentials_problems`, :func:`netrc_block`, :func:`plugstack_line`), so a
hand-written inventory is held to them too.

Artifacts (the Enroot .deb files and the Pyxis source) come from a URL or a path, each
with a pinned sha256; a mirror (a directory or URL holding them under their file names)
replaces the upstream URLs, which is how air-gapped sites and the tests install them.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infra.schema import Collector, key

# Artifact names as the stack config spells them -> the role's names (defaults/main.yml of
# roles/enroot_pyxis holds each one's upstream URL and file name; a unit test keeps the
# two lists equal).
ARTIFACT_NAMES = {"enroot": "enroot", "enrootCaps": "enroot_caps", "pyxis": "pyxis"}
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
# A registry host as Enroot's credentials file (netrc) names it: a DNS name or address,
# with an optional port; never a path (nvcr.io, not nvcr.io/nvidia).
REGISTRY_HOST_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})(:\d{1,5})?$")
CONTAINER_SCOPES = ("global", "job")
# Pyxis plugstack options metalslurm writes (pyxis config.c); values are checked here.
PYXIS_OPTION_KEYS = ("runtimePath", "containerScope", "sbatchSupport", "executeEntrypoint")
_CONTAINER_KEYS = ("enabled", "mirror", "pinnedOnly", "artifacts", "storageDir", "cacheDir",
                   "runSize", "pyxis", "credentialsFile")
_ARTIFACT_KEYS = ("url", "sha256")
# A /run size: what tmpfs's size= takes (bytes with a k/m/g suffix, or a per cent).
RUN_SIZE_RE = re.compile(r"^(\d+[kKmMgG]?|\d{1,2}%)$")
ABSOLUTE_PATH_RE = re.compile(r"^/[A-Za-z0-9._/+-]*$")


class ContainersError(ValueError):
    """Artifacts or credentials the role must not install."""


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
    storage_dir: str = "/var/lib/enroot"
    cache_dir: str = ""
    run_size: str = "50%"
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
                     base_dir: Path | None) -> ContainerSettings:
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
    for name, default in (("storageDir", "/var/lib/enroot"), ("cacheDir", "")):
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
    run_size = c.string(item, "runSize", f"{where}.runSize", default="50%", pattern=RUN_SIZE_RE,
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
    return ContainerSettings(enabled=enabled, mirror=mirror, pinned_only=pinned_only,
                             artifacts=artifacts, storage_dir=dirs["storageDir"],
                             cache_dir=dirs["cacheDir"], run_size=run_size or "50%",
                             pyxis=pyxis, credentials_file=creds)


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


def credentials_problems(entries: Any) -> list[str]:
    """What is wrong with registry credentials: a list of {host, login, password}."""
    if not isinstance(entries, list) or not entries:
        return ["registry credentials must be a non-empty list of {host, login, password}"]
    problems = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            problems.append(f"entry {i + 1} is not a mapping of host, login and password")
            continue
        unknown = sorted(set(entry) - {"host", "login", "password"})
        if unknown:
            problems.append(f"entry {i + 1} has unknown keys {', '.join(map(str, unknown))}")
        host = entry.get("host")
        if not host:
            problems.append(f"entry {i + 1} has no host: give the registry it is for, such as "
                            "nvcr.io")
        elif not isinstance(host, str) or not REGISTRY_HOST_RE.fullmatch(host):
            problems.append(f"entry {i + 1}: host {host!r} is not a registry host name such as "
                            "nvcr.io or registry.example.com:5000 (no path, no '#')")
        for name in ("login", "password"):
            value = entry.get(name)
            if not isinstance(value, str) or not value or any(ch.isspace() for ch in value):
                problems.append(f"entry {i + 1} ({host or 'no host'}): {name} must be a "
                                "non-empty string without spaces")
    return problems


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


def netrc_block(entries: list[Mapping[str, str]]) -> str:
    """Enroot's credentials (netrc) lines, one machine per entry."""
    problems = credentials_problems(entries)
    if problems:
        raise ContainersError("registry credentials: " + "; ".join(problems))
    return "\n".join(f"machine {e['host']} login {e['login']} password {e['password']}"
                     for e in entries)


def artifact_sources(artifacts: Mapping[str, Mapping[str, str]],
                     overrides: Mapping[str, Mapping[str, str]] | None,
                     mirror: str) -> list[dict[str, Any]]:
    """Where each artifact comes from: {name, file, location, remote, sha256}.

    An override's url wins; otherwise the mirror's copy (mirror + '/' + file); otherwise
    the upstream url. ``remote``: fetched by each node over http(s); else a path on the
    machine running Ansible, copied to the nodes.
    """
    overrides = overrides or {}
    unknown = sorted(set(overrides) - set(artifacts))
    if unknown:
        raise ContainersError(f"metalslurm_containers.artifacts: unknown artifact(s) "
                              f"{', '.join(unknown)}; known: {', '.join(sorted(artifacts))}")
    sources = []
    for name in sorted(artifacts):
        spec = {**artifacts[name], **{k: v for k, v in (overrides.get(name) or {}).items() if v}}
        if (overrides.get(name) or {}).get("url"):
            location = spec["url"]
        elif mirror:
            location = f"{mirror.rstrip('/')}/{spec['file']}"
        else:
            location = spec["url"]
        if location.startswith("file://"):
            location = location[len("file://"):]
        remote = bool(re.match(r"^https?://", location))
        if not remote and not os.path.isabs(location):
            raise ContainersError(f"artifact {name}: {location!r} is neither an http(s) URL "
                                  "nor an absolute path")
        sources.append({"name": name, "file": spec["file"], "location": location,
                        "remote": remote, "sha256": str(spec.get("sha256") or "").lower()})
    return sources


def artifact_problems(sources: list[Mapping[str, Any]], require_pinned: bool) -> dict[str, list]:
    """{'problems': [...], 'unpinned': [...]} for the artifacts the role would install."""
    problems, unpinned = [], []
    for s in sources:
        if s["sha256"] and not SHA256_RE.fullmatch(s["sha256"]):
            problems.append(f"artifact {s['name']}: sha256 {s['sha256']!r} is not 64 "
                            "hexadecimal digits")
        elif not s["sha256"]:
            if require_pinned:
                problems.append(f"artifact {s['name']} ({s['location']}) has no sha256, and "
                                "pinned artifacts only are allowed: give its sha256 "
                                f"(metalslurm:containers.artifacts.{_config_name(s['name'])}"
                                ".sha256)")
            else:
                unpinned.append(f"{s['name']} ({s['location']})")
    return {"problems": problems, "unpinned": unpinned}


def local_artifact_problems(results: list[Mapping[str, Any]]) -> list[str]:
    """What is wrong with the artifacts kept on the Ansible machine, from the role's
    ``stat`` results ({item: source, stat: {exists, isreg, checksum}}): missing ones, and
    ones whose sha256 differs from their pin."""
    problems = []
    for result in results:
        item, st = result["item"], result.get("stat") or {}
        where = f"artifact {item['name']}: {item['location']}"
        if not st.get("exists"):
            problems.append(f"{where} does not exist on this machine")
        elif not st.get("isreg"):
            problems.append(f"{where} is not a file")
        elif item.get("sha256") and st.get("checksum") != item["sha256"]:
            problems.append(f"{where} has sha256 {st.get('checksum')}, not the pinned "
                            f"{item['sha256']}")
    return problems


def _config_name(role_name: str) -> str:
    return next((c for c, r in ARTIFACT_NAMES.items() if r == role_name), role_name)


def plugstack_line(plugin: str, options: Mapping[str, Any]) -> str:
    """The plugstack.conf line that loads Pyxis with its options (booleans as 1/0)."""
    args = []
    for name in sorted(options):
        value = options[name]
        if isinstance(value, bool):
            value = int(value)
        elif isinstance(value, str) and value.lower() in ("true", "false"):
            value = int(value.lower() == "true")
        text = str(value)
        if not text or any(ch.isspace() for ch in text):
            raise ContainersError(f"pyxis option {name}={text!r}: a value without spaces")
        args.append(f"{name}={text}")
    return " ".join(["required", plugin, *args])


def enroot_settings(defaults: Mapping[str, Any], overrides: Mapping[str, Any] | None) -> list[str]:
    """enroot.conf lines ('KEY value'), sorted; a None override removes a default."""
    merged = {**defaults, **(overrides or {})}
    lines = []
    for name in sorted(merged):
        value = merged[name]
        if value is None:
            continue
        if not re.fullmatch(r"(ENROOT_[A-Z_]+|MELLANOX_[A-Z_]+|NVIDIA_[A-Z_]+)", name):
            raise ContainersError(f"enroot setting {name!r} is not one enroot.conf reads "
                                  "(ENROOT_*, MELLANOX_*, NVIDIA_*)")
        if isinstance(value, bool):
            value = "yes" if value else "no"
        text = str(value)
        if "\n" in text:
            raise ContainersError(f"enroot setting {name}: one line only")
        lines.append(f"{name} {text}")
    return lines
