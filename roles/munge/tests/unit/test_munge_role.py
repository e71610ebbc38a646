"""The munge role's own check, run by Ansible: an inventory that names no key file is refused
before any host is touched, with a sentence saying where the key comes from; the role never
makes a key (the cluster's is made once on the operator's side, infra/stack/state.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.paths import REPO


def run_checks(tmp_path: Path, **role_vars: str) -> str:
    """The role's checks alone on this machine: their output, whitespace folded (the run
    must fail)."""
    play = [{"hosts": "localhost", "gather_facts": False,
             "vars": {"ansible_python_interpreter": sys.executable, **role_vars},
             "tasks": [{"name": "The munge role's checks", "ansible.builtin.include_role": {
                 "name": "munge", "tasks_from": "validate.yml"}}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"),
           "ANSIBLE_ROLES_PATH": str(REPO / "roles"), "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i",
                           "localhost,", "-c", "local", str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=env, check=False, timeout=300)
    assert proc.returncode != 0, proc.stdout[-3000:]
    return " ".join(proc.stdout.split())


def test_an_inventory_without_a_key_file_is_refused(tmp_path: Path) -> None:
    out = run_checks(tmp_path)
    assert "munge_key_b64_file is not set: name the operator-side file holding the cluster's " \
           "munge key" in out, out[-3000:]
    assert "which is not a file" not in out


def test_a_key_file_that_is_not_there_is_refused_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "secrets" / "munge.key.b64"
    out = run_checks(tmp_path, munge_key_b64_file=str(missing))
    assert f"munge_key_b64_file names {missing}, which is not a file on this machine " \
           "(the one running Ansible)" in out, out[-3000:]
    assert "is not set" not in out
