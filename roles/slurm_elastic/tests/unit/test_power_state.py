"""The power programs' state file (metalslurm_power/statefile.py), which ResumeProgram,
SuspendProgram, ResumeFailProgram and the reconcile timer share while running at the same
time: no update lost between concurrent programs, no reader ever seeing a change half
written, and a failure or crash mid-write leaving the old state and no stray file."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
from metalslurm_power import actions


def program(state_file: Path) -> actions.Context:
    """What the state functions read of a program's context: its state file, not a dry run."""
    return cast(actions.Context, SimpleNamespace(config=SimpleNamespace(state_file=state_file),
                                                 dry_run=False))


@pytest.fixture()
def state_file(tmp_path: Path) -> Path:
    return tmp_path / "log" / "metalslurm-power.state.json"


def test_a_change_replaces_the_file_whole_with_the_new_state(
        state_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(actions.time, "time", lambda: 1000.0)
    actions.record_resume(program(state_file), ["gpu-001"])
    assert state_file.read_text() == ('{"on_while_powered_down": {}, '
                                      '"resume_started": {"gpu-001": 1000.0}}')
    assert oct(stat.S_IMODE(state_file.stat().st_mode)) == "0o644"
    assert sorted(p.name for p in state_file.parent.iterdir()) == [
        "metalslurm-power.state.json", "metalslurm-power.state.json.lock"]


def _program_run(state_file: str, index: int, changes: int) -> None:
    """One program's changes: a resume and a machine seen on, per node, one at a time."""
    ctx = program(Path(state_file))
    for j in range(changes):
        node = f"gpu-{index}-{j:02d}"
        actions.record_resume(ctx, [node])
        actions.note_machines_on(ctx, [], {node: float(j)})


def test_concurrent_programs_lose_no_update(state_file: Path) -> None:
    programs, changes = 6, 15
    fork = multiprocessing.get_context("fork")
    runs = [fork.Process(target=_program_run, args=(str(state_file), i, changes))
            for i in range(programs)]
    for run in runs:
        run.start()
    for run in runs:
        run.join(60)
    assert [run.exitcode for run in runs] == [0] * programs
    expected = sorted(f"gpu-{i}-{j:02d}" for i in range(programs) for j in range(changes))
    state = json.loads(state_file.read_text())
    assert sorted(state["resume_started"]) == expected
    assert sorted(state["on_while_powered_down"]) == expected


def test_a_reader_waits_for_a_change_in_progress_and_sees_it_whole(
        state_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = program(state_file)
    monkeypatch.setattr(actions.time, "time", lambda: 1000.0)
    actions.record_resume(ctx, ["gpu-001"])
    writing = threading.Event()
    real_dumps = json.dumps

    def slow_dumps(obj: object, **kwargs: object) -> str:
        """A write that takes its time: another program reads meanwhile."""
        writing.set()
        time.sleep(0.3)
        return real_dumps(obj, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(json, "dumps", slow_dumps)
    writer = threading.Thread(target=actions.record_resume, args=(ctx, ["gpu-002"]))
    writer.start()
    assert writing.wait(5)
    seen = actions.resume_started(ctx)  # ResumeFailProgram or the reconciler, meanwhile
    writer.join(5)
    assert seen == {"gpu-001": 1000.0, "gpu-002": 1000.0}


def _fail_encoding(monkeypatch: pytest.MonkeyPatch) -> None:
    def dumps(obj: object, **kwargs: object) -> str:
        raise MemoryError("killed while encoding")

    monkeypatch.setattr(json, "dumps", dumps)


def _fail_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    def fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.parametrize("fail", [_fail_encoding, _fail_sync], ids=["encoding", "sync"])
def test_a_write_that_fails_midway_leaves_the_old_state_and_no_stray_file(
        state_file: Path, monkeypatch: pytest.MonkeyPatch, fail) -> None:
    ctx = program(state_file)
    monkeypatch.setattr(actions.time, "time", lambda: 1000.0)
    actions.record_resume(ctx, ["gpu-001"])
    before = state_file.read_text()
    fail(monkeypatch)
    with pytest.raises((MemoryError, OSError)):
        actions.record_resume(ctx, ["gpu-002"])
    monkeypatch.undo()
    assert state_file.read_text() == before
    assert actions.resume_started(ctx) == {"gpu-001": 1000.0}
    assert sorted(p.name for p in state_file.parent.iterdir()) == [
        "metalslurm-power.state.json", "metalslurm-power.state.json.lock"]


def test_a_missing_or_unreadable_state_is_empty_and_reading_creates_nothing(
        tmp_path: Path) -> None:
    ctx = program(tmp_path / "absent" / "state.json")
    assert actions.resume_started(ctx) == {}
    assert not (tmp_path / "absent").exists()
    broken = tmp_path / "state.json"
    broken.write_text('{"resume_started": {"gpu-001": ')
    assert actions.resume_started(program(broken)) == {}
