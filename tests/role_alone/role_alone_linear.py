"""Ansible's linear strategy with no host behind it: a role plays its whole task graph (its
includes, conditions, loops, variables, registered results, notifications and handlers run
as Ansible runs them), but no module runs anywhere and nothing reaches a host.

Loaded by tests/lint/test_roles_play_alone.py (ANSIBLE_STRATEGY=role_alone_linear). Every
module call (on the host or delegated, facts included) is answered by a stand-in result
and recorded; every path to a host (a command, a file transfer, the connection itself)
raises; only a stat delegated to this machine is answered from this machine's files (read,
never changed). The stand-in result reports a change, so every notification a task makes is
resolved and its handlers run (their modules answered the same way).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleError
from ansible.executor import task_executor
from ansible.plugins.action import ActionBase
from ansible.plugins.connection.local import Connection as LocalConnection
from ansible.plugins.strategy.linear import StrategyModule as LinearStrategy

# Given by the test: what each module answers (JSON, by the module's short name, or
# "task:<task name>" for one task: the keys a later task reads, over COMMON's), and the
# file each module call is recorded in (one JSON line: host, task, module).
ANSWERS: dict[str, dict[str, Any]] = json.loads(os.environ.get("ROLE_ALONE_ANSWERS", "{}"))
RECORD = os.environ.get("ROLE_ALONE_RECORD", "")
COMMON = {"changed": True, "failed": False, "rc": 0, "stdout": "", "stderr": "",
          "stdout_lines": [], "stderr_lines": [], "msg": "stand-in: no module ran"}


def _refuse(what: str):
    def refused(self, *args: Any, **kwargs: Any) -> Any:
        raise AnsibleError(f"role_alone_linear: refused to {what} (no host behind this run)")
    return refused


def _local_stat(args: dict[str, Any]) -> dict[str, Any]:
    """What ansible.builtin.stat says of a path on this machine (read, never changed)."""
    path = os.path.expanduser(str(args.get("path", "")))
    if not os.path.exists(path):
        return {"stat": {"exists": False}}
    found: dict[str, Any] = {"exists": True, "path": path, "isreg": os.path.isfile(path),
                             "isdir": os.path.isdir(path), "islnk": os.path.islink(path)}
    if found["isreg"] and args.get("get_checksum", True):
        algorithm = str(args.get("checksum_algorithm", "sha1"))
        with open(path, "rb") as handle:
            found["checksum"] = hashlib.new(algorithm, handle.read()).hexdigest()
    return {"stat": found, "changed": False}


def _execute_module(self, module_name=None, module_args=None, task_vars=None, **kwargs):
    name = module_name or self._task.action
    if name.rsplit(".", 1)[-1] == "stat" and self._task.delegate_to in ("localhost",
                                                                        "127.0.0.1"):
        # the Ansible machine's own files (a mirror of artifacts): answered as they are
        return {**COMMON, **_local_stat(module_args or self._task.args)}
    if RECORD:
        with open(RECORD, "a") as record:
            record.write(json.dumps({"host": (task_vars or {}).get("inventory_hostname"),
                                     "task": self._task.name, "module": name}) + "\n")
    return {**COMMON, **ANSWERS.get(name.rsplit(".", 1)[-1], {}),
            **ANSWERS.get(f"task:{self._task.name}", {})}


ActionBase._execute_module = _execute_module


class _NoWait:
    """The task executor's ``time`` (it only sleeps): a task retried until a stand-in
    result would do (until/retries/delay), or a loop's pause, does not wait."""

    @staticmethod
    def sleep(seconds: float) -> None:
        return None


task_executor.time = _NoWait  # type: ignore[assignment]
ActionBase._low_level_execute_command = _refuse("run a command on the host")
ActionBase._transfer_data = _refuse("write a file on the host")
ActionBase._transfer_file = _refuse("copy a file to the host")
# Actions that transfer files ask for a directory first; in check mode they stop before
# the transfer (which is refused all the same).
def _make_tmp_path(self, *args: Any, **kwargs: Any) -> str:
    self._connection._shell.tmpdir = "/nonexistent/role-alone-tmp"
    return self._connection._shell.tmpdir


ActionBase._make_tmp_path = _make_tmp_path
ActionBase._remove_tmp_path = lambda self, *args, **kwargs: None
ActionBase._remote_expand_user = lambda self, path, *args, **kwargs: path
ActionBase._execute_remote_stat = lambda self, path, *args, **kwargs: {
    "exists": False, "checksum": "", "isdir": False}
LocalConnection._connect = _refuse("connect to the host")
LocalConnection.exec_command = _refuse("run a command through the connection")
LocalConnection.put_file = _refuse("put a file through the connection")
LocalConnection.fetch_file = _refuse("fetch a file through the connection")


# The project's strategy (ansible/strategy_plugins): its way of answering a task in
# ansible-playbook, by the TaskExecutor a worker runs, with the worker's copy of the task.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "ansible" / "strategy_plugins"))
import mitogen_linear  # noqa: E402


class StrategyModule(mitogen_linear.AnsweredHere, LinearStrategy):
    """Every task runs in ansible-playbook, by the TaskExecutor a worker runs, on the
    worker's copy of the task: no host is behind it, so nothing blocks (retries and pauses
    do not wait). A worker forked per task and host made the runs of make lint's
    tests/lint/test_roles_play_alone.py take 194 CPU-seconds, against 61 this way, for the
    same tasks, outcomes, recaps and recorded module calls (compared run by run)."""

    def run(self, iterator, play_context):  # type: ignore[no-untyped-def]
        mitogen_linear.preload_jinja_plugins()
        mitogen_linear.jinja_code.enable()
        return super().run(iterator, play_context)

    def _queue_task(self, host, task, task_vars, play_context):  # type: ignore[no-untyped-def]
        self._answer_here(host, task, task_vars, play_context)

    def _run_here(self, task, host, task_vars, play_context) -> dict:  # type: ignore[no-untyped-def]
        """Without the capture of what a plugin prints (no module runs here): the results
        thread prints a loop's items while the task runs, and a capture would take them."""
        return mitogen_linear.run_here(task, host, task_vars, play_context, self._loader,
                                       self._final_q, self._variable_manager, capture=False)
