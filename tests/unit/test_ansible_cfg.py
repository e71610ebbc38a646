"""ansible/ansible.cfg's SSH control sockets: in the operator's own ``~/.ansible/cp`` (which
Ansible makes 0700), never a fixed directory under /tmp another local user could make first
and own; the socket names hashed (Ansible's control_path default), so a long home directory
stays within a Unix socket path's 108 bytes."""

from __future__ import annotations

import configparser
from pathlib import Path

from ansible.plugins.connection.ssh import Connection

REPO = Path(__file__).resolve().parents[2]
SUN_PATH_MAX = 108  # sizeof(sockaddr_un.sun_path) on Linux, the terminating NUL included


def ssh_connection() -> configparser.SectionProxy:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(REPO / "ansible" / "ansible.cfg")
    return cfg["ssh_connection"]


def test_control_sockets_live_in_the_operators_own_directory() -> None:
    assert ssh_connection()["control_path_dir"] == "~/.ansible/cp"


def test_nothing_overrides_the_hashed_socket_name() -> None:
    """A control_path, or -o ControlPath in ssh_args, would replace Ansible's hashed name
    (and ssh_args' one would also ignore control_path_dir)."""
    section = ssh_connection()
    assert "control_path" not in section
    assert "controlpath" not in section["ssh_args"].lower()


def test_a_socket_under_a_long_home_directory_fits_a_unix_socket_path() -> None:
    # A nested home of the longest login useradd takes (32 characters): 58 bytes.
    home = "/nfs/home/department-name/" + "x" * 32
    name = Connection._create_control_path("gpu-0001.a-long-cluster-domain.example.org", 22,
                                           "a-long-ssh-login")
    path = name % {"directory": f"{home}/.ansible/cp"}
    assert path == f"{home}/.ansible/cp/{path[-10:]}"
    # While it sets the master up, ssh listens on the path with a random suffix of 17
    # characters (".XXXXXXXXXXXXXXXX", OpenSSH's mux.c), and sun_path ends with a NUL.
    assert len(path) + 17 + 1 <= SUN_PATH_MAX, path
