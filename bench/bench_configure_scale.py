"""Configure cost as nodes grow: a cold and a converged configure of local clusters of N
static 8 x H100 compute nodes, one size after the other, fitted against N and extrapolated
to 1,000 nodes.

For each N of ``--nodes`` it writes a stack file (bench/stacks/Pulumi.cold-2node.yaml with
one pool of N static nodes, no elastic or login node, no shared storage, its own
``clusterName`` ms-cfg-N and network 10.78.(100+N).0/24; the nodes from the prepared images,
local up's default, or with ``--bare`` from the bare node image), creates the nodes with
``metalslurm local up --stack FILE --no-configure`` and times two runs of the plain
playbook on the stack's inventory (``ansible-playbook -i INVENTORY site.yml`` with
ansible/ansible.cfg, what 'metalslurm configure' runs), with Ansible's ``profile_roles`` and
``profile_tasks`` callbacks on:

- cold: the first configure of the fresh nodes;
- converged: a second one right after, which must report 0 changed.

Each run records its wall time, the seconds per role and per task, the task steps per
compute node (ok + skipped), the CPU seconds of ansible-playbook with its workers and of its
main process alone (the control side: what stays on a real cluster, the main process
serial), of the node containers (their cgroups) and of the whole host (here the nodes share
its cores), and the least memory the host had available. After the converged run it reads
each node container's memory from its cgroup (usage, as memory.current and podman stats
show it; working set; anonymous) and then removes the cluster (``metalslurm local down``)
unless ``--keep``. The results go to OUT/results.json after every size, each run's output
to OUT/logs/ as it runs.

Before a size is brought up, the host memory it takes is predicted from the sizes already
measured (the memory their cold configure took at its worst moment, and their node
containers' after the converged run, each fitted against N; the larger of the two); a size
predicted to take more than ``--budget-gib``, or to leave less than ``--reserve-gib``
available, is not run and the series stops there, saying why.

The summary: a table with each size's times and their ratio to the smallest size's; a
least-squares line per series (seconds = a + b N) and its value at 1,000 nodes; the
model (with F forks a task's per-host work runs in batches of F, so the slope per node is
about the per-host task time / F plus the per-host fixed cost the control side pays
serially); and the roles and tasks whose seconds grow most with N.

    .venv/bin/python -m bench.bench_configure_scale --nodes 2,8,16,32 \\
        --plot docs/lab/img/configure-scale-prepared.png
    .venv/bin/python -m bench.bench_configure_scale --nodes 2,8 --bare \\
        --out ~/.cache/metalslurm/cfgscale-bare       # the same from the bare node image
    .venv/bin/python -m bench.bench_configure_scale --replot \\
        --plot docs/lab/img/configure-scale-prepared.png   # the summary and plot of saved results

Results go to ``--out`` (default ``~/.cache/metalslurm/cfgscale``, bench/out_dir.py).
"""

from __future__ import annotations

import argparse
import configparser
import contextlib
import datetime
import json
import math
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.out_dir import default_out

REPO = Path(__file__).resolve().parents[1]
BASE_STACK = REPO / "bench" / "stacks" / "Pulumi.cold-2node.yaml"
ANSIBLE_CFG = REPO / "ansible" / "ansible.cfg"
DEFAULT_SIZES = (2, 8, 16, 32)
MAX_NODES = 150  # 10.78.(100+N).0/24 stays a valid, unused network
EXTRAPOLATE_TO = 1000
NAME_PREFIX = "ms-cfg-"
CONTROLLER = "ctl"
MIB = 1024 * 1024

BANNER = re.compile(r"^([A-Z][A-Z ]+[A-Z]) \*+$")
# profile_roles / profile_tasks lines: "name ------- 1.23s" (the name padded with dashes).
PROFILE_LINE = re.compile(r"^(?P<name>.+?) -* ?(?P<seconds>\d+\.\d+)s$")
RECAP_HOST = re.compile(r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
                        r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)\s+"
                        r"skipped=(?P<skipped>\d+)", re.M)
RECAP_KEYS = ("ok", "changed", "unreachable", "failed", "skipped")
SIZE_UNITS = {"b": 1, "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3, "tb": 1000 ** 4,
              "kib": 1024, "mib": 1024 ** 2, "gib": 1024 ** 3, "tib": 1024 ** 4}


# ---- the stack files -------------------------------------------------------------------

def cluster_name(n: int) -> str:
    return f"{NAME_PREFIX}{n}"


def private_cidr(n: int) -> str:
    """Each size its own network, so a size kept with --keep never meets another's."""
    if not 1 <= n <= MAX_NODES:
        raise ValueError(f"{n} nodes: this bench takes 1 to {MAX_NODES}")
    return f"10.78.{100 + n}.0/24"


def stack_config(base: Mapping[str, Any], base_dir: Path, n: int,
                 bare: bool = False) -> dict[str, Any]:
    """The stack document for N static 8 x H100 compute nodes, from ``base`` (a stack
    document read from ``base_dir``): its users and container artifacts kept (the pins have
    one owner, the base file), the mirror made absolute (the new file lives elsewhere). The
    nodes start from the prepared images (local up's default), or with ``bare`` from the
    bare node image."""
    config = dict(base["config"])
    for key in ("metalslurm:login", "metalslurm:topology", "metalslurm:elastic"):
        config.pop(key, None)  # no login node; a topology names the base's nodes
    config.update({
        "metalslurm:clusterName": cluster_name(n),
        "metalslurm:provider": "local",
        "metalslurm:privateCidr": private_cidr(n),
        "metalslurm:os": "debian13",
        "metalslurm:storage": {"backend": "none"},
        "metalslurm:computePools": [{"name": "gpu", "count": n, "elasticCount": 0,
                                     "gpuType": "h100", "gpuCount": 8}],
    })
    containers = dict(config.get("metalslurm:containers") or {})
    mirror = containers.get("mirror")
    if isinstance(mirror, str) and mirror and not mirror.startswith(("/", "http")):
        containers["mirror"] = str((base_dir / mirror).resolve())
        config["metalslurm:containers"] = containers
    local = dict(config.get("metalslurm:local") or {})
    local.pop("preparedImages", None)
    if bare:
        local["preparedImages"] = False
    if local:
        config["metalslurm:local"] = local
    else:
        config.pop("metalslurm:local", None)
    return {"config": config}


def write_stack(directory: Path, n: int, base_file: Path = BASE_STACK,
                bare: bool = False) -> Path:
    doc = stack_config(yaml.safe_load(base_file.read_text()), base_file.parent, n, bare)
    path = directory / f"Pulumi.{cluster_name(n)}.yaml"
    directory.mkdir(parents=True, exist_ok=True)
    image = "the bare node image" if bare else "the prepared images"
    path.write_text(f"# Written by bench/bench_configure_scale.py from {base_file.name}: "
                    f"{n} static compute node(s), from {image}.\n"
                    + yaml.safe_dump(doc, sort_keys=False))
    return path


def parse_sizes(text: str) -> list[int]:
    sizes = sorted({int(x) for x in text.split(",") if x.strip()})
    if not sizes or not all(1 <= n <= MAX_NODES for n in sizes):
        raise ValueError(f"--nodes {text!r}: give node counts from 1 to {MAX_NODES}, "
                         "comma-separated (2,8,16,32)")
    return sizes


# ---- what a run prints -------------------------------------------------------------------

def recap_sections(stdout: str) -> dict[str, list[str]]:
    """The lines under each banner (``PLAY RECAP``, ``ROLES RECAP``, ``TASKS RECAP``)."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in stdout.splitlines():
        found = BANNER.match(line.rstrip())
        if found:
            current = sections.setdefault(found.group(1), [])
        elif current is not None:
            current.append(line.rstrip())
    return sections


def parse_profile(lines: Iterable[str]) -> dict[str, float]:
    """``name ---- 1.23s`` lines as {name: seconds}, a name seen twice summed (profile_tasks
    lists a task once per play it runs in); the ``total`` line and the timestamp lines are
    left out."""
    seconds: dict[str, float] = {}
    for line in lines:
        found = PROFILE_LINE.match(line)
        if found and found.group("name") != "total":
            name = found.group("name").rstrip(" -")
            seconds[name] = round(seconds.get(name, 0.0) + float(found.group("seconds")), 2)
    return seconds


def parse_recap(stdout: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP: {host: {ok, changed, unreachable, failed, skipped}}."""
    text = stdout.split("PLAY RECAP", 1)[-1] if "PLAY RECAP" in stdout else ""
    return {m["host"]: {k: int(m[k]) for k in RECAP_KEYS} for m in RECAP_HOST.finditer(text)}


def steps_per_compute_node(recap: Mapping[str, Mapping[str, int]]) -> float:
    """The task steps (ok + skipped) a compute node went through, on average: the per-host
    results the control side handles for each node added."""
    steps = [h["ok"] + h["skipped"] for name, h in recap.items()
             if name not in (CONTROLLER, "localhost")]
    return round(sum(steps) / len(steps), 1) if steps else 0.0


def parse_memory_stat(text: str) -> dict[str, int]:
    """A cgroup's memory.stat (``key value`` lines)."""
    stat: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            stat[key] = int(value)
    return stat


def memory_figures(usage: int, stat: Mapping[str, int]) -> dict[str, float]:
    """MiB of one container from its cgroup (v1: memory.usage_in_bytes and the hierarchical
    ``total_*`` keys; v2: memory.current and ``anon``/``shmem``/``inactive_file``):

    - usage: what podman stats and memory.current show, page cache included;
    - working_set: usage less inactive file pages (cAdvisor's and the kubelet's figure);
    - anon: anonymous memory and tmpfs/shm, which cannot be dropped without swap.
    """
    if "total_rss" in stat:
        anon = stat["total_rss"] + stat.get("total_shmem", 0)
        inactive = stat.get("total_inactive_file", 0)
    else:
        anon = stat.get("anon", 0) + stat.get("shmem", 0)
        inactive = stat.get("inactive_file", 0)
    return {"usage": round(usage / MIB, 1), "working_set": round(max(usage - inactive, 0) / MIB, 1),
            "anon": round(anon / MIB, 1)}


def memory_summary(per_node: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Per figure (usage, working_set, anon): the compute nodes' mean MiB, the controller's,
    and the sum over all nodes."""
    summary: dict[str, float] = {}
    for figure in ("usage", "working_set", "anon"):
        compute = [v[figure] for k, v in per_node.items() if k != CONTROLLER]
        summary[f"compute_mean_{figure}_mib"] = (round(sum(compute) / len(compute), 1)
                                                 if compute else 0.0)
        summary[f"controller_{figure}_mib"] = per_node.get(CONTROLLER, {}).get(figure, 0.0)
        summary[f"total_{figure}_mib"] = round(sum(v[figure] for v in per_node.values()), 1)
    return summary


def ansible_settings(cfg_file: Path = ANSIBLE_CFG,
                     env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The forks, strategy and pipelining in effect: ansible.cfg, overridden by ANSIBLE_*
    variables as Ansible does (5, linear and off are Ansible's own defaults)."""
    env = os.environ if env is None else env
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=("#", ";"))
    parser.read(cfg_file)
    forks = env.get("ANSIBLE_FORKS") or parser.get("defaults", "forks", fallback=None) or "5"
    strategy = (env.get("ANSIBLE_STRATEGY")
                or parser.get("defaults", "strategy", fallback=None) or "linear")
    pipelining = (env.get("ANSIBLE_PIPELINING")
                  or parser.get("ssh_connection", "pipelining", fallback=None) or "False")
    return {"forks": int(forks), "strategy": strategy,
            "pipelining": pipelining.strip().lower() in ("1", "true", "yes", "on")}


# ---- fits and the model ------------------------------------------------------------------

@dataclass(frozen=True)
class Line:
    """seconds = intercept + slope * N, least squares."""

    intercept: float
    slope: float
    r2: float

    def at(self, n: float) -> float:
        return self.intercept + self.slope * n


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> Line:
    if len(xs) != len(ys) or len(xs) < 2 or len(set(xs)) < 2:
        raise ValueError("a line needs two or more points at two or more sizes")
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    intercept = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
    return Line(intercept, slope, 1.0 - ss_res / ss_tot if ss_tot else 1.0)


def per_host_task_seconds(slope: float, forks: int) -> float:
    """The model: with F forks a task's hosts run in batches of F, so each added node costs
    about (per-host task time) / F; read backwards, slope * F is the per-host task time it
    implies (an upper bound: fixed per-host costs the control side pays serially are in
    the slope too)."""
    return slope * forks


def growth(small: Mapping[str, float], large: Mapping[str, float], n_small: int,
           n_large: int) -> list[tuple[str, float, float, float]]:
    """(name, seconds at the smallest size, at the largest, added seconds per node) for
    every name in either, the fastest-growing first."""
    span = n_large - n_small
    rows = [(name, small.get(name, 0.0), large.get(name, 0.0),
             (large.get(name, 0.0) - small.get(name, 0.0)) / span if span else 0.0)
            for name in set(small) | set(large)]
    return sorted(rows, key=lambda r: (-r[3], r[0]))


def predict_host_gib(points: Sequence[tuple[int, float]], n: int) -> float | None:
    """The host memory (GiB) N nodes take, from the sizes measured (``points``: N, GiB): a
    line through them (never below the largest measured), or proportional to the N + 1
    machines with one size; None with none."""
    if not points:
        return None
    if len({p[0] for p in points}) < 2:
        n0, gib = points[-1]
        return gib * (n + 1) / (n0 + 1)
    line = fit_line([p[0] for p in points], [p[1] for p in points])
    return max(line.at(n), max(p[1] for p in points))


# ---- running it ----------------------------------------------------------------------------

@dataclass
class Run:
    """One configure run."""

    seconds: float
    changed: int
    ok: int
    failed: int
    unreachable: int
    rc: int
    ansible_cpu_s: float  # ansible-playbook and every process it waited for
    host_cpu_s: float
    host_min_available_gib: float
    controller_cpu_s: float = 0.0  # CPU seconds the controller's container used in the run
    compute_cpu_s: float = 0.0  # and all compute nodes' together
    steps_per_node: float = 0.0  # task steps (ok + skipped) per compute node
    ansible_main_cpu_s: float = 0.0  # ansible-playbook's own process (sampled each second)
    roles: dict[str, float] = field(default_factory=dict)
    tasks: dict[str, float] = field(default_factory=dict)
    log: str = ""


def host_busy_seconds(stat: str | None = None) -> float:
    """CPU seconds the host has been busy (all cores, /proc/stat's first line)."""
    text = stat if stat is not None else Path("/proc/stat").read_text()
    fields = [int(x) for x in text.splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    busy = sum(fields[:8]) - idle
    return busy / os.sysconf("SC_CLK_TCK")


def mem_available_gib(meminfo: str | None = None) -> float:
    text = meminfo if meminfo is not None else Path("/proc/meminfo").read_text()
    found = re.search(r"^MemAvailable:\s+(\d+) kB", text, re.M)
    return int(found.group(1)) / 1024 / 1024 if found else float("nan")


def mem_total_gib() -> float:
    found = re.search(r"^MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.M)
    return int(found.group(1)) / 1024 / 1024 if found else float("nan")


def process_cpu_seconds(stat: str) -> float:
    """A process's own CPU seconds (user + system, not its children's) from /proc/PID/stat."""
    fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RunWatch:
    """Sampled every second in a thread while a run goes: the least MemAvailable, and the
    CPU seconds of ansible-playbook's own process (``pid``, set once it is started: the
    serial loop that hands tasks to the workers and handles their results)."""

    def __init__(self) -> None:
        self.least = mem_available_gib()
        self.pid: int | None = None
        self.main_cpu = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            self.least = min(self.least, mem_available_gib())
            if self.pid is not None:
                # Exited between two samples: the last sample stands.
                with contextlib.suppress(OSError, IndexError, ValueError):
                    stat = Path(f"/proc/{self.pid}/stat").read_text()
                    self.main_cpu = process_cpu_seconds(stat)

    def __enter__(self) -> RunWatch:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.least = min(self.least, mem_available_gib())


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_configure(inventory: Path, log: Path, cgroups: Mapping[str, str]) -> Run:
    """The site playbook once on ``inventory``, as 'metalslurm configure' runs it, with the
    profile callbacks on; its output kept in ``log``; ``cgroups``: the node containers', for
    the CPU seconds they spend."""
    venv_bin = Path(sys.executable).parent
    env = dict(os.environ, ANSIBLE_CONFIG=str(ANSIBLE_CFG),
               ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_roles,ansible.posix.profile_tasks",
               PROFILE_TASKS_TASK_OUTPUT_LIMIT="all", PROFILE_TASKS_SORT_ORDER="descending",
               PROFILE_TASKS_SUMMARY_ONLY="true", PROFILE_ROLES_SUMMARY_ONLY="true",
               ANSIBLE_PYTHON_INTERPRETER="auto_silent", ANSIBLE_NOCOLOR="1",
               PATH=f"{venv_bin}{os.pathsep}{os.environ['PATH']}")
    cpu0, busy0, nodes0 = children_cpu_seconds(), host_busy_seconds(), node_cpu_seconds(cgroups)
    start = time.monotonic()
    log.parent.mkdir(parents=True, exist_ok=True)
    with RunWatch() as watch, log.open("w") as sink:
        # Its own process group: a bench stopped midway takes the playbook with it. The
        # output goes straight to the log, which can be followed while it runs.
        child = subprocess.Popen([str(venv_bin / "ansible-playbook"), "-i", str(inventory),
                                  "site.yml"], cwd=REPO / "ansible", env=env, stdout=sink,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        watch.pid = child.pid
        try:
            child.wait()
        except BaseException:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            raise
    seconds = time.monotonic() - start
    nodes = {k: v - nodes0.get(k, 0.0) for k, v in node_cpu_seconds(cgroups).items()}
    stdout = log.read_text()
    recap = parse_recap(stdout)
    sections = recap_sections(stdout)
    return Run(seconds=round(seconds, 2),
               changed=sum(h["changed"] for h in recap.values()),
               ok=sum(h["ok"] for h in recap.values()),
               failed=sum(h["failed"] for h in recap.values()),
               unreachable=sum(h["unreachable"] for h in recap.values()),
               rc=child.returncode,
               ansible_cpu_s=round(children_cpu_seconds() - cpu0, 2),
               ansible_main_cpu_s=round(watch.main_cpu, 2),
               host_cpu_s=round(host_busy_seconds() - busy0, 2),
               host_min_available_gib=round(watch.least, 2),
               controller_cpu_s=round(nodes.get(CONTROLLER, 0.0), 2),
               compute_cpu_s=round(sum(v for k, v in nodes.items() if k != CONTROLLER), 2),
               steps_per_node=steps_per_compute_node(recap),
               roles=parse_profile(sections.get("ROLES RECAP", [])),
               tasks=parse_profile(sections.get("TASKS RECAP", [])), log=str(log))


def metalslurm(*argv: str) -> float:
    """The project's CLI; seconds it took. A failure stops the bench."""
    start = time.monotonic()
    proc = subprocess.run([str(Path(sys.executable).parent / "metalslurm"), *argv], cwd=REPO,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BenchError(f"metalslurm {' '.join(argv)} failed ({proc.returncode}):\n"
                         f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return round(time.monotonic() - start, 2)


CGROUP_ROOT = Path("/sys/fs/cgroup")


def node_cgroups(cluster: str) -> dict[str, str]:
    """{node: cgroup path} of the cluster's running node containers."""
    names = subprocess.run(["podman", "ps", "--format", "{{.Names}}", "--filter",
                            f"name=^{cluster}-"], capture_output=True, text=True,
                           check=True).stdout.split()
    if not names:
        return {}
    lines = subprocess.run(["podman", "inspect", "--format", "{{.Name}} {{.State.CgroupPath}}",
                            *names], capture_output=True, text=True, check=True).stdout
    paths = dict(line.split(" ", 1) for line in lines.splitlines() if " " in line)
    return {name[len(cluster) + 1:]: path.strip() for name, path in paths.items()}


def _cgroup_file(path: str, controller: str, name: str) -> Path:
    if (CGROUP_ROOT / "cgroup.controllers").exists():  # v2: one tree
        return CGROUP_ROOT / path.lstrip("/") / name
    return CGROUP_ROOT / controller / path.lstrip("/") / name


def node_memory(cgroups: Mapping[str, str]) -> dict[str, dict[str, float]]:
    figures = {}
    for node, path in cgroups.items():
        usage = _cgroup_file(path, "memory", "memory.usage_in_bytes")
        if not usage.exists():
            usage = _cgroup_file(path, "memory", "memory.current")
        stat = parse_memory_stat(_cgroup_file(path, "memory", "memory.stat").read_text())
        figures[node] = memory_figures(int(usage.read_text()), stat)
    return figures


def node_cpu_seconds(cgroups: Mapping[str, str]) -> dict[str, float]:
    """CPU seconds each node container has used since it started."""
    seconds = {}
    for node, path in cgroups.items():
        v1 = _cgroup_file(path, "cpuacct", "cpuacct.usage")
        if v1.exists():
            seconds[node] = int(v1.read_text()) / 1e9
        else:
            stat = parse_memory_stat(_cgroup_file(path, "cpu", "cpu.stat").read_text())
            seconds[node] = stat.get("usage_usec", 0) / 1e6
    return seconds


def other_workload() -> list[str]:
    """Containers on this machine that are not this bench's (they share its cores)."""
    names = subprocess.run(["podman", "ps", "--format", "{{.Names}}"], capture_output=True,
                           text=True, check=False).stdout.split()
    return sorted(n for n in names if not n.startswith(NAME_PREFIX))


class BenchError(RuntimeError):
    pass


def measure_size(row: dict[str, Any], out: Path, keep: bool,
                 say: Callable[[str], None], bare: bool = False) -> None:
    """Bring up ``row['nodes']`` nodes, configure them twice, read their memory, and fill
    ``row`` in as it goes (a failure leaves what was measured before it)."""
    n = row["nodes"]
    stack = write_stack(out / "stacks", n, bare=bare)
    name = cluster_name(n)
    inventory = REPO / ".metalslurm" / name / "inventory.yml"
    row.update({"cluster": name, "stack": str(stack), "other_containers": other_workload(),
                "loadavg_before": Path("/proc/loadavg").read_text().split()[:3]})
    metalslurm("local", "down", "--stack", str(stack))
    row["available_before_gib"] = round(mem_available_gib(), 2)
    try:
        row["provision_s"] = metalslurm("local", "up", "--stack", str(stack), "--no-configure")
        say(f"  {name}: {n + 1} node containers up in {row['provision_s']:.1f} s")
        cgroups = node_cgroups(name)
        for label in ("cold", "converged"):
            run = run_configure(inventory, out / "logs" / f"{name}-{label}.log", cgroups)
            row[label] = asdict(run)
            say(f"  {name} {label}: {run.seconds:.1f} s, {run.changed} changed, {run.ok} ok, "
                f"rc {run.rc}, ansible CPU {run.ansible_cpu_s:.0f} s, host CPU "
                f"{run.host_cpu_s:.0f} s (controller {run.controller_cpu_s:.0f} s, compute nodes "
                f"{run.compute_cpu_s:.0f} s), least available "
                f"{run.host_min_available_gib:.1f} GiB")
            if run.rc != 0 or run.failed or run.unreachable:
                raise BenchError(f"{name} {label} configure failed; see {run.log}")
        per_node = node_memory(cgroups)
        row["memory_mib"] = per_node
        m = row["memory"] = memory_summary(per_node)
        say(f"  {name} memory (usage / working set / anon MiB): compute nodes "
            f"{m['compute_mean_usage_mib']:.0f} / {m['compute_mean_working_set_mib']:.0f} / "
            f"{m['compute_mean_anon_mib']:.0f} each, controller {m['controller_usage_mib']:.0f} / "
            f"{m['controller_working_set_mib']:.0f} / {m['controller_anon_mib']:.0f}")
    finally:
        row["other_containers_after"] = other_workload()
        if not keep:
            metalslurm("local", "down", "--stack", str(stack))


def host_cost_gib(row: Mapping[str, Any]) -> float:
    """The host memory a size took at the worst moment of its cold configure: what was
    available before it was brought up less the least available during the run."""
    return round(row["available_before_gib"] - row["cold"]["host_min_available_gib"], 2)


# ---- the report --------------------------------------------------------------------------

SERIES = (("cold", "cold configure"), ("converged", "converged configure"))


def completed(sizes: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The sizes whose two runs both finished."""
    return [s for s in sizes if "converged" in s and "memory" in s and "error" not in s]


def fits(sizes: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """A line per series (and for the control side's CPU), with its value at 1,000 nodes."""
    done = completed(sizes)
    xs = [s["nodes"] for s in done]
    out: dict[str, dict[str, float]] = {}
    if len(set(xs)) < 2:
        return out
    for key, metric in (("cold", "seconds"), ("converged", "seconds"),
                        ("cold_ansible_cpu", "ansible_cpu_s"),
                        ("converged_ansible_cpu", "ansible_cpu_s"),
                        ("cold_ansible_main_cpu", "ansible_main_cpu_s"),
                        ("converged_ansible_main_cpu", "ansible_main_cpu_s"),
                        ("cold_host_cpu", "host_cpu_s"), ("converged_host_cpu", "host_cpu_s"),
                        ("cold_compute_cpu", "compute_cpu_s"),
                        ("converged_compute_cpu", "compute_cpu_s")):
        run = key.split("_")[0]
        line = fit_line(xs, [s[run].get(metric, 0.0) for s in done])
        out[key] = {"intercept": round(line.intercept, 2), "slope": round(line.slope, 3),
                    "r2": round(line.r2, 4),
                    f"at_{EXTRAPOLATE_TO}": round(line.at(EXTRAPOLATE_TO), 1)}
    return out


def other_cpu_seconds(run: Mapping[str, float]) -> float:
    """The host's busy CPU seconds in a run that were not Ansible's or the nodes': the
    kernel's networking, podman, processes Ansible did not wait for (rusage counts only
    those), and any other workload on the machine (it shares the cores)."""
    return run["host_cpu_s"] - run["ansible_cpu_s"] - run.get("controller_cpu_s", 0.0) - run.get(
        "compute_cpu_s", 0.0)


def report(results: Mapping[str, Any], say: Callable[[str], None] = print) -> None:
    sizes = completed(results["sizes"])
    if not sizes:
        say("no size completed")
        return
    report_table(results, sizes, say)
    fitted = results.get("fits") or {}
    if not fitted:
        say("(one size: no line to fit)")
        return
    report_fits(results, fitted, say)
    report_model(results, sizes, fitted, say)
    report_growth(sizes, say)


def report_table(results: Mapping[str, Any], sizes: Sequence[Mapping[str, Any]],
                 say: Callable[[str], None]) -> None:
    """One row per completed size, ratios to the smallest; then the sizes skipped or failed."""
    settings = results["ansible"]
    forks = settings["forks"]
    base = sizes[0]
    say(f"\nconfigure cost as nodes grow ({settings['strategy']}, forks {forks}, pipelining "
        f"{'on' if settings['pipelining'] else 'off'}; {results['host']['cores']} cores, "
        f"{results['host']['mem_gib']:.0f} GiB; nodes from the "
        f"{results.get('images', 'bare')} image(s); ratios to N={base['nodes']} of this run)")
    say(f"{'N':>4} {'cold s':>7} {'ratio':>6} {'conv s':>7} {'ratio':>6} {'changed':>7} "
        f"{'ansible CPU s':>13} {'node CPU s':>10} {'other CPU s':>11} {'MiB/node':>13} "
        f"{'MiB ctl':>11} {'host GiB':>8}")
    say(f"{'':>4} {'':>7} {'':>6} {'':>7} {'':>6} {'(conv)':>7} {'cold/conv':>13} "
        f"{'cold/node':>10} {'cold/conv':>11} {'usage/anon':>13} {'usage/anon':>11} "
        f"{'cold':>8}")
    for s in sizes:
        c, v, m = s["cold"], s["converged"], s["memory"]
        say(f"{s['nodes']:>4} {c['seconds']:>7.1f} {c['seconds'] / base['cold']['seconds']:>6.2f} "
            f"{v['seconds']:>7.1f} {v['seconds'] / base['converged']['seconds']:>6.2f} "
            f"{v['changed']:>7} {c['ansible_cpu_s']:>6.0f}/{v['ansible_cpu_s']:<6.0f} "
            f"{c['compute_cpu_s'] / s['nodes']:>10.1f} "
            f"{other_cpu_seconds(c):>5.0f}/{other_cpu_seconds(v):<5.0f} "
            f"{m['compute_mean_usage_mib']:>6.0f}/{m['compute_mean_anon_mib']:<6.0f} "
            f"{m['controller_usage_mib']:>5.0f}/{m['controller_anon_mib']:<5.0f} "
            f"{host_cost_gib(s):>8.1f}")
    say("(node CPU: the compute containers' CPU seconds in the cold run per node; other CPU: "
        "the host's busy CPU seconds during the run that were neither Ansible's nor the "
        "nodes' (the kernel's networking, podman, processes Ansible did not wait for, any "
        "other workload); MiB after the converged run, usage "
        "= memory.current / podman stats, anon = anonymous + shmem; host GiB: the most host "
        "memory the size took during its cold configure)")
    for s in results["sizes"]:
        if s.get("skipped") or s.get("error"):
            say(f"N={s['nodes']}: {s.get('skipped') or s.get('error')}")


def report_fits(results: Mapping[str, Any], fitted: Mapping[str, Mapping[str, float]],
                say: Callable[[str], None]) -> None:
    """The least-squares line of each series, and its value at EXTRAPOLATE_TO nodes."""
    forks = results["ansible"]["forks"]
    say(f"\nleast-squares lines, seconds = a + b N, and their value at {EXTRAPOLATE_TO} nodes "
        f"(forks {forks}):")
    for key, label in (*SERIES, ("cold_ansible_cpu", "ansible CPU, cold"),
                       ("converged_ansible_cpu", "ansible CPU, converged"),
                       ("cold_ansible_main_cpu", "its main process, cold"),
                       ("converged_ansible_main_cpu", "its main process, conv."),
                       ("cold_compute_cpu", "compute nodes' CPU, cold"),
                       ("converged_compute_cpu", "compute nodes' CPU, conv."),
                       ("cold_host_cpu", "host CPU, cold"),
                       ("converged_host_cpu", "host CPU, converged")):
        f = fitted[key]
        say(f"  {label:<26} a {f['intercept']:7.1f} s  b {f['slope']:6.2f} s/node  "
            f"r2 {f['r2']:.3f}  -> {f[f'at_{EXTRAPOLATE_TO}'] / 60:6.1f} min at "
            f"{EXTRAPOLATE_TO}")


def report_model(results: Mapping[str, Any], sizes: Sequence[Mapping[str, Any]],
                 fitted: Mapping[str, Mapping[str, float]], say: Callable[[str], None]) -> None:
    """What the slopes mean: batches of forks, CPU, separate machines, per task step."""
    forks = results["ansible"]["forks"]
    cores = results["host"]["cores"]
    smallest = sizes[0]
    say(f"\nthe model: with F = {forks} forks a task's hosts run in batches of F, so each node "
        "adds (per-node task time) / F, plus what the control side pays per host (forking a "
        "worker, templating, handling the result: serial in ansible-playbook's loop)")
    batches = math.ceil((EXTRAPOLATE_TO + 1) / forks)
    for key, label in SERIES:
        slope = fitted[key]["slope"]
        host, ctl = fitted[f"{key}_host_cpu"]["slope"], fitted[f"{key}_ansible_cpu"]["slope"]
        main = fitted[f"{key}_ansible_main_cpu"]["slope"]
        nodes = fitted[f"{key}_compute_cpu"]["slope"]
        one_batch = smallest[key]["seconds"]
        say(f"  {label}: slope {slope:.2f} s/node")
        say(f"    batches: up to N = {forks - 1} every host of a task is in one batch of "
            f"{forks}, so the slope measured here is not batching; read as batches it would "
            f"mean {per_host_task_seconds(slope, forks):.0f} s of task time per node, against "
            f"{one_batch:.0f} s for the whole run at N={smallest['nodes']}")
        say(f"    CPU: the host's busy CPU grows {host:.2f} CPU-s/node (the compute node "
            f"containers {nodes:.2f}, ansible {ctl:.2f}, of which its main process "
            f"{main:.2f}); on {cores} cores that alone is {host / cores:.2f} s/node")
        say(f"    on separate machines: each batch of {forks} nodes does its own work in "
            f"parallel ({batches} batches x {one_batch:.0f} s = {batches * one_batch / 60:.0f} "
            f"min at {EXTRAPOLATE_TO} nodes, high: the controller's plays run once), and "
            f"ansible's main process stays serial: "
            f"{main:.2f} CPU-s/node, {main * EXTRAPOLATE_TO / 60:.0f} min at "
            f"{EXTRAPOLATE_TO} nodes whatever the forks")
        steps = sizes[-1][key].get("steps_per_node", 0.0)
        if steps:
            say(f"    per task step: a compute node goes through {steps:.0f} steps (ok + "
                f"skipped); each node adds {slope / steps * 1000:.0f} ms of wall time, "
                f"{ctl / steps * 1000:.0f} ms of ansible CPU and {main / steps * 1000:.0f} ms "
                "of its main process per step")


def report_growth(sizes: Sequence[Mapping[str, Any]], say: Callable[[str], None]) -> None:
    """The roles and tasks that grow most from the smallest size to the largest."""
    small, large = sizes[0], sizes[-1]
    if small["nodes"] == large["nodes"]:
        return
    for run in ("cold", "converged"):
        added = large[run]["seconds"] - small[run]["seconds"]
        for kind in ("roles", "tasks"):
            rows = growth(small[run][kind], large[run][kind], small["nodes"], large["nodes"])
            say(f"\n{run}: the {kind} that grow most from N={small['nodes']} to "
                f"N={large['nodes']} (the run grew {added:.0f} s, "
                f"{added / (large['nodes'] - small['nodes']):.2f} s/node):")
            for name, s0, s1, per_node in rows[:8 if kind == "roles" else 10]:
                share = (s1 - s0) / added if added else 0.0
                say(f"  {name[:70]:<70} {s0:7.1f} -> {s1:7.1f} s  {per_node:+6.2f} s/node  "
                    f"{share:5.0%}")


def plot(results: Mapping[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = completed(results["sizes"])
    fitted = results.get("fits") or {}
    forks = results["ansible"]["forks"]
    xs = [s["nodes"] for s in sizes]
    fig, (left, *panels) = plt.subplots(1, 3, figsize=(16, 5.4))
    for (key, label), colour in zip(SERIES, ("tab:red", "tab:blue"), strict=True):
        ys = [s[key]["seconds"] for s in sizes]
        left.plot(xs, ys, "o", color=colour, label=f"{label} (measured)")
        if key in fitted:
            f = fitted[key]
            grid = [0, max(xs)]
            left.plot(grid, [f["intercept"] + f["slope"] * x for x in grid], "--",
                      color=colour, label=f"fit {f['intercept']:.0f} + {f['slope']:.2f} N s; "
                      f"{EXTRAPOLATE_TO} nodes: {f[f'at_{EXTRAPOLATE_TO}'] / 3600:.1f} h")
        for x, y in zip(xs, ys, strict=True):
            left.annotate(f"{y:.0f}", (x, y), textcoords="offset points", xytext=(4, 4),
                          fontsize=8, color=colour)
    if xs and max(xs) >= forks:
        left.axvline(forks, color="grey", linestyle=":", linewidth=1)
        left.annotate(f"N = forks ({forks}): more hosts than workers", (forks, 0),
                      textcoords="offset points", xytext=(3, 6), fontsize=7, color="grey",
                      rotation=90, va="bottom")
    left.set_xlabel("static compute nodes N (+ 1 controller)")
    left.set_ylabel("configure wall time (s)")
    left.set_title(f"site.yml on N local nodes from the {results.get('images', 'bare')} "
                   f"image(s)\n({results['ansible']['strategy']}, forks {forks}, "
                   f"{results['host']['cores']} host cores)", fontsize=10)
    left.legend(fontsize=8, loc="upper left")
    for panel, run in zip(panels, ("cold", "converged"), strict=True):
        if len(sizes) >= 2:
            small, large = sizes[0], sizes[-1]
            top = [name for name, *_ in growth(small[run]["roles"], large[run]["roles"],
                                               small["nodes"], large["nodes"])[:7]]
            for name in top:
                panel.plot(xs, [s[run]["roles"].get(name, 0.0) for s in sizes], "o-",
                           label=name, markersize=4)
            panel.legend(fontsize=8, loc="upper left")
        panel.set_title(f"{run} configure: the roles that grow most with N", fontsize=10)
        panel.set_xlabel("static compute nodes N")
        panel.set_ylabel("seconds in the role (profile_roles)")
    for panel in (left, *panels):
        panel.set_xlim(0, max(xs) * 1.08 if xs else 1)
        panel.set_ylim(0, None)
        panel.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def git_revision() -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                          text=True, check=False)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                           capture_output=True, text=True, check=False).stdout.strip()
    return proc.stdout.strip() + ("+changes" if dirty else "")


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(f"stopped by signal {signum}")


def parse_args(argv: list[str] | None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_configure_scale",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default=",".join(map(str, DEFAULT_SIZES)),
                        help="compute node counts, comma-separated (default 2,8,16,32)")
    parser.add_argument("--out", type=Path, default=default_out("cfgscale"),
                        help="results.json, the stack files and each run's log go here")
    parser.add_argument("--plot", type=Path, help="write the plot (PNG) here")
    parser.add_argument("--keep", action="store_true",
                        help="leave each size's cluster running (each has its own network)")
    parser.add_argument("--budget-gib", type=float, default=18.0,
                        help="the most host memory a size may be predicted to use (GiB)")
    parser.add_argument("--reserve-gib", type=float, default=2.0,
                        help="the least host memory a size must be predicted to leave (GiB)")
    parser.add_argument("--bare", action="store_true",
                        help="start the nodes from the bare node image, not the prepared "
                             "images (local up's default); give it its own --out")
    parser.add_argument("--replot", action="store_true",
                        help="only print the summary and plot of OUT/results.json")
    return parser, parser.parse_args(argv)


def replot(results_file: Path, plot_path: Path | None) -> int:
    """The summary and plot of a saved results.json, its lines fitted again."""
    saved = json.loads(results_file.read_text())
    saved["fits"] = fits(saved["sizes"])
    report(saved)
    if plot_path:
        plot(saved, plot_path)
        print(f"plot: {plot_path}")
    return 0


def too_big(results: Mapping[str, Any], n: int, args: argparse.Namespace) -> str | None:
    """Why size ``n`` is not run (the host memory predicted from the sizes before it), or
    None."""
    done = completed(results["sizes"])
    during = predict_host_gib([(s["nodes"], host_cost_gib(s)) for s in done], n)
    nodes = predict_host_gib(
        [(s["nodes"], s["memory"]["total_working_set_mib"] / 1024) for s in done], n)
    available = mem_available_gib()
    if during is None or nodes is None:
        return None
    need = max(during, nodes)
    print(f"N={n}: predicted host memory {during:.1f} GiB at the worst moment of the cold "
          f"configure, {nodes:.1f} GiB in the node containers after it; "
          f"{available:.1f} GiB available now", flush=True)
    if need > args.budget_gib or available - need < args.reserve_gib:
        return (f"predicted {need:.1f} GiB (budget {args.budget_gib:.0f} GiB), which "
                f"would leave {available - need:.1f} GiB available (reserve "
                f"{args.reserve_gib:.0f} GiB); fitted to the sizes measured before it")
    return None


def run_sizes(results: dict[str, Any], sizes: Sequence[int], args: argparse.Namespace,
              results_file: Path) -> int:
    """Each size in turn, results.json written after each; stops before a size predicted
    too big, and after one that fails or whose second configure did not converge (a larger
    size would measure the same drift, only slower)."""
    rc = 0
    for n in sizes:
        why = too_big(results, n, args)
        if why:
            print(f"N={n}: not run: {why}", flush=True)
            results["sizes"].append({"nodes": n, "skipped": why})
            break
        print(f"N={n}:", flush=True)
        row: dict[str, Any] = {"nodes": n}
        results["sizes"].append(row)
        try:
            measure_size(row, args.out, args.keep, lambda m: print(m, flush=True), args.bare)
        except BenchError as exc:
            print(f"N={n}: {exc}", flush=True)
            row["error"] = str(exc)
            rc = 1
        finally:
            results["fits"] = fits(results["sizes"])
            results_file.write_text(json.dumps(results, indent=1) + "\n")
        if rc:
            break
        if row["converged"]["changed"]:
            print(f"N={n}: the converged configure changed {row['converged']['changed']} "
                  "task(s): not converged", flush=True)
            return 1
    return rc


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _stop)  # the cluster in hand is removed on the way out
    parser, args = parse_args(argv)
    results_file = args.out / "results.json"
    if args.replot:
        if not results_file.is_file():
            parser.error(f"--replot: no {results_file}; run the bench first")
        return replot(results_file, args.plot)
    try:
        sizes = parse_sizes(args.nodes)
    except ValueError as exc:
        parser.error(str(exc))
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "revision": git_revision(), "ansible": ansible_settings(),
        "host": {"cores": os.cpu_count(), "mem_gib": round(mem_total_gib(), 1)},
        "images": "bare" if args.bare else "prepared", "sizes": []}
    print(f"configure scale: N = {', '.join(map(str, sizes))}, from the {results['images']} "
          f"image(s); ansible {results['ansible']}; results in {results_file}", flush=True)
    rc = run_sizes(results, sizes, args, results_file)
    report(results)
    if args.plot and completed(results["sizes"]):
        plot(results, args.plot)
        print(f"plot: {args.plot}")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
