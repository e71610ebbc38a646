"""The acceptance gate: nodes prove their GPUs, NVLink and InfiniBand before they take jobs.

One run, driven from the operator's machine over SSH to the controller (``Remote``):

1. Every node left in an earlier run's reservation (``metalslurm-accept-*``: a run that was
   stopped) and not drained is drained with the gate's reason prefix ("left untested by run
   <id>"), then the reservation is deleted: such a node is tested, never returned untested.
2. The nodes: those named, or every node drained with the gate's reason prefix
   (``metalslurm-accept:``). A node drained by anyone else is neither tested nor resumed.
3. A maintenance reservation on them (``metalslurm-accept-<run>``, root only, MAINT and
   IGNORE_JOBS): no user job starts there from now on; a running one ends first, since the
   gate's jobs are exclusive. Nodes the gate drained are resumed so that its jobs can run
   (they stay in the reservation); powered-down elastic nodes are powered up by Slurm for
   those jobs and go back to sleep after SuspendTime.
4. One job per node: ``dcgmi diag -r 2`` (quick) or ``-r 3`` (full), then nccl-tests'
   ``all_reduce_perf`` over the node's GPUs; each tool under ``timeout`` (a hang is killed at
   its limit and fails with "timed out").
5. Two-node jobs in rounds (infra/accept/pairing.py): ``all_reduce_perf`` across the pair with
   ``srun --mpi=pmix`` and the node's NCCL settings (``/etc/nccl.env``), then ``ib_write_bw``
   per HCA port from one node to the other; a failing pair's nodes meet known-good partners
   in the next round, which names the bad one.
6. Verdicts (infra/accept/verdicts.py) against the floors and the history; the figures are
   appended to it. Failing nodes are drained with the gate's prefix and the failed test's
   figure in the reason; the reservation is deleted, which returns the others.

Nothing the gate runs as root reads or writes a path a cluster user can write (``/shared``
is mode 1777, and with NFS's root_squash root on a node is not even root there):

- the job scripts go to ``sbatch`` on its standard input (Slurm keeps them with the job);
  their parameters are ``GATE_*`` variables;
- each job writes its results on its own node's disk, under ``LOCAL_DIR`` (root only, 0700,
  made by the job); as soon as a job has ended, ``srun`` in the reservation over its nodes
  prints them back (``COLLECT_PROGRAM``, short lines: srun passes a task's lines whole);
- the history is ``HISTORY_PATH`` on the controller's disk, root's, 0600, read and appended
  by ``HISTORY_PROGRAM``, which refuses a link, FIFO, device or file of several links and
  replaces the file through a new one in the same directory, synced, renamed over it.

A Slurm read that feeds a decision (``sinfo``, ``squeue``, ``scontrol show``) is retried and
then stops the run; it is never taken for an empty answer. A run that stops half-way
(an error, Ctrl-C) cancels its jobs and drains every node under test without a verdict
("run <id> interrupted, not judged"), and leaves its reservation for the next run (step 1).
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import hostlist

from infra.accept.pairing import BAD, GOOD, Pair, Pairing
from infra.accept.parsers import (
    HEALTH_CHECKS,
    HealthRun,
    ToolOutputError,
    parse_all_reduce_perf,
    parse_dcgmi_diag,
    parse_health_json,
    parse_ib_write_bw,
)
from infra.accept.remote import Remote, RemoteError, read_retried
from infra.accept.verdicts import (
    PASS_FAIL_UNIT,
    REASON_PREFIX,
    Measurement,
    Verdict,
    drain_reason,
    judge,
    judge_check,
    read_history_text,
)
from infra.stack.accept import LEVELS, LOCAL_DIR, GateSettings

RESERVATION_PREFIX = "metalslurm-accept"
TIMED_OUT = {124, 137}  # timeout(1)'s status, and a KILL at its limit
HEALTH_TIMEOUT = 120  # the node script's limit on each metalslurm-health run
# The history, on the controller's own disk (LOCAL_DIR: infra/stack/accept.py).
HISTORY_PATH = f"{LOCAL_DIR}/history.jsonl"
READ_TRIES = 10  # a Slurm read that fails is tried again this often, the poll interval apart
COLLECT_TIMEOUT = 900  # s: srun reading results back waits for its nodes (a resume at worst)
COLLECT_LINE = 768  # characters of a result line: under slurmstepd's 1024-byte message
# sinfo's words for a node that cannot run a step now (and "*": not responding)
UNREACHABLE = ("down", "fail", "drain")
# squeue's reasons for a job that will not start by itself: a launch on its node failed and
# Slurm requeued it held, or someone held it. The gate cancels it; its tests did not run.
HELD = re.compile(r"launch failed requeued held|JobHeld|held", re.IGNORECASE)

class GateError(RuntimeError):
    """The gate cannot run or go on (the message says what to do)."""


@dataclass(frozen=True)
class GateNode:
    name: str
    address: str
    gpu_type: str
    gpus: int


@dataclass
class GateResult:
    run: str
    tested: list[str]
    skipped: dict[str, str]  # node -> why it was left alone
    verdicts: list[Verdict]
    drained: dict[str, str]  # node -> the reason it keeps
    passed: list[str]
    rounds: int
    jobs: int
    seconds: float
    history_unreadable: int = 0


# The jobs' first lines: the results' directory on the node's own disk, root's alone (0700
# on LOCAL_DIR, which install(1) sets on an existing one too), and the script's own output
# there. sbatch's -o is /dev/null: Slurm writes nothing anywhere else.
_RESULTS_DIR = r"""set -u
out=@LOCAL_DIR@/runs/$GATE_RUN/$GATE_DIR
install -d -m 0700 @LOCAL_DIR@ && install -d -m 0700 "$out" && cd "$out" || exit 1
exec > job.log 2>&1
if [ -r /etc/nccl.env ]; then set -a; . /etc/nccl.env; set +a; fi
"""

NODE_SCRIPT = r"""#!/bin/bash
# metalslurm acceptance gate: one node's own tests (given to sbatch by 'metalslurm accept').
@RESULTS_DIR@PATH=${GATE_PATH:+$GATE_PATH:}$PATH:/usr/local/sbin
run() {  # run NAME LIMIT COMMAND...: output, errors and exit status beside each other
    local name=$1 limit=$2; shift 2
    if ! command -v "$1" >/dev/null; then
        echo "$1 is not installed on $(hostname -s)" > "$name.err"; echo 127 > "$name.rc"
        return
    fi
    timeout -s KILL "$limit" "$@" > "$name.out" 2> "$name.err"; echo $? > "$name.rc"
}
health() {  # the GPUs' state as the health checker reads it: ECC, row remapping, Xids
    run "health_$1" @HEALTH_TIMEOUT@ metalslurm-health --json --only @HEALTH_CHECKS@
}
health before
run dcgm "$GATE_DCGM_TIMEOUT" dcgmi diag -r "$GATE_DCGM_LEVEL" -j
run nccl_1node "$GATE_NCCL_TIMEOUT" all_reduce_perf -b 1G -e 16G -f 2 -g "$GATE_GPUS"
health after
""".replace("@RESULTS_DIR@", _RESULTS_DIR).replace("@LOCAL_DIR@", LOCAL_DIR).replace(
    "@HEALTH_CHECKS@", ",".join(HEALTH_CHECKS)).replace("@HEALTH_TIMEOUT@", str(HEALTH_TIMEOUT))

# Its results are on the node the batch script runs on (the allocation's first node).
PAIR_SCRIPT = r"""#!/bin/bash
# metalslurm acceptance gate: two nodes' fabric tests (given to sbatch by 'metalslurm accept').
@RESULTS_DIR@a=$GATE_A b=$GATE_B a_address=$GATE_A_ADDRESS
PATH=${GATE_PATH:+$GATE_PATH:}$PATH
export PATH
srun --mpi=pmix -N2 --ntasks-per-node=1 -w "$a,$b" timeout -s KILL "$GATE_NCCL_TIMEOUT" \
    all_reduce_perf -b 1G -e 16G -f 2 -g "$GATE_GPUS" > nccl_pair.out 2> nccl_pair.err
echo $? > nccl_pair.rc
hcas=${GATE_HCAS:-$(srun -N1 -n1 -w "$a" --overlap ls /sys/class/infiniband 2>/dev/null)}
i=0
for hca in $hcas; do
    cuda=""
    if [ "$GATE_GPUDIRECT" = 1 ] && [ "$GATE_GPUS" -gt 0 ]; then
        cuda="--use_cuda=$((i % GATE_GPUS))"
    fi
    srun -N1 -n1 -w "$a" --overlap timeout -s KILL "$GATE_IB_TIMEOUT" ib_write_bw -d "$hca" \
        --report_gbits -s 8388608 -F $cuda > "ib_write_bw:$hca.server" 2>&1 &
    sleep 2
    srun -N1 -n1 -w "$b" --overlap timeout -s KILL "$GATE_IB_TIMEOUT" ib_write_bw -d "$hca" \
        --report_gbits -s 8388608 -F $cuda "$a_address" > "ib_write_bw:$hca.out" \
        2> "ib_write_bw:$hca.err"
    echo $? > "ib_write_bw:$hca.rc"
    wait
    i=$((i + 1))
done
""".replace("@RESULTS_DIR@", _RESULTS_DIR).replace("@LOCAL_DIR@", LOCAL_DIR)

# Run by srun on each node holding results (python3 -c PROGRAM RUN_DIR): every file under
# the run's directory as {relative path: text}, zlib'd and base64'd into lines "NODE + DATA"
# and a last "NODE = COUNT". slurmstepd passes a task's output on in messages of whole lines
# under 1024 bytes, so the lines of several nodes interleave but are never cut.
COLLECT_PROGRAM = r"""import base64, json, os, socket, sys, zlib
root = sys.argv[1]
node = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
files = {}
for top, _dirs, names in os.walk(root):
    for name in names:
        path = os.path.join(top, name)
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, errors="replace") as handle:
                files[os.path.relpath(path, root)] = handle.read()
data = base64.b64encode(zlib.compress(json.dumps(files).encode())).decode()
chunks = [data[i:i + @LINE@] for i in range(0, len(data), @LINE@)]
for chunk in chunks:
    print(node, "+", chunk)
print(node, "=", len(chunks))
""".replace("@LINE@", str(COLLECT_LINE))

# Run on the controller as root (python3 -c PROGRAM read|append PATH; append's text on
# stdin). Kept to the standard library of any python3 a node has.
HISTORY_PROGRAM = r'''"""The acceptance gate's history file.

"read PATH" prints it (nothing when there is none); "append PATH" adds standard input
to it. PATH must be a regular file with one link, owned by whoever runs this, in a directory
of theirs nobody else can write (made 0700 when missing): a symbolic link, FIFO, device,
directory or a file with more links is refused, never followed, read or replaced. An
append writes the old text and the new to a new file in the same directory, syncs it and
renames it over PATH, under a lock."""
import errno
import fcntl
import os
import secrets
import stat
import sys

KINDS = {stat.S_IFLNK: "a symbolic link", stat.S_IFIFO: "a FIFO",
         stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
         stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory"}


class Refused(Exception):
    pass


def check(path, st):
    kind = stat.S_IFMT(st.st_mode)
    if kind != stat.S_IFREG:
        raise Refused(f"{path} is {KINDS.get(kind, 'not a regular file')}")
    if st.st_nlink != 1:
        raise Refused(f"{path} has {st.st_nlink} hard links")
    if st.st_uid != os.geteuid():
        raise Refused(f"{path} belongs to uid {st.st_uid}")


def open_directory(directory, create):
    if create:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Refused(f"{directory} is not a directory (a symbolic link?)") from None
        raise
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        os.close(fd)
        raise Refused(f"{directory} can be written by others than uid {os.geteuid()}")
    if create:
        os.fchmod(fd, 0o700)
    return fd


def read_existing(dfd, name, path):
    try:
        check(path, os.stat(name, dir_fd=dfd, follow_symlinks=False))
    except FileNotFoundError:
        return b""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                 dir_fd=dfd)
    try:
        check(path, os.fstat(fd))
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def append(dfd, name, path, text):
    fcntl.flock(dfd, fcntl.LOCK_EX)
    old = read_existing(dfd, name, path)
    if old and not old.endswith(b"\n"):
        old += b"\n"
    temporary = f".{name}.{secrets.token_hex(8)}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=dfd)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(old + text)
            handle.flush()
            os.fsync(handle.fileno())
        os.rename(temporary, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        os.unlink(temporary, dir_fd=dfd)
        raise
    os.fsync(dfd)


def main(argv):
    if len(argv) != 2 or argv[0] not in ("read", "append") or not os.path.isabs(argv[1]):
        print("usage: read|append ABSOLUTE-PATH", file=sys.stderr)
        return 2
    path = argv[1]
    directory, name = os.path.split(path)
    try:
        dfd = open_directory(directory, create=argv[0] == "append")
        if dfd is None:
            return 0
        try:
            if argv[0] == "read":
                sys.stdout.buffer.write(read_existing(dfd, name, path))
            else:
                append(dfd, name, path, sys.stdin.buffer.read())
        finally:
            os.close(dfd)
    except Refused as exc:
        print(f"{exc}: refused, neither followed, read nor replaced; move it away and run "
              "again", file=sys.stderr)
        return 1
    return 0


sys.exit(main(sys.argv[1:]))
'''


def history_command(action: str) -> str:
    """The controller's command that reads (``read``) or appends to (``append``) the
    history with :data:`HISTORY_PROGRAM`."""
    return f"python3 -c {shlex.quote(HISTORY_PROGRAM)} {action} {HISTORY_PATH}"


def read_history_file(remote: Remote) -> str:
    """The history's text (empty when there is none yet); a failure to read it is an error,
    never an empty history."""
    proc = remote.run(history_command("read"), check=False)
    if proc.returncode != 0:
        raise GateError(f"cannot read the gate's history on the controller: "
                        f"{(proc.stderr or proc.stdout).strip()[-600:] or proc.returncode}")
    return proc.stdout


def read_collected(text: str, nodes: Sequence[str]) -> dict[str, str]:
    """The files :data:`COLLECT_PROGRAM` printed on ``nodes``: {path under the run: text}.
    A node is heard for its own results and its pairs' (``NODE/...``, ``pairs/A+B/...``);
    one whose lines are missing or incomplete is an error."""
    chunks: dict[str, list[str]] = {n: [] for n in nodes}
    counts: dict[str, int] = {}
    for line in text.splitlines():
        node, kind, data = (line.split(" ", 2) + ["", ""])[:3]
        if node not in chunks:
            continue
        if kind == "+":
            chunks[node].append(data)
        elif kind == "=" and data.isdigit():
            counts[node] = int(data)
    files: dict[str, str] = {}
    for node in nodes:
        if counts.get(node) != len(chunks[node]):
            raise GateError(f"the results on {node} came back incomplete ({len(chunks[node])} "
                            f"of {counts.get(node, 'an unknown number of')} lines)")
        try:
            doc = json.loads(zlib.decompress(base64.b64decode("".join(chunks[node]))))
        except (ValueError, zlib.error) as exc:
            raise GateError(f"the results on {node} came back unreadable ({exc})") from None
        for path, content in doc.items():
            top, _, rest = path.partition("/")
            if top == node or (top == "pairs" and node in rest.split("/", 1)[0].split("+")):
                files[path] = content
    return files


class Gate:
    def __init__(self, remote: Remote, settings: GateSettings, nodes: Mapping[str, GateNode],
                 log: Callable[[str], None] = print, poll: float = 2.0,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.remote, self.settings, self.nodes = remote, settings, dict(nodes)
        self.log, self.poll, self.clock = log, poll, clock
        self.run_id = self.clock().strftime("%Y%m%dT%H%M%SZ")
        self.when = self.clock().isoformat(timespec="seconds")
        self.reservation = f"{RESERVATION_PREFIX}-{self.run_id}"
        self.no_health: list[str] = []  # nodes without the health checker
        self.one_gpu: list[str] = []  # nodes whose single-node bus bandwidth means nothing
        self.reserved: list[str] = []  # the reservation's nodes: under test, and partners
        self.files: dict[str, str] = {}  # the results read back: {path under the run: text}
        self.judged: set[str] = set()  # nodes drained or passed by this run's verdicts

    @property
    def run_dir(self) -> str:
        """The run's results on each node's own disk."""
        return f"{LOCAL_DIR}/runs/{self.run_id}"

    # ---- Slurm, on the controller ------------------------------------------------------

    def slurm(self, command: str, check: bool = True, stdin: str | None = None) -> str:
        return self.remote.run(command, check=check, stdin=stdin).stdout

    def read(self, command: str) -> str:
        """A Slurm read that feeds a decision: a failure (slurmctld restarting, an SSH
        hiccup) is tried again, the poll interval apart, and then stops the run; it is
        never taken for an empty answer."""
        try:
            return read_retried(self.remote, command, READ_TRIES,
                                lambda: time.sleep(self.poll))
        except RemoteError as exc:
            raise GateError(f"{command.split()[0]} failed {READ_TRIES} times on the controller "
                            f"({exc}); run 'metalslurm accept' again once Slurm answers"
                            ) from None

    def node_states(self, names: Sequence[str]) -> dict[str, tuple[str, str]]:
        """node -> (sinfo's state, e.g. idle~ or drained; the reason or "none")."""
        out = self.read(f"sinfo --noheader --Node --nodes={','.join(names)} "
                        "--format='%N|%T|%E'")
        states: dict[str, tuple[str, str]] = {}
        for line in out.splitlines():
            name, state, reason = (line.split("|", 2) + ["", ""])[:3]
            states.setdefault(name, (state, reason))
        return states

    def gate_drained(self) -> list[str]:
        """The nodes drained with the gate's prefix (the ones a run without --nodes takes)."""
        out = self.read("sinfo --noheader --Node --format='%N|%E'")
        return sorted({line.split("|", 1)[0] for line in out.splitlines()
                       if "|" in line and line.split("|", 1)[1].startswith(REASON_PREFIX)})

    def drain(self, nodes: Sequence[str], reason: str) -> None:
        self.slurm(f"scontrol update nodename={','.join(nodes)} state=drain "
                   f"reason={shlex.quote(reason)}")

    def remove_old_reservations(self) -> None:
        """Earlier runs' reservations (a run that stopped half-way): their nodes that are
        not drained are drained with the gate's prefix first, so that the gate tests them
        instead of their going back to service untested when the reservation goes."""
        out = self.read("scontrol show reservation --oneliner")
        for line in out.splitlines():
            fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
            name = fields.get("ReservationName", "")
            if not name.startswith(f"{RESERVATION_PREFIX}-"):
                continue
            listed = fields.get("Nodes", "")
            nodes = hostlist.expand_hostlist(listed) if listed not in ("", "(null)") else []
            states = self.node_states(nodes) if nodes else {}
            left = [n for n in nodes if n in states and "drain" not in states[n][0]]
            if left:
                old_run = name[len(RESERVATION_PREFIX) + 1:]
                self.drain(left, f"{REASON_PREFIX} left untested by run {old_run}")
                self.log(f"{', '.join(left)}: left untested in the reservation {name}: "
                         "drained for this run")
            self.log(f"removing the reservation {name} an earlier run left")
            self.slurm(f"scontrol delete reservation={name}", check=False)

    def submit(self, args: str, script: str, env: Mapping[str, str]) -> str:
        """A job in the reservation; sbatch reads ``script`` from its standard input."""
        exports = ",".join(["ALL", f"GATE_RUN={self.run_id}",
                            *(f"{k}={v}" for k, v in env.items())])
        command = (f"sbatch --parsable --reservation={self.reservation} --exclusive "
                   f"--export={shlex.quote(exports)} -o /dev/null {args}")
        return self.slurm(command, stdin=script).strip().split(";")[0]

    def wait(self, jobs: Mapping[str, Sequence[str]]) -> None:
        """Until every job (id -> its nodes) has ended; each one's results are read back as
        soon as it has, before an elastic node could be powered down."""
        pending = dict(jobs)
        while pending:
            listed: dict[str, str] = {}
            for line in self.read(f"squeue --noheader --reservation={self.reservation} "
                                  "--format='%i|%T|%r'").splitlines():
                job, state, reason = (line.strip().split("|", 2) + ["", ""])[:3]
                listed[job] = reason if state == "PENDING" and HELD.search(reason) else ""
            held = sorted(j for j in pending if listed.get(j))
            for j in held:
                # It would wait for ever; its node keeps no result, so its tests read "did
                # not run" and it is drained with that.
                self.log(f"job {j} on {', '.join(pending[j])} is held ({listed[j]}): "
                         "cancelled")
                self.slurm(f"scancel {j}", check=False)
                del pending[j]
            ended = sorted(j for j in pending if j not in listed)
            if ended:
                self.collect_from(sorted({n for j in ended for n in pending[j]}))
                for j in ended:
                    del pending[j]
            if pending:
                time.sleep(self.poll)

    def collect_from(self, nodes: Sequence[str]) -> None:
        """The results on those of ``nodes`` that can run a step: one that is down or not
        responding (it failed under the load, say) keeps its results, and its tests read
        "did not run"."""
        states = self.node_states(nodes)
        lost = {n: states.get(n, ("unknown to Slurm", ""))[0] for n in nodes}
        lost = {n: state for n, state in lost.items()
                if state == "unknown to Slurm" or "*" in state
                or any(word in state for word in UNREACHABLE)}
        for name, state in lost.items():
            self.log(f"{name} is {state}: the results it holds cannot be read back")
        if len(lost) < len(nodes):
            self.collect([n for n in nodes if n not in lost])

    def collect(self, nodes: Sequence[str]) -> None:
        """The results on ``nodes`` into ``self.files``, through srun in the reservation."""
        command = (f"srun --reservation={self.reservation} -w {','.join(nodes)} "
                   f"-N{len(nodes)} --ntasks-per-node=1 --time=5 "
                   f"-J {RESERVATION_PREFIX}-collect --quiet "
                   f"python3 -c {shlex.quote(COLLECT_PROGRAM)} {self.run_dir}")
        proc = self.remote.run(command, check=False, timeout=COLLECT_TIMEOUT)
        if proc.returncode != 0:
            raise GateError(f"could not read the results on {', '.join(nodes)} back (srun: "
                            f"exit status {proc.returncode}: "
                            f"{(proc.stderr or proc.stdout).strip()[-300:]})")
        self.files.update(read_collected(proc.stdout, nodes))

    # ---- the run -----------------------------------------------------------------------

    def job_env(self, nodes: Sequence[str], directory: str) -> dict[str, str]:
        s = self.settings
        gpus = min(self.nodes[n].gpus for n in nodes)
        return {"GATE_DIR": directory, "GATE_DCGM_LEVEL": str(LEVELS[s.level]),
                "GATE_DCGM_TIMEOUT": str(s.timeouts["dcgm"]),
                "GATE_NCCL_TIMEOUT": str(s.timeouts["nccl"]),
                "GATE_IB_TIMEOUT": str(s.timeouts["ib_write_bw"]),
                "GATE_GPUS": str(gpus), "GATE_HCAS": " ".join(s.hcas),
                "GATE_PATH": ":".join(s.path),
                "GATE_GPUDIRECT": "1" if s.gpudirect else "0"}

    def time_limit(self, kind: str) -> int:
        """A job's --time in minutes: its tools' limits and a margin for Slurm to start it
        (a powered-down node's resume)."""
        t = self.settings.timeouts
        seconds = (t["dcgm"] + t["nccl"] + 2 * HEALTH_TIMEOUT if kind == "node"
                   else t["nccl"] + (len(self.settings.hcas) or 8) * (t["ib_write_bw"] + 2))
        return seconds // 60 + 15

    def run(self, requested: Sequence[str] | None) -> GateResult:
        start = time.monotonic()
        self.remove_old_reservations()
        names = list(requested) if requested else self.gate_drained()
        states = self.node_states(names) if names else {}
        skipped: dict[str, str] = {}
        for name in names:
            state, reason = states.get(name, ("", ""))
            if not state:
                skipped[name] = "Slurm does not know it"
            elif "drain" in state and not reason.startswith(REASON_PREFIX):
                skipped[name] = f"drained by someone else ({reason}): left alone"
        tested = [n for n in names if n not in skipped]
        for name, why in skipped.items():
            self.log(f"{name}: {why}")
        if not tested:
            return GateResult(self.run_id, [], skipped, [], {}, [], 0, 0,
                              time.monotonic() - start)
        reference = self.reference_partner(tested) if len(tested) == 1 else []
        if len(tested) + len(reference) < 2:
            raise GateError(f"{tested[0]} is the only node to test and no other compute node "
                            "is in service to partner its two-node tests; return one to "
                            "service or test it with another node")
        self.reserved = tested + reference
        self.slurm(f"scontrol create reservation reservationname={self.reservation} "
                   f"starttime=now duration=infinite users=root flags=maint,ignore_jobs "
                   f"nodes={','.join(self.reserved)}")
        self.log(f"reservation {self.reservation} on {', '.join(tested + reference)}"
                 + (f" ({reference[0]}: a known-good partner, not under test)"
                    if reference else ""))
        try:
            verdicts, rounds, job_count, unreadable = self.test(tested, reference, states)
            drained, passed = self.conclude(tested, verdicts)
            self.slurm(f"scontrol delete reservation={self.reservation}")
        except BaseException:
            self.hold(tested)
            raise
        return GateResult(self.run_id, tested, skipped,
                          [v for vs in verdicts.values() for v in vs], drained, passed, rounds,
                          job_count, time.monotonic() - start, unreadable)

    def test(self, tested: Sequence[str], reference: Sequence[str],
             states: Mapping[str, tuple[str, str]]
             ) -> tuple[dict[str, list[Verdict]], int, int, int]:
        """The jobs and their verdicts: (node -> verdicts, rounds, jobs, unreadable history
        lines)."""
        for name in tested:
            if "drain" in states[name][0]:
                self.slurm(f"scontrol update nodename={name} state=resume")
        limit = self.time_limit("node")
        jobs = {self.submit(f"-N1 -w {n} -J {RESERVATION_PREFIX}-node --time={limit}",
                            NODE_SCRIPT, self.job_env([n], n)): [n]
                for n in tested}
        self.log(f"single-node tests: {len(jobs)} jobs")
        self.wait(jobs)
        job_count = len(jobs)

        verdicts: dict[str, list[Verdict]] = {n: [] for n in tested}
        history, unreadable = self.history()
        singles = self.single_node_measurements(tested, self.files)
        if self.no_health:
            self.log(f"GPU state before and after the load not checked on "
                     f"{', '.join(self.no_health)}: no metalslurm-health there "
                     "(metalslurm:health is off)")
        if self.one_gpu:
            self.log(f"single-node NCCL bandwidth not judged on {', '.join(self.one_gpu)}: "
                     "one GPU (nccl-tests' bus bandwidth is 0 for one rank)")
        for m, problem in singles:
            verdict = (judge_check(m, problem) if m.unit == PASS_FAIL_UNIT
                       else self.judge(m, history + [s for s, _ in singles]))
            verdicts[m.node].append(verdict)

        pairing, pair_jobs = self.pairwise(tested, reference, history)
        for name, pair_verdicts in self.pair_verdicts(pairing, tested).items():
            verdicts[name].extend(pair_verdicts)
        self.append_history([v for vs in verdicts.values() for v in vs])
        return verdicts, len(pairing.rounds), job_count + pair_jobs, unreadable

    def conclude(self, tested: Sequence[str], verdicts: Mapping[str, list[Verdict]]
                 ) -> tuple[dict[str, str], list[str]]:
        """Failing nodes drained with their reason; (drained, passed)."""
        drained: dict[str, str] = {}
        passed: list[str] = []
        for name in tested:
            reason = drain_reason(verdicts[name])
            if reason:
                drained[name] = reason
                self.drain([name], reason)
                self.log(f"{name}: FAILED, drained: {reason}")
            else:
                passed.append(name)
                self.log(f"{name}: passed")
            self.judged.add(name)
        return drained, passed

    def hold(self, tested: Sequence[str]) -> None:
        """The run stopped half-way: its jobs cancelled, every node under test without a
        verdict drained with the gate's prefix, the reservation left for the next run (which
        drains what is left in it and removes it). Each step is tried whatever the last
        did."""
        untested = [n for n in tested if n not in self.judged]
        reason = f"{REASON_PREFIX} run {self.run_id} interrupted, not judged"
        try:
            self.slurm(f"scancel --reservation={self.reservation}")
        except RemoteError as exc:
            self.log(f"could not cancel the run's jobs: {exc}")
        held = ""
        if untested:
            try:
                self.drain(untested, reason)
                held = f"{', '.join(untested)} drained ({reason}); "
            except RemoteError as exc:
                self.log(f"could not drain {', '.join(untested)}: {exc}")
        self.log(f"run {self.run_id} stopped: {held}the reservation {self.reservation} stays "
                 "until the next run")

    # ---- measurements ------------------------------------------------------------------

    def measurement(self, node: str, test: str, hardware: str, value: float | None, unit: str,
                    error: str = "") -> Measurement:
        return Measurement(self.run_id, self.when, node, test, hardware, value, unit, error)

    @staticmethod
    def tool_error(files: Mapping[str, str], stem: str, tool: str) -> str:
        """Why a tool gave no figure ("" when it ran to its end)."""
        rc_text = files.get(f"{stem}.rc", "").strip()
        if not rc_text:
            return "did not run (the job ended first)"
        rc = int(rc_text) if rc_text.lstrip("-").isdigit() else -1
        if rc in TIMED_OUT:
            return "timed out"
        if rc == 127:
            return files.get(f"{stem}.err", "").strip() or f"{tool} is not installed"
        return ""

    def nccl_figure(self, files: Mapping[str, str], stem: str) -> tuple[float | None, str]:
        """all_reduce_perf's bus bandwidth in ``stem``.out, or why there is none."""
        error = self.tool_error(files, stem, "all_reduce_perf")
        if error:
            return None, error
        try:
            nccl = parse_all_reduce_perf(files.get(f"{stem}.out", ""))
        except ToolOutputError as exc:
            return None, str(exc)
        return (None, nccl.problem) if nccl.problem else (nccl.busbw, "")

    def single_node_measurements(self, tested: Sequence[str], files: Mapping[str, str]
                                 ) -> list[tuple[Measurement, str]]:
        out: list[tuple[Measurement, str]] = []
        for n in tested:
            gpu = self.nodes[n].gpu_type
            error = self.tool_error(files, f"{n}/dcgm", "dcgmi")
            problem = ""
            failed = None
            if not error:
                try:
                    run = parse_dcgmi_diag(files.get(f"{n}/dcgm.out", ""))
                    failed = float(len(run.failures))
                    problem = f"dcgm_diag {run.failures[0]}" if run.failures else ""
                except ToolOutputError as exc:
                    error = str(exc)
            out.append((self.measurement(n, "dcgm_diag", gpu, failed, PASS_FAIL_UNIT,
                                         error),
                        problem))
            # nccl-tests' bus bandwidth is algbw x 2(n-1)/n: 0 for one rank, whatever the GPU
            # does (recorded on an H200, tests/fixtures/accept/*-1xh200-*). A one-GPU node's
            # NVLink has nothing to show; its GPU is still read by DCGM and the health checks.
            if self.nodes[n].gpus == 1:
                self.one_gpu.append(n)
            else:
                figure, error = self.nccl_figure(files, f"{n}/nccl_1node")
                out.append((self.measurement(n, "nccl_1node", gpu, figure, "GB/s", error), ""))
            health = self.health_measurement(n, files)
            if health is not None:
                out.append(health)
        return out

    def health_measurement(self, n: str, files: Mapping[str, str]
                           ) -> tuple[Measurement, str] | None:
        """gpu_health: the health checker's GPU checks (device files, count, uncorrected
        ECC errors, row remapping, critical Xids) before the load and after it; its value
        is the count of failed checks after the load. None where the node has no health
        checker (metalslurm:health off): said once in the run's log."""
        gpu = self.nodes[n].gpu_type
        runs: dict[str, HealthRun] = {}
        for when in ("before", "after"):
            stem = f"{n}/health_{when}"
            if files.get(f"{stem}.rc", "").strip() == "127":
                self.no_health.append(n)
                return None
            error = self.tool_error(files, stem, "metalslurm-health")
            if not error:
                try:
                    runs[when] = parse_health_json(files.get(f"{stem}.out", ""))
                except ToolOutputError as exc:
                    error = str(exc)
            if error:
                return self.measurement(n, "gpu_health", gpu, None, PASS_FAIL_UNIT,
                                        f"{when} load: {error}"), ""
        before, after = runs["before"], runs["after"]
        problem = (f"gpu_health before load: {before.failures[0]}" if before.failures
                   else f"gpu_health after load: {after.failures[0]}" if after.failures
                   else "")
        return self.measurement(n, "gpu_health", gpu, float(len(after.failures)),
                                PASS_FAIL_UNIT), problem

    def judge(self, m: Measurement, history: Sequence[Measurement]) -> Verdict:
        s = self.settings
        return judge(m, s.floor(m.test, m.hardware), history, s.fleet_fraction, s.min_samples)

    def pair_figures(self, pair: Pair, files: Mapping[str, str]) -> list[Measurement]:
        """The figures of one pair's job, credited to its first node (the one the ib_write_bw
        server ran on); the gate credits them to the right node once the pairing is done."""
        stem = f"pairs/{pair[0]}+{pair[1]}"
        gpu = self.nodes[pair[0]].gpu_type
        out = []
        figure, error = self.nccl_figure(files, f"{stem}/nccl_pair")
        out.append(self.measurement(pair[0], "nccl_pair", gpu, figure, "GB/s", error))
        hcas = sorted(k[len(stem) + 1:-len(".rc")] for k in files
                      if k.startswith(f"{stem}/ib_write_bw:") and k.endswith(".rc"))
        for hca in hcas:
            error = self.tool_error(files, f"{stem}/{hca}", "ib_write_bw")
            gbits = None
            if not error:
                try:
                    gbits = parse_ib_write_bw(files.get(f"{stem}/{hca}.out", "")).gbits
                except ToolOutputError as exc:
                    error = str(exc)
            out.append(self.measurement(pair[0], hca, self.settings.hca_type, gbits, "Gb/s",
                                        error))
        return out

    def reference_partner(self, tested: Sequence[str]) -> list[str]:
        """A node outside the gate to partner a lone node under test: one that is in
        service (not drained, down or failing), powered up if there is one."""
        others = [n for n in sorted(self.nodes) if n not in tested]
        states = self.node_states(others) if others else {}
        usable = [n for n in others if n in states and not any(
            word in states[n][0] for word in ("drain", "down", "fail", "maint", "resv"))]
        usable.sort(key=lambda n: ("~" in states[n][0] or "#" in states[n][0],
                                   "idle" not in states[n][0], n))
        return usable[:1]

    def pairwise(self, tested: Sequence[str], reference: Sequence[str],
                 history: list[Measurement]) -> tuple[Pairing, int]:
        pairing = Pairing(tested, reference, max_rounds=self.settings.max_rounds)
        self.pair_results: dict[Pair, list[Verdict]] = {}
        jobs = 0
        while len(pairing.rounds) < pairing.max_rounds:
            pairs = pairing.next_round()
            if not pairs:
                break
            ids = {self.submit(f"-N2 -w {a},{b} -J {RESERVATION_PREFIX}-pair "
                               f"--time={self.time_limit('pair')}", PAIR_SCRIPT,
                               {**self.job_env([a, b], f"pairs/{a}+{b}"), "GATE_A": a,
                                "GATE_B": b, "GATE_A_ADDRESS": self.nodes[a].address}):
                   [a, b] for a, b in pairs}
            jobs += len(ids)
            self.log(f"two-node tests, round {len(pairing.rounds) + 1}: "
                     + ", ".join(f"{a}+{b}" for a, b in pairs))
            self.wait(ids)
            results = {}
            for pair in pairs:
                figures = self.pair_figures(pair, self.files)
                verdicts = [self.judge(m, history) for m in figures]
                self.pair_results[pair] = verdicts
                results[pair] = bool(verdicts) and all(v.passed for v in verdicts)
            pairing.record(results)
            if pairing.pending and not pairing.good:
                self.add_reference(pairing)
        return pairing, jobs

    def add_reference(self, pairing: Pairing) -> None:
        """Every pair failed, so no node under test is proven good: a node in service joins
        the reservation to partner the suspects (else they end inconclusive)."""
        partner = self.reference_partner(self.reserved)
        if not partner:
            self.log("no node in service to partner the suspects: they stay inconclusive")
            return
        self.reserved.append(partner[0])
        self.slurm(f"scontrol update reservationname={self.reservation} "
                   f"nodes={','.join(self.reserved)}")
        pairing.add_reference(partner[0])
        self.log(f"every pair failed: {partner[0]}, a node in service, joins as a known-good "
                 "partner (not under test)")

    def pair_verdicts(self, pairing: Pairing, tested: Sequence[str]
                      ) -> dict[str, list[Verdict]]:
        """Each node's two-node verdicts, its figures credited to it: a good node's from a
        pair that passed, a bad one's from the failing pair with a partner proven good, an
        inconclusive one's failing with that word."""
        out: dict[str, list[Verdict]] = {}
        outcome = pairing.verdicts()
        for name in tested:
            mine = [(p, vs) for p, vs in self.pair_results.items() if name in p]

            def partner(pair: Pair, node: str = name) -> str:
                return pair[1] if pair[0] == node else pair[0]
            chosen = None
            if outcome[name] == GOOD:
                chosen = next(((p, vs) for p, vs in reversed(mine)
                               if all(v.passed for v in vs)), None)
            elif outcome[name] == BAD:
                chosen = next(((p, vs) for p, vs in reversed(mine)
                               if outcome.get(partner(p), GOOD) == GOOD
                               and not all(v.passed for v in vs)), None)
            if chosen is None or not chosen[1]:
                m = self.measurement(name, "nccl_pair", self.nodes[name].gpu_type, None, "GB/s",
                                     "inconclusive: no partner proven good")
                out[name] = [Verdict(m, None, None, None, False,
                                     "nccl_pair inconclusive: no partner proven good")]
                continue
            pair, vs = chosen
            out[name] = [replace(v, measurement=replace(v.measurement, node=name),
                                 reason=f"{v.reason} (with {partner(pair)})" if v.reason else "")
                         for v in vs]
        return out

    # ---- history -----------------------------------------------------------------------

    def history(self) -> tuple[list[Measurement], int]:
        return read_history_text(read_history_file(self.remote), self.clock(),
                                 self.settings.history_days)

    def append_history(self, records: Sequence[Verdict]) -> None:
        text = "".join(r.to_json() + "\n" for r in records)
        proc = self.remote.run(history_command("append"), check=False, stdin=text)
        if proc.returncode != 0:
            raise GateError(f"cannot add this run to the gate's history on the controller: "
                            f"{(proc.stderr or proc.stdout).strip()[-600:] or proc.returncode}")


def gate_nodes(inventory: Mapping[str, Any]) -> dict[str, GateNode]:
    """The compute nodes of a parsed inventory, with what the gate needs of each."""
    root = inventory.get("all") or {}
    hosts = root.get("hosts") or {}
    compute = ((root.get("children") or {}).get("slurm_compute") or {}).get("hosts") or {}
    out = {}
    for name in compute:
        host = {**(hosts.get(name) or {}), **(compute.get(name) or {})}
        out[name] = GateNode(name, str(host.get("metalslurm_address") or host.get("ansible_host")
                                       or name),
                             str(host.get("metalslurm_gpu_type") or "unknown"),
                             int(host.get("metalslurm_gpu_count") or 0))
    return out
