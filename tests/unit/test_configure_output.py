"""What configure prints (infra/ops/configure.py), with ansible-playbook replaced by a
stand-in process that writes a list of events to the pipe run_playbook reads: each NOTE
once with its hosts as a hostlist, and a progress line when nothing was printed for 15 s
(stdout not a terminal). Then the real ansible-playbook on this machine (connection local)
with the collection's events callback: what a run's result says, and what it never holds."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

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


# The stand-in for ansible-playbook: the events of a spec file to the events pipe (a number:
# that many seconds' sleep), the recap, what the spec says it printed, its exit status; and
# the sudo password it was handed, if any, to the file the spec names.
STAND_IN = textwrap.dedent("""
    import json, os, sys, time
    spec = json.load(open(sys.argv[1]))
    if "--become-password-file" in sys.argv:
        given = sys.argv[sys.argv.index("--become-password-file") + 1]
        with open(spec["password_seen"], "w") as seen:
            seen.write(sys.stdin.read() if given == "-" else "not from stdin: " + given)
    out = os.fdopen(int(os.environ["METALSLURM_EVENTS_FD"]), "w", buffering=1)
    for step in spec["events"]:
        if isinstance(step, dict):
            out.write(json.dumps(step) + "\\n")
        else:
            time.sleep(step)
    if spec["recap"]:
        out.write(json.dumps({"event": "playbook_on_stats", "event_data": spec["stats"]}) + "\\n")
    print(spec["printed"])
    sys.exit(spec["rc"])
""")


def stand_in_playbook(monkeypatch, tmp_path, steps: list[dict[str, Any] | float], rc: int = 0,
                      printed: str = "", recap: bool = True) -> dict[str, Any]:
    """run_playbook's ansible-playbook replaced by STAND_IN with ``steps``; returns what it
    was started with (argv, env) and the files of the run's private directory then."""
    from infra.ops import configure

    spec = tmp_path / "stand-in.json"
    spec.write_text(json.dumps({"events": steps, "rc": rc, "printed": printed, "recap": recap,
                                "stats": {"ok": {h: 1 for h in HOSTS}, "changed": {}},
                                "password_seen": str(tmp_path / "password-seen")}))
    script = tmp_path / "stand-in-playbook.py"
    script.write_text(STAND_IN)
    seen: dict[str, Any] = {}

    def spawn(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        private = Path(kwargs["stdout"].name).parent
        seen.update(argv=argv, env=kwargs["env"],
                    files={str(p.relative_to(private)): p.read_bytes()
                           for p in private.rglob("*") if p.is_file()},
                    modes={str(p.relative_to(private)): p.stat().st_mode & 0o7777
                           for p in [private, *private.rglob("*")]})
        return subprocess.Popen([sys.executable, str(script), str(spec), *argv[1:]], **kwargs)

    monkeypatch.setattr(configure, "spawn", spawn)
    return seen


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


def test_configure_prints_the_nccl_tests_note_once_for_four_nodes(monkeypatch, tmp_path, inventory):
    task = "Say why nccl-tests is not built on this GPU node"
    events: list[dict[str, Any] | float] = [task_start(1, task)]
    events += [on_host("runner_on_ok", 1, task, h, "NOTE: " + NCCL_NOTE.format(host=h))
               for h in HOSTS]
    stand_in_playbook(monkeypatch, tmp_path, events)
    lines: list[str] = []
    result = run_playbook(inventory, out=lines.append)
    lines.clear()
    print_summary(result, out=lines.append)
    assert [line for line in lines if line.startswith("NOTE:")] == [
        "NOTE: gpu-[001-004]: nccl-tests is not built here: no CUDA compiler, no NCCL header "
        "(/usr/local/cuda/bin/nvcc, /usr/include/nccl.h). Install the CUDA toolkit"]


def test_a_runtime_group_a_limited_run_leaves_empty_is_no_warning(monkeypatch, tmp_path, inventory):
    """--limit slurm_controller leaves metalslurm_powered_down empty; Ansible's warning about
    it says nothing about the cluster. Another warning is still said, once."""
    task = "Ask the controller whether the inventory's munge key would replace the one it holds"
    event = on_host("runner_on_ok", 1, task, "ctl")
    event["event_data"]["res"]["warnings"] = [
        "Could not match supplied host pattern, ignoring: metalslurm_powered_down",
        "Could not match supplied host pattern, ignoring: gpu_typo"]
    stand_in_playbook(monkeypatch, tmp_path, [task_start(1, task), event])
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


def test_run_playbook_prints_progress_while_a_task_is_slow(monkeypatch, tmp_path, inventory):
    task = "Install Slurm"
    stand_in_playbook(monkeypatch, tmp_path, [
        task_start(1, "Gathering Facts"), task_start(2, task),
        on_host("runner_on_start", 2, task, "gpu-001"),
        on_host("runner_on_start", 2, task, "gpu-002"),
        0.5,
        on_host("runner_on_ok", 2, task, "gpu-001"), on_host("runner_on_ok", 2, task, "gpu-002"),
    ])
    said: list[str] = []
    result = run_playbook(inventory, out=None, heartbeat=said.append, heartbeat_every=0.1)
    assert result.ok
    # A loaded machine may beat before the first event arrives ("starting ansible-playbook")
    # or between two events the stand-in wrote at once (task 1, or task 2 before its hosts
    # started): each beat names the run's state then, and the states only move forward.
    forms = [r"starting ansible-playbook", r"task 1: Gathering Facts",
             r"task 2: Install Slurm( \((1 host|2 hosts)\))?"]
    stages = []
    for line in said:
        stage = [i for i, form in enumerate(forms)
                 if re.fullmatch(r"\.\.\. configure: \d+ s, " + form, line)]
        assert stage, f"{line!r} names no state of the run: {said}"
        stages.append(stage[0])
    assert stages == sorted(stages), said
    # The stand-in waits 0.5 s with both hosts started: beats every 0.1 s name them.
    assert any(line.endswith("task 2: Install Slurm (2 hosts)") for line in said), said


def test_no_progress_line_without_a_heartbeat(monkeypatch, tmp_path, inventory, capsys):
    stand_in_playbook(monkeypatch, tmp_path, [task_start(1, "Install Slurm"), 0.2])
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


def test_a_sudo_password_goes_through_a_pipe_and_is_written_nowhere(monkeypatch, tmp_path,
                                                                     inventory):
    """The password reaches ansible-playbook through a pipe on its standard input, which it
    reads as its password file (--become-password-file -): not an extra variable, no file,
    not its environment or arguments. The extra variables are in a file only the user can
    read."""
    seen = stand_in_playbook(monkeypatch, tmp_path, [])
    result = run_playbook(inventory, out=None, become_password="s3cret-pw",
                          extra_vars={"metalslurm_drain_wait": 60})
    assert result.ok
    assert (tmp_path / "password-seen").read_text() == "s3cret-pw\n"
    assert seen["argv"][seen["argv"].index("--become-password-file") + 1] == "-"
    assert "s3cret-pw" not in " ".join(seen["argv"]) + json.dumps(seen["env"])
    # What ansible-playbook prints goes to output.txt (read back on a failure).
    assert sorted(seen["files"]) == ["extra-vars.json", "output.txt"]
    assert json.loads(seen["files"]["extra-vars.json"]) == {"metalslurm_drain_wait": 60}
    assert seen["modes"]["."] == 0o700 and seen["modes"]["extra-vars.json"] == 0o600
    assert "--extra-vars" in seen["argv"]
    (tmp_path / "password-seen").unlink()
    run_playbook(inventory, out=None)
    assert "--become-password-file" not in seen["argv"]
    assert "--extra-vars" not in seen["argv"] and sorted(seen["files"]) == ["output.txt"]
    assert not (tmp_path / "password-seen").exists()


def test_a_run_that_ends_without_its_recap_is_not_taken_for_a_converged_one(
        monkeypatch, tmp_path, inventory):
    """No recap event (the events callback did not load, or died): exit status 0 is not
    enough, since 0 changed would then read as converged."""
    stand_in_playbook(monkeypatch, tmp_path, [task_start(1, "Install Slurm")], recap=False)
    result = run_playbook(inventory, out=None)
    assert (result.ok, result.status, result.changed) == (False, "failed", 0)
    assert result.failures == [
        "ansible-playbook ended without its recap event (the metalslurm.cluster events "
        "callback did not run): what it changed is not known"]


def test_an_event_the_caller_cannot_take_fails_the_run_after_reading_the_rest(
        monkeypatch, tmp_path, inventory):
    stand_in_playbook(monkeypatch, tmp_path, [
        {"event": "playbook_on_play_start", "event_data": {"play": "Prepare every node"}},
        task_start(1, "Install Slurm")])

    def out(line: str) -> None:
        raise OSError("stdout is closed")

    result = run_playbook(inventory, out=out)
    assert not result.ok and result.stats["ok"] == {h: 1 for h in HOSTS}
    assert result.failures == ["reading the run's events failed (OSError: stdout is closed)"]


def test_a_run_that_fails_before_any_event_says_what_ansible_printed(monkeypatch, tmp_path,
                                                                     inventory):
    stand_in_playbook(monkeypatch, tmp_path, [], rc=4, recap=False,
                      printed="ERROR! the inventory could not be parsed")
    result = run_playbook(inventory, out=None)
    assert (result.ok, result.rc, result.status) == (False, 4, "failed")
    assert result.failures[0] == "ERROR! the inventory could not be parsed"


# A real ansible-playbook run on this machine (connection local), with the project's
# ansible.cfg and the collection's events callback.
LOCAL_PLAYBOOK = """
- hosts: here
  gather_facts: false
  tasks:
    - name: Change something
      ansible.builtin.command: "true"
      changed_when: true
    - name: Say a note
      ansible.builtin.debug:
        msg: "NOTE: {{ inventory_hostname }} has no GPU"
    - name: Say a warning
      ansible.builtin.debug:
        msg: "WARNING: an artifact without a sha256"
    - name: Fail quietly, holding a secret
      ansible.builtin.command: "sh -c 'echo {{ secret }}; exit 3'"
      no_log: true
      ignore_errors: true
      changed_when: false
    - name: Read the host key setting the run has
      ansible.builtin.debug:
        msg: "NOTE: host key checking {{ lookup('ansible.builtin.config', 'HOST_KEY_CHECKING') }}"
    - name: Say an extra variable that looks like a template, and one of digits
      ansible.builtin.debug:
        msg: "NOTE: pattern {{ pattern }}, {{ digits | length }} {{ digits | type_debug }}"
    - name: Fail, holding a secret
      ansible.builtin.command: "sh -c 'echo {{ secret }}; exit 5'"
      no_log: true
"""


def test_a_real_run_gives_its_changes_notes_warnings_and_failures_and_no_secret(tmp_path,
                                                                                monkeypatch):
    """The events callback on a real ansible-playbook: the changed task, the note and the
    warning once each, the failure of a no_log task without its output, the recap's
    counts; ansible.cfg's host key checking holds (ansible-runner had turned it off); the
    secret is in no line, no result and no file left behind."""
    monkeypatch.delenv("ANSIBLE_HOST_KEY_CHECKING", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"here": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    playbook = tmp_path / "play.yml"
    playbook.write_text(LOCAL_PLAYBOOK)
    lines: list[str] = []
    result = run_playbook(inventory, playbook=str(playbook), out=lines.append,
                          become_password=" pw with spaces ",
                          extra_vars={"secret": "hunter2-not-shown",
                                      "pattern": "{{ 6 * 7 }} {% raw %}", "digits": "0" * 40})
    assert (result.ok, result.rc) == (False, 2)
    assert result.changed_tasks == [("here", "Change something")]
    assert result.notes == ["here has no GPU", "host key checking True",
                            "pattern {{ 6 * 7 }} {% raw %}, 40 str"]
    assert result.warnings == ["an artifact without a sha256"]
    assert len(result.failures) == 1 and result.failures[0].startswith(
        "here: Fail, holding a secret: "), result.failures
    assert result.stats["changed"] == {"here": 1} and result.stats["failures"] == {"here": 1}
    assert result.stats["ignored"] == {"here": 1}
    assert "hunter2" not in repr(result) + "\n".join(lines)
    assert list((tmp_path / "tmp").iterdir()) == []


