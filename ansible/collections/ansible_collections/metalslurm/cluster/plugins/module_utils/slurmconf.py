"""Render Slurm's key=value config files from data.

Used by the Ansible roles through the collection's filters (plugins/filter/slurm.py), and
unit-tested directly. Settings are plain dicts (defaults combined with user values);
nodes and partitions are lists of dicts, so a new Slurm option never needs a template
edit. Node names are compressed to hostlist expressions (``gpu-[001-064]``), as Slurm
advises for large systems.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import hostlist


class SlurmConfError(ValueError):
    pass


def compress_hostlist(names: Iterable[str]) -> str:
    """``["gpu-001", "gpu-002", "gpu-004"]`` -> ``"gpu-[001-002,004]"`` (sorted, no duplicates)."""
    unique = sorted(set(names))
    if not unique:
        raise SlurmConfError("cannot compress an empty host list")
    return str(hostlist.collect_hostlist(unique))


def expand_hostlist(expression: str) -> list[str]:
    return list(hostlist.expand_hostlist(expression))


# What a value in slurm.conf, cgroup.conf or gres.conf may hold unquoted: printable ASCII
# without spaces; '#' starts a comment and a trailing backslash joins the next line.
_VALUE_RE = re.compile(r"[!-~]+")
# Slurm time limits: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or UNLIMITED.
SLURM_TIME_RE = re.compile(
    r"UNLIMITED|INFINITE|\d+|\d+:\d{2}(:\d{2})?|\d+-\d{1,2}(:\d{2}){0,2}")


def slurm_value(value: Any) -> str:
    """Render one value the way slurm.conf wants it."""
    if isinstance(value, bool):
        return "YES" if value else "NO"
    if isinstance(value, (list, tuple)):
        return ",".join(slurm_value(v) for v in value)
    if isinstance(value, Mapping):
        return ",".join(f"{k}={slurm_value(v)}" for k, v in sorted(value.items()))
    text = str(value)
    if not _VALUE_RE.fullmatch(text) or "#" in text or text.endswith("\\"):
        raise SlurmConfError(f"value {text!r} cannot be written unquoted in a Slurm config "
                             "(no spaces, line breaks, '#' or a trailing backslash)")
    return text


def shorter_time(a: str, b: str) -> str:
    """The shorter of two Slurm time limits (UNLIMITED is the longest)."""
    sa, sb = slurm_time_seconds(a), slurm_time_seconds(b)
    if sa is None:
        return b
    return a if sb is None or sa <= sb else b


def slurm_time_seconds(text: str) -> int | None:
    """Seconds of a Slurm time limit (``30`` minutes, ``2:00:00``, ``7-00:00:00``);
    None for UNLIMITED/INFINITE. Raises SlurmConfError for anything else."""
    if not SLURM_TIME_RE.fullmatch(text):
        raise SlurmConfError(f"{text!r} is not a Slurm time such as 30, 2:00:00 or 7-00:00:00")
    if text in ("UNLIMITED", "INFINITE"):
        return None
    days, _, clock = text.rpartition("-") if "-" in text else ("", "", text)
    parts = [int(p) for p in clock.split(":")]
    if days:
        # D-HH, D-HH:MM, D-HH:MM:SS
        hours, minutes, seconds = (parts + [0, 0])[:3]
        return ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds
    if len(parts) == 1:
        return parts[0] * 60  # minutes
    if len(parts) == 2:
        return parts[0] * 60 + parts[1]  # MM:SS
    return (parts[0] * 60 + parts[1]) * 60 + parts[2]  # HH:MM:SS


# Settings Slurm reads as one line per value, in order (a list value gives one line each):
# SlurmctldHost's first line is the primary controller, the next ones its backups.
REPEATED_SETTINGS = frozenset({"SlurmctldHost"})


def settings_lines(settings: Mapping[str, Any]) -> list[str]:
    """``Key=Value`` lines, sorted by key; keys whose value is None are left out."""
    lines = []
    for key, value in sorted(settings.items()):
        if value is None:
            continue
        if not key or not str(key).isidentifier():
            raise SlurmConfError(f"{key!r} is not a Slurm setting name")
        try:
            if key in REPEATED_SETTINGS and isinstance(value, (list, tuple)):
                lines += [f"{key}={slurm_value(item)}" for item in value]
                continue
            lines.append(f"{key}={slurm_value(value)}")
        except SlurmConfError as exc:
            raise SlurmConfError(f"setting {key}: {exc}") from None
    return lines


def _record(first_key: str, name_expr: str, attrs: Mapping[str, Any]) -> str:
    parts = [f"{first_key}={name_expr}"]
    parts += [f"{k}={slurm_value(v)}" for k, v in sorted(attrs.items()) if v is not None]
    return " ".join(parts)


def grouped_lines(first_key: str, records: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per set of identical attributes, names compressed to a hostlist.

    Each record has ``first_key`` (a single name) plus attributes. Records whose
    attributes are equal share one line: 64 identical GPU nodes become one NodeName line.
    """
    groups: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for record in records:
        if first_key not in record:
            raise SlurmConfError(f"record without {first_key}: {dict(record)!r}")
        attrs = tuple(sorted((k, slurm_value(v)) for k, v in record.items()
                             if k != first_key and v is not None))
        groups.setdefault(attrs, []).append(str(record[first_key]))
    lines = []
    for attrs, names in sorted(groups.items(), key=lambda item: sorted(item[1])[0]):
        lines.append(_record(first_key, compress_hostlist(names), dict(attrs)))
    return lines


def node_lines(nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    return grouped_lines("NodeName", nodes)


def partition_lines(partitions: Sequence[Mapping[str, Any]]) -> list[str]:
    """PartitionName lines; a partition's ``Nodes`` list is compressed to a hostlist."""
    lines = []
    for part in partitions:
        attrs = {k: v for k, v in part.items() if k != "PartitionName"}
        nodes = attrs.get("Nodes")
        if isinstance(nodes, (list, tuple)):
            if not nodes:
                raise SlurmConfError(f"partition {part.get('PartitionName')!r} has no nodes")
            attrs["Nodes"] = compress_hostlist(nodes)
        lines.append(_record("PartitionName", str(part["PartitionName"]), attrs))
    return lines


def gpu_device_files(count: int, prefix: str = "/dev/nvidia") -> str:
    """``/dev/nvidia[0-7]`` for 8 GPUs, ``/dev/nvidia0`` for one."""
    if count < 1:
        raise SlurmConfError("a GPU node needs at least one GPU device")
    return compress_hostlist(f"{prefix}{i}" for i in range(count))


def mount_unit_name(path: str) -> str:
    """systemd's unit name for a mount point (``systemd-escape --path --suffix=mount``)."""
    if not path.startswith("/") or path == "/":
        raise SlurmConfError(f"{path!r} is not an absolute mount point below /")
    text = "/".join(p for p in path.split("/") if p)
    out = ""
    for i, ch in enumerate(text):
        if ch == "/":
            out += "-"
        elif (ch.isascii() and ch.isalnum()) or ch in ":_" or (ch == "." and i > 0):
            out += ch
        else:
            out += "".join(f"\\x{b:02x}" for b in ch.encode())
    return out + ".mount"
