#!/usr/bin/env python3
"""Talk to the cluster's Slurm REST API (slurmrestd) with your JWT token: list your jobs,
submit one, wait for it, cancel it. Needs only ``requests``.

Get a token on a node of the cluster, then use it from anywhere on the private network::

    export $(scontrol token lifespan=3600)          # sets SLURM_JWT
    export SLURMRESTD_URL=http://<REST host>:6820    # the controller (or the login node)
    python3 slurm_rest_client.py jobs
    python3 slurm_rest_client.py submit train.sbatch --wait
    python3 slurm_rest_client.py cancel 1234

The user name sent with the token is ``$SLURM_USER`` or ``$USER``; slurmctld checks that
the token was made for that user. The API version is the newest the server offers among
those this client knows (Slurm 22.05's v0.0.38 to 24.11's v0.0.42).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import requests

# Newest first: 24.11 serves v0.0.42 (and .41, .40), 23.11 v0.0.40, 22.05 v0.0.38.
API_VERSIONS = ("v0.0.42", "v0.0.41", "v0.0.40", "v0.0.38")
# slurmrestd answers 401 to a request without a user name or token; slurmctld checks the
# token itself, and its refusal (expired, signed with another key, made for another user)
# comes back as 511, Slurm's "Protocol authentication error" (24.11; 22.05 answers 500).
REFUSED = (401, 511)
TOKEN_REFUSED = ("the token was refused (missing, expired, made for another user, or not "
                 "this cluster's): make a new one with 'scontrol token'")
DONE = {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL",
        "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT"}


class RestError(Exception):
    """What went wrong, in one sentence a user can act on."""


class SlurmRest:
    def __init__(self, url: str, user: str, token: str, timeout: float = 30) -> None:
        self.url = url.rstrip("/")
        self.session = requests.Session()
        self.session.headers.update({"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": token})
        self.timeout = timeout
        self.user = user
        self.api = self._discover()

    def _call(self, method: str, path: str, missing_ok: bool = False,
              **kwargs: Any) -> dict[str, Any]:
        try:
            reply = self.session.request(method, f"{self.url}{path}", timeout=self.timeout,
                                         **kwargs)
        except requests.RequestException as exc:
            raise RestError(f"cannot reach {self.url}: {exc}") from None
        if reply.status_code == 404 and missing_ok:
            return {}
        if reply.status_code in REFUSED:
            raise RestError(TOKEN_REFUSED)
        try:
            body = reply.json()
        except ValueError:
            raise RestError(f"{method} {path}: HTTP {reply.status_code}, not JSON") from None
        errors = [e.get("error") or e.get("description") or str(e)
                  for e in body.get("errors") or []]
        if reply.status_code >= 400 or errors:
            hint = (" (Slurm 22.05 answers a token slurmctld refuses this way: "
                    f"{TOKEN_REFUSED})" if reply.status_code == 500 else "")
            raise RestError(f"{method} {path}: HTTP {reply.status_code}: "
                            f"{'; '.join(map(str, errors)) or reply.reason}{hint}")
        return body

    def _discover(self) -> str:
        for version in API_VERSIONS:
            if self._call("GET", f"/slurm/{version}/ping", missing_ok=True):
                return version
        raise RestError(f"{self.url} serves none of the API versions {', '.join(API_VERSIONS)}")

    @staticmethod
    def state(job: dict[str, Any]) -> str:
        """A job's state: a word in v0.0.38, a list of flags from v0.0.40 on."""
        value = job.get("job_state")
        return value[0] if isinstance(value, list) and value else str(value)

    def jobs(self, everyone: bool = False) -> list[dict[str, Any]]:
        jobs = self._call("GET", f"/slurm/{self.api}/jobs")["jobs"]
        return [j for j in jobs if everyone or j.get("user_name") == self.user]

    def job(self, job_id: int) -> dict[str, Any]:
        return self._call("GET", f"/slurm/{self.api}/job/{job_id}")["jobs"][0]

    def submit(self, script: str, name: str, cwd: str) -> int:
        path = "/usr/local/bin:/usr/bin:/bin"
        if self.api == "v0.0.38":
            payload: dict[str, Any] = {"script": script, "job": {
                "name": name, "current_working_directory": cwd,
                "environment": {"PATH": path}}}
        else:
            payload = {"job": {"script": script, "name": name,
                               "current_working_directory": cwd,
                               "environment": [f"PATH={path}"]}}
        return int(self._call("POST", f"/slurm/{self.api}/job/submit", json=payload)["job_id"])

    def cancel(self, job_id: int) -> None:
        body = self._call("DELETE", f"/slurm/{self.api}/job/{job_id}")
        # From v0.0.40 on, a refused signal is HTTP 200 with an error per job in 'status'.
        refused = [(s.get("error") or {}).get("message") for s in body.get("status") or []
                   if (s.get("error") or {}).get("code")]
        if refused:
            raise RestError(f"job {job_id} was not cancelled: {'; '.join(map(str, refused))}")

    def wait(self, job_id: int, timeout: float, every: float = 2) -> str:
        deadline = time.monotonic() + timeout
        while True:
            state = self.state(self.job(job_id))
            if state in DONE:
                return state
            if time.monotonic() > deadline:
                raise RestError(f"job {job_id} is still {state} after {timeout:.0f} s")
            time.sleep(every)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("SLURMRESTD_URL", ""),
                        help="slurmrestd's URL (default $SLURMRESTD_URL)")
    parser.add_argument("--user", default=os.environ.get("SLURM_USER")
                        or os.environ.get("USER", ""),
                        help="the user the token was made for (default $SLURM_USER or $USER)")
    sub = parser.add_subparsers(dest="command", required=True)
    jobs = sub.add_parser("jobs", help="list your jobs (--all: everyone's you may see)")
    jobs.add_argument("--all", action="store_true")
    submit = sub.add_parser("submit", help="submit a batch script")
    submit.add_argument("script", type=Path)
    submit.add_argument("--name", default="")
    submit.add_argument("--chdir", default="", help="working directory (default $HOME)")
    submit.add_argument("--wait", action="store_true", help="wait until it ends")
    submit.add_argument("--timeout", type=float, default=600)
    wait = sub.add_parser("wait", help="wait for a job to end; prints its final state")
    wait.add_argument("job_id", type=int)
    wait.add_argument("--timeout", type=float, default=600)
    cancel = sub.add_parser("cancel", help="cancel a job")
    cancel.add_argument("job_id", type=int)
    return parser


def _script_problem(path: Path) -> tuple[str, str]:
    """The batch script's text, or why it cannot be one (one sentence)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        return "", f"script {path}: cannot read it as text ({exc}); give a batch script file"
    if not text.startswith("#!"):
        return "", (f"script {path}: does not start with '#!' (e.g. #!/bin/bash), which "
                     "Slurm needs")
    return text, ""


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    token = os.environ.get("SLURM_JWT", "")
    missing = [what for what, value in (("--url or $SLURMRESTD_URL", args.url),
                                        ("$SLURM_JWT (export $(scontrol token))", token),
                                        ("--user or $USER", args.user)) if not value]
    if missing:
        print(f"slurm_rest_client: set {', '.join(missing)}", file=sys.stderr)
        return 2
    script, problem = _script_problem(args.script) if args.command == "submit" else ("", "")
    if problem:
        print(f"slurm_rest_client: {problem}", file=sys.stderr)
        return 2
    try:
        rest = SlurmRest(args.url, args.user, token)
        if args.command == "jobs":
            for job in rest.jobs(everyone=args.all):
                print(job["job_id"], job.get("user_name"), rest.state(job), job.get("name"))
        elif args.command == "submit":
            job_id = rest.submit(script, args.name or args.script.name,
                                 args.chdir or f"/home/{args.user}")
            print(job_id)
            if args.wait:
                print(rest.wait(job_id, args.timeout))
        elif args.command == "wait":
            print(rest.wait(args.job_id, args.timeout))
        elif args.command == "cancel":
            rest.cancel(args.job_id)
    except RestError as exc:
        print(f"slurm_rest_client: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
