"""Build a reproducible wheel of a small pure-Python project: the controller's power programs
(``roles/slurm_elastic/files/metalslurm-power``), which the slurm_elastic role installs
offline into a virtualenv on the controller.

The wheel's bytes depend on the project's files only: entries sorted, timestamps fixed,
modes 0644. Its version carries a hash of those files as a local label
(``0.1.0+g1a2b3c4d5e6f``), so any change gives a new wheel name, and an unchanged project
gives the same file (Ansible's copy reports ``ok``). Only what such a project uses is read:
``[project]`` name, version, description, requires-python, license, dependencies,
optional-dependencies, scripts, and the packages named by
``[tool.setuptools.packages.find] include`` (directories with an ``__init__.py``).
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import io
import os
import re
import tempfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GENERATOR = "metalslurm module_utils.wheel"
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can carry
FILE_MODE = 0o644
SKIPPED_DIRS = {"__pycache__"}
SKIPPED_SUFFIXES = {".pyc", ".pyo"}


class WheelError(ValueError):
    pass


@dataclass(frozen=True)
class Project:
    root: Path
    name: str
    version: str
    summary: str
    requires_python: str | None
    license: str | None
    dependencies: list[str]
    extras: dict[str, list[str]]
    scripts: dict[str, str]
    packages: list[str]


def read_project(project_dir: Path) -> Project:
    """The parts of ``project_dir/pyproject.toml`` a wheel needs."""
    root = Path(project_dir).resolve()
    try:
        data = tomllib.loads((root / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise WheelError(f"{root}: cannot read pyproject.toml: {exc}") from exc
    meta: dict[str, Any] = data.get("project", {})
    missing = [key for key in ("name", "version") if not meta.get(key)]
    if missing:
        raise WheelError(f"{root}/pyproject.toml: [project] needs {', '.join(missing)}")
    find = data.get("tool", {}).get("setuptools", {}).get("packages", {}).get("find", {})
    packages = top_level_packages(root, find.get("include", ["*"]))
    if not packages:
        raise WheelError(f"{root}: no package directory (with __init__.py) to put in a wheel")
    return Project(
        root=root, name=meta["name"], version=str(meta["version"]),
        summary=meta.get("description", ""), requires_python=meta.get("requires-python"),
        license=(meta.get("license") or {}).get("text"),
        dependencies=list(meta.get("dependencies", [])),
        extras={k: list(v) for k, v in meta.get("optional-dependencies", {}).items()},
        scripts=dict(meta.get("scripts", {})), packages=packages)


def top_level_packages(root: Path, include: list[str]) -> list[str]:
    return sorted(p.name for p in root.iterdir()
                  if (p / "__init__.py").is_file()
                  and any(fnmatch.fnmatchcase(p.name, pattern) for pattern in include))


def source_files(project: Project) -> list[tuple[str, Path]]:
    """``(path in the wheel, file)`` for every file of the packages, sorted by path."""
    files = []
    for package in project.packages:
        for path in (project.root / package).rglob("*"):
            relative = path.relative_to(project.root)
            if (path.is_file() and not SKIPPED_DIRS.intersection(relative.parts)
                    and path.suffix not in SKIPPED_SUFFIXES):
                files.append((relative.as_posix(), path))
    return sorted(files)


def source_hash(project: Project, files: list[tuple[str, Path]]) -> str:
    """A hash of pyproject.toml and every packaged file (names and bytes)."""
    digest = hashlib.sha256((project.root / "pyproject.toml").read_bytes())
    for name, path in files:
        digest.update(b"\0" + name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def local_version(version: str, source_digest: str) -> str:
    """``0.1.0`` -> ``0.1.0+g<hash>`` (``0.1.0+x`` -> ``0.1.0+x.g<hash>``)."""
    return f"{version}{'.' if '+' in version else '+'}g{source_digest}"


def distribution_name(name: str) -> str:
    """The name as wheel file names spell it: ``metalslurm-power`` -> ``metalslurm_power``."""
    return re.sub(r"[-_.]+", "_", name).lower()


def wheel_file_name(project: Project, version: str) -> str:
    return f"{distribution_name(project.name)}-{version}-py3-none-any.whl"


def metadata_text(project: Project, version: str) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {project.name}", f"Version: {version}"]
    if project.summary:
        lines.append(f"Summary: {project.summary}")
    if project.license:
        lines.append(f"License: {project.license}")
    if project.requires_python:
        lines.append(f"Requires-Python: {project.requires_python}")
    lines += [f"Requires-Dist: {req}" for req in project.dependencies]
    for extra, requirements in sorted(project.extras.items()):
        lines.append(f"Provides-Extra: {extra}")
        lines += [f"Requires-Dist: {extra_requirement(req, extra)}" for req in requirements]
    return "\n".join(lines) + "\n"


def extra_requirement(requirement: str, extra: str) -> str:
    """``oci`` in extra ``oci`` -> ``oci; extra == "oci"`` (an existing marker is kept)."""
    spec, _, marker = requirement.partition(";")
    condition = f'extra == "{extra}"'
    if marker.strip():
        condition = f"({marker.strip()}) and {condition}"
    return f"{spec.strip()}; {condition}"


def wheel_text() -> str:
    return (f"Wheel-Version: 1.0\nGenerator: {GENERATOR}\nRoot-Is-Purelib: true\n"
            "Tag: py3-none-any\n")


def entry_points_text(scripts: dict[str, str]) -> str:
    lines = ["[console_scripts]"]
    lines += [f"{name} = {target}" for name, target in sorted(scripts.items())]
    return "\n".join(lines) + "\n"


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def wheel_entries(project: Project) -> tuple[str, list[tuple[str, bytes]]]:
    """The wheel's file name and its entries in archive order (RECORD last)."""
    files = source_files(project)
    version = local_version(project.version, source_hash(project, files))
    dist_info = f"{distribution_name(project.name)}-{version}.dist-info"
    entries = [(name, path.read_bytes()) for name, path in files]
    entries += [(f"{dist_info}/METADATA", metadata_text(project, version).encode()),
                (f"{dist_info}/WHEEL", wheel_text().encode())]
    if project.scripts:
        entries.append((f"{dist_info}/entry_points.txt",
                        entry_points_text(project.scripts).encode()))
    entries.append((f"{dist_info}/top_level.txt", "".join(
        f"{p}\n" for p in project.packages).encode()))
    record = [record_line(name, data) for name, data in entries] + [f"{dist_info}/RECORD,,"]
    entries.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    return wheel_file_name(project, version), entries


def zip_bytes(entries: list[tuple[str, bytes]]) -> bytes:
    """The archive: entries in the given order, fixed time and mode, deflated."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=ZIP_EPOCH)
            info.create_system = 3  # unix, so the mode below is read
            info.external_attr = (0o100000 | FILE_MODE) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data, compresslevel=9)
    return buffer.getvalue()


def write_atomically(target: Path, data: bytes) -> None:
    """Write next to ``target`` and rename into place: readers never see half a file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def remove_other_versions(out_dir: Path, keep: Path, project: Project) -> None:
    for old in out_dir.glob(f"{distribution_name(project.name)}-*.whl"):
        if old != keep:
            old.unlink(missing_ok=True)


def build_wheel(project_dir: Path | str, out_dir: Path | str) -> Path:
    """Build the project's wheel into ``out_dir`` and remove older wheels of the project
    from it. An identical wheel already there is left untouched."""
    project = read_project(Path(project_dir))
    name, entries = wheel_entries(project)
    data = zip_bytes(entries)
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    target = out / name
    if not target.is_file() or target.read_bytes() != data:
        write_atomically(target, data)
    remove_other_versions(out, target, project)
    return target
