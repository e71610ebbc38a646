"""CLI entry points that need no cluster: config validation and argument errors."""

from pathlib import Path

from infra.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_config_validate_accepts_the_shipped_stacks(capsys):
    for stack in [REPO / "Pulumi.local.yaml", *sorted((REPO / "tests/e2e/stacks").glob("*.yaml"))]:
        assert main(["config", "validate", str(stack)]) == 0
        assert ": valid. cluster " in capsys.readouterr().out


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
