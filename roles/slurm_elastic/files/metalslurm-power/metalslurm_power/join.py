"""metalslurm-join: configure the machines the power driver made anew (launch-terminate).

A resume of such a node leaves an empty file named after it in the requests directory
(actions.request_join, as SlurmUser). systemd starts this program as root when one appears
(metalslurm-join.path). For each request it takes, it runs the cluster's playbook from the
join kit the configure put on the controller (infra/stack/join_kit.py: the same roles, an
inventory that reaches the nodes as root with the join key), limited to that node, which
gives the machine its files and the munge key and starts slurmd (configless): the node
registers and its job starts. A node whose run fails is handed to ResumeFailProgram (as
SlurmUser), which powers its machine off and returns it to the pool: never left half
joined. A request for a node the kit does not have in launch-terminate mode is refused
and removed, whatever it is (a link, a directory); the file's content is never read.

SlurmUser writes the requests directory, its power config and the power log, so this
program (root) reads nothing of theirs but the requests' names and times: its settings
come from its unit's command line (root's), and it appends to the power log only through
a descriptor that is that log's own regular file (eventlog.EventLog). Each node's deadline
counts from its request, not from when this program took it; requests that arrive while
others run are taken at once. The kit is read under a shared lock the configure takes
exclusively to replace it (tasks/join.yml).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .eventlog import EventLog

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
KIT = "kit"
KIT_LOCK = "kit.lock"  # tasks/join.yml takes it exclusively to replace the kit
WORKERS = 8  # machines configured at once
POLL_S = 1.0  # how often requests that arrive during a join are looked for
# Ansible's own strategy (Mitogen is the operator's, not the controller's).
ANSIBLE_ENV = {"ANSIBLE_STRATEGY": "linear", "ANSIBLE_NOCOLOR": "1",
               "ANSIBLE_RETRY_FILES_ENABLED": "0", "ANSIBLE_STDOUT_CALLBACK": "default"}


def launched_nodes(inventory: dict[str, Any]) -> dict[str, str]:
    """The kit inventory's nodes in launch-terminate mode, and the address each is reached at."""
    hosts = (inventory.get("all") or {}).get("hosts") or {}
    return {name: str((hv or {}).get("ansible_host") or name) for name, hv in hosts.items()
            if ((hv or {}).get("metalslurm_power") or {}).get("mode") == "launch-terminate"}


def sshd_answers(address: str, deadline: float, sleep: Callable[[float], None] = time.sleep,
                 port: int = 22) -> bool:
    """Whether the new machine's sshd takes a connection before ``deadline`` (it boots)."""
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, port), timeout=2):
                return True
        except OSError:
            sleep(1)
    return False


def node_states(node: str, run: Callable[..., Any] = subprocess.run) -> list[str]:
    """The node's states as sinfo prints them (with its flags: ``idle#``), [] if unknown."""
    proc = run(["sinfo", "--noheader", "--Node", f"--nodes={node}", "--format=%T"],
               capture_output=True, text=True, check=False, timeout=30)
    return proc.stdout.split() if proc.returncode == 0 else []


def registered(node: str, run: Callable[..., Any] = subprocess.run) -> bool:
    """Whether slurmctld has the node up: registered and responding, no longer powering up."""
    states = node_states(node, run)
    return bool(states) and not any(c in state for state in states for c in "#~*%!")


def powering_up(node: str, run: Callable[..., Any] = subprocess.run) -> bool:
    """Whether slurmctld has the node powering up (a resume under way)."""
    return any("#" in state for state in node_states(node, run))


def _remove(path: Path) -> str | None:
    """Remove a request entry whatever it is, never following a link; why not, or None."""
    try:
        if stat.S_ISDIR(path.lstat().st_mode):
            if not shutil.rmtree.avoids_symlink_attacks:
                return "a directory, and this platform's rmtree could follow links in it"
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot remove the request: {exc}"
    return None


def take_requests(requests: Path, allowed: Collection[str] | None, log: Callable[..., None],
                  now: Callable[[], float] = time.time) -> list[tuple[str, float]]:
    """The requested nodes of ``allowed`` (None: any node name), each with when it was
    asked (its file's time, no earlier than ``now() - 1 day``, no later than now), each
    request removed as it is taken; others refused (and removed). A name that is not a
    node name is logged as its repr."""
    nodes = []
    try:
        entries = sorted(requests.iterdir())
    except OSError:
        return []
    for entry in entries:
        name = entry.name
        try:
            info = entry.lstat()
        except OSError:
            continue
        shown = name if NAME.match(name) else repr(name)[:66]
        error = _remove(entry)
        if error:
            log("join_refused", node=shown, error=error)
            continue
        if not stat.S_ISREG(info.st_mode) or not NAME.match(name) or \
                (allowed is not None and name not in allowed):
            log("join_refused", node=shown,
                error="not an elastic node in launch-terminate mode of this cluster"
                if stat.S_ISREG(info.st_mode) else "not a plain file")
            continue
        t = now()
        nodes.append((name, min(max(info.st_mtime, t - 86400), t)))
    return nodes


def playbook_argv(join_dir: Path, node: str) -> list[str]:
    kit = join_dir / KIT
    return ["ansible-playbook", "-i", str(kit / "inventory.yml"), str(kit / "ansible/site.yml"),
            "--limit", node, "-e", "slurm_compute_join=true",
            # Each machine is new: its host key is taken on first use, into its own file.
            "-e", "ansible_ssh_common_args='-o UserKnownHostsFile="
                  f"{join_dir}/known_hosts.d/{node} -o StrictHostKeyChecking=accept-new'"]


def join_one(join_dir: Path, node: str, address: str, timeout: float,
             resume_fail: Sequence[str], log: Callable[..., None],
             run: Callable[..., Any] = subprocess.run,
             answers: Callable[[str, float], bool] = sshd_answers,
             asked: float | None = None) -> bool:
    """Configure ``node`` once its machine's sshd answers, within ``timeout`` seconds of
    ``asked`` (its request's time; now if None); on failure hand it to ResumeFailProgram.
    True when it joined: the run ended well and slurmctld has the node up (a run that set
    the node aside as powered down changed nothing: a failure)."""
    (join_dir / "known_hosts.d").mkdir(mode=0o700, exist_ok=True)
    (join_dir / "known_hosts.d" / node).unlink(missing_ok=True)
    logs = join_dir / "logs"
    logs.mkdir(mode=0o700, exist_ok=True)
    # The request waited (for this program to start, or for others) before it was taken.
    waited = max(time.time() - asked, 0.0) if asked is not None else 0.0
    start = time.monotonic() - waited
    log("join_start", node=node, waited_s=round(waited, 1))
    env = {**os.environ, **ANSIBLE_ENV, "ANSIBLE_CONFIG": str(join_dir / KIT / "ansible"
                                                              / "ansible.cfg")}
    booted = answers(address, start + timeout)
    log("join_booted", node=node, ok=booted, duration_s=round(time.monotonic() - start, 1))
    with open(logs / f"{node}.log", "w") as out:
        try:
            if not booted:
                raise TimeoutError(f"its sshd ({address}:22) did not answer in {timeout:.0f}s")
            proc = run(playbook_argv(join_dir, node), stdout=out, stderr=subprocess.STDOUT,
                       env=env, cwd=join_dir / KIT / "ansible",
                       timeout=max(start + timeout - time.monotonic(), 1), check=False)
            ok, why = proc.returncode == 0, f"ansible-playbook exit {proc.returncode}"
            if ok and not registered(node, run):
                ok, why = False, "the configure ended but slurmctld does not have the node up"
        except subprocess.TimeoutExpired:
            ok, why = False, f"not joined in {timeout:.0f}s"
        except (OSError, TimeoutError) as exc:
            ok, why = False, str(exc)
    duration = round(time.monotonic() - start, 1)
    if ok:
        log("join_end", node=node, ok=True, duration_s=duration)
        return True
    log("join_end", node=node, ok=False, duration_s=duration,
        error=f"{why} (see {logs / (node + '.log')})")
    run([*resume_fail, node], check=False, timeout=600)
    return False


def fail_requests(requests: Path, resume_fail: Sequence[str], why: str,
                  log: Callable[..., None], run: Callable[..., Any] = subprocess.run) -> int:
    """Nothing can be joined (no kit to read): every request taken and its node handed to
    ResumeFailProgram at once, rather than left to wait out ResumeTimeout."""
    nodes = [n for n, _ in take_requests(requests, None, log)]
    for node in nodes:
        log("join_end", node=node, ok=False, duration_s=0.0, error=why)
        run([*resume_fail, node], check=False, timeout=600)
    return 2


def serve(requests: Path, join_dir: Path, launched: dict[str, str], timeout: float,
          resume_fail: Sequence[str], log: Callable[..., None],
          join: Callable[..., bool] = join_one, sleep: Callable[[float], None] = time.sleep,
          resuming: Callable[[str], bool] = powering_up) -> bool:
    """Join the requested machines, taking the requests that arrive meanwhile, until none is
    left; whether every one joined.

    A node asked for again while its join runs: a join that succeeds answers both requests.
    One that fails hands the node to ResumeFailProgram, which returns it to the pool; Slurm
    may resume it again at once (its requeued job), and that resume's request can arrive
    before the failed join has ended here. So after a failure the node is joined again when
    slurmctld has it powering up (a new resume), else the request was the failed one's."""
    running: dict[str, Future[bool]] = {}
    again: dict[str, float] = {}  # asked again while its join ran: when
    results: list[bool] = []
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:

        def start(node: str, asked: float) -> None:
            running[node] = pool.submit(join, join_dir, node, launched[node], timeout,
                                        resume_fail, log, asked=asked)

        while True:
            for node, asked in take_requests(requests, set(launched), log):
                if node in running:
                    again[node] = asked
                else:
                    start(node, asked)
            for node in [n for n, f in running.items() if f.done()]:
                ok = running.pop(node).result()
                results.append(ok)
                if node in again and not ok and resuming(node):
                    start(node, again[node])
                again.pop(node, None)
            if not running:
                return all(results)
            sleep(POLL_S)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="metalslurm-join", description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=Path, required=True,
                   help="the directory SlurmUser's resume leaves a request per node in")
    p.add_argument("--log", type=Path, required=True,
                   help="the power log (JSON lines) this program's events are appended to")
    p.add_argument("--join-dir", type=Path, required=True,
                   help="the join kit's directory (root only)")
    p.add_argument("--timeout", type=float, required=True,
                   help="seconds a node's join may take from its request (inside ResumeTimeout)")
    p.add_argument("--resume-fail", required=True,
                   help="the command that powers a node off and returns it (as SlurmUser)")
    args = p.parse_args(argv)
    events = EventLog(args.log, program="join")

    def log(event: str, **fields: Any) -> None:
        events.event(event, phase="join", **fields)

    resume_fail = args.resume_fail.split()
    args.join_dir.mkdir(mode=0o700, exist_ok=True)
    lock = os.open(args.join_dir / KIT_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
                   | os.O_CLOEXEC, 0o600)
    try:
        # The configure replaces the kit only while no join reads it.
        fcntl.flock(lock, fcntl.LOCK_SH)
        import yaml  # python3-yaml: the kit's inventory

        try:
            inventory = yaml.safe_load((args.join_dir / KIT / "inventory.yml").read_text())
            launched = launched_nodes(inventory if isinstance(inventory, dict) else {})
        except (OSError, yaml.YAMLError) as exc:
            return fail_requests(args.requests, resume_fail,
                                 f"the join kit's inventory cannot be read: {exc}", log)
        joined = serve(args.requests, args.join_dir, launched, args.timeout, resume_fail, log)
    finally:
        os.close(lock)
    return 0 if joined else 1


if __name__ == "__main__":
    sys.exit(main())
