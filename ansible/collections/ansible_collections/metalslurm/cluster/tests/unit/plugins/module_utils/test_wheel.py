"""module_utils/wheel.py: the power programs' wheel, built the way the slurm_elastic role builds it,
checked for reproducible bytes, correct RECORD hashes, and installed by real pip."""

from __future__ import annotations

import base64
import hashlib
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from ansible_collections.metalslurm.cluster.plugins.module_utils.wheel import (
    WheelError,
    build_wheel,
)

from tests.paths import REPO

PROJECT = REPO / "roles/slurm_elastic/files/metalslurm-power"
PROGRAMS = ["metalslurm-resume", "metalslurm-suspend", "metalslurm-resume-fail",
            "metalslurm-reconcile"]


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    """A copy of the power programs' project that a test may change."""
    copy = tmp_path / "metalslurm-power"
    shutil.copytree(PROJECT, copy, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    return copy


@pytest.fixture()
def wheel(tmp_path: Path) -> Path:
    return build_wheel(PROJECT, tmp_path / "build")


def test_same_bytes_twice(tmp_path: Path) -> None:
    first = build_wheel(PROJECT, tmp_path / "a")
    second = build_wheel(PROJECT, tmp_path / "b")
    assert first.name == second.name
    assert first.read_bytes() == second.read_bytes()


def test_name_carries_the_source_hash(wheel: Path) -> None:
    assert re.fullmatch(r"metalslurm_power-0\.1\.0\+g[0-9a-f]{12}-py3-none-any\.whl",
                        wheel.name), wheel.name


def test_entries_are_sorted_with_fixed_time_and_mode(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        infos = archive.infolist()
    sources = [i.filename for i in infos if ".dist-info/" not in i.filename]
    assert sources == sorted(sources)
    assert infos[-1].filename.endswith(".dist-info/RECORD")
    assert {(i.date_time, i.external_attr >> 16) for i in infos} == {
        ((1980, 1, 1, 0, 0, 0), 0o100644)}


def test_record_hashes_and_sizes_are_correct(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        record_name = next(n for n in archive.namelist() if n.endswith(".dist-info/RECORD"))
        rows = [line.split(",") for line in archive.read(record_name).decode().splitlines()]
        listed = {name for name, _, _ in rows}
        assert listed == set(archive.namelist())
        for name, digest, size in rows:
            if name == record_name:
                assert (digest, size) == ("", "")
                continue
            data = archive.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            assert (digest, int(size)) == (f"sha256={expected.decode()}", len(data)), name


def test_python_caches_are_left_out(project: Path, tmp_path: Path) -> None:
    cache = project / "metalslurm_power/__pycache__"
    cache.mkdir()
    (cache / "cli.cpython-311.pyc").write_bytes(b"\0")
    with zipfile.ZipFile(build_wheel(project, tmp_path / "build")) as archive:
        assert not [n for n in archive.namelist() if "__pycache__" in n or n.endswith(".pyc")]


def test_a_code_change_gives_a_new_wheel_and_removes_the_old(project: Path,
                                                             tmp_path: Path) -> None:
    out = tmp_path / "build"
    old = build_wheel(project, out)
    with (project / "metalslurm_power/cli.py").open("a") as handle:
        handle.write("# changed\n")
    new = build_wheel(project, out)
    assert new.name != old.name
    assert sorted(out.iterdir()) == [new]


def test_an_unchanged_wheel_is_not_rewritten(tmp_path: Path) -> None:
    first = build_wheel(PROJECT, tmp_path / "build")
    inode = first.stat().st_ino
    assert build_wheel(PROJECT, tmp_path / "build").stat().st_ino == inode


def test_a_project_without_version_is_refused(project: Path, tmp_path: Path) -> None:
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('version = "0.1.0"\n', ""))
    with pytest.raises(WheelError, match=r"\[project\] needs version"):
        build_wheel(project, tmp_path / "build")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed by pip, offline, into a plain directory."""
    tmp = tmp_path_factory.mktemp("pip")
    wheel = build_wheel(PROJECT, tmp / "build")
    target = tmp / "target"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps",
                    "--disable-pip-version-check", "--quiet", "--target", str(target),
                    str(wheel)], check=True, capture_output=True, text=True, timeout=120)
    return target


@pytest.mark.parametrize("program", PROGRAMS)
def test_pip_creates_the_console_script(installed: Path, program: str) -> None:
    script = installed / "bin" / program
    assert script.is_file(), sorted(p.name for p in (installed / "bin").iterdir())
    proc = subprocess.run([str(script), "--help"], capture_output=True, text=True,
                          env={"PYTHONPATH": str(installed), "PATH": "/usr/bin:/bin"},
                          timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: {program} "), proc.stdout


def test_pip_installs_the_package_from_the_wheel(installed: Path) -> None:
    code = "import metalslurm_power.cli as c; print(c.__file__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(installed)}, check=True).stdout.strip()
    assert out == str(installed / "metalslurm_power/cli.py")


