"""CLI entry points that need no cluster: config validation and argument errors."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infra.cli import main
from infra.ops import local as local_ops

REPO = Path(__file__).resolve().parents[2]
SHIPPED_STACKS = [REPO / "Pulumi.local.yaml", *sorted((REPO / "tests/e2e/stacks").glob("*.yaml"))]


@pytest.mark.parametrize("stack", SHIPPED_STACKS, ids=lambda p: p.name)
def test_config_validate_accepts_the_shipped_stacks(capsys, stack):
    """Valid as shipped; on a clone without the offline mirror beside it (../shared/vendor)
    refused for that alone."""
    mirror = yaml.safe_load(stack.read_text())["config"].get("metalslurm:containers", {}).get(
        "mirror")
    rc = main(["config", "validate", str(stack)])
    out = capsys.readouterr().out
    if mirror and not (stack.parent / mirror).is_dir():
        assert rc == 2
        assert out.count("\n  - ") == 1
        assert "metalslurm:containers.mirror: " in out and "does not exist on this machine" in out
    else:
        assert rc == 0, out
        assert ": valid. cluster " in out


@pytest.fixture
def clone_without_mirror(tmp_path, monkeypatch):
    """The local stack as a fresh clone has it, with no ../shared/vendor beside it; podman
    and the image builder replaced by stand-ins that fail the test if anything reaches them."""
    shutil.copy(REPO / "Pulumi.local.yaml", tmp_path / "Pulumi.local.yaml")

    def reached(*_args, **_kwargs):
        raise AssertionError("podman or the image builder was reached")

    from infra.providers import images, local
    monkeypatch.setattr(local.LocalCluster, "preflight", reached)
    monkeypatch.setattr(images, "ensure_image", reached)
    return tmp_path / "Pulumi.local.yaml"


def test_a_missing_mirror_is_refused_naming_the_files_and_the_fix(clone_without_mirror, capsys):
    assert main(["config", "validate", str(clone_without_mirror)]) == 2
    out = capsys.readouterr().err
    assert (f"metalslurm:containers.mirror: {clone_without_mirror.parent.parent}/shared/vendor "
            "does not exist on this machine; it should hold enroot_4.1.2-1_amd64.deb, "
            "enroot+caps_4.1.2-1_amd64.deb and pyxis-0.24.0.tar.gz: put them there") in out
    assert "or remove mirror to download from upstream" in out


def test_local_up_refuses_a_missing_mirror_before_building_anything(clone_without_mirror,
                                                                   capsys):
    assert main(["local", "up", "--stack", str(clone_without_mirror)]) == 2
    assert "metalslurm:containers.mirror: " in capsys.readouterr().err


def test_local_down_status_and_exec_do_not_need_the_artifacts(clone_without_mirror):
    """A cluster whose mirror went away can still be listed, reached and removed."""
    cfg, _cluster = local_ops.local_cluster(clone_without_mirror)
    assert cfg.containers.mirror.endswith("/shared/vendor")


def test_config_validate_refuses_a_missing_mirror_as_a_user_runs_it(clone_without_mirror):
    """As a user runs it: a new Python process, imports included (no timing asserted)."""
    proc = subprocess.run([sys.executable, "-m", "infra.cli", "config", "validate",
                           str(clone_without_mirror)], cwd=REPO, capture_output=True, text=True,
                          check=False, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "does not exist on this machine" in proc.stderr


def test_config_validate_names_the_slurm_release_of_the_os(capsys):
    releases = {"Pulumi.local.yaml": "os debian13 (Slurm 24.11)",
                "Pulumi.example-byo.yaml": "os debian12 (Slurm 22.05)",
                "Pulumi.example-oci.yaml": "os ubuntu24.04 (Slurm 23.11)"}
    for stack, release in releases.items():
        assert main(["config", "validate", str(REPO / stack)]) == 0
        assert release in capsys.readouterr().out


def test_config_validate_lists_every_problem(tmp_path, capsys):
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text("config:\n  metalslurm:os: centos7\n  metalslurm:privateCidr: 10.0.0.0/33\n")
    assert main(["config", "validate", str(bad)]) == 2
    out = capsys.readouterr().err
    assert "2 problem(s)" in out
    assert "metalslurm:os: 'centos7' is not one of the allowed values" in out
    assert "metalslurm:privateCidr: '10.0.0.0/33' is not a valid network" in out


def test_configure_rejects_a_malformed_extra_var(capsys):
    assert main(["configure", "-i", "inventory.yml", "-e", "novalue"]) == 2
    assert "write KEY=VALUE" in capsys.readouterr().err


def test_local_commands_refuse_a_bad_stack_before_touching_podman(tmp_path, capsys):
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text("config:\n  metalslurm:computePools: [{name: gpu, count: -1}]\n")
    for command in ("up", "down", "status"):
        assert main(["local", command, "--stack", str(bad)]) == 2
        assert "metalslurm:computePools[0].count: must be at least 0" in capsys.readouterr().err


def test_an_interrupt_is_one_line_and_exit_130(monkeypatch, capsys):
    def interrupted(_args):
        raise KeyboardInterrupt

    monkeypatch.setattr("infra.cli.cmd_config_validate", interrupted)
    assert main(["config", "validate", str(REPO / "Pulumi.local.yaml")]) == 130
    assert capsys.readouterr().err == "error: interrupted; every step is safe to run again\n"


def test_a_reader_that_stops_reading_ends_the_command_quietly(monkeypatch, capfd):
    """'metalslurm report usage | head': stdout goes to /dev/null (so Python's last flush is
    silent) and the command ends with 1, no traceback."""
    def closed(_args):
        raise BrokenPipeError

    redirected = []
    monkeypatch.setattr("infra.cli.cmd_config_validate", closed)
    monkeypatch.setattr("infra.cli.os.dup2", lambda fd, to: redirected.append(to))
    assert main(["config", "validate", str(REPO / "Pulumi.local.yaml")]) == 1
    assert redirected == [sys.stdout.fileno()]
    assert capfd.readouterr().err == ""
