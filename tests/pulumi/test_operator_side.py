"""The parts that need no engine, run for real: secret files and the byo host check."""

import base64
import json
import stat
import subprocess

import pytest
import yaml

from infra.pulumi.byo import host_check_script
from infra.pulumi.configure import OperatorFilesError, write_operator_files
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


@pytest.mark.parametrize(("os_release", "os_name", "gpus", "ok", "message"), [
    ('ID=debian\nVERSION_ID="12"\n', "debian12", 8, True, "debian 12 ok"),
    ('ID=ubuntu\nVERSION_ID="24.04"\n', "ubuntu24.04", 8, True, "ubuntu 24.04 ok"),
    ('ID=centos\nVERSION_ID="7"\n', "debian13", 8, False,
     "host gpu-001: runs centos 7; metalslurm:os is debian13 (debian 13)"),
    # Every host must run the stack's OS: mixed releases mean mixed Slurm versions.
    ('ID=ubuntu\nVERSION_ID="22.04"\n', "ubuntu24.04", 8, False,
     "host gpu-001: runs ubuntu 22.04; metalslurm:os is ubuntu24.04 (ubuntu 24.04)"),
    ('ID=debian\nVERSION_ID="12"\n', "debian12", 4, False,
     "nvidia-smi shows 8 GPUs, the config says 4"),
])
def test_host_check_script(tmp_path, os_release, os_name, gpus, ok, message):
    (tmp_path / "os-release").write_text(os_release)
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nfor i in 0 1 2 3 4 5 6 7; do echo 'NVIDIA H100 80GB HBM3'; done\n")
    fake.chmod(0o755)
    script = host_check_script("gpu-001", gpus, os_name, str(tmp_path / "os-release"))
    res = subprocess.run(["sh", "-c", script], capture_output=True, text=True,
                         env={"PATH": f"{fake.parent}:/usr/bin:/bin"}, check=False)
    assert (res.returncode == 0) is ok, res.stderr
    assert message in res.stdout + res.stderr
