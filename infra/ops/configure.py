"""Run ansible/site.yml with per-host progress and a timing summary.

Same playbook, same inventory, same ansible.cfg as ``ansible-playbook -i INVENTORY
ansible/site.yml`` from a shell: this only adds compact progress output and a result object
the tests can read (the number of changed tasks, per host), from the events the
collection's ``events`` callback writes to a pipe.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.ops.playbook import RUNTIME_GROUPS

REPO_ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_DIR = REPO_ROOT / "ansible"
# When stdout is not a terminal (a CI log), a progress line at least this often.
HEARTBEAT_SECONDS = 15.0
# The callback that hands run_playbook its events (ansible/collections/.../callback/events.py).
EVENTS_CALLBACK = "metalslurm.cluster.events"
# How long the events still being read may take once ansible-playbook has exited.
EVENTS_DRAIN_SECONDS = 30.0


@dataclass
class ConfigureResult:
    rc: int
    status: str
    seconds: float
    stats: dict[str, dict[str, int]]
    changed_tasks: list[tuple[str, str]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    # (host, task, file content after the change) of changed tasks, with diff=True
    diffs: list[tuple[str, str, str]] = field(default_factory=list)
    slowest: list[tuple[float, str]] = field(default_factory=list)
    # Warnings tasks gave (Ansible's own, and debug messages that start with WARNING:),
    # once each, e.g. an artifact installed without a sha256.
    warnings: list[str] = field(default_factory=list)
    # Debug messages that start with NOTE: (a step skipped on purpose, said once), e.g. no
    # HCA on the local nodes; the same note from several hosts, apart from the host's name,
    # is said once with the hosts as a Slurm hostlist (fold_notes).
    notes: list[str] = field(default_factory=list)
    # Seconds each task took, the longest of its hosts (the benchmarks read it).
    task_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def changed(self) -> int:
        return sum(self.stats.get("changed", {}).values())


# Ansible's warnings that say nothing about the cluster: a run limited to some hosts (the
# topology command's --limit slurm_controller, a join's --limit <node>) leaves the playbook's
# own runtime groups empty, and Ansible says so in the next task's result.
EXPECTED_WARNINGS = frozenset(
    f"Could not match supplied host pattern, ignoring: {group}" for group in RUNTIME_GROUPS)


class _Progress:
    """Turns the run's events into one line per task and per problem."""

    def __init__(self, out: Callable[[str], None]) -> None:
        self.out = out
        self.task_started: dict[str, float] = {}
        self.task_seconds: dict[str, float] = defaultdict(float)
        self.changed: list[tuple[str, str]] = []
        self.failures: list[str] = []
        self.warnings: list[str] = []
        # (host, note) as the hosts said them; fold_notes says each once
        self.host_notes: list[tuple[str, str]] = []
        self.diffs: list[tuple[str, str, str]] = []
        self.start = time.monotonic()

    def __call__(self, event: dict[str, Any]) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data", {})
        task = data.get("task") or ""
        host = data.get("host") or ""
        elapsed = time.monotonic() - self.start
        if kind == "playbook_on_play_start":
            self.out(f"[{elapsed:6.1f}s] PLAY {data.get('play', '')}")
        elif kind == "playbook_on_task_start":
            self.task_started[data.get("task_uuid", task)] = time.monotonic()
        elif kind in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable",
                      "runner_on_skipped"):
            uuid = data.get("task_uuid", task)
            if uuid in self.task_started:
                self.task_seconds[task] = max(self.task_seconds[task],
                                              time.monotonic() - self.task_started[uuid])
            res = data.get("res") or {}
            if kind == "runner_on_ok":
                self._warnings(res, host)
            if kind == "runner_on_ok" and res.get("changed"):
                self.changed.append((host, task))
                items = [res] + [r for r in res.get("results") or [] if isinstance(r, dict)]
                for item in items:
                    for diff in _diff_list(item.get("diff")):
                        if isinstance(diff.get("after"), str):
                            self.diffs.append((host, task, diff["after"]))
                self.out(f"[{elapsed:6.1f}s]   changed  {host}: {task}")
            elif kind == "runner_on_failed" and not data.get("ignore_errors"):
                msg = str(res.get("msg") or res.get("stderr") or res)[:800]
                self.failures.append(f"{host}: {task}: {msg}")
                self.out(f"[{elapsed:6.1f}s]   FAILED   {host}: {task}: {msg}")
            elif kind == "runner_on_unreachable":
                msg = str(res.get("msg") or res)[:400]
                self.failures.append(f"{host}: unreachable: {msg}")
                self.out(f"[{elapsed:6.1f}s]   UNREACHABLE {host}: {msg}")
        return True


    def _warnings(self, res: dict[str, Any], host: str) -> None:
        found: list[str] = []
        notes = []
        # A looped task's warnings, and a looped debug task's messages, are in its items'
        # results.
        for item in [res] + [r for r in res.get("results") or [] if isinstance(r, dict)]:
            found += [str(w) for w in item.get("warnings") or []]
            msg = item.get("msg")
            if isinstance(msg, str) and msg.startswith("WARNING:"):
                found.append(msg[len("WARNING:"):].strip())
            elif isinstance(msg, str) and msg.startswith("NOTE:"):
                notes.append(msg[len("NOTE:"):].strip())
        for warning in found:
            if warning in EXPECTED_WARNINGS:
                continue
            if warning not in self.warnings:
                self.warnings.append(warning)
                self.out(f"WARNING: {warning}")
        self.host_notes += [(host, note) for note in notes
                            if (host, note) not in self.host_notes]


_HOSTLIST_MARK = "\0hosts\0"


def fold_notes(host_notes: list[tuple[str, str]]) -> list[str]:
    """Each note once, in the order first said: notes that differ only by the name of the
    host that said them are one, naming the hosts as a Slurm hostlist
    (``gpu-[001-004]: nccl-tests is not built here: ...``)."""
    import hostlist  # python-hostlist, as infra.stack.inputs

    hosts_of: dict[str, list[str]] = {}
    for host, note in host_notes:
        named = re.compile(rf"(?<![\w.-]){re.escape(host)}(?![\w-]|\.\w)") if host else None
        template = named.sub(_HOSTLIST_MARK, note) if named else note
        hosts = hosts_of.setdefault(template, [])
        if host not in hosts:
            hosts.append(host)
    return [template.replace(_HOSTLIST_MARK, hostlist.collect_hostlist(hosts))
            for template, hosts in hosts_of.items()]


class _Heartbeat:
    """A one-line progress message whenever ``every`` seconds pass with nothing printed,
    for a log that is not a terminal: ``... configure: 45 s, task 37: Install Slurm
    (6 hosts)``, the hosts being those still running the task."""

    def __init__(self, out: Callable[[str], None], every: float = HEARTBEAT_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.out = out
        self.every = every
        self.clock = clock
        self.start = self.last = clock()
        self.lock = threading.Lock()
        self.tasks = 0
        self.task = ""
        self.task_uuid = ""
        self.running: set[str] = set()

    def watch(self, out: Callable[[str], None]) -> Callable[[str], None]:
        """``out``, each of whose lines counts as printed."""
        def printed(line: str) -> None:
            with self.lock:
                out(line)
                self.last = self.clock()
        return printed

    def event(self, event: dict[str, Any]) -> None:
        kind = event.get("event", "")
        data = event.get("event_data", {})
        with self.lock:
            if kind == "playbook_on_task_start":
                self.tasks += 1
                self.task = data.get("task") or data.get("name") or ""
                self.task_uuid = data.get("task_uuid") or data.get("uuid") or ""
                self.running = set()
            elif data.get("task_uuid") == self.task_uuid and data.get("host"):
                if kind == "runner_on_start":
                    self.running.add(data["host"])
                elif kind in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable",
                              "runner_on_skipped"):
                    self.running.discard(data["host"])

    def beat(self) -> None:
        """Print the progress line if ``every`` seconds passed with nothing printed."""
        with self.lock:
            now = self.clock()
            if now - self.last < self.every:
                return
            self.last = now
            elapsed = f"... configure: {now - self.start:.0f} s"
            if not self.tasks:
                self.out(f"{elapsed}, starting ansible-playbook")
                return
            hosts = len(self.running)
            on = f" ({hosts} host{'' if hosts == 1 else 's'})" if hosts else ""
            self.out(f"{elapsed}, task {self.tasks}: {self.task}{on}")

    def run(self, stop: threading.Event, poll: float) -> None:
        while not stop.wait(poll):
            self.beat()


def heartbeat_for(out: Callable[[str], None], stream: Any = None) -> Callable[[str], None] | None:
    """Where configure's progress lines go: ``out`` when ``stream`` (stdout) is not a
    terminal, else nowhere (a terminal shows what it shows today)."""
    stream = sys.stdout if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return None if isatty is not None and isatty() else out


def _diff_list(diff: Any) -> list[dict[str, Any]]:
    if isinstance(diff, dict):
        return [diff]
    return [d for d in diff if isinstance(d, dict)] if isinstance(diff, list) else []


class _EventReader:
    """Reads the events callback's JSON lines from a pipe in a thread, hands each event to
    ``on_event`` and keeps the recap's counts (``stats``: ok, changed, failures, dark...,
    each host to its count). ``problem`` says why the events cannot be trusted whole: no
    recap came, the pipe was still open after the run, or reading an event failed."""

    def __init__(self, on_event: Callable[[dict[str, Any]], None]) -> None:
        self.on_event = on_event
        self.stats: dict[str, dict[str, int]] = {}
        self.recap = False
        self.error = ""
        self.thread: threading.Thread | None = None

    def start(self, fd: int) -> None:
        self.thread = threading.Thread(target=self._read, args=(fd,), daemon=True,
                                       name="configure-events")
        self.thread.start()

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as stream:
            for line in stream:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(event, dict):
                    continue
                if event.get("event") == "playbook_on_stats":
                    data = event.get("event_data") or {}
                    self.stats = {k: v for k, v in data.items() if isinstance(v, dict)}
                    self.recap = True
                try:
                    self.on_event(event)
                except Exception as exc:  # noqa: BLE001 - read on: the recap must still come
                    self.error = self.error or f"{type(exc).__name__}: {exc}"

    def join(self) -> None:
        """Wait for the last events: the pipe ends when every process holding it has (a
        process forked from ansible-playbook may outlive it by a moment)."""
        if self.thread:
            self.thread.join(EVENTS_DRAIN_SECONDS)

    @property
    def problem(self) -> str:
        if self.thread and self.thread.is_alive():
            return (f"the run's events were still open {EVENTS_DRAIN_SECONDS:.0f} s after "
                    "ansible-playbook ended")
        if self.error:
            return f"reading the run's events failed ({self.error})"
        if not self.recap:
            return ("ansible-playbook ended without its recap event (the metalslurm.cluster "
                    "events callback did not run): what it changed is not known")
        return ""


def _unsafe(value: Any) -> Any:
    """``value`` with every string in Ansible's JSON mark for an unsafe value
    (``{"__ansible_unsafe": ...}``), which its loader reads as a string never templated."""
    if isinstance(value, str):
        return {"__ansible_unsafe": value}
    if isinstance(value, dict):
        return {str(k): _unsafe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_unsafe(v) for v in value]
    return value


def write_extra_vars(path: Path, extra_vars: dict[str, Any]) -> None:
    """The extra variables as a JSON file only this user can read, every string marked
    unsafe: a value holding ``{{`` (a password, a pattern) is that text, never a template,
    as it was when ansible-runner passed the variables on the command line (a vars file's
    strings are otherwise templates). Not YAML's ``!unsafe``: ansible-core 2.19 reads
    ``!unsafe '0000'`` as the number 0."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(_unsafe(extra_vars), f)


def ansible_playbook() -> str:
    """This interpreter's ansible-playbook (the virtualenv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "ansible-playbook"
    return str(beside) if beside.exists() else (shutil.which("ansible-playbook")
                                                 or "ansible-playbook")


def spawn(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """Start ansible-playbook (the unit tests start a stand-in here)."""
    return subprocess.Popen(argv, **kwargs)


def venv_on_path() -> None:
    """testinfra and Ansible's own tools call ansible-* by name: use this interpreter's."""
    bindir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bindir:
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")


def stack_run_vars(drain_wait: float | None) -> dict[str, Any]:
    """Extra variables of a configure whose inventory is made from the stack config ('local
    up', byo 'up'): no bound on the share of nodes that leave in one run (the stack config
    says which leave; a stale or partial inventory cannot), and the wait for their jobs
    when one was given (module_utils/slurm_leaving.py)."""
    extra: dict[str, Any] = {"metalslurm_leaving_max_share": 1.0}
    if drain_wait is not None:
        extra["metalslurm_drain_wait"] = drain_wait
    return extra


def _ansible_env(strategy: str | None) -> dict[str, str]:
    """This process's environment, ansible.cfg named, host keys checked whatever the
    environment says (before a node is handed a secret), the events callback enabled beside
    any the caller enabled, and ``strategy`` when given."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg"),
           "ANSIBLE_PYTHON_INTERPRETER": "auto_silent", "ANSIBLE_FORCE_COLOR": "0",
           "ANSIBLE_HOST_KEY_CHECKING": "True",
           "ANSIBLE_CALLBACKS_ENABLED": ",".join(filter(None, (
               os.environ.get("ANSIBLE_CALLBACKS_ENABLED"), EVENTS_CALLBACK)))}
    if strategy:
        env["ANSIBLE_STRATEGY"] = strategy
    if strategy and strategy.startswith("mitogen"):
        import ansible_mitogen  # optional: pip install mitogen

        env["ANSIBLE_STRATEGY_PLUGINS"] = str(
            Path(ansible_mitogen.__file__).parent / "plugins" / "strategy")
    return env


# Far less than a pipe holds before a write blocks: the password is written before
# ansible-playbook starts reading it.
PASSWORD_MAX_BYTES = 4096


def _run_ansible(argv: list[str], playbook: str, env: dict[str, str],
                 on_event: Callable[[dict[str, Any]], None],
                 extra_vars: dict[str, Any] | None,
                 become_password: str | None) -> tuple[int, dict[str, dict[str, int]], str, str]:
    """Run ``argv`` (ansible-playbook and its options) on ``playbook``, its events to
    ``on_event``: (exit status, the recap's counts, the last 3000 characters it printed,
    why its events are not whole or ""). Extra variables go in a 0600 file of a private
    directory removed afterwards; a sudo password through a pipe on its standard input
    (``--become-password-file -``), never a file."""
    if become_password is not None and len(become_password.encode()) > PASSWORD_MAX_BYTES:
        raise ValueError(f"a sudo password longer than {PASSWORD_MAX_BYTES} bytes")
    private = Path(tempfile.mkdtemp(prefix="metalslurm-configure-"))  # 0700
    ours: list[int] = []  # pipe ends to close here whatever happens
    events = _EventReader(on_event)
    try:
        if extra_vars:
            write_extra_vars(private / "extra-vars.json", extra_vars)
            argv = [*argv, "--extra-vars", f"@{private / 'extra-vars.json'}"]
        stdin: int = subprocess.DEVNULL
        if become_password is not None:
            # Ansible reads '-' from its standard input as given (a path would be resolved
            # first, which /dev/fd/N does not survive; a file's content is stripped of
            # spaces).
            read_end, write_end = os.pipe()
            ours.append(read_end)
            try:
                os.write(write_end, become_password.encode() + b"\n")
            finally:
                os.close(write_end)
            stdin = read_end
            argv = [*argv, "--become-password-file", "-"]
        read_events, write_events = os.pipe()
        ours += [read_events, write_events]
        output_path = private / "output.txt"
        with open(output_path, "wb") as output:
            proc = spawn([*argv, playbook], cwd=ANSIBLE_DIR,
                         env={**env, "METALSLURM_EVENTS_FD": str(write_events)},
                         stdin=stdin, stdout=output, stderr=subprocess.STDOUT,
                         pass_fds=(write_events,))
        ours.remove(read_events)  # the reader's from here
        for fd in ours:
            os.close(fd)
        ours.clear()
        events.start(read_events)
        try:
            rc = proc.wait()
        except BaseException:  # Ctrl-C: the run stops with this process
            proc.terminate()
            proc.wait()
            raise
        events.join()
        return (rc, events.stats, output_path.read_text(errors="replace")[-3000:],
                events.problem)
    finally:
        for fd in ours:
            os.close(fd)
        shutil.rmtree(private, ignore_errors=True)


def run_playbook(inventory: str | Path, *, limit: str | None = None,
                 tags: str | None = None, check: bool = False, diff: bool = False,
                 verbosity: int = 0,
                 extra_vars: dict[str, Any] | None = None, strategy: str | None = None,
                 out: Callable[[str], None] | None = print,
                 heartbeat: Callable[[str], None] | None = None,
                 heartbeat_every: float = HEARTBEAT_SECONDS,
                 playbook: str = "site.yml",
                 become_password: str | None = None) -> ConfigureResult:
    """Run the site playbook (or another of ansible/) against ``inventory``; never raises
    for a failed play.

    ``strategy="mitogen_linear"`` runs it with Mitogen's strategy (the ``mitogen``
    package must be installed); the default is ansible.cfg's. ``out`` gets a line per
    changed task and per problem (None: no line). With ``heartbeat``, it gets a progress
    line whenever ``heartbeat_every`` seconds pass with no line printed there or on
    ``out`` (see :func:`heartbeat_for`).

    ansible-playbook runs as it would from a shell, with ansible.cfg as it is (its host key
    checking and fact cache included), and the collection's ``events`` callback writing its
    events as JSON lines to a pipe this process reads (plugins/callback/events.py). Extra
    variables go in a 0600 JSON file of a private directory, every string marked unsafe
    (never templated), removed after the run; a sudo password through a pipe on
    ansible-playbook's standard input (``--become-password-file -``), never a file.
    """
    inventory = Path(inventory).resolve()
    venv_on_path()
    if not inventory.exists():
        raise FileNotFoundError(f"inventory {inventory} does not exist")
    beats = _Heartbeat(heartbeat, heartbeat_every) if heartbeat else None
    lines = out or (lambda _line: None)
    progress = _Progress(beats.watch(lines) if beats and out else lines)

    def on_event(event: dict[str, Any]) -> None:
        if beats:
            beats.event(event)
        progress(event)

    stop = threading.Event()
    beating = threading.Thread(target=beats.run, args=(stop, min(1.0, heartbeat_every / 4)),
                               name="configure-heartbeat", daemon=True) if beats else None
    if beating:
        beating.start()
    argv = [ansible_playbook(), "-i", str(inventory)]
    argv += ["--limit", limit] if limit else []
    argv += ["--tags", tags] if tags else []
    argv += ["--check"] if check else []
    argv += ["--diff"] if diff else []
    argv += ["-" + "v" * verbosity] if verbosity else []
    try:
        rc, stats, tail, problem = _run_ansible(argv, str(ANSIBLE_DIR / playbook),
                                                _ansible_env(strategy), on_event, extra_vars,
                                                become_password)
    finally:
        stop.set()
        if beating:
            beating.join()
    if rc != 0 and not progress.failures:
        progress.failures.append(tail.strip() or f"ansible-playbook exited {rc}")
    if problem:
        # A run whose events are not whole must not read as converged (0 changed).
        progress.failures.append(problem)
        rc = rc or 1
    status = "successful" if rc == 0 else "failed"
    result = ConfigureResult(
        rc=rc, status=status, seconds=time.monotonic() - progress.start,
        stats={k: dict(v) for k, v in stats.items() if isinstance(v, dict)},
        changed_tasks=progress.changed, failures=progress.failures, diffs=progress.diffs,
        warnings=progress.warnings, notes=fold_notes(progress.host_notes),
        task_seconds=dict(progress.task_seconds),
        slowest=sorted(((s, t) for t, s in progress.task_seconds.items()), reverse=True)[:5])
    return result


def summary_lines(result: ConfigureResult) -> list[str]:
    hosts = sorted({h for per_host in result.stats.values() for h in per_host})
    lines = [f"{'host':<20} {'ok':>5} {'changed':>8} {'failed':>7} {'unreachable':>12}"]
    for h in hosts:
        def n(key: str, host: str = h) -> int:
            return result.stats.get(key, {}).get(host, 0)
        lines.append(f"{h:<20} {n('ok'):>5} {n('changed'):>8} {n('failures'):>7} "
                     f"{n('dark'):>12}")
    lines.append(f"configure {result.status} in {result.seconds:.1f} s, "
                 f"{result.changed} changed task(s)")
    if result.slowest:
        lines.append("slowest tasks: " + "; ".join(f"{t} {s:.1f}s" for s, t in result.slowest))
    return lines


def print_summary(result: ConfigureResult, out: Callable[[str], None] = print) -> None:
    for line in summary_lines(result):
        out(line)
    for note in result.notes:
        out(f"NOTE: {note}")
    for warning in result.warnings:
        out(f"WARNING: {warning}")
    for failure in result.failures:
        out(f"FAILED: {failure}")
    sys.stdout.flush()
