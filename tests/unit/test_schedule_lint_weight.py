"""How tests/schedule.sh weighs lint and the unit tests against the lanes: its own functions
(lint_unit_then_ha and what it calls, read out of the script) run by bash with a stand-in
make (a process that waits for the test) and stand-ins for the lanes' bring-ups and the
backup controller's modules. Lint's make leads a session of its own, weighed as nice 19
until both lanes are up, then as nice 0; the run's own group is never touched; a lint that
ended first is not weighed (its pid may be a lane's by then); its exit status is kept."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.paths import REPO

SCHEDULE = REPO / "tests" / "schedule.sh"
FUNCTIONS = ("descendants", "leads_session", "own_autogroup", "weigh_lint", "lint_unit_then_ha")
AUTOGROUPS = Path("/proc/sys/kernel/sched_autogroup_enabled")


def functions() -> str:
    text = SCHEDULE.read_text()
    found = [re.search(rf"^{name}\(\) {{\n.*?^}}\n", text, re.M | re.S) for name in FUNCTIONS]
    assert all(found), [n for n, f in zip(FUNCTIONS, found, strict=True) if not f]
    return "".join(f.group(0) for f in found if f)


def wait_until(what: str, probe, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (value := probe()):
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def autogroup(pid: int | str) -> str:
    return Path(f"/proc/{pid}/autogroup").read_text().strip()


@pytest.fixture
def run(tmp_path):
    """Starts lint_unit_then_ha in bash (make: a stand-in that writes its pid, waits for
    tmp_path/make-ends and exits 3; the lanes are up once tmp_path/lanes-up exists)."""
    (tmp_path / "bin").mkdir()
    make = tmp_path / "bin" / "make"
    make.write_text(f"#!/bin/bash\necho $$ > {tmp_path}/make.pid\n"
                    f"while [ ! -e {tmp_path}/make-ends ]; do sleep 0.05; done\nexit 3\n")
    make.chmod(0o755)
    logs = tmp_path / "logs"
    logs.mkdir()
    script = (f"{functions()}\nlogs={logs}; what=all; ha=(ha-module)\n"
              f"wait_for_both_lanes() {{ until [ -e {tmp_path}/lanes-up ]; do sleep 0.1; done; }}\n"
              f"run_modules() {{ echo \"$*\" > {logs}/ha-ran; }}\n"
              "lint_unit_then_ha\n")
    proc = subprocess.Popen(["bash", "-c", script], cwd=tmp_path, text=True,
                            env={**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    yield tmp_path, logs, proc
    (tmp_path / "lanes-up").touch()
    (tmp_path / "make-ends").touch()
    proc.wait(timeout=60)


def times(logs: Path) -> list[str]:
    return (logs / "schedule-times.txt").read_text().splitlines()


@pytest.mark.skipif(not AUTOGROUPS.exists() or AUTOGROUPS.read_text().strip() != "1",
                    reason="this kernel schedules without autogroups (the script renices then)")
def test_lint_leads_its_own_group_weighed_19_until_the_lanes_are_up_then_0(run):
    tmp_path, logs, proc = run
    ours = autogroup(os.getpid())
    pid = wait_until("the stand-in make", lambda: (tmp_path / "make.pid").exists()
                     and (tmp_path / "make.pid").read_text().strip())
    wait_until("lint's first weighing", lambda: (logs / "schedule-times.txt").exists())
    assert autogroup(pid).endswith(" nice 19")
    assert autogroup(pid).split()[0] != ours.split()[0]
    assert autogroup(os.getpid()) == ours  # the run's own group (the lanes') is not touched
    assert re.fullmatch(r"lint-unit: autogroup nice 19 from \d+ s", times(logs)[0])
    (tmp_path / "lanes-up").touch()
    wait_until("lint's second weighing", lambda: len(times(logs)) == 2)
    assert autogroup(pid).endswith(" nice 0")
    assert not (logs / "ha-ran").exists()  # the backup controller's modules wait for lint
    (tmp_path / "make-ends").touch()
    assert proc.wait(timeout=60) == 0, proc.stdout.read()
    assert (logs / "schedule-lint-unit.rc").read_text() == "3\n"
    assert (logs / "ha-ran").read_text() == "ha 10 ha-module\n"
    assert autogroup(os.getpid()) == ours


def test_a_lint_that_ended_before_the_lanes_were_up_is_not_weighed_again(run):
    tmp_path, logs, proc = run
    pid = wait_until("the stand-in make", lambda: (tmp_path / "make.pid").exists()
                     and (tmp_path / "make.pid").read_text().strip())
    wait_until("lint's first weighing", lambda: (logs / "schedule-times.txt").exists())
    (tmp_path / "make-ends").touch()
    # bash reaps a background child when it ends, so its pid is free before the lanes are up
    wait_until("the stand-in make to be gone", lambda: not Path(f"/proc/{pid}").exists())
    (tmp_path / "lanes-up").touch()
    assert proc.wait(timeout=60) == 0, proc.stdout.read()
    said = times(logs)
    assert re.fullmatch(r"lint-unit: not weighed \(ended\) from \d+ s", said[1]), said
    assert (logs / "schedule-lint-unit.rc").read_text() == "3\n"
    assert (logs / "ha-ran").exists()
