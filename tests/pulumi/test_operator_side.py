"""The parts that need no engine, run for real: secret files, and the pre-flight the
operator-files command runs before the playbook."""

import base64
import json
import stat
import tarfile

import pytest
import yaml

from infra.pulumi import configure
from infra.pulumi.configure import OperatorFilesError, write_operator_files
from infra.stack.join_kit import ed25519_key_pair
from infra.stack.state import StateDir


def test_secret_files_are_0600_and_inventory_holds_none(tmp_path):
    state = StateDir(tmp_path / "stack")
    key = base64.b64encode(b"k" * 1024).decode()
    env = {"METALSLURM_SECRET_VARS": json.dumps(["munge_key_b64_file", "slurmdbd_password_file",
                                                  "slurm_elastic_credentials_file"]),
           "METALSLURM_MUNGE_KEY_B64": key, "METALSLURM_SLURMDBD_PASSWORD": "pw-123",
           "METALSLURM_BMC_CREDENTIALS": json.dumps({"default": {"username": "a",
                                                                 "password": "b"}}),
           "METALSLURM_INVENTORY": json.dumps({"all": {"vars": {"x": 1}}})}
    written = write_operator_files(state, env)
    assert [p.name for p in written] == ["munge.key.b64", "bmc-credentials.json",
                                         "slurmdbd.password", "inventory.yml"]
    assert stat.S_IMODE(state.secrets.stat().st_mode) == 0o700
    for path in written[:-1]:
        assert path.read_text()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert "pw-123" not in state.inventory.read_text()
    assert yaml.safe_load(state.inventory.read_text()) == {"all": {"vars": {"x": 1}}}


def test_a_bad_secret_writes_nothing(tmp_path):
    state = StateDir(tmp_path / "stack")
    env = {"METALSLURM_SECRET_VARS": json.dumps(["munge_key_b64_file",
                                                  "slurm_elastic_credentials_file"]),
           "METALSLURM_MUNGE_KEY_B64": base64.b64encode(b"k" * 1024).decode(),
           "METALSLURM_BMC_CREDENTIALS": json.dumps({"default": {"username": "a"}}),
           "METALSLURM_INVENTORY": json.dumps({"all": {}})}
    with pytest.raises(OperatorFilesError, match="metalslurm:bmcCredentials"):
        write_operator_files(state, env)
    assert not state.root.exists()


def munge_env(key: bytes, password: str = "pw") -> dict[str, str]:
    return {"METALSLURM_SECRET_VARS": json.dumps(["munge_key_b64_file",
                                                  "slurmdbd_password_file"]),
            "METALSLURM_MUNGE_KEY_B64": base64.b64encode(key).decode(),
            "METALSLURM_SLURMDBD_PASSWORD": password,
            "METALSLURM_INVENTORY": json.dumps({"all": {"vars": {"run": password}}})}


def test_the_same_munge_key_is_written_again_on_every_run(tmp_path):
    state = StateDir(tmp_path / "stack")
    write_operator_files(state, munge_env(b"k" * 1024))
    write_operator_files(state, munge_env(b"k" * 1024, password="pw2"))
    assert state.secret_file("slurmdbd_password_file").read_text() == "pw2\n"


def test_a_different_munge_key_never_replaces_the_clusters(tmp_path):
    """The key in the state directory is the one the nodes hold (made by 'local up', or by
    a Pulumi stack since destroyed over machines that outlived it): another stack's key is
    refused, and no file of this run is written."""
    state = StateDir(tmp_path / "stack")
    write_operator_files(state, munge_env(b"k" * 1024))
    before = {p.name: p.read_text() for p in (*state.secrets.iterdir(), state.inventory)}
    with pytest.raises(OperatorFilesError, match="already holds this cluster's munge key"):
        write_operator_files(state, munge_env(b"x" * 1024, password="pw2"))
    assert {p.name: p.read_text() for p in (*state.secrets.iterdir(), state.inventory)} == before


def launch_terminate_env(join_key: str | None) -> dict[str, str]:
    inventory = {"all": {
        "vars": {"ansible_user": "ubuntu", "ansible_become": True},
        "hosts": {"ctl": {}, "gpu-003": {"metalslurm_power": {"driver": "oci",
                                                              "mode": "launch-terminate"}}},
        "children": {"slurm_controller": {"hosts": {"ctl": None}}}}}
    env = {**munge_env(b"k" * 1024), "METALSLURM_INVENTORY": json.dumps(inventory)}
    return env if join_key is None else {**env, "METALSLURM_JOIN_SSH_KEY": join_key}


def test_a_stack_with_launch_terminate_nodes_gets_the_join_key_and_kit(tmp_path):
    """oci's launched machines are configured by the controller: the operator-files command
    writes the join key (0600) and the kit, and the inventory names both."""
    state = StateDir(tmp_path / "stack")
    private, _ = ed25519_key_pair(bytes(range(32)), "metalslurm-join-h100")
    write_operator_files(state, launch_terminate_env(private))
    assert state.join_key.read_text() == private
    assert stat.S_IMODE(state.join_key.stat().st_mode) == 0o600
    assert stat.S_IMODE(state.join_key.parent.stat().st_mode) == 0o700
    join = yaml.safe_load(state.inventory.read_text())["all"]["vars"]["metalslurm_join"]
    assert join["kit"] == str(state.join_kit.resolve()) and state.join_kit.is_file()
    assert join["secrets"][0]["src"] == str(state.join_key.resolve())
    with tarfile.open(state.join_kit) as tar:
        kit_inventory = yaml.safe_load(tar.extractfile("inventory.yml").read())  # type: ignore[union-attr]
    assert (kit_inventory["all"]["vars"]["ansible_user"],
            kit_inventory["all"]["vars"]["ansible_become"]) == ("ubuntu", True)
    assert private not in state.inventory.read_text()


@pytest.mark.parametrize("join_key", [None, "", "ssh-ed25519 AAAA public-half"])
def test_launch_terminate_nodes_without_a_join_key_write_nothing(tmp_path, join_key):
    state = StateDir(tmp_path / "stack")
    with pytest.raises(OperatorFilesError, match="METALSLURM_JOIN_SSH_KEY: the inventory has "
                                                 "launch-terminate nodes"):
        write_operator_files(state, launch_terminate_env(join_key))
    assert not state.root.exists()


def test_an_unfit_host_fails_the_command_before_the_playbook(tmp_path, monkeypatch, capsys):
    """--preflight runs 'metalslurm preflight' on the inventory just written; a host it
    cannot reach fails the command (and so 'pulumi up') before the playbook starts."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ssh").write_text("#!/bin/sh\necho 'ssh: connect to host 10.20.0.10 port 22: "
                                "Connection refused' >&2\nexit 255\n")
    (bindir / "ssh").chmod(0o755)
    played = tmp_path / "played"
    monkeypatch.setattr(configure, "playbook_command", lambda _inv: ["touch", str(played)])
    inventory = {"all": {"vars": {"metalslurm_os": "debian13", "ansible_user": "root"},
                         "hosts": {"ctl": {"ansible_host": "10.20.0.10"}},
                         "children": {"slurm_controller": {"hosts": {"ctl": None}}}}}
    env = {**munge_env(b"k" * 1024), "METALSLURM_INVENTORY": json.dumps(inventory),
           "PATH": f"{bindir}:/usr/bin:/bin"}
    monkeypatch.setattr("os.environ", env)
    rc = configure.main(["--state-dir", str(tmp_path / "stack"), "--preflight", "--playbook"])
    assert rc == 1
    assert not played.exists()
    # Without --preflight (metalslurm:byo.checkHosts false) the playbook runs.
    rc = configure.main(["--state-dir", str(tmp_path / "stack"), "--playbook"])
    assert rc == 0 and played.exists()


def test_machines_just_created_give_the_preflight_time_to_boot(tmp_path, monkeypatch):
    """--preflight-wait (oci) reaches the pre-flight as its --ssh-wait and --lock-wait."""
    asked = []
    monkeypatch.setattr(configure, "preflight_command",
                        lambda _inv, waits=None: asked.append(waits) or ["true"])
    inventory = {"all": {"vars": {"metalslurm_os": "debian13"}, "hosts": {"ctl": {}}}}
    monkeypatch.setattr("os.environ", {**munge_env(b"k" * 1024),
                                       "METALSLURM_INVENTORY": json.dumps(inventory)})
    assert configure.main(["--state-dir", str(tmp_path / "s"), "--preflight",
                           "--preflight-wait", "900"]) == 0
    assert configure.main(["--state-dir", str(tmp_path / "s"), "--preflight"]) == 0
    assert asked == [["--ssh-wait", "900.0", "--lock-wait", "900.0"], []]
