"""The power programs' state file (``state_file`` in the config): when each node's resume
began (``resume_started``), and since when a machine has been on while Slurm holds it powered
down (``on_while_powered_down``), each ``{node: epoch seconds}``.

ResumeProgram, SuspendProgram, ResumeFailProgram and the reconcile timer run at the same time,
so:

- a change is a read-modify-write inside one hold of an exclusive ``flock`` (:func:`changed`):
  a program that read, then waited for the lock to write, would write back a state without
  what another program changed in between;
- the lock is on a separate file, ``<state_file>.lock``, that is never replaced: a lock on
  the state file itself would stay with the old file once a new one is renamed over it, and
  two programs could each hold "the" lock;
- the new state goes to a new file in the same directory, synced, renamed over the state file
  (atomic), and the directory synced: a reader, or a crash of the program or of the machine,
  finds the old state or the new one, never a truncated or half-written one;
- a reader (:func:`read`) takes the shared lock, so it waits for a change in progress and
  sees it whole; where the lock file cannot be opened (a directory this user cannot write)
  it reads without it, which the rename keeps safe: it gets one whole file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

SECTIONS = ("resume_started", "on_while_powered_down")
# Timestamps, not secrets: readable by anyone, as the log beside it.
FILE_MODE = 0o644

State = dict[str, dict[str, float]]


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def _open_lock(path: Path) -> int:
    # O_RDONLY is enough for flock, and opens a lock file another user made (0644).
    return os.open(lock_path(path), os.O_RDONLY | os.O_CREAT, FILE_MODE)


def _parse(path: Path) -> State:
    """The state in ``path``; empty sections when it is missing, unreadable or not the
    state's JSON (a file from an older version, edited by hand)."""
    try:
        data = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    state: State = {}
    for name in SECTIONS:
        section = data.get(name)
        state[name] = dict(section) if isinstance(section, dict) else {}
    return state


def _replace(path: Path, text: str) -> None:
    """``text`` as the new content of ``path``: a new file beside it, synced, renamed over
    it, the directory synced; on a failure the old file stays and the new one is removed."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), FILE_MODE)
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@contextlib.contextmanager
def changed(path: Path) -> Iterator[State]:
    """The state to change in place, read and written back within one hold of the exclusive
    lock; nothing is written when the block raises."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _open_lock(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        state = _parse(path)
        yield state
        _replace(path, json.dumps(state, sort_keys=True))
    finally:
        os.close(fd)  # releases the lock


def read(path: Path) -> State:
    """The state as the last finished change left it."""
    try:
        fd = _open_lock(path)
    except OSError:  # no lock file and no right to make one: the rename keeps reads whole
        return _parse(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        return _parse(path)
    finally:
        os.close(fd)
