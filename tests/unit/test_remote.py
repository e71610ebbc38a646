"""infra/accept/remote.py: commands on a host over ssh, as root or through sudo as Ansible
becomes root there (ansible_become), against stand-ins for ssh and sudo that run the command
here, so that the quoting is the real shell's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infra.accept import remote
from infra.accept.remote import Remote


@pytest.fixture
def fake_tools(tmp_path, monkeypatch) -> Path:
    """ssh: runs what follows '--' in sh, as sshd does; sudo: logs its arguments, runs the
    rest."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "sudo.log"
    (bin_dir / "ssh").write_text('#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done; shift\n'
                                 'exec sh -c "$*"\n')
    (bin_dir / "sudo").write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {log}\n'
                                  'while [ "$1" != "--" ]; do shift; done; shift\nexec "$@"\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return log


COMMAND = "printf '%s|' \"a b\" 'it'\\''s' && SLURM_X=1 sh -c 'echo $SLURM_X' && cat"


@pytest.mark.parametrize("host_vars, through_sudo", [
    ({"ansible_user": "ops", "ansible_become": True}, True),
    ({"ansible_user": "ops", "ansible_become": "yes"}, True),
    ({"ansible_user": "ops", "ansible_become": "false"}, False),
    ({"ansible_user": "root", "ansible_become": True}, False),
    ({"ansible_user": "ops"}, False),
    ({"ansible_user": "ops", "ansible_become": True, "ansible_become_user": "slurm"}, False),
])
def test_a_command_runs_the_same_as_root_or_through_sudo(fake_tools, host_vars, through_sudo):
    remote = Remote("n1", {"ansible_host": "127.0.0.1", **host_vars})
    try:
        proc = remote.run(COMMAND, stdin="from stdin\n")
        assert proc.stdout == "a b|it's|1\nfrom stdin\n"
        held = remote.start("echo held && exec cat")
        assert held.stdout.readline() == "held\n"
        held.stdin.close()
        assert held.wait(timeout=10) == 0
    finally:
        remote._control.cleanup()
    said = fake_tools.read_text().splitlines() if fake_tools.exists() else []
    assert len(said) == (2 if through_sudo else 0)
    if through_sudo:
        assert said[0].startswith("-n -H -- sh -c ")


def test_ssh_options_that_cannot_be_split_say_so():
    with pytest.raises(remote.RemoteError, match=r"^the inventory's ansible_ssh_common_args "
                       r"cannot be read as ssh's options \(No closing quotation\): fix its "
                       r"quoting$"):
        remote.ssh_options({"ansible_ssh_common_args": "-o ProxyCommand='ssh bastion"})
