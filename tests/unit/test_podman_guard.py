"""The podman guard (tests/podman_guard.py): in this session podman is the stand-in; in
sessions of their own, a test that runs podman fails on the spot and fails the session even
when it swallows the error, a session that never runs it passes, a test that hides podman
on purpose still finds none, and a test under tests/e2e gets the real PATH back."""

from __future__ import annotations

import os
import shutil

import pytest

from infra.providers import podman
from tests.paths import REPO

pytest_plugins = ["pytester"]


def test_podman_here_is_the_stand_in():
    found = shutil.which("podman")
    assert found is not None and "metalslurm-podman-guard-" in found, found


def test_a_test_that_hides_podman_finds_none(monkeypatch, tmp_path):
    """Tests that check what happens without podman set a PATH without it, as they would on
    a machine with podman installed."""
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(podman.PodmanError, match="podman is not installed"):
        podman.podman_path()


def run_session(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                files: dict[str, str], first_on_path: str = "") -> pytest.RunResult:
    """A pytest session of its own, in a directory of its own, with the guard loaded as the
    repository's conftest.py loads it, and this session's PATH without its stand-in (with
    ``first_on_path`` in front)."""
    for name, text in files.items():
        path = pytester.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    guard = os.environ["METALSLURM_PODMAN_GUARD"]
    path = [p for p in os.environ["PATH"].split(os.pathsep) if not p.startswith(guard)]
    monkeypatch.setenv("PATH", os.pathsep.join(([first_on_path] if first_on_path else []) + path))
    monkeypatch.delenv("METALSLURM_PODMAN_GUARD")
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    return pytester.runpytest_subprocess("-p", "tests.podman_guard", "-p", "no:cacheprovider",
                                         "--rootdir", str(pytester.path))


CALLS_PODMAN = """
import subprocess

def test_lists_containers():
    proc = subprocess.run(["podman", "ps", "-a"], capture_output=True, text=True)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)

def test_swallows_the_failure():
    subprocess.run(["podman", "rm", "-f", "c1"], capture_output=True, check=False)
"""


def test_a_test_that_runs_podman_fails_and_so_does_the_session(pytester, monkeypatch):
    result = run_session(pytester, monkeypatch, {"test_calls.py": CALLS_PODMAN})
    # The call fails where it is made (podman's "could not run" status, and why) ...
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*125*podman is not for unit tests*'podman ps -a' was refused*"])
    # ... and the session fails naming every call, the swallowed one too.
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "*podman was called by tests that must not run it*",
        "test_calls.py::test_lists_containers (call): podman ps -a",
        "test_calls.py::test_swallows_the_failure (call): podman rm -f c1",
    ])


def test_a_session_that_never_runs_podman_passes(pytester, monkeypatch):
    result = run_session(pytester, monkeypatch,
                         {"test_quiet.py": (
                             "import subprocess\n\n"
                             "def test_other_commands_run():\n"
                             "    out = subprocess.run(['sh', '-c', 'echo ok'], check=True,\n"
                             "                         capture_output=True, text=True).stdout\n"
                             "    assert out == 'ok\\n'\n")})
    assert result.ret == pytest.ExitCode.OK
    assert "podman was called" not in result.stdout.str()


def test_an_e2e_test_gets_the_real_path(pytester, monkeypatch):
    """tests/e2e and tests/verify may run podman: they see PATH without the stand-in (a
    'podman' of this test's own, first on that PATH, shows which one they get)."""
    real = pytester.path / "real-bin"
    real.mkdir()
    (real / "podman").write_text("#!/bin/sh\necho real podman\n")
    (real / "podman").chmod(0o755)
    test = ("import subprocess\n\n"
            "def test_real_podman():\n"
            "    out = subprocess.run(['podman'], capture_output=True, text=True).stdout\n"
            "    assert out == 'real podman\\n'\n")
    result = run_session(pytester, monkeypatch, {"tests/e2e/test_real.py": test},
                         first_on_path=str(real))
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
