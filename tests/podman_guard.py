"""A pytest plugin that keeps podman out of every test layer but e2e and verify.

``make unit`` must start no container (the e2e cluster on a shared machine is someone
else's, and unit tests must run where there is no podman at all). The plugin puts a
stand-in ``podman`` first on PATH while any test outside tests/e2e and tests/verify is set
up, run and torn down: the stand-in records who called it with what, prints why it refuses
and exits 125 (podman's own "could not run" status), so the calling test fails on the spot;
and at the end the session fails, naming every call, even one a test swallowed. It works
the same under pytest-xdist (the workers share the controller's stand-in and record).

What it does not stop: a test that sets PATH itself (it then does not see the stand-in,
nor, if it leaves podman's directory out, podman) or runs ``/usr/bin/podman`` by its path.
A test that needs podman to be missing sets a PATH without it, as it would anyway.

Loaded by the repository's conftest.py (``pytest_plugins``); tests/unit/test_podman_guard.py
runs it in sessions of its own.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

# The layers that may run podman: the local clusters (e2e) and the verify suite against them.
ALLOWED = ("tests/e2e", "tests/verify")
# The controller's stand-in directory, for pytest-xdist's workers (they inherit it).
ENV = "METALSLURM_PODMAN_GUARD"
STAND_IN = """#!/bin/sh
# metalslurm's podman guard (tests/podman_guard.py): unit tests must not run podman.
printf '%s\\t%s\\n' "${{PYTEST_CURRENT_TEST:-(outside a test)}}" "$*" >> '{record}'
echo "podman is not for unit tests (tests/podman_guard.py): 'podman $*' was refused;" \\
     "move this test to tests/e2e, or give it a stand-in of its own" >&2
exit 125
"""


class PodmanGuard:
    def __init__(self, root: Path, own: bool) -> None:
        self.root = root
        self.own = own  # made by this process (not an xdist worker's inherited one)
        self.bin = root / "bin"
        self.record = root / "calls.tsv"

    def path(self, with_stand_in: bool) -> str:
        """The PATH as it is now (a test or fixture may have added to it, as the e2e
        helpers add the virtualenv's bin), with the stand-in's directory first or left out."""
        kept = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p != str(self.bin)]
        return os.pathsep.join([str(self.bin), *kept] if with_stand_in else kept)

    @classmethod
    def make(cls) -> PodmanGuard:
        inherited = os.environ.get(ENV)
        if inherited:
            guard = cls(Path(inherited), own=False)
        else:
            guard = cls(Path(tempfile.mkdtemp(prefix="metalslurm-podman-guard-")), own=True)
            guard.bin.mkdir()
            script = guard.bin / "podman"
            script.write_text(STAND_IN.format(record=guard.record))
            script.chmod(0o755)
            os.environ[ENV] = str(guard.root)
        return guard

    def calls(self) -> list[str]:
        if not self.record.exists():
            return []
        return self.record.read_text().splitlines()


def _allowed(item: pytest.Item) -> bool:
    root = Path(str(item.config.rootpath))
    try:
        relative = Path(str(item.path)).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return False
    return any(relative == a or relative.startswith(a + "/") for a in ALLOWED)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist starts its workers, which inherit it
def pytest_sessionstart(session: pytest.Session) -> None:
    guard = PodmanGuard.make()
    session.config.stash[_KEY] = guard
    # From here on, fixtures set up before the first test (session-scoped ones included)
    # see the stand-in; an allowed test gets the real PATH back before its own set-up.
    os.environ["PATH"] = guard.path(with_stand_in=True)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item):  # type: ignore[no-untyped-def]
    guard = item.config.stash[_KEY]
    os.environ["PATH"] = guard.path(with_stand_in=not _allowed(item))
    yield


def pytest_sessionfinish(session: pytest.Session) -> None:
    guard = session.config.stash.get(_KEY, None)
    if guard is None:
        return
    os.environ["PATH"] = guard.path(with_stand_in=False)
    if not guard.own:  # an xdist worker: the controller reads the record
        return
    calls = guard.calls()
    if calls:
        session.config.stash[_CALLS] = calls
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    shutil.rmtree(guard.root, ignore_errors=True)
    os.environ.pop(ENV, None)


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    calls = terminalreporter.config.stash.get(_CALLS, [])
    if not calls:
        return
    terminalreporter.section("podman was called by tests that must not run it", red=True)
    for line in calls:
        test, _, args = line.partition("\t")
        terminalreporter.write_line(f"{test}: podman {args}")
    terminalreporter.write_line("unit tests start no container: move such a test to "
                                "tests/e2e (see tests/podman_guard.py)")


_KEY = pytest.StashKey[PodmanGuard]()
_CALLS = pytest.StashKey[list[str]]()
