"""The events 'metalslurm configure' reads (infra/ops/configure.py): one JSON line per play,
task start, host result and the final recap, written to the file descriptor named by
``METALSLURM_EVENTS_FD``, which run_playbook opens for ansible-playbook as a pipe. Without
that variable it writes nothing.

Each line is ``{"event": ..., "event_data": {...}}`` with the event names and fields
ansible-runner's own callback used (``playbook_on_task_start``, ``runner_on_ok``, ...,
``playbook_on_stats``), so the progress lines and results are read as before. A result
carries only what configure reads (changed, msg, stderr, warnings, diff, a loop's items),
a failed or unreachable one whole; Ansible has already hidden a ``no_log`` task's result
before a callback sees it. Nothing is written to disk.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from typing import Any

from ansible.module_utils.common.json import AnsibleJSONEncoder
from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: events
type: notification
short_description: the events 'metalslurm configure' reads, as JSON lines on a pipe
description:
  - Writes one JSON line per play, task start, host result and the recap to the file
    descriptor named by the METALSLURM_EVENTS_FD environment variable; nothing without it.
requirements:
  - enabled by 'metalslurm configure' (ANSIBLE_CALLBACKS_ENABLED), which opens the pipe
"""

# What configure reads of a host's result, and of each item of a loop's.
KEPT = ("changed", "msg", "stderr", "warnings", "diff", "skipped")


def kept(result: dict[str, Any]) -> dict[str, Any]:
    out = {k: result[k] for k in KEPT if k in result}
    items = result.get("results")
    if isinstance(items, list):
        out["results"] = [kept(i) if isinstance(i, dict) else i for i in items]
    return out


def encode(doc: dict[str, Any]) -> str:
    """One JSON line; a value neither JSON nor Ansible's encoder knows is its text, a key
    that is not a string is left out, and an event that still cannot be written keeps its
    name and host alone."""
    for options in ({"cls": AnsibleJSONEncoder}, {"default": str, "skipkeys": True}):
        try:
            return json.dumps(doc, separators=(",", ":"), **options)
        except Exception:  # noqa: BLE001 - Ansible's encoder raises its own errors too
            continue
    data = doc.get("event_data") or {}
    return json.dumps({"event": doc.get("event"), "event_data": {
        k: str(data[k]) for k in ("task", "task_uuid", "host") if k in data}})


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "metalslurm.cluster.events"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._out = None
        self._lock = threading.Lock()  # Ansible calls back from more than one thread
        fd = os.environ.get("METALSLURM_EVENTS_FD", "")
        if fd.isdigit():
            # Not handed to the programs Ansible starts (ssh, a module's command); the
            # workers forked from this process share it and never write to it.
            os.set_inheritable(int(fd), False)
            self._out = os.fdopen(int(fd), "w", encoding="utf-8", buffering=1)

    def _emit(self, event: str, **data: Any) -> None:
        if self._out is None:
            return
        line = encode({"event": event, "event_data": data})
        with self._lock:
            if self._out is None:
                return
            try:
                self._out.write(line + "\n")
            except (BrokenPipeError, ValueError):
                # Nobody reads the events: the 'metalslurm configure' that started this run
                # is gone (killed). The run stops too, rather than go on unwatched.
                self._out = None
                os.kill(os.getpid(), signal.SIGTERM)

    @staticmethod
    def _task(task: Any) -> dict[str, str]:
        return {"task": task.name or task.action, "task_uuid": str(task._uuid)}

    def _host_event(self, event: str, result: Any, res: dict[str, Any] | None,
                    **more: Any) -> None:
        data = {**self._task(result._task), "host": result._host.get_name(), **more}
        if res is not None:
            data["res"] = res
        self._emit(event, **data)

    def v2_playbook_on_play_start(self, play: Any) -> None:
        self._emit("playbook_on_play_start", play=play.get_name())

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        self._emit("playbook_on_task_start", **self._task(task))

    def v2_playbook_on_handler_task_start(self, task: Any) -> None:
        self._emit("playbook_on_task_start", **self._task(task))

    def v2_runner_on_start(self, host: Any, task: Any) -> None:
        self._emit("runner_on_start", host=host.get_name(), **self._task(task))

    def v2_runner_on_ok(self, result: Any) -> None:
        self._host_event("runner_on_ok", result, kept(result._result))

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._host_event("runner_on_failed", result, result._result,
                         ignore_errors=bool(ignore_errors))

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._host_event("runner_on_skipped", result, None)

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._host_event("runner_on_unreachable", result, result._result)

    def v2_playbook_on_stats(self, stats: Any) -> None:
        self._emit("playbook_on_stats", **{
            key: dict(getattr(stats, key, {}) or {})
            for key in ("changed", "dark", "failures", "ignored", "ok", "processed",
                        "rescued", "skipped")})
        with self._lock:
            if self._out is not None:
                with contextlib.suppress(BrokenPipeError):
                    self._out.close()
                self._out = None
