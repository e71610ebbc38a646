"""slurmrestd's systemd drop-in as the role renders it (Ansible itself, the role's defaults,
vars and template), for the Slurm releases the supported operating systems ship: its own
user, JWT only, the release's OpenAPI plugins, the private address only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.paths import REPO

ROLE = REPO / "roles/slurm_rest"


def render(tmp_path: Path, version: str | None,
           rest: dict | None = None) -> subprocess.CompletedProcess:
    play = [{
        "name": "Render slurmrestd's drop-in", "hosts": "localhost", "gather_facts": False,
        "vars_files": [str(ROLE / "defaults/main.yml"), str(ROLE / "vars/main.yml")],
        "vars": {"ansible_managed": "rendered by a test", "metalslurm_address": "10.77.0.10",
                 "metalslurm_private_cidr": "10.77.0.0/24", "metalslurm_rest": rest or {},
                 "ansible_facts": {"packages": {"slurm-client": [{"version": version}]}
                                   if version else {}}},
        "tasks": [{"name": "Write it", "ansible.builtin.copy": {
            "content": "{{ __slurm_rest_dropin_content }}", "dest": str(tmp_path / "out.conf"),
            "mode": "0644"}}]}]
    (tmp_path / "templates").symlink_to(ROLE / "templates")
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible/ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    return subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}",
                           str(tmp_path / "play.yml")], capture_output=True, text=True,
                          env=env, check=False, timeout=120)


def service_lines(tmp_path: Path) -> list[str]:
    return [line for line in (tmp_path / "out.conf").read_text().splitlines()
            if line and not line.startswith("#")]


@pytest.mark.parametrize(("version", "plugins"), [
    ("22.05.8-4+deb12u3", "openapi/v0.0.38,openapi/dbv0.0.38"),
    ("24.11.5-4+deb13u1", "openapi/slurmctld,openapi/slurmdbd"),
])
def test_the_drop_in_runs_slurmrestd_as_its_user_with_jwt_on_the_private_address(
        tmp_path, version, plugins):
    proc = render(tmp_path, version)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert service_lines(tmp_path) == [
        # On a login node slurm.conf is sackd's, in /run/slurm/conf: no condition on /etc's.
        "[Unit]", "ConditionPathExists=", "After=munge.service sackd.service",
        "[Service]", "User=slurmrestd", "Group=slurmrestd", "Environment=SLURM_JWT=daemon",
        "ExecStart=",
        f"ExecStart=/usr/sbin/slurmrestd -a rest_auth/jwt -s {plugins} 10.77.0.10:6820",
        "Restart=on-failure", "RestartSec=5", "NoNewPrivileges=true"]


def test_the_stacks_address_and_port_are_used(tmp_path):
    proc = render(tmp_path, "24.11.5-4", {"listen_address": "10.77.0.20", "port": 8443})
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert service_lines(tmp_path)[8].endswith(" 10.77.0.20:8443")


def test_an_address_outside_the_private_network_stops_the_role(tmp_path):
    proc = render(tmp_path, "24.11.5-4", {"listen_address": "172.16.0.1"})
    assert proc.returncode != 0
    assert "metalslurm_rest.listen_address 172.16.0.1 is outside the cluster's private " \
           "network 10.77.0.0/24" in proc.stdout
    assert not (tmp_path / "out.conf").exists()


def test_before_slurm_is_installed_the_drop_in_still_renders(tmp_path):
    """Check mode on a new node: no Slurm yet, so no release to take the plugins from; the
    prediction renders (without them) instead of failing the run."""
    proc = render(tmp_path, None)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert service_lines(tmp_path)[8] == ("ExecStart=/usr/sbin/slurmrestd -a rest_auth/jwt -s  "
                                          "10.77.0.10:6820")
