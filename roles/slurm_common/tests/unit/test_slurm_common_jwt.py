"""slurm_common's JWT key step, run by Ansible: with the REST API on, an inventory that names
no key file, or a file that is not there, is refused with a sentence saying where the key
comes from; nothing is written (nodes never make a key)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.paths import REPO


def run_jwt_step(tmp_path: Path, extra: dict) -> subprocess.CompletedProcess[str]:
    play = [{"hosts": "localhost", "gather_facts": False,
             "vars": {"ansible_python_interpreter": sys.executable,
                      "slurm_common_jwt_key_path": str(tmp_path / "jwt_hs256.key"), **extra},
             "tasks": [{"name": "slurm_common's JWT key step", "ansible.builtin.include_role": {
                 "name": "slurm_common", "tasks_from": "jwt.yml"}}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"),
           "ANSIBLE_ROLES_PATH": str(REPO / "roles"), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i",
                           "localhost,", "-c", "local", str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=env, check=False, timeout=300)


@pytest.mark.parametrize(("extra", "said"), [
    ({}, "slurm_jwt_key_b64_file is not set: name the operator-side file holding the "
         "cluster's JWT key"),
    ({"slurm_jwt_key_b64_file": "/nonexistent/jwt.key.b64"},
     "slurm_jwt_key_b64_file names /nonexistent/jwt.key.b64, which is not a file on this "
     "machine: name the operator-side file"),
])
def test_a_missing_key_file_is_refused(tmp_path, extra, said):
    proc = run_jwt_step(tmp_path, extra)
    assert proc.returncode != 0
    assert said in " ".join(proc.stdout.split()), proc.stdout[-3000:]
    assert not (tmp_path / "jwt_hs256.key").exists()


def test_with_the_api_off_no_key_is_needed_and_none_is_left(tmp_path):
    (tmp_path / "jwt_hs256.key").write_bytes(b"k" * 32)
    proc = run_jwt_step(tmp_path, {"metalslurm_rest": {"enabled": False}})
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert not (tmp_path / "jwt_hs256.key").exists()
