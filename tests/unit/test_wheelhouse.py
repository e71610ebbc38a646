"""'metalslurm wheelhouse' (infra/ops/wheelhouse.py): the pip command it runs, the nodes' Python
taken from the stack's OS, bad input refused with exit 2, a filled wheelhouse left alone.
No network: pip is replaced by a recorder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from infra.cli import main
from infra.ops import wheelhouse

REQUIREMENTS = "idna==3.20\npackaging==26.3\n"


@pytest.fixture
def pip(monkeypatch):
    """pip download replaced: records each command, and 'downloads' one wheel."""
    calls: list[list[str]] = []

    def run(command, timeout):
        calls.append(command)
        dest = command[command.index("--dest") + 1]
        (Path(dest) / "idna-3.20-py3-none-any.whl").write_bytes(b"wheel")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(wheelhouse, "run_pip", run)
    return calls


@pytest.fixture
def requirements(tmp_path):
    path = tmp_path / "requirements.txt"
    path.write_text(REQUIREMENTS)
    return path


def test_the_pip_command_downloads_binary_wheels_for_the_nodes_python(tmp_path, requirements):
    assert wheelhouse.pip_download_command("3.13", requirements, tmp_path / "wh") == [
        sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
        "--only-binary=:all:", "--python-version", "3.13", "--implementation", "cp",
        "--platform=manylinux_2_28_x86_64", "--platform=manylinux_2_27_x86_64",
        "--platform=manylinux_2_17_x86_64", "--platform=manylinux2014_x86_64",
        "--requirement", str(requirements), "--dest", str(tmp_path / "wh")]


@pytest.mark.parametrize(("os_name", "python"), [
    ("debian12", "3.11"), ("debian13", "3.13"), ("ubuntu22.04", "3.10"), ("ubuntu24.04", "3.12")])
def test_the_nodes_python_follows_the_stacks_os(os_name, python):
    assert wheelhouse.node_python(os_name) == python


def test_the_wheelhouse_is_filled_once_per_requirements_and_python(tmp_path, requirements, pip):
    dest = tmp_path / "wh"
    assert wheelhouse.fill_wheelhouse(dest, "3.13", requirements) is True
    assert wheelhouse.fill_wheelhouse(dest, "3.13", requirements) is False
    assert len(pip) == 1
    assert wheelhouse.fill_wheelhouse(dest, "3.12", requirements) is True
    requirements.write_text(REQUIREMENTS + "numpy==2.5.5\n")
    assert wheelhouse.fill_wheelhouse(dest, "3.12", requirements) is True
    assert len(pip) == 3


def test_a_failed_download_names_pips_last_words_and_leaves_no_stamp(tmp_path, requirements,
                                                                     monkeypatch):
    monkeypatch.setattr(wheelhouse, "run_pip", lambda command, timeout: subprocess.CompletedProcess(
        command, 1, "", "Collecting jax==0.12.0.1\nERROR: Could not find a version that "
        "satisfies the requirement jax==0.12.0.1\nERROR: No matching distribution found\n"))
    with pytest.raises(wheelhouse.WheelhouseError, match=r"for Python 3\.11 failed: .*Could not "
                       r"find a version .* No matching distribution found$"):
        wheelhouse.fill_wheelhouse(tmp_path / "wh", "3.11", requirements)
    assert not (tmp_path / "wh" / wheelhouse.STAMP).exists()


# ---- the command line ----------------------------------------------------------------

def test_the_command_takes_the_python_from_the_stack(tmp_path, requirements, pip, capsys):
    stack = tmp_path / "Pulumi.old.yaml"
    stack.write_text("config:\n  metalslurm:os: debian12\n")
    dest = tmp_path / "wh"
    assert main(["wheelhouse", "--stack", str(stack), "--dest", str(dest),
                 "--requirements", str(requirements)]) == 0
    assert pip[0][pip[0].index("--python-version") + 1] == "3.11"
    out = capsys.readouterr().out
    assert f"==> wheelhouse {dest}: the wheels of {requirements} for Python 3.11" in out
    assert "1 wheels, 0.0 MiB" in out
    assert "PIP_NO_INDEX=1 PIP_FIND_LINKS=/shared/wheelhouse" in out


def test_the_command_defaults_to_the_training_examples_requirements(tmp_path, pip):
    assert main(["wheelhouse", "--python", "3.13", "--dest", str(tmp_path / "wh")]) == 0
    assert pip[0][pip[0].index("--requirement") + 1] == str(
        wheelhouse.REPO_ROOT / "examples/python/requirements-train-cpu.txt")


@pytest.mark.parametrize(("args", "problem"), [
    (["--python", "2.7"], "--python '2.7': give the nodes' Python as 3.N, such as 3.13"),
    (["--python", "3.13.1"], "--python '3.13.1': give the nodes' Python as 3.N"),
    (["--python", "python3"], "--python 'python3': give the nodes' Python as 3.N"),
    (["--python", "3.13", "--requirements", "{tmp}/missing.txt"],
     "--requirements {tmp}/missing.txt: "),
    (["--python", "3.13", "--dest", "{tmp}/a-file/wh"],
     "--dest {tmp}/a-file/wh: {tmp}/a-file is not a directory; give a directory"),
    (["--python", "3.13", "--dest", "{tmp}/a-file"], "--dest {tmp}/a-file: {tmp}/a-file is not "
     "a directory"),
])
def test_bad_input_is_refused_with_exit_2_and_nothing_downloaded(tmp_path, pip, capsys, args,
                                                                   problem):
    (tmp_path / "a-file").write_text("")
    argv = ["wheelhouse", "--dest", str(tmp_path / "wh"), *args]
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {problem.replace('{tmp}', str(tmp_path))}"), err
    assert len(err.splitlines()) == 1
    assert pip == []
    assert not (tmp_path / "wh").exists()


def test_a_stack_file_that_does_not_exist_is_refused_with_exit_2(tmp_path, pip, capsys):
    assert main(["wheelhouse", "--stack", str(tmp_path / "Pulumi.nope.yaml"),
                 "--dest", str(tmp_path / "wh")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --stack {tmp_path / 'Pulumi.nope.yaml'}: "), err


def test_a_failed_download_exits_1_with_one_line(tmp_path, requirements, monkeypatch, capsys):
    monkeypatch.setattr(wheelhouse, "run_pip", lambda command, timeout: subprocess.CompletedProcess(
        command, 1, "", "ERROR: network is unreachable\n"))
    assert main(["wheelhouse", "--python", "3.13", "--dest", str(tmp_path / "wh"),
                 "--requirements", str(requirements)]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["error: pip download of requirements.txt for Python 3.13 failed: "
                     "ERROR: network is unreachable"]
