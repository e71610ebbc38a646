"""Containers in jobs (Enroot + Pyxis): the rules the stack config and the role share.

The ``enroot_pyxis`` role applies them to its inventory through the collection's filters
(:func:`artifact_sources`, :func:`artifact_problems`, :func:`credentials_problems`,
:func:`netrc_block`, :func:`plugstack_line`), so a hand-written inventory is held to them
too; the operator's stack config (infra/stack/containers.py) uses the same functions.

Artifacts (the Enroot .deb files and the Pyxis source) come from a URL or a path, each
with a pinned sha256; a mirror (a directory or URL holding them under their file names)
replaces the upstream URLs, which is how air-gapped sites and the tests install them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

# Artifact names as the stack config spells them -> the role's names (defaults/main.yml of
# roles/enroot_pyxis holds each one's upstream URL and file name; a unit test keeps the
# two lists equal).
ARTIFACT_NAMES = {"enroot": "enroot", "enrootCaps": "enroot_caps", "pyxis": "pyxis"}
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
# A registry host as Enroot's credentials file (netrc) names it: a DNS name or address,
# with an optional port; never a path (nvcr.io, not nvcr.io/nvidia).
REGISTRY_HOST_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})(:\d{1,5})?$")
# Where Enroot keeps its data, layer cache and temporary files on each node (local disk),
# and the size of the /run tmpfs Pyxis unpacks images in ('': leave /run as it is): the
# defaults of metalslurm_containers for the stack parser (infra/stack/containers.py) and,
# through container_settings, for the enroot_pyxis and slurm_health roles.
DEFAULT_STORAGE_DIR = "/var/lib/enroot"
DEFAULT_RUN_SIZE = "50%"


class ContainersError(ValueError):
    """Artifacts or credentials the role must not install."""


def container_settings(containers: Mapping[str, Any] | None) -> dict[str, str]:
    """Enroot's directories and /run's size for ``metalslurm_containers`` (or part of it):
    its own, else the defaults; the layer cache under the storage directory unless given
    (the enroot_pyxis role writes it there, the slurm_health role checks its free space)."""
    given = dict(containers or {})
    storage = given.get("storage_dir") or DEFAULT_STORAGE_DIR
    return {"storage_dir": storage, "cache_dir": given.get("cache_dir") or f"{storage}/cache",
            "run_size": given.get("run_size", DEFAULT_RUN_SIZE)}


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


def pyxis_build_record(version: str, source_sha256: str, headers: str, libslurm_dev: str) -> str:
    """What an installed Pyxis was built from (its build record, one line): a node whose
    record differs rebuilds it."""
    return f"pyxis {version} sha256 {source_sha256} slurm {headers} libslurm-dev {libslurm_dev}"


def install_drift(probe: Mapping[str, str], sources: list[Mapping[str, Any]],
                  local: list[Mapping[str, Any]], installed: Mapping[str, Any],
                  build_packages: list[str], pyxis_version: str) -> list[str]:
    """What the install phase of the enroot_pyxis role would change on a node, one sentence
    each (empty: it would change nothing, and is skipped). ``probe`` is the node's one read
    (tasks/probe.yml: ``artifact:<file>`` sha256 of its copies, ``slurm_client``,
    ``libslurm_dev``, ``headers`` release, ``slurm_release``, ``pyxis_record`` (empty where
    the plugin is missing), ``artifact_dir`` (its type, owner and mode)), ``local`` the stat
    results of the artifacts kept on the Ansible machine, ``installed`` the package facts.
    The same tests as the install tasks' conditions: the artifact directory not root's 0755,
    an artifact copy that differs, Enroot's packages not at the artifacts' version, the build
    tools or libslurm-dev of the installed Slurm's version missing, a Pyxis built from
    anything else than the node's Slurm and the source it has."""
    drift = []
    if probe.get("artifact_dir") != "directory root:root 755":
        drift.append(f"the artifact directory: {probe.get('artifact_dir') or 'missing'}")
    checksums = {r["item"]["file"]: (r.get("stat") or {}).get("checksum") for r in local}
    for source in sources:
        have = probe.get(f"artifact:{source['file']}", "")
        want = checksums.get(source["file"]) if not source.get("remote") else source.get("sha256")
        if not have or (want and have != want):
            drift.append(f"artifact {source['name']}: the node's copy differs")
    enroot = next((s["file"] for s in sources if s["name"] == "enroot"), "")
    version = enroot.rsplit("_", 2)[1] if enroot.count("_") >= 2 else ""
    for package in ("enroot", "enroot+caps"):
        seen = ((installed.get(package) or [{}])[0]).get("version", "")
        if seen != version:
            drift.append(f"{package} {seen or '(not installed)'}, not {version}")
    slurm = probe.get("slurm_client", "")
    missing = [p for p in build_packages if p not in installed]
    if missing:
        drift.append(f"build tools missing: {', '.join(missing)}")
    if slurm and probe.get("libslurm_dev", "") != slurm:
        drift.append(f"libslurm-dev {probe.get('libslurm_dev') or '(not installed)'}, "
                     f"not the installed Slurm's {slurm}")
    pyxis = next((s["file"] for s in sources if s["name"] == "pyxis"), "")
    record = pyxis_build_record(pyxis_version, probe.get(f"artifact:{pyxis}", ""),
                                probe.get("headers", ""), probe.get("libslurm_dev", ""))
    if not slurm or probe.get("headers", "") != probe.get("slurm_release", "") \
            or probe.get("pyxis_record", "") != record:
        drift.append("Pyxis was not built from this node's Slurm and Pyxis source")
    return drift


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
