"""What configure prints (infra/ops/configure.py), with ansible-runner replaced by a fake that
hands run_playbook a list of events: each NOTE once with its hosts as a hostlist, and a
progress line when nothing was printed for 15 s (stdout not a terminal)."""

from __future__ import annotations

import io
import itertools
import json
import re
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest

from infra.ops.configure import _Heartbeat, fold_notes, heartbeat_for, print_summary, run_playbook

NCCL_NOTE = ("{host}: nccl-tests is not built here: no CUDA compiler, no NCCL header "
             "(/usr/local/cuda/bin/nvcc, /usr/include/nccl.h). Install the CUDA toolkit")
RDMA_NOTE = ("no InfiniBand or RoCE device (/sys/class/infiniband is empty) on "
             "gpu-[001-004]: RDMA kernel modules are not loaded there")
HOSTS = [f"gpu-00{i}" for i in range(1, 5)]


def task_start(n: int, task: str) -> dict[str, Any]:
    return {"event": "playbook_on_task_start",
            "event_data": {"task": task, "task_uuid": f"uuid-{n}"}}


def on_host(kind: str, n: int, task: str, host: str, msg: str | None = None) -> dict[str, Any]:
    res = {"changed": False} if msg is None else {"changed": False, "msg": msg}
    return {"event": kind, "event_data": {"task": task, "task_uuid": f"uuid-{n}",
                                          "host": host, "res": res}}


def fake_runner(monkeypatch, steps: list[dict[str, Any] | float]) -> None:
    """ansible_runner.run handing the events in ``steps`` to the event handler, sleeping
    where a step is a number of seconds."""
    def run(**kwargs: Any) -> types.SimpleNamespace:
        for step in steps:
            if isinstance(step, dict):
                kwargs["event_handler"](step)
            else:
                time.sleep(step)
        ok = {h: 1 for h in HOSTS}
        return types.SimpleNamespace(stats={"ok": ok, "changed": {}}, rc=0,
                                     status="successful", stdout=None)

    monkeypatch.setitem(sys.modules, "ansible_runner", types.SimpleNamespace(run=run))


@pytest.fixture
def inventory(tmp_path):
    path = tmp_path / "inventory.yml"
    path.write_text("all: {}\n")
    return path


def test_notes_that_differ_only_by_the_host_are_said_once_with_a_hostlist():
    notes = [(h, NCCL_NOTE.format(host=h)) for h in reversed(HOSTS)]
    notes += [("ctl", RDMA_NOTE)]
    notes += [("gpu-001", "gpu-0010 is not gpu-001's neighbour")]
    notes += [("gpu-002", "gpu-0010 is not gpu-002's neighbour")]
    assert fold_notes(notes) == [
        NCCL_NOTE.format(host="gpu-[001-004]"),
        RDMA_NOTE,
        "gpu-0010 is not gpu-[001-002]'s neighbour",
    ]


def test_one_host_keeps_its_name_and_a_note_without_a_host_name_is_said_once():
    notes = [("gpu-003", NCCL_NOTE.format(host="gpu-003")),
             ("gpu-001", "no GPU there"), ("gpu-002", "no GPU there")]
    assert fold_notes(notes) == [NCCL_NOTE.format(host="gpu-003"), "no GPU there"]


def test_configure_prints_the_nccl_tests_note_once_for_four_nodes(monkeypatch, inventory):
    task = "Say why nccl-tests is not built on this GPU node"
    events: list[dict[str, Any] | float] = [task_start(1, task)]
    events += [on_host("runner_on_ok", 1, task, h, "NOTE: " + NCCL_NOTE.format(host=h))
               for h in HOSTS]
    fake_runner(monkeypatch, events)
    lines: list[str] = []
    result = run_playbook(inventory, out=lines.append)
    lines.clear()
    print_summary(result, out=lines.append)
    assert [line for line in lines if line.startswith("NOTE:")] == [
        "NOTE: gpu-[001-004]: nccl-tests is not built here: no CUDA compiler, no NCCL header "
        "(/usr/local/cuda/bin/nvcc, /usr/include/nccl.h). Install the CUDA toolkit"]


def test_a_runtime_group_a_limited_run_leaves_empty_is_no_warning(monkeypatch, inventory):
    """--limit slurm_controller leaves metalslurm_powered_down empty; Ansible's warning about
    it says nothing about the cluster. Another warning is still said, once."""
    task = "Ask the controller whether the inventory's munge key would replace the one it holds"
    event = on_host("runner_on_ok", 1, task, "ctl")
    event["event_data"]["res"]["warnings"] = [
        "Could not match supplied host pattern, ignoring: metalslurm_powered_down",
        "Could not match supplied host pattern, ignoring: gpu_typo"]
    fake_runner(monkeypatch, [task_start(1, task), event])
    lines: list[str] = []
    result = run_playbook(inventory, out=lines.append)
    assert result.warnings == ["Could not match supplied host pattern, ignoring: gpu_typo"]
    assert [line for line in lines if line.startswith("WARNING")] == [
        "WARNING: Could not match supplied host pattern, ignoring: gpu_typo"]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_progress_line_when_15_s_pass_with_nothing_printed():
    clock = FakeClock()
    said: list[str] = []
    beats = _Heartbeat(said.append, every=15, clock=clock)
    out = beats.watch(said.append)
    clock.now += 14.9
    beats.beat()
    assert said == []
    clock.now += 0.1
    beats.beat()
    assert said == ["... configure: 15 s, starting ansible-playbook"]
    beats.event(task_start(1, "Gathering Facts"))
    beats.event(task_start(2, "Install Slurm"))
    for host in HOSTS:
        beats.event(on_host("runner_on_start", 2, "Install Slurm", host))
    beats.event(on_host("runner_on_ok", 2, "Install Slurm", "gpu-001"))
    beats.event(on_host("runner_on_ok", 1, "Gathering Facts", "gpu-002"))  # not this task
    clock.now += 10
    out("[  25.0s]   changed  gpu-001: Install Slurm")  # printed: 15 s from here
    clock.now += 14
    beats.beat()
    clock.now += 1
    beats.beat()
    clock.now += 15
    beats.beat()
    beats.event(on_host("runner_on_ok", 2, "Install Slurm", "gpu-002"))
    beats.event(on_host("runner_on_failed", 2, "Install Slurm", "gpu-003"))
    clock.now += 15
    beats.beat()
    beats.event(on_host("runner_on_skipped", 2, "Install Slurm", "gpu-004"))
    clock.now += 15
    beats.beat()
    assert said[1:] == [
        "[  25.0s]   changed  gpu-001: Install Slurm",
        "... configure: 40 s, task 2: Install Slurm (3 hosts)",
        "... configure: 55 s, task 2: Install Slurm (3 hosts)",
        "... configure: 70 s, task 2: Install Slurm (1 host)",
        "... configure: 85 s, task 2: Install Slurm",
    ]


def test_run_playbook_prints_progress_while_a_task_is_slow(monkeypatch, inventory):
    task = "Install Slurm"
    fake_runner(monkeypatch, [
        task_start(1, "Gathering Facts"), task_start(2, task),
        on_host("runner_on_start", 2, task, "gpu-001"),
        on_host("runner_on_start", 2, task, "gpu-002"),
        0.5,
        on_host("runner_on_ok", 2, task, "gpu-001"), on_host("runner_on_ok", 2, task, "gpu-002"),
    ])
    said: list[str] = []
    result = run_playbook(inventory, out=None, heartbeat=said.append, heartbeat_every=0.1)
    assert result.ok
    # A loaded machine may beat before the first event arrives: "starting ansible-playbook"
    # then, and only before any task line.
    on_task = list(itertools.dropwhile(
        lambda line: re.fullmatch(r"\.\.\. configure: \d+ s, starting ansible-playbook", line),
        said))
    assert on_task, f"no line about the task in 0.5 s with a heartbeat every 0.1 s: {said}"
    assert all(re.fullmatch(r"\.\.\. configure: \d+ s, task 2: Install Slurm \(2 hosts\)", line)
               for line in on_task), said


def test_no_progress_line_without_a_heartbeat(monkeypatch, inventory, capsys):
    fake_runner(monkeypatch, [task_start(1, "Install Slurm"), 0.2])
    said: list[str] = []
    run_playbook(inventory, out=said.append)
    assert said == [] and capsys.readouterr().out == ""


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_lines_only_when_stdout_is_not_a_terminal():
    assert heartbeat_for(print, Terminal()) is None
    assert heartbeat_for(print, io.StringIO()) is print


def test_metalslurm_configure_piped_gets_progress_lines(monkeypatch, tmp_path, capsys):
    """``metalslurm configure`` with stdout not a terminal (here: captured) passes the
    progress lines to stdout."""
    from infra import cli
    from infra.ops import configure
    from infra.ops.configure import ConfigureResult

    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all:\n  hosts:\n    gpu-001: {}\n")
    given: dict[str, Any] = {}

    def run(inventory: Any, **kwargs: Any) -> ConfigureResult:
        given.update(kwargs)
        kwargs["heartbeat"]("... configure: 15 s, task 1: Gathering Facts (1 host)")
        return ConfigureResult(rc=0, status="successful", seconds=15.0, stats={})

    monkeypatch.setattr(configure, "run_playbook", run)
    assert cli.main(["configure", "-i", str(inventory)]) == 0
    assert given["heartbeat"] is cli.say
    assert capsys.readouterr().out.splitlines()[0] == (
        "... configure: 15 s, task 1: Gathering Facts (1 host)")


def test_a_sudo_password_answers_ansibles_prompt_and_is_written_nowhere(monkeypatch,
                                                                         inventory):
    """The password goes to ansible-playbook's own prompt (--ask-become-pass) through
    ansible-runner's in-memory answers: not an extra variable, which ansible-runner writes
    to its directory."""
    seen = {}

    def run(**kwargs: Any) -> types.SimpleNamespace:
        seen.update(kwargs)
        seen["files"] = sorted(str(p.relative_to(kwargs["private_data_dir"]))
                               for p in Path(kwargs["private_data_dir"]).rglob("*"))
        return types.SimpleNamespace(stats={}, rc=0, status="successful", stdout=None)

    monkeypatch.setitem(sys.modules, "ansible_runner", types.SimpleNamespace(run=run))
    run_playbook(inventory, out=None, become_password="s3cret-pw")
    assert "--ask-become-pass" in seen["cmdline"].split()
    assert list(seen["passwords"].values()) == ["s3cret-pw"]
    assert re.match(next(iter(seen["passwords"])), "BECOME password: ")
    assert "s3cret-pw" not in json.dumps(seen["extravars"]) and seen["files"] == []
    seen.clear()
    run_playbook(inventory, out=None)
    assert seen["passwords"] == {} and seen["cmdline"] is None
