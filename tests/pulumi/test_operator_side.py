"""The parts that need no engine, run for real: secret files and the byo host check."""

import base64
import json
import stat
import subprocess

import pytest

from infra.providers.byo import host_check_script
from infra.pulumi_configure import OperatorFilesError, write_operator_files


def test_secret_files_are_0600_and_inventory_holds_none(tmp_path):
    files = {"munge_key_b64_file": str(tmp_path / "s" / "munge.key.b64"),
             "slurmdbd_password_file": str(tmp_path / "s" / "db"),
             "slurm_elastic_credentials_file": str(tmp_path / "s" / "bmc.json")}
    key = base64.b64encode(b"k" * 1024).decode()
    env = {"METALSLURM_FILES": json.dumps(files), "METALSLURM_MUNGE_KEY_B64": key,
           "METALSLURM_SLURMDBD_PASSWORD": "pw-123",
           "METALSLURM_BMC_CREDENTIALS": json.dumps({"default": {"username": "a",
                                                                 "password": "b"}}),
           "METALSLURM_INVENTORY": "all: {}\n"}
    write_operator_files(tmp_path / "inventory.yml", env)
    for path in files.values():
        assert stat.S_IMODE((tmp_path / "s").stat().st_mode) == 0o700
        with open(path) as f:
            assert f.read()
        assert stat.S_IMODE(__import__("os").stat(path).st_mode) == 0o600, path
    assert "pw-123" not in (tmp_path / "inventory.yml").read_text()
    env["METALSLURM_BMC_CREDENTIALS"] = json.dumps({"default": {"username": "a"}})
    with pytest.raises(OperatorFilesError, match="metalslurm:bmcCredentials"):
        write_operator_files(tmp_path / "inventory.yml", env)


@pytest.mark.parametrize(("os_release", "gpus", "ok", "message"), [
    ('ID=debian\nVERSION_ID="12"\n', 8, True, "debian 12 ok"),
    ('ID=ubuntu\nVERSION_ID="24.04"\n', 8, True, "ubuntu 24.04 ok"),
    ('ID=centos\nVERSION_ID="7"\n', 8, False, "host gpu-001: runs centos 7"),
    ('ID=debian\nVERSION_ID="12"\n', 4, False, "nvidia-smi shows 8 GPUs, the config says 4"),
])
def test_host_check_script(tmp_path, os_release, gpus, ok, message):
    (tmp_path / "os-release").write_text(os_release)
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nfor i in 0 1 2 3 4 5 6 7; do echo 'NVIDIA H100 80GB HBM3'; done\n")
    fake.chmod(0o755)
    script = host_check_script("gpu-001", gpus, str(tmp_path / "os-release"))
    res = subprocess.run(["sh", "-c", script], capture_output=True, text=True,
                         env={"PATH": f"{fake.parent}:/usr/bin:/bin"}, check=False)
    assert (res.returncode == 0) is ok, res.stderr
    assert message in res.stdout + res.stderr
