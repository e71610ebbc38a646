"""Run the testinfra suite (tests/verify) against an inventory and print a pass/fail table.

Equivalent to ``pytest tests/verify --hosts=ansible://all --ansible-inventory=INVENTORY``,
with one SSH connection per host for the whole run: testinfra opens a new connection for
each command unless its Ansible configuration names a control path (the project's
ansible.cfg names only the directory, for Ansible's own hashed socket names), and the
handshakes were most of the suite's time (51 s of 7 nodes' 143 checks, 7 s shared).
"""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from infra.ops.configure import ANSIBLE_DIR, venv_on_path

REPO_ROOT = Path(__file__).resolve().parents[2]
VERIFY_DIR = REPO_ROOT / "tests" / "verify"
# A Unix socket's path holds at most 107 bytes; ssh's %C is 40 hex digits.
SOCKET_PATH_MAX = 107


@dataclass(frozen=True)
class CaseResult:
    name: str
    outcome: str  # passed, failed, error, skipped
    message: str = ""


def parse_junit(path: Path) -> list[CaseResult]:
    results = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                lines = (node.get("message") or node.text or "").strip().splitlines()
                message = lines[0] if lines else ""
                break
        results.append(CaseResult(case.get("name", "?"), outcome, message))
    return results


def table_lines(results: list[CaseResult]) -> list[str]:
    width = max((len(r.name) for r in results), default=10)
    width = min(width, 90)
    lines = [f"{'check':<{width}}  result"]
    for r in results:
        mark = {"passed": "PASS", "failed": "FAIL", "error": "ERROR", "skipped": "skip"}[r.outcome]
        extra = f"  {r.message[:100]}" if r.outcome != "passed" and r.message else ""
        lines.append(f"{r.name[:width]:<{width}}  {mark}{extra}")
    counts = {o: sum(1 for r in results if r.outcome == o)
              for o in ("passed", "failed", "error", "skipped")}
    lines.append(", ".join(f"{n} {o}" for o, n in counts.items() if n) or "no checks ran")
    return lines


def run_verify(inventory: str | Path, extra_args: list[str] | None = None,
               out: Callable[[str], None] = print) -> int:
    """Run the suite; print the table; return pytest's exit code."""
    inventory = Path(inventory).resolve()
    with tempfile.TemporaryDirectory(prefix="metalslurm-verify-") as tmp:
        junit = Path(tmp) / "verify.xml"
        cmd = [sys.executable, "-m", "pytest", str(VERIFY_DIR), "-p", "no:cacheprovider",
               "-q", "--hosts=ansible://all", f"--ansible-inventory={inventory}",
               f"--junitxml={junit}", "-o", "junit_family=xunit2", *(extra_args or [])]
        venv_on_path()
        sockets = Path(tmp) / "cp"
        env = {**os.environ, "ANSIBLE_CONFIG": str(shared_connections_config(Path(tmp), sockets))}
        try:
            proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True,
                                  check=False, env=env)
        finally:
            close_shared_connections(sockets)
        if not junit.exists():
            out(proc.stdout[-4000:] + proc.stderr[-2000:])
            return proc.returncode or 1
        for line in table_lines(parse_junit(junit)):
            out(line)
        if proc.returncode != 0:
            out("--- pytest output (failures) ---")
            out(proc.stdout[-6000:])
        return proc.returncode


def shared_connections_config(tmp: Path, sockets: Path) -> Path:
    """An ansible.cfg for testinfra in ``tmp``: the project's, whose ssh_args turn
    ControlMaster on, with the control sockets in ``sockets`` (made 0700 here, removed
    with ``tmp``) named by ssh's %C. Where that path would be too long for a socket, the
    project's file as it is (a connection per command, as before)."""
    project = ANSIBLE_DIR / "ansible.cfg"
    if len(str(sockets)) + 1 + 40 > SOCKET_PATH_MAX:
        return project
    sockets.mkdir(mode=0o700)
    config = configparser.ConfigParser(interpolation=None)
    config.read(project)
    for section in ("ssh_connection", "persistent_connection"):
        if not config.has_section(section):
            config.add_section(section)
    config.set("ssh_connection", "control_path", "%(directory)s/%%C")
    config.set("persistent_connection", "control_path_dir", str(sockets))
    path = tmp / "ansible.cfg"
    with path.open("w") as out:
        config.write(out)
    return path


def close_shared_connections(sockets: Path) -> None:
    """Ends the master connections left in ``sockets`` (ControlPersist would keep each for
    minutes after the run)."""
    for socket in sorted(sockets.glob("*")) if sockets.is_dir() else []:
        subprocess.run(["ssh", "-o", f"ControlPath={socket}", "-O", "exit", "metalslurm-verify"],
                       capture_output=True, check=False, timeout=30)
