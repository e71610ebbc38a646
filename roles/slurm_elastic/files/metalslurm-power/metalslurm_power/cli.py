"""The shared command line of the four programs (after slurm-gcp's suspend.py).

slurmctld runs ``ResumeProgram HOSTLIST`` (and the others) and waits for it: each program
checks its arguments, forks a detached worker (double fork + setsid, all output to the log)
and returns 0 at once. The worker expands the hostlist and does the work.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence

from . import actions
from .config import DEFAULT_CONFIG, ConfigError, PowerConfig, load_config
from .eventlog import EventLog
from .slurm import Slurm

PROGRAMS: dict[str, tuple[Callable[[actions.Context, Sequence[str]], int], str]] = {
    "resume": (actions.resume, "power on nodes (slurm.conf ResumeProgram)"),
    "suspend": (actions.suspend, "power off nodes (slurm.conf SuspendProgram)"),
    "resume-fail": (actions.resume_fail,
                    "power off nodes that failed to resume and return them to the pool "
                    "(slurm.conf ResumeFailProgram)"),
    "reconcile": (actions.reconcile,
                  "stop machines on without Slurm needing them; return nodes stuck powering up "
                  "(systemd timer)"),
}


def parser(program: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"metalslurm-{program}", description=PROGRAMS[program][1])
    if program == "reconcile":
        p.add_argument("hostlist", nargs="?", default="",
                       help="nodes to check (Slurm hostlist); default: every node in the config")
        p.add_argument("--orphan-after", type=_seconds, default=None, metavar="SECONDS",
                       help="stop a machine on while Slurm holds its node powered down after "
                            "this long, not the config's orphan_after (the playbook: 0 for "
                            "the machines it has just configured)")
    else:
        p.add_argument("hostlist", nargs="?", default="",
                       help="nodes, as a Slurm hostlist (gpu-[001-004]); empty: nothing to do")
    p.add_argument("--config", default=os.environ.get("METALSLURM_POWER_CONFIG", DEFAULT_CONFIG),
                   help=f"power config file (default {DEFAULT_CONFIG}, or "
                        "$METALSLURM_POWER_CONFIG)")
    p.add_argument("--dry-run", action="store_true",
                   help="log what would be done, power nothing, change nothing in Slurm")
    p.add_argument("--foreground", action="store_true",
                   help="do the work in this process (debugging, systemd timer)")
    return p


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (0 or more)")
    return value


def detach() -> bool:
    """Double fork. Returns False in the original process, True in the detached worker."""
    pid = os.fork()
    if pid > 0:
        os.waitpid(pid, 0)  # the intermediate child exits at once
        return False
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    os.chdir("/")
    return True


def redirect_output(log_file: str) -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    try:
        out = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
    except OSError:
        out = os.open(os.devnull, os.O_WRONLY)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)


def resume_jobs() -> list[dict[str, object]] | None:
    """The jobs waiting for this resume: slurmctld (22.05+) writes them to $SLURM_RESUME_FILE
    and deletes the file when the program returns, so read it before detaching."""
    path = os.environ.get("SLURM_RESUME_FILE")
    if not path:
        return None
    try:
        with open(path) as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return [{"job_id": job.get("job_id"), "nodes": job.get("nodes_resume")}
            for job in data.get("jobs", []) if isinstance(job, dict)]


def work(program: str, config: PowerConfig, log: EventLog, hostlist: str, dry_run: bool,
         summary: Callable[[dict[str, object]], None] | None = None) -> int:
    start = time.monotonic()
    slurm = Slurm(log, config.slurm_bin, dry_run=dry_run)
    ctx = actions.Context(config=config, log=log, slurm=slurm, dry_run=dry_run,
                          summary=summary)
    if program == "reconcile" and not hostlist.strip():
        nodes = sorted(config.nodes)
    else:
        nodes = slurm.expand(hostlist)
    log.event("worker_start", phase="program", nodes=nodes, count=len(nodes))
    if not nodes:
        log.event("program_end", phase="program", ok=True, rc=0, note="empty hostlist: no-op",
                  duration_s=round(time.monotonic() - start, 3))
        return 0
    rc = PROGRAMS[program][0](ctx, nodes)
    log.event("program_end", phase="program", ok=rc == 0, rc=rc, nodes=nodes,
              duration_s=round(time.monotonic() - start, 3))
    return rc


def main(program: str, argv: Sequence[str] | None = None) -> int:
    invoked = time.time()
    args = parser(program).parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        # Nothing else to log to: stderr reaches slurmctld's log.
        print(f"metalslurm-{program}: {exc}", file=sys.stderr)
        return 2
    dry_run = args.dry_run or config.dry_run
    if getattr(args, "orphan_after", None) is not None:
        config = dataclasses.replace(config, orphan_after=args.orphan_after)
    log = EventLog(config.log_file, program, dry_run=dry_run)
    log.event("invoked", phase="program", hostlist=args.hostlist, argv=sys.argv[1:],
              invoked_t=round(invoked, 4), ppid=os.getppid(), jobs=resume_jobs())
    if not args.foreground and not detach():
        return 0
    if not args.foreground:
        redirect_output(str(config.log_file))
        log.event("detached", phase="program", sid=os.getsid(0))
    # In the foreground (the timer, the playbook) a reconcile's summary is its one line of
    # output: what it powered off, returned and resumed.
    summary = None if not args.foreground else (
        lambda s: print(json.dumps(s, sort_keys=True), flush=True))
    try:
        rc = work(program, config, log, args.hostlist, dry_run, summary)
    except BaseException as exc:
        log.event("crash", phase="program", ok=False, error=f"{type(exc).__name__}: {exc}",
                  traceback=traceback.format_exc())
        rc = 1
    if not args.foreground:
        os._exit(rc)
    return rc


# Console scripts (pyproject.toml [project.scripts]): one entry function per program.

def resume_main() -> int:
    return main("resume")


def suspend_main() -> int:
    return main("suspend")


def resume_fail_main() -> int:
    return main("resume-fail")


def reconcile_main() -> int:
    return main("reconcile")
