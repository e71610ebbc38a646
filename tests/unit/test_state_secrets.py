"""The operator's secret files in ``.metalslurm/<stack>/secrets/`` (infra/stack/state.py): 0600 in
a 0700 directory from the first byte, written to a new file beside the old one, synced, renamed
into place and the directory synced; a write that fails midway leaves the old secret and no
temporary file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from infra.stack import state as state_module
from infra.stack.state import StateDir

VAR, NAME = "slurmdbd_password_file", "slurmdbd.password"


@pytest.fixture()
def state(tmp_path: Path) -> StateDir:
    return StateDir(tmp_path / "stack")


def test_a_secret_file_is_0600_with_its_content_in_a_0700_directory(state: StateDir) -> None:
    path = state.write_secret(VAR, "first-password")
    assert path == state.secrets.resolve() / NAME
    assert path.read_text() == "first-password\n"
    assert oct(stat.S_IMODE(path.stat().st_mode)) == "0o600"
    assert oct(stat.S_IMODE(state.secrets.stat().st_mode)) == "0o700"
    assert sorted(p.name for p in state.secrets.iterdir()) == [NAME]


def test_the_file_is_synced_then_renamed_then_its_directory_synced(
        state: StateDir, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        mode = os.fstat(fd).st_mode
        events.append("fsync directory" if stat.S_ISDIR(mode) else
                      f"fsync file {oct(stat.S_IMODE(mode))}")
        real_fsync(fd)

    def replace(src: str | Path, dst: str | Path) -> None:
        events.append(f"rename {Path(src).parent == Path(dst).parent and 'in its directory'}")
        real_replace(src, dst)

    monkeypatch.setattr(state_module.os, "fsync", fsync)
    monkeypatch.setattr(state_module.os, "replace", replace)
    state.write_secret(VAR, "first-password")
    assert events == ["fsync file 0o600", "rename in its directory", "fsync directory"]


def test_a_write_that_fails_midway_leaves_the_old_secret_and_no_temporary_file(
        state: StateDir, monkeypatch: pytest.MonkeyPatch) -> None:
    path = state.write_secret(VAR, "first-password")

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(state_module.os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="Input/output error"):
        state.write_secret(VAR, "second-password")
    assert path.read_text() == "first-password\n"
    assert sorted(p.name for p in state.secrets.iterdir()) == [NAME]


def test_a_file_planted_at_a_predictable_temporary_name_is_left_alone(
        state: StateDir) -> None:
    """The temporary file's name is new each time (mkstemp), so a name taken in advance
    neither redirects the write nor is removed."""
    state.write_secret(VAR, "first-password")
    planted = state.secrets / f".{NAME}.tmp"
    planted.write_text("someone else's")
    state.write_secret(VAR, "second-password")
    assert (state.secrets / NAME).read_text() == "second-password\n"
    assert planted.read_text() == "someone else's"
