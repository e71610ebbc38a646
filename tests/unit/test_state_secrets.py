"""The operator's secret files in ``.metalslurm/<stack>/secrets/`` (infra/stack/state.py): 0600 in
a 0700 directory from the first byte, written to a new file beside the old one, synced, renamed
into place and the directory synced; a write that fails midway leaves the old secret and no
temporary file."""

from __future__ import annotations

import base64
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


# ---- a Pulumi stack's key text (infra/pulumi/cluster.py stack_key) ---------------------------

def test_key_text_is_long_enough_for_the_keys_bytes() -> None:
    assert [state_module.key_text_chars(n) for n in (1024, 32, 3, 1)] == [1366, 43, 4, 2]


def test_a_new_stacks_password_text_reads_as_a_key_of_the_full_length() -> None:
    """1,366 characters of base64's alphabet (what the RandomPassword makes) are 1,024 bytes;
    the last character's 4 spare bits are dropped, so the base64 written is canonical."""
    text = ("Ab+/09zZ" * 200)[:1366]
    key = state_module.key_b64_from_text(text, "c-munge-key-b64")
    raw = base64.b64decode(key, validate=True)
    assert len(raw) == 1024
    assert base64.b64encode(raw).decode() == key
    assert key[:1364] == text[:1364] and key.endswith("==")


def test_an_older_stacks_key_imported_as_its_base64_is_kept_byte_for_byte() -> None:
    """A RandomBytes' base64 (with its padding), imported into the password: the same key."""
    old = base64.b64encode(os.urandom(1024)).decode()
    assert old.endswith("==")
    assert state_module.key_b64_from_text(old, "c-munge-key-b64") == old
    assert state_module.key_b64_from_text(old[:600] + "\n" + old[600:] + "\n",
                                          "c-munge-key-b64") == old
    jwt = base64.b64encode(os.urandom(32)).decode()
    assert state_module.key_b64_from_text(jwt, "c-jwt-key-b64") == jwt


@pytest.mark.parametrize("text", ["not base64!", "A", "ABCDE"])
def test_key_text_that_is_not_base64_is_refused_naming_the_resource(text: str) -> None:
    with pytest.raises(state_module.SecretError, match=r"^c-munge-key-b64: .*not base64"):
        state_module.key_b64_from_text(text, "c-munge-key-b64")
