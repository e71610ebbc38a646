"""What differs between a role's managed files and services as they are on the node (the
managed_state module) and as the role would write them: the converged fast path's test.
A role runs its write tasks only when this list is not empty."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.plugin_utils.filters import filter_errors


class ManagedStateError(ValueError):
    pass


# What an entry that does not say has: the project's files are root's, 0644, its
# directories 0755.
DEFAULTS = {"file": {"owner": "root", "group": "root", "mode": "0644"},
            "directory": {"owner": "root", "group": "root", "mode": "0755"},
            "link": {},
            "copy": {"owner": "root", "group": "root", "mode": "0644"},
            "block": {}}


def _same_owner(seen: Mapping[str, Any], want: Mapping[str, Any]) -> list[str]:
    return [f"{key} {seen.get(key)} (not {want[key]})"
            for key in ("owner", "group", "mode") if key in want and seen.get(key) != want[key]]


def _source_sha1(paths: Mapping[str, Any], want: Mapping[str, Any]) -> str | None:
    """The SHA-1 a copy must have: its source's on the node (None where that is not a file)."""
    source = paths.get(str(want.get("src") or ""))
    if not isinstance(source, Mapping) or source.get("type") != "file":
        return None
    return source.get("sha1")


def _entry(kind: str, entry: Any) -> dict[str, Any]:
    if isinstance(entry, str):
        entry = {"path": entry}
    if not isinstance(entry, Mapping) or not entry.get("path"):
        raise ManagedStateError(f"a managed {kind} without a path: {entry!r}")
    return {**DEFAULTS[kind], **entry}


def _block_problem(text: Any, want: Mapping[str, Any]) -> str | None:
    """Why ansible.builtin.blockinfile with ``want``'s block and marker (its default
    BEGIN/END, inserted at the end) would change ``text`` (None: it would not): each marker
    line once, in order, with exactly the block's lines between them, as the module compares
    them (bytes, each line with its newline)."""
    if not isinstance(text, str):
        return "not read"
    marker = str(want.get("marker") or "# {mark} ANSIBLE MANAGED BLOCK")
    begin, end = (marker.replace("{mark}", mark).encode() + b"\n" for mark in ("BEGIN", "END"))
    lines = text.encode().splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line == begin]
    ends = [i for i, line in enumerate(lines) if line == end]
    if not starts or not ends or ends[-1] < starts[-1]:
        return f"no block between {begin.decode().strip()!r} and {end.decode().strip()!r}"
    block = str(want.get("block", "")).encode()
    if block and not block.endswith(b"\n"):
        block += b"\n"
    if lines[starts[-1] + 1:ends[-1]] != block.splitlines(keepends=True):
        return "the managed block differs"
    return None


def _applies(paths: Mapping[str, Any], want: Mapping[str, Any]) -> bool | None:
    """Whether an entry is wanted on this node: always, or (``if_exists``) only where that
    path exists; None where that path was not read."""
    if not want.get("if_exists"):
        return True
    seen = paths.get(want["if_exists"])
    return bool(seen.get("exists")) if isinstance(seen, Mapping) else None


def _entry_drift(kind: str, want: Mapping[str, Any], paths: Mapping[str, Any],
                 contents: Mapping[str, Any]) -> list[str]:
    """What differs in one wanted entry (``kind``: file, directory, link, copy, block)."""
    if kind == "block":
        problem = _block_problem(contents.get(want["path"]), want)
        return [] if problem is None else [problem]
    seen = paths.get(want["path"])
    if not isinstance(seen, Mapping):
        return ["not read"]
    if not seen.get("exists"):
        return ["missing"]
    if seen.get("type") != (shape := "file" if kind == "copy" else kind):
        return [f"a {seen.get('type')}, not a {shape}"]
    if kind == "file" and seen.get("sha1") != hashlib.sha1(  # noqa: S324
            str(want.get("content", "")).encode()).hexdigest():
        return ["content differs"]
    if kind == "copy" and seen.get("sha1") != _source_sha1(paths, want):
        return [f"differs from {want.get('src')}"]
    if kind == "link" and seen.get("target") != want.get("src"):
        return [f"points to {seen.get('target')}, not {want.get('src')}"]
    return _same_owner(seen, want)


def managed_drift(state: Any, wanted: Mapping[str, Any], installed: Any = None) -> list[str]:
    """One sentence per difference between ``state`` (managed_state's result) and
    ``wanted``: ``packages`` [names that must be installed, looked up in ``installed``, the
    package facts], ``files`` [{path, content, owner, group, mode}], ``copies`` [{path, src,
    owner, group, mode}: a file with the content of the node's ``src``, which managed_state
    read too; ``src`` the path itself where only owner, group and mode are the role's],
    ``directories`` [{path, owner, group, mode} or a path], ``links`` [{path, src}],
    ``blocks`` [{path, block, marker}: ansible.builtin.blockinfile's block, in the text
    managed_state read (its ``read``)], ``units`` [names that must be active and enabled].
    Left-out owner, group and mode are root, root, 0644 (0755 for a directory). An entry
    with ``if_exists`` is wanted only where that path exists (managed_paths reads it too).
    A ``state`` that is not a result (the probe was skipped) is one difference: the write
    tasks decide."""
    drift = []
    packages = wanted.get("packages") or []
    if packages:
        if not isinstance(installed, Mapping | list):
            raise ManagedStateError("wanted.packages needs the installed packages as the "
                                    "second argument (ansible_facts.packages)")
        missing = [name for name in packages if name not in installed]
        if missing:
            drift.append(f"packages missing: {', '.join(missing)}")
    if not isinstance(state, Mapping) or not isinstance(state.get("paths"), Mapping):
        return [*drift, "the node's state was not read"]
    paths, units = state["paths"], state.get("units") or {}
    contents = state.get("contents") or {}
    for kind, entries in (("file", wanted.get("files") or []),
                          ("directory", wanted.get("directories") or []),
                          ("link", wanted.get("links") or []),
                          ("copy", wanted.get("copies") or []),
                          ("block", wanted.get("blocks") or [])):
        for want in (_entry(kind, e) for e in entries):
            applies = _applies(paths, want)
            if applies is None:
                drift.append(f"{want['if_exists']}: not read")
            elif applies:
                drift += [f"{want['path']}: {d}"
                          for d in _entry_drift(kind, want, paths, contents)]
    for unit in wanted.get("units") or []:
        seen = units.get(unit) or {}
        if seen.get("active") != "active" or seen.get("enabled") != "enabled":
            drift.append(f"{unit}: {seen.get('active', 'unknown')}, "
                         f"{seen.get('enabled', 'unknown')}")
    return drift


# systemd's words for a unit that runs or starts at boot.
RUNNING = ("active", "activating", "reloading")
ENABLED = ("enabled", "enabled-runtime", "linked", "linked-runtime")


def managed_retire(state: Any, retirable: Any) -> list[str]:
    """The units of ``retirable`` ([{unit, marker, runs}]) to stop and disable: those that
    must not run here (``runs`` false), whose ``marker`` file exists (metalslurm set them
    up), and that run or are enabled, by ``state`` (managed_state's result, which read the
    markers and the units). A ``state`` that is not a result (the probe was skipped) stops
    nothing."""
    if not isinstance(state, Mapping) or not isinstance(state.get("paths"), Mapping):
        return []
    if not isinstance(retirable, list):
        raise ManagedStateError(f"retirable units must be a list, got {retirable!r}")
    paths, units = state["paths"], state.get("units") or {}
    stop = []
    for entry in retirable:
        if not isinstance(entry, Mapping) or not entry.get("unit") or not entry.get("marker"):
            raise ManagedStateError(f"a retirable unit needs unit and marker: {entry!r}")
        if str(entry.get("runs", False)).lower() in ("true", "1", "yes"):
            continue
        seen = units.get(entry["unit"]) or {}
        marker = paths.get(entry["marker"])
        if (isinstance(marker, Mapping) and marker.get("exists")
                and (seen.get("active") in RUNNING or seen.get("enabled") in ENABLED)
                and entry["unit"] not in stop):
            stop.append(entry["unit"])
    return stop


def _key(kind: str, entry: Any, key: str) -> Any:
    """One key of a wanted entry, read alone: Ansible renders a variable's values as they
    are read, so listing paths this way renders no file's content."""
    if isinstance(entry, str) and entry:
        return entry if key == "path" else None
    if not isinstance(entry, Mapping) or not entry.get("path"):
        raise ManagedStateError(f"a managed {kind} without a path: {entry!r}")
    return entry.get(key)


def managed_paths(wanted: Mapping[str, Any]) -> list[str]:
    """The paths managed_state must read for ``wanted`` (a copy's source and an entry's
    ``if_exists``, a block's too), each once. Only those keys are read: no content is rendered."""
    found: list[Any] = []
    for key, kind in (("files", "file"), ("directories", "directory"), ("links", "link"),
                      ("copies", "copy")):
        for entry in wanted.get(key) or []:
            found += [_key(kind, entry, "path"), _key(kind, entry, "if_exists")]
            if kind == "copy":
                found.append(_key(kind, entry, "src"))
    # A block's text comes from managed_reads; where it applies, from here.
    found += [_key("block", entry, "if_exists") for entry in wanted.get("blocks") or []]
    return list(dict.fromkeys(str(p) for p in found if p))


def managed_reads(wanted: Mapping[str, Any]) -> list[str]:
    """The files whose text managed_state must return for ``wanted`` (its blocks')."""
    return list(dict.fromkeys(str(_key("block", entry, "path"))
                              for entry in wanted.get("blocks") or []))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"managed_drift": filter_errors(ManagedStateError)(managed_drift),
                "managed_paths": filter_errors(ManagedStateError)(managed_paths),
                "managed_reads": filter_errors(ManagedStateError)(managed_reads),
                "managed_retire": filter_errors(ManagedStateError)(managed_retire)}
