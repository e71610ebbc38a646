"""metalslurm.cluster.events: the JSON lines 'metalslurm configure' reads. What a result
keeps, events that JSON cannot hold as they are, a run without the pipe, and a pipe whose
reader is gone (the run stops)."""

from __future__ import annotations

import json
import os
import signal
import types

import pytest
from ansible_collections.metalslurm.cluster.plugins.callback import events


def test_a_result_keeps_what_configure_reads_and_a_loops_items_the_same():
    result = {"changed": True, "msg": "NOTE: no GPU", "stderr": "", "warnings": ["w"],
              "diff": {"after": "x"}, "stdout": "a long output", "invocation": {"x": 1},
              "results": [{"changed": False, "msg": "item", "stdout": "more", "item": "a"},
                          "not a dict"]}
    assert events.kept(result) == {
        "changed": True, "msg": "NOTE: no GPU", "stderr": "", "warnings": ["w"],
        "diff": {"after": "x"},
        "results": [{"changed": False, "msg": "item"}, "not a dict"]}


def test_an_event_json_cannot_hold_is_written_as_text_or_by_its_name_and_host():
    odd = json.loads(events.encode({"event": "runner_on_ok", "event_data": {
        "host": "gpu-001", "res": {"msg": object(), "ids": {7}, ("a", "b"): 1}}}))
    assert odd["event_data"]["host"] == "gpu-001"
    assert odd["event_data"]["res"]["msg"].startswith("<object object")
    assert odd["event_data"]["res"]["ids"] == "{7}"
    assert sorted(odd["event_data"]["res"]) == ["ids", "msg"]  # the tuple key left out


class Task:
    name = "Install Slurm"
    action = "ansible.builtin.apt"
    _uuid = "uuid-1"


def result(host: str = "gpu-001", res: dict | None = None) -> types.SimpleNamespace:
    return types.SimpleNamespace(_task=Task(), _host=types.SimpleNamespace(get_name=lambda: host),
                                 _result=res or {})


def test_without_the_pipe_it_writes_nothing(monkeypatch):
    monkeypatch.delenv("METALSLURM_EVENTS_FD", raising=False)
    callback = events.CallbackModule()
    callback.v2_runner_on_ok(result(res={"changed": True}))  # no error, no output


def test_the_events_go_to_the_pipe_and_the_recap_closes_it(monkeypatch):
    read_end, write_end = os.pipe()
    monkeypatch.setenv("METALSLURM_EVENTS_FD", str(write_end))
    callback = events.CallbackModule()
    assert not os.get_inheritable(write_end)
    callback.v2_playbook_on_task_start(Task(), False)
    callback.v2_runner_on_ok(result(res={"changed": True, "stdout": "x"}))
    callback.v2_runner_on_failed(result(res={"msg": "boom", "rc": 3}), ignore_errors=True)
    callback.v2_runner_on_skipped(result(host="gpu-002"))
    stats = types.SimpleNamespace(ok={"gpu-001": 2}, changed={"gpu-001": 1}, dark={},
                                  failures={}, ignored={"gpu-001": 1}, processed={},
                                  rescued={}, skipped={"gpu-002": 1})
    callback.v2_playbook_on_stats(stats)
    with os.fdopen(read_end) as stream:
        lines = [json.loads(line) for line in stream]  # ends: the recap closed the pipe
    assert [e["event"] for e in lines] == ["playbook_on_task_start", "runner_on_ok",
                                           "runner_on_failed", "runner_on_skipped",
                                           "playbook_on_stats"]
    assert lines[1]["event_data"] == {"task": "Install Slurm", "task_uuid": "uuid-1",
                                      "host": "gpu-001", "res": {"changed": True}}
    assert lines[2]["event_data"]["res"] == {"msg": "boom", "rc": 3}  # a failure whole
    assert lines[2]["event_data"]["ignore_errors"] is True
    assert "res" not in lines[3]["event_data"]
    assert lines[4]["event_data"]["changed"] == {"gpu-001": 1}


def test_a_pipe_nobody_reads_stops_the_run(monkeypatch):
    """The configure that started the run was killed: the next event stops ansible-playbook
    (SIGTERM to itself) instead of letting it configure the cluster unwatched."""
    read_end, write_end = os.pipe()
    monkeypatch.setenv("METALSLURM_EVENTS_FD", str(write_end))
    callback = events.CallbackModule()
    os.close(read_end)
    killed = []
    monkeypatch.setattr(events.os, "kill", lambda pid, sig: killed.append((pid, sig)))
    callback.v2_runner_on_ok(result(res={"changed": True}))
    assert killed == [(os.getpid(), signal.SIGTERM)]
    callback.v2_runner_on_ok(result(res={"changed": True}))  # once
    assert len(killed) == 1


@pytest.fixture(autouse=True)
def _no_leftover_fd_variable(monkeypatch):
    monkeypatch.delenv("METALSLURM_EVENTS_FD", raising=False)
