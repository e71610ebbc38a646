"""``metalslurm up --stack`` (a byo stack without the Pulumi engine): its inputs, the
inventory it writes, the secrets it keeps, and that an unfit host stops it before anything
is written. The hosts are reached through a stand-in ``ssh`` on PATH (no server here); the
run against real SSH servers is tests/e2e/test_preflight.py's."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import yaml

from infra.cli import main
from infra.ops import byo
from infra.stack.config import load_stack_file
from infra.stack.schema import ConfigError
from infra.stack.state import StateDir
from tests.paths import REPO

EXAMPLE = REPO / "Pulumi.example-byo.yaml"
BMC = {"default": {"username": "admin", "password": "bmc-pw-1"}}


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A byo stack, a key and BMC credentials in an empty directory (the state directory
    goes to ./.metalslurm/)."""
    monkeypatch.chdir(tmp_path)
    stack = tmp_path / "Pulumi.rented.yaml"
    stack.write_text(EXAMPLE.read_text())
    key = tmp_path / "id_ed25519"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaA==\n"
                   "-----END OPENSSH PRIVATE KEY-----\n")
    key.chmod(0o600)
    bmc = tmp_path / "bmc.json"
    bmc.write_text(json.dumps(BMC))
    return stack, key, bmc


def fake_ssh(tmp_path, monkeypatch, stderr: str) -> None:
    """Every ssh connection fails with ``stderr`` (exit 255)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "ssh"
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' {json.dumps(stderr)} >&2\nexit 255\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize(("change", "problem"), [
    ("mode", "--ssh-key {key}: can be read by others (mode 0644), which ssh refuses: "
             "chmod 600 {key}"),
    ("public", "--ssh-key {key}: is a public key; give the SSH private key file"),
    ("no-bmc", "--bmc-credentials: is missing: the stack's elastic hosts are powered through "
               "their BMCs"),
    ("bad-bmc", "--bmc-credentials {bmc}: is not a JSON file mapping a node name or 'default'"),
    ("local", "--stack {stack}: metalslurm:provider is 'local': 'metalslurm up' takes byo "
              "stacks"),
])
def test_bad_input_is_refused_in_one_line_before_a_host_is_reached(work, tmp_path, monkeypatch,
                                                                   capsys, change, problem):
    stack, key, bmc = work
    fake_ssh(tmp_path, monkeypatch, "must not be reached")
    args = ["up", "--stack", str(stack), "--ssh-key", str(key), "--bmc-credentials", str(bmc)]
    if change == "mode":
        key.chmod(0o644)
    elif change == "public":
        key.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKmv me@laptop\n")
    elif change == "no-bmc":
        args = args[:-2]
    elif change == "bad-bmc":
        bmc.write_text('{"default": {"username": "admin"}}')
    elif change == "local":
        stack.write_text("config:\n  metalslurm:provider: local\n")
    rc, out, err = run(args, capsys)
    assert rc == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("error: " + problem.format(key=key, bmc=bmc, stack=stack)), err
    assert not (tmp_path / ".metalslurm").exists()


def test_an_unreachable_host_stops_up_before_anything_is_written(work, tmp_path, monkeypatch,
                                                                 capsys):
    stack, key, bmc = work
    fake_ssh(tmp_path, monkeypatch, "ssh: connect to host 198.51.100.20 port 22: "
                                    "Connection refused")
    rc, out, _err = run(["up", "--stack", str(stack), "--ssh-key", str(key),
                         "--bmc-credentials", str(bmc)], capsys)
    assert rc == 1
    assert "FAIL ctl: bastion jump@198.51.100.20: unreachable; ssh: connect to host " \
           "198.51.100.20 port 22: Connection refused" in out
    assert "up stopped before changing anything" in out
    assert not (tmp_path / ".metalslurm").exists()


def test_a_stack_for_up_holds_no_secret_while_pulumi_up_still_asks_for_them(
        work, tmp_path, monkeypatch, capsys):
    """Without the Pulumi engine the key and the BMC credentials are files on the command
    line: a stack with neither secret in it is taken; the same stack under 'pulumi up' (its
    parse) still needs them from 'pulumi config set --secret'."""
    stack, key, bmc = work
    doc = yaml.safe_load(stack.read_text())
    del doc["config"]["metalslurm:sshPrivateKey"], doc["config"]["metalslurm:bmcCredentials"]
    stack.write_text(yaml.safe_dump(doc))
    fake_ssh(tmp_path, monkeypatch, "ssh: connect to host 198.51.100.20 port 22: "
                                    "Connection refused")
    rc, out, err = run(["up", "--stack", str(stack), "--ssh-key", str(key),
                        "--bmc-credentials", str(bmc)], capsys)
    assert (rc, err) == (1, ""), err
    assert "FAIL ctl: bastion jump@198.51.100.20: unreachable" in out
    with pytest.raises(ConfigError) as exc:
        load_stack_file(stack)
    assert [p.split(":")[1] for p in exc.value.problems] == ["sshPrivateKey", "bmcCredentials"]


def test_config_validate_takes_such_a_stack_and_says_what_pulumi_up_would_need(work, capsys):
    stack, _key, _bmc = work
    doc = yaml.safe_load(stack.read_text())
    del doc["config"]["metalslurm:sshPrivateKey"]
    stack.write_text(yaml.safe_dump(doc))
    rc, out, err = run(["config", "validate", str(stack)], capsys)
    assert (rc, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith(f"{stack}: valid. cluster rented, provider byo")
    assert lines[1:] == ["NOTE: for 'pulumi up' ('metalslurm up' takes --ssh-key and "
                         "--bmc-credentials instead): metalslurm:sshPrivateKey: is required for "
                         "provider byo: 'pulumi config set --secret metalslurm:sshPrivateKey < "
                         "~/.ssh/id_ed25519'"]
    # An oci stack has no such path: the key is still required.
    oci = yaml.safe_load((REPO / "Pulumi.example-oci.yaml").read_text())
    del oci["config"]["metalslurm:sshPrivateKey"]
    stack.write_text(yaml.safe_dump(oci))
    rc, out, err = run(["config", "validate", str(stack)], capsys)
    assert (rc, out) == (2, "")
    assert "metalslurm:sshPrivateKey: is required for provider oci" in err


def test_a_key_in_plain_text_in_the_stack_is_refused_by_up_and_by_validate(work, tmp_path,
                                                                          monkeypatch, capsys):
    stack, key, bmc = work
    fake_ssh(tmp_path, monkeypatch, "must not be reached")
    doc = yaml.safe_load(stack.read_text())
    doc["config"]["metalslurm:sshPrivateKey"] = key.read_text()
    stack.write_text(yaml.safe_dump(doc))
    for argv in (["up", "--stack", str(stack), "--ssh-key", str(key), "--bmc-credentials",
                  str(bmc)], ["config", "validate", str(stack)]):
        rc, out, err = run(argv, capsys)
        assert (rc, out) == (2, ""), argv
        assert "metalslurm:sshPrivateKey: is a secret but is stored in plain text" in err
    assert not (tmp_path / ".metalslurm").exists()


def test_the_inventory_names_the_key_and_the_secret_files_and_they_are_kept(work):
    stack, key, bmc = work
    cfg = byo.byo_stack(stack)
    state = StateDir(Path(".metalslurm/rented"))
    bmc_text = byo.read_bmc_credentials(bmc)
    first = byo.byo_inventory(cfg, state, byo.checked_ssh_key(key), bmc_text, write=True)
    munge = state.secret_file("munge_key_b64_file").read_text()
    again = byo.byo_inventory(cfg, state, byo.checked_ssh_key(key), bmc_text, write=True)
    assert again == first
    assert state.secret_file("munge_key_b64_file").read_text() == munge
    all_vars = first["all"]["vars"]
    assert all_vars["ansible_ssh_private_key_file"] == str(key.resolve())
    assert all_vars["ansible_ssh_common_args"] == "-o ProxyJump=jump@198.51.100.20"
    assert all_vars["slurm_elastic_credentials_file"] == str(
        state.secret_file("slurm_elastic_credentials_file"))
    for var in ("munge_key_b64_file", "slurmdbd_password_file", "slurm_jwt_key_b64_file",
                "monitoring_password_file", "slurm_elastic_credentials_file"):
        path = Path(all_vars[var])
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, var
    assert json.loads(state.secret_file("slurm_elastic_credentials_file").read_text()) == BMC
    text = state.inventory.read_text()
    assert text.startswith("# Written by 'metalslurm up' for a byo stack")
    assert "bmc-pw-1" not in text and munge.strip() not in text
    assert yaml.safe_load(text) == first
    # The pre-flight's view is the same inventory, and writes nothing.
    state.remove()
    assert byo.byo_inventory(cfg, state, key.resolve(), bmc_text, write=False) == first
    assert not state.root.exists()


def test_a_sudo_password_reaches_the_preflight_and_the_configure_and_verify_is_left_out(
        work, tmp_path, monkeypatch, capsys):
    """--become-password-file: the pre-flight and the configure get it (in memory); verify
    (testinfra, which cannot answer sudo's prompt) is skipped with the command to run."""
    import infra.ops.configure as configure_mod
    import infra.ops.verify as verify_mod

    stack, key, bmc = work
    secret = tmp_path / "sudo-pw"
    secret.write_text("rented-pw-1\n")
    seen = {}
    monkeypatch.setattr(byo, "check", lambda _doc, **kw: seen.update(check=kw["password"])
                        or True)
    monkeypatch.setattr(configure_mod, "run_playbook", lambda _inv, **kw: seen.update(
        configure=kw["become_password"]) or configure_mod.ConfigureResult(0, "successful", 1.0,
                                                                          {}))
    monkeypatch.setattr(verify_mod, "run_verify", lambda *_a, **_k: seen.update(verify=1) or 0)
    rc, out, _err = run(["up", "--stack", str(stack), "--ssh-key", str(key),
                         "--bmc-credentials", str(bmc), "--become-password-file", str(secret)],
                        capsys)
    assert rc == 0, out
    assert seen == {"check": "rented-pw-1", "configure": "rented-pw-1"}
    assert ("verify skipped: testinfra cannot answer sudo's password prompt; run 'metalslurm "
            "verify -i .metalslurm/rented/inventory.yml' as root or a NOPASSWD sudo user") in out
    assert "rented-pw-1" not in out


def test_a_host_whose_firewall_the_operator_keeps_gets_no_openings(work):
    """metalslurm:byo.openFirewall (every host) and a host's own openFirewall become the
    host_firewall role's host_firewall_enabled; not given, the role's default decides."""
    stack, key, _bmc = work
    doc = yaml.safe_load(stack.read_text())
    byo_cfg = doc["config"]["metalslurm:byo"]
    state = StateDir(Path(".metalslurm/rented"))

    def firewall_vars() -> dict[str, object]:
        stack.write_text(yaml.safe_dump(doc))
        hosts = byo.byo_inventory(byo.byo_stack(stack), state, key.resolve(), "{}",
                                  write=False)["all"]["hosts"]
        return {name: hv["host_firewall_enabled"] for name, hv in hosts.items()
                if "host_firewall_enabled" in hv}

    assert firewall_vars() == {}
    byo_cfg["hosts"][0]["openFirewall"] = False
    first = byo_cfg["hosts"][0]["name"]
    assert firewall_vars() == {first: False}
    byo_cfg["openFirewall"] = False
    byo_cfg["hosts"][0]["openFirewall"] = True
    names = [h["name"] for h in byo_cfg["hosts"]]
    assert firewall_vars() == {name: name == first for name in names}


@pytest.mark.parametrize("where", ["byo", "host"])
def test_an_open_firewall_that_is_not_a_boolean_is_refused_naming_the_key(work, tmp_path,
                                                                          capsys, where):
    stack, key, bmc = work
    doc = yaml.safe_load(stack.read_text())
    target = doc["config"]["metalslurm:byo"]
    if where == "host":
        target = target["hosts"][1]
    target["openFirewall"] = "no"
    stack.write_text(yaml.safe_dump(doc))
    rc, out, err = run(["up", "--stack", str(stack), "--ssh-key", str(key),
                        "--bmc-credentials", str(bmc)], capsys)
    assert rc == 2 and out == ""
    place = {"byo": "metalslurm:byo.openFirewall",
             "host": "metalslurm:byo.hosts[1].openFirewall"}[where]
    assert f"{place}: must be true or false, got 'no'" in err, err
    assert not (tmp_path / ".metalslurm").exists()
