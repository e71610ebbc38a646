"""Evidence of a failed e2e test, saved before its cluster is removed (the hooks in
conftest.py call it).

A failing e2e test leaves what explains it under .metalslurm/e2e-evidence/<test>/: Slurm's
view (sinfo, squeue, scontrol show node/job, sacct), the power programs' log and state,
the tail of slurmctld's and each compute node's slurmd log, the containers podman knows.
The terminal summary lists the directories, and .ci/run prints their files when the run
fails (a CI machine is gone afterwards).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from tests.e2e.cluster import POWER_LOG, REPO, console

EVIDENCE = REPO / ".metalslurm" / "e2e-evidence"
# Each pytest run saves under its own directory: 'make test' runs two side by side.
RUN_EVIDENCE = EVIDENCE / f"run-{os.getpid()}"
CONTROLLER_EVIDENCE = {
    "sinfo.txt": "sinfo --Node --long; echo; sinfo --long",
    "squeue.txt": "squeue --all --format='%i %P %j %u %T %M %l %D %R %r'",
    "scontrol-show-node.txt": "scontrol show node",
    "scontrol-show-job.txt": "scontrol show job",
    "sacct.txt": "sacct --allusers --duplicates --starttime=now-3hours --parsable2 "
                 "--format=JobID,JobName,User,Partition,State,ExitCode,Start,End,NodeList,Reason",
    "sdiag.txt": "sdiag",
    "power-log.txt": f"tail -n 300 {POWER_LOG} 2>&1",
    "power-state.json": "cat /var/log/slurm/metalslurm-power.state.json 2>&1",
    "slurmctld-log.txt": "tail -n 400 /var/log/slurm/slurmctld.log 2>&1",
    "reconciler.txt": "systemctl status --no-pager metalslurm-power-reconcile.timer "
                      "metalslurm-power-reconcile.service 2>&1; "
                      "journalctl --no-pager -n 100 -u metalslurm-power-reconcile.service 2>&1",
}
NODE_EVIDENCE = "tail -n 150 /var/log/slurm/slurmd.log 2>&1; echo; systemctl is-active slurmd"


def podman_output(*args: str, timeout: int = 30) -> str:
    """What ``podman args`` printed, or why it could not run: saving evidence never fails."""
    try:
        proc = subprocess.run(["podman", *args], capture_output=True, text=True,
                              timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"podman {' '.join(args[:3])}...: {exc}\n"
    return proc.stdout + proc.stderr


def console_output(container: str, command: str) -> str:
    """What ``command`` printed on a node (tests.e2e.cluster.console), or why it could not
    run: saving evidence never fails."""
    try:
        proc = console(container, command, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{command[:40]}...: {exc}\n"
    return proc.stdout + proc.stderr


def save_evidence(nodeid: str) -> Path:
    """Write what the clusters that run now look like into one directory for ``nodeid``."""
    name = nodeid.replace("/", "_").replace("::", "__").replace("[", "_").replace("]", "")
    out = RUN_EVIDENCE / f"{time.strftime('%H%M%S')}-{name}"[:200]
    out.mkdir(parents=True, exist_ok=True)
    containers = podman_output("ps", "-a", "--format", "{{.Names}}\t{{.Status}}\t{{.Labels}}")
    (out / "podman-ps.txt").write_text(containers)
    running = json.loads(podman_output("ps", "--format", "json") or "[]")
    for container in running:
        labels = container.get("Labels") or {}
        name = container["Names"][0]
        if "metalslurm.cluster" not in labels:
            continue
        if name.endswith("-ctl"):
            for file_name, command in CONTROLLER_EVIDENCE.items():
                (out / f"{name}-{file_name}").write_text(console_output(name, command))
        else:
            (out / f"{name}-slurmd.txt").write_text(console_output(name, NODE_EVIDENCE))
    return out


def still_running(run_dir: Path) -> bool:
    """Whether the pytest run that saved into ``run_dir`` (run-<pid>) still runs."""
    pid = run_dir.name.removeprefix("run-")
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# Set by tests/schedule.sh, which removes the evidence once, before its runs: a pytest run
# it starts after another has ended must not remove that one's (seen: lane b's failure had
# no evidence left by the time .ci/run printed it, the rented servers' run had removed it).
SCHEDULED = "METALSLURM_E2E_SCHEDULED"


def remove_finished_runs() -> None:
    """An earlier run's evidence goes; a run beside this one keeps its own, and so does
    every run of the same schedule."""
    if os.environ.get(SCHEDULED):
        return
    for run_dir in EVIDENCE.glob("*"):
        if not still_running(run_dir):
            shutil.rmtree(run_dir, ignore_errors=True)
