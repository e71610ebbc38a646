"""metalslurm verify: testinfra shares one SSH connection per host (infra/ops/verify.py)."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import testinfra
import yaml

from infra.ops import verify
from infra.ops.configure import ANSIBLE_DIR

INVENTORY = {"all": {"vars": {"ansible_user": "root", "ansible_ssh_common_args":
                              "-o UserKnownHostsFile=/nonexistent/known_hosts"},
                     "hosts": {"gpu-001": {"ansible_host": "192.0.2.11"}}}}


@pytest.fixture
def short_tmp():
    """A directory whose sockets' paths fit (pytest's own tmp_path under xdist is too
    deep: it would test the fallback)."""
    path = Path(tempfile.mkdtemp(prefix="msv-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def ssh_command(tmp_path: Path, config: Path, monkeypatch) -> str:
    """The ssh command line testinfra builds for gpu-001 under ``config``."""
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump(INVENTORY))
    # testinfra runs ansible-inventory: this interpreter's.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("ANSIBLE_CONFIG", str(config))
    [host] = testinfra.get_hosts(["ansible://gpu-001"], ansible_inventory=str(inventory))
    ssh = host.backend.ansible_runner.get_host(host.backend.host).backend
    cmd, args = ssh._build_ssh_command("true")
    return " ".join(cmd) % tuple(args)


def test_testinfra_shares_a_connection_through_the_written_config(short_tmp, monkeypatch):
    sockets = short_tmp / "cp"
    config = verify.shared_connections_config(short_tmp, sockets)
    assert config == short_tmp / "ansible.cfg"
    assert sockets.stat().st_mode & 0o777 == 0o700
    command = ssh_command(short_tmp, config, monkeypatch)
    assert f"-o ControlPath={sockets}/%C" in command, command
    assert "-o ControlMaster=auto" in command


def test_the_project_config_alone_gives_testinfra_no_control_path(tmp_path, monkeypatch):
    """Why the written config exists: without it every command is a new connection."""
    command = ssh_command(tmp_path, ANSIBLE_DIR / "ansible.cfg", monkeypatch)
    assert "ControlMaster=auto" in command and "ControlPath" not in command, command


def test_the_written_config_keeps_every_other_setting_of_the_projects(short_tmp):
    config = verify.shared_connections_config(short_tmp, short_tmp / "cp")
    written, project = (configparser.ConfigParser(interpolation=None) for _ in range(2))
    written.read(config)
    project.read(ANSIBLE_DIR / "ansible.cfg")
    for section in project.sections():
        for key, value in project.items(section):
            assert written.get(section, key) == value, (section, key)
    assert written.get("ssh_connection", "control_path") == "%(directory)s/%%C"


def test_a_socket_directory_too_deep_for_a_socket_falls_back_to_the_project_config(tmp_path):
    deep = tmp_path / ("d" * (verify.SOCKET_PATH_MAX - len(str(tmp_path)) - 40)) / "cp"
    assert verify.shared_connections_config(tmp_path, deep) == ANSIBLE_DIR / "ansible.cfg"
    assert not deep.exists()


def test_closing_asks_each_master_to_exit_and_a_missing_directory_is_nothing(tmp_path,
                                                                           monkeypatch):
    calls = []
    monkeypatch.setattr(verify.subprocess, "run",
                        lambda argv, **_kw: calls.append(argv) or
                        subprocess.CompletedProcess(argv, 0))
    verify.close_shared_connections(tmp_path / "absent")
    assert calls == []
    sockets = tmp_path / "cp"
    sockets.mkdir()
    for name in ("b" * 40, "a" * 40):
        (sockets / name).touch()
    verify.close_shared_connections(sockets)
    assert calls == [["ssh", "-o", f"ControlPath={sockets / n}", "-O", "exit",
                      "metalslurm-verify"] for n in ("a" * 40, "b" * 40)]
