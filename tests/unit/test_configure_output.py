"""What configure prints (infra/configure.py), with ansible-runner replaced by a fake that
hands run_playbook a list of events: each NOTE once with its hosts as a hostlist."""

from __future__ import annotations

import sys
import time
import types
from typing import Any

import pytest

from infra.configure import fold_notes, print_summary, run_playbook

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
