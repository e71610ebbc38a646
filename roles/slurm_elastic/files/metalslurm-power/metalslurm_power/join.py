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
and removed; the file's content is never read.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .config import DEFAULT_CONFIG, ConfigError, load_config
from .eventlog import EventLog

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
KIT = "kit"
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


def registered(node: str, run: Callable[..., Any] = subprocess.run) -> bool:
    """Whether slurmctld has the node up: registered and responding, no longer powering up."""
    proc = run(["sinfo", "--noheader", "--Node", f"--nodes={node}", "--format=%T"],
               capture_output=True, text=True, check=False, timeout=30)
    states = proc.stdout.split() if proc.returncode == 0 else []
    return bool(states) and not any(c in state for state in states for c in "#~*%!")


def take_requests(requests: Path, allowed: set[str],
                  log: Callable[..., None]) -> list[str]:
    """The requested nodes (each request removed as it is taken); others refused."""
    nodes = []
    for entry in sorted(requests.iterdir()) if requests.is_dir() else []:
        name = entry.name
        try:
            entry.unlink()
        except OSError as exc:
            log("join_refused", node=name[:64], error=f"cannot remove the request: {exc}")
            continue
        if not NAME.match(name) or name not in allowed:
            log("join_refused", node=name[:64],
                error="not an elastic node in launch-terminate mode of this cluster")
            continue
        nodes.append(name)
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
             answers: Callable[[str, float], bool] = sshd_answers) -> bool:
    """Configure ``node`` once its machine's sshd answers; on failure hand it to
    ResumeFailProgram. True when it joined: the run ended well and slurmctld has the node
    up (a run that set the node aside as powered down changed nothing: a failure)."""
    (join_dir / "known_hosts.d").mkdir(mode=0o700, exist_ok=True)
    (join_dir / "known_hosts.d" / node).unlink(missing_ok=True)
    logs = join_dir / "logs"
    logs.mkdir(mode=0o700, exist_ok=True)
    start = time.monotonic()
    log("join_start", node=node)
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


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="metalslurm-join", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=os.environ.get("METALSLURM_POWER_CONFIG", DEFAULT_CONFIG))
    p.add_argument("--join-dir", type=Path, required=True,
                   help="the join kit's directory (root only)")
    p.add_argument("--timeout", type=float, required=True,
                   help="seconds a node's configure may take (inside ResumeTimeout)")
    p.add_argument("--resume-fail", required=True,
                   help="the command that powers a node off and returns it (as SlurmUser)")
    args = p.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"metalslurm-join: {exc}", file=sys.stderr)
        return 2
    events = EventLog(config.log_file, program="join")

    def log(event: str, **fields: Any) -> None:
        events.event(event, phase="join", **fields)

    if config.join_requests is None:
        log("join_refused", error="the power config has no join requests directory")
        return 2
    import yaml  # python3-yaml: the kit's inventory

    inventory = yaml.safe_load((args.join_dir / KIT / "inventory.yml").read_text())
    launched = launched_nodes(inventory)
    nodes = take_requests(config.join_requests, set(launched), log)
    if not nodes:
        return 0
    resume_fail = args.resume_fail.split()
    with ThreadPoolExecutor(max_workers=min(8, len(nodes))) as pool:
        joined = list(pool.map(lambda n: join_one(args.join_dir, n, launched[n], args.timeout,
                                                  resume_fail, log), nodes))
    return 0 if all(joined) else 1


if __name__ == "__main__":
    sys.exit(main())
