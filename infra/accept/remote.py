"""Shell commands on the controller, over SSH as Ansible reaches it (the inventory's
``ansible_host``, ``ansible_user``, ``ansible_port``, ``ansible_ssh_private_key_file`` and
``ansible_ssh_common_args``: known hosts, a bastion's ProxyJump), through one multiplexed
connection so that the gate's few dozen Slurm commands cost a round trip each, not a
handshake.
"""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol


class RemoteError(RuntimeError):
    """A command on the controller failed (the message has its exit status and stderr)."""


class Shell(Protocol):
    """What runs a command on a machine: :class:`Remote`, or a test's stand-in."""

    def run(self, command: str, check: bool = True, timeout: float = 120,
            stdin: str | None = None) -> subprocess.CompletedProcess[str]: ...


class FileShell(Shell, Protocol):
    """A :class:`Shell` that also moves bytes (an archive, a dump) to and from local files."""

    def to_file(self, command: str, dest: Path, timeout: float = 3600) -> None: ...

    def from_file(self, command: str, source: Path, timeout: float = 3600) -> None: ...


def ssh_options(host_vars: Mapping[str, Any]) -> list[str]:
    """ssh's options for a host as Ansible connects to it: ``ansible_port``,
    ``ansible_ssh_private_key_file`` and ``ansible_ssh_common_args``."""
    options = []
    if host_vars.get("ansible_port"):
        options += ["-p", str(host_vars["ansible_port"])]
    if host_vars.get("ansible_ssh_private_key_file"):
        options += ["-i", str(Path(str(host_vars["ansible_ssh_private_key_file"])).expanduser())]
    try:
        return options + shlex.split(str(host_vars.get("ansible_ssh_common_args") or ""))
    except ValueError as exc:  # an unclosed quote
        raise RemoteError(f"the inventory's ansible_ssh_common_args cannot be read as ssh's "
                          f"options ({exc}): fix its quoting") from None


class Remote:
    def __init__(self, host: str, host_vars: Mapping[str, Any]) -> None:
        self.host = host
        self._control = tempfile.TemporaryDirectory(prefix="metalslurm-accept-ssh-")
        address = str(host_vars.get("ansible_host") or host)
        user = host_vars.get("ansible_user")
        argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=20",
                "-o", "ControlMaster=auto", "-o", f"ControlPath={self._control.name}/%C",
                "-o", "ControlPersist=120", *ssh_options(host_vars)]
        self._argv = argv + [f"{user}@{address}" if user else address, "--"]
        # As Ansible becomes root there: a login user other than root with ansible_become
        # runs each command through sudo, without a password (-n: a prompt would hang).
        become = host_vars.get("ansible_become")
        self._sudo = ((become is True or str(become).lower() in ("true", "yes", "1", "on"))
                      and str(user or "root") != "root"
                      and str(host_vars.get("ansible_become_user") or "root") == "root")

    def _remote(self, command: str) -> str:
        return f"sudo -n -H -- sh -c {shlex.quote(command)}" if self._sudo else command

    def run(self, command: str, check: bool = True, timeout: float = 120,
            stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """``command`` in the host's login shell, as root (or through sudo: ansible_become)."""
        try:
            proc = subprocess.run([*self._argv, self._remote(command)], capture_output=True,
                                  text=True, timeout=timeout, check=False, input=stdin)
        except subprocess.TimeoutExpired:
            raise RemoteError(f"on {self.host}: {command[:120]!r} did not end in {timeout:.0f} s"
                              ) from None
        if check and proc.returncode != 0:
            raise RemoteError(f"on {self.host}: {command[:120]!r} failed ({proc.returncode}): "
                              f"{(proc.stderr or proc.stdout).strip()[-600:]}")
        return proc

    def to_file(self, command: str, dest: Path, timeout: float = 3600) -> None:
        """``command``'s output (bytes: an archive, a dump) written to the local file
        ``dest``; RemoteError when it fails (``dest`` then holds what came, for the caller
        to remove)."""
        self._binary(command, timeout, stdout=dest)

    def from_file(self, command: str, source: Path, timeout: float = 3600) -> None:
        """``command`` with the local file ``source`` (bytes) on its standard input."""
        self._binary(command, timeout, stdin=source)

    def _binary(self, command: str, timeout: float, stdout: Path | None = None,
                stdin: Path | None = None) -> None:
        with contextlib.ExitStack() as files:
            out = files.enter_context(open(stdout, "wb")) if stdout else subprocess.PIPE
            into = files.enter_context(open(stdin, "rb")) if stdin else subprocess.DEVNULL
            try:
                proc = subprocess.run([*self._argv, self._remote(command)], stdin=into,
                                      stdout=out, stderr=subprocess.PIPE, timeout=timeout,
                                      check=False)
            except subprocess.TimeoutExpired:
                raise RemoteError(f"on {self.host}: {command[:120]!r} did not end in "
                                  f"{timeout:.0f} s") from None
        if proc.returncode != 0:
            raise RemoteError(f"on {self.host}: {command[:120]!r} failed ({proc.returncode}): "
                              f"{proc.stderr.decode(errors='replace').strip()[-600:]}")

    def start(self, command: str) -> subprocess.Popen[str]:
        """``command`` left running (its stdin, stdout and stderr pipes the caller's): it
        ends when the caller closes its stdin, or dies with this process's connection."""
        return subprocess.Popen([*self._argv, self._remote(command)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def close(self) -> None:
        subprocess.run([*self._argv[:-2], "-O", "exit", self._argv[-2]], capture_output=True,
                       check=False, timeout=20)
        self._control.cleanup()


def read_retried(remote: Shell, command: str, tries: int, pause: Callable[[], None]) -> str:
    """The output of a read that feeds a decision. A failure (slurmctld restarting, an SSH
    hiccup) is tried again, ``pause`` apart, ``tries`` times in all, and then raises
    RemoteError with the last problem: a failed read is never taken for an empty answer."""
    problem = ""
    for attempt in range(tries):
        if attempt:
            pause()
        try:
            proc = remote.run(command, check=False)
        except RemoteError as exc:
            problem = str(exc)
            continue
        if proc.returncode == 0:
            return proc.stdout
        problem = (f"exit status {proc.returncode}: "
                   f"{(proc.stderr or proc.stdout).strip()[-300:]}")
    raise RemoteError(problem)
