"""Structured JSON-lines event log: one line per event, appended by every program.

Every line has ``ts`` (ISO 8601, UTC), ``t`` (epoch seconds), ``program``, ``pid``, ``run``
(one id per invocation, shared by the detached worker) and ``event``; the rest depends on the
event (``node``, ``driver``, ``phase``, ``duration_s``, ``ok``, ``error``, ``address``...).
Credentials never reach this module: drivers only report node names, states and errors.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


class EventLog:
    def __init__(self, path: Path | str, program: str, run: str | None = None,
                 dry_run: bool = False) -> None:
        self.path = Path(path)
        self.program = program
        self.run = run or f"{os.getpid()}-{int(time.time() * 1000)}"
        self.dry_run = dry_run

    def event(self, event: str, **fields: Any) -> dict[str, Any]:
        now = time.time()
        record: dict[str, Any] = {
            "ts": datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="milliseconds"),
            "t": round(now, 4),
            "program": self.program,
            "pid": os.getpid(),
            "run": self.run,
            "event": event,
        }
        if self.dry_run:
            record["dry_run"] = True
        record.update({k: v for k, v in fields.items() if v is not None})
        line = json.dumps(record, sort_keys=False, default=str) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = open_log(self.path)
            try:
                # One write() per line on an O_APPEND descriptor: lines of concurrent
                # programs do not interleave.
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        except OSError as exc:
            sys.stderr.write(f"metalslurm-power: cannot write {self.path}: {exc}\n{line}")
        return record


def open_log(path: Path) -> int:
    """An append descriptor on the log ``path``, which must be its own regular file: the log
    directory is SlurmUser's, and the join service appends as root, so a link (symbolic or
    hard), a FIFO or a device planted at the log's name is refused, never written through.
    A log root makes is given to the directory's owner, whose programs append to it."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                 | os.O_CLOEXEC, 0o640)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            raise OSError(f"not a regular file of its own (mode {info.st_mode:o}, "
                          f"{info.st_nlink} links): refused")
        if info.st_uid == 0 and os.geteuid() == 0:
            parent = os.stat(path.parent)
            if parent.st_uid != 0:
                os.fchown(fd, parent.st_uid, parent.st_gid)
    except OSError:
        os.close(fd)
        raise
    return fd
