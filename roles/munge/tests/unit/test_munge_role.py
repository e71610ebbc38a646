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


def test_an_inventory_without_a_key_file_is_refused(tmp_path: Path) -> None:
    play = [{"hosts": "localhost", "gather_facts": False,
             "vars": {"ansible_python_interpreter": sys.executable},
             "tasks": [{"name": "The munge role's checks", "ansible.builtin.include_role": {
                 "name": "munge", "tasks_from": "validate.yml"}}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"),
           "ANSIBLE_ROLES_PATH": str(REPO / "roles"), "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i",
                           "localhost,", "-c", "local", str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=env, check=False, timeout=300)
    assert proc.returncode != 0
    out = " ".join(proc.stdout.split())
    assert "munge_key_b64_file is not set: name the operator-side file holding the cluster's " \
           "munge key" in out, proc.stdout[-3000:]
