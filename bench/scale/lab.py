"""The scale lab's machinery: render this project's Slurm files for N simulated nodes, run the
real slurmctld and one real slurmd per node in one container, and measure it.

Why this route (docs/lab/scale-lab.md has the whole story): Debian 13's ``slurm-wlm-emulator``
(24.11.5) is the front-end build, but its daemons link the distribution's ordinary
``libslurmfull.so``, which refuses ``FrontendName`` ("without Slurm being configured/built
with the --enable-front-end option") while the front-end slurmctld refuses to start without
it ("No front end nodes defined"): unusable as packaged. Debian 13's ordinary slurmd takes
``-N <node>`` and slurm.conf takes a ``Port`` per node, so one container runs the ordinary
slurmctld and one ordinary slurmd per simulated node (about 3 MB of memory each), each
listening on its own port of 127.0.0.1, with ``%n`` in the slurmd paths.

What the lab changes in the rendered slurm.conf is ``LAB_SETTINGS`` and the node addresses,
nothing else; what it does not model is listed in ``NOT_MODELLED``.
"""

from __future__ import annotations

import hashlib
import math
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.slurmconf import (
    expand_hostlist,
)

from infra.providers.images import ensure_image
from infra.providers.podman import image_exists, podman, remove_containers

REPO = Path(__file__).resolve().parents[2]
CONTAINER = "metalslurm-scalelab"
RELEASE = "24.11"          # Debian 13's Slurm, the only one with topology/block
PORT_BASE = 20001          # slurmd of the i-th node listens on PORT_BASE + i
USERS = ("alice", "bob", "carol", "dave")   # the burst's submitters (uids 2001-2004)
PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
# The container's limits: a slurmd has 2 to 4 threads, and every thread counts against
# both (podman's default pids limit, 2048, stops at about 600 nodes).
RUN_LIMITS = ("--pids-limit=-1", "--ulimit", "nofile=16384:16384",
              "--ulimit", "nproc=32768:32768")

# The lab's changes to the rendered slurm.conf, each for a reason of the simulation.
LAB_SETTINGS: dict[str, str] = {
    # One slurmd per node on one host: per-node spool, pid and log files (%n: node name).
    "SlurmdSpoolDir": "/var/lib/slurm/slurmd/%n",
    "SlurmdPidFile": "/run/slurmd/%n.pid",
    "SlurmdLogFile": "/var/log/slurm/slurmd-%n.log",
    # Every slurmd sees the container's 2 CPUs and its memory: the node lines stand instead
    # (otherwise each node registers INVALID: 'Node configuration differs from hardware').
    # conmgr_threads=2: a slurmd of 24.11 starts 12 threads (8 connection workers), 4 with
    # this; 1,024 slurmds idle at 13,000 threads otherwise, and with a burst's slurmstepds
    # the host's pid_max (32,768) was reached: slurmctld died ('pthread_create error').
    "SlurmdParameters": "config_overrides,conmgr_threads=2",
    # No cgroup tree is delegated to a thousand slurmds in one container.
    "ProctrackType": "proctrack/linuxproc",
    "TaskPlugin": "task/none",
    "JobAcctGatherType": "jobacct_gather/none",
}
# A setting kept but pointed at a program that exists in the lab (the health checker is not
# installed there; its interval and CYCLE node state stay as rendered).
LAB_PROGRAMS = {"HealthCheckProgram": "/bin/true"}
# Settings left out (commented): each job's private /tmp (job_container/tmpfs) would give a
# thousand slurmds in one container one base and a mount namespace per job step; 24.11 has
# no job_container/none to name instead.
LAB_LEFT_OUT = ("JobContainerType",)
NODE_ADDRESS_KEYS = ("NodeAddr", "NodeHostname", "Port")

NOT_MODELLED = (
    "steps across nodes: the slurmstepds of one job cannot tell their nodes apart (srun -N2 "
    "fails with 'Node 0 already established stream'); batch jobs and one-node steps run",
    "the network: every message goes over 127.0.0.1, without latency, loss or a switch",
    "node hardware: every node reports the node line (config_overrides), GPUs are empty "
    "files named like the devices; no cgroups, no device binding, no CUDA_VISIBLE_DEVICES",
    "the nodes' CPU: all slurmds and job steps share the 2 cores with slurmctld",
    "the nodes' threads: every slurmd, job step and slurmctld thread takes a PID of one host "
    "(pid_max 32,768 here): each slurmd runs 2 connection workers, not 8",
    "accounting (no slurmdbd), the REST API, the prolog and epilog, the health checker",
    "each job's private /tmp and /dev/shm (JobContainerType left out)",
)

Log = Callable[[str], None]


class LabError(RuntimeError):
    """The lab could not be built, started or measured."""


# --------------------------------------------------------------------------- slurm.conf


def _tokens(text: str) -> list[tuple[str, str]]:
    out = []
    for token in text.split():
        key, _, value = token.partition("=")
        out.append((key, value))
    return out


def lab_slurm_conf(rendered: str) -> tuple[str, list[str]]:
    """The rendered slurm.conf with the lab's changes, and the node names in file order.

    Every NodeName record becomes one line per node with ``NodeHostname=localhost
    NodeAddr=127.0.0.1 Port=<PORT_BASE + i>`` and its other attributes unchanged."""
    out: list[str] = []
    nodes: list[str] = []
    seen: set[str] = set()
    settings_done = False
    for line in rendered.splitlines():
        stripped = line.strip()
        key = stripped.partition("=")[0] if "=" in stripped and not stripped.startswith("#") else ""
        if key == "NodeName":
            if not settings_done:
                out += _missing_settings(seen)
                settings_done = True
            pairs = _tokens(stripped)
            rest = " ".join(f"{k}={v}" for k, v in pairs[1:] if k not in NODE_ADDRESS_KEYS)
            for name in expand_hostlist(pairs[0][1]):
                port = PORT_BASE + len(nodes)
                nodes.append(name)
                out.append(f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 "
                           f"Port={port} {rest}".rstrip())
            continue
        if key == "SlurmctldHost":  # the controller's name, at the loopback address
            out.append(f"# scale lab: {stripped}")
            out.append(f"SlurmctldHost={stripped.partition('=')[2].split('(')[0]}(127.0.0.1)")
            continue
        if key in LAB_LEFT_OUT:
            out.append(f"# scale lab: {stripped}")
            continue
        if key in LAB_SETTINGS or key in LAB_PROGRAMS:
            seen.add(key)
            value = LAB_SETTINGS.get(key) or LAB_PROGRAMS[key]
            out.append(f"# scale lab: {stripped}")
            out.append(f"{key}={value}")
            continue
        out.append(line)
    if not nodes:
        raise LabError("the rendered slurm.conf has no NodeName line")
    return "\n".join(out) + "\n", nodes


def _missing_settings(seen: set[str]) -> list[str]:
    return [f"{k}={v}" for k, v in LAB_SETTINGS.items() if k not in seen]


def settings_of(conf: str) -> dict[str, str]:
    """slurm.conf's single-line settings (not NodeName/PartitionName records)."""
    out = {}
    for line in conf.splitlines():
        line = line.split("#", 1)[0].strip()
        key, sep, value = line.partition("=")
        if sep and key not in ("NodeName", "PartitionName", "NodeSet", "DownNodes"):
            out[key] = value
    return out


# --------------------------------------------------------------------------- rendering


def lab_inventory(nodes: Sequence[str], plugin: str, static: int | None = None,
                  elastic: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The default local stack's inventory (tests/slurm_render.py) with ``nodes`` as its
    8-GPU H100 compute nodes in every partition (the first ``static`` static, all when None,
    the rest elastic with the ``elastic`` timings over the provider's), no slurmdbd and no
    REST API."""
    from tests.slurm_render import inventory_with_nodes

    inventory = inventory_with_nodes(list(nodes), static)
    top = inventory["all"]
    if elastic is not None:
        top["vars"]["metalslurm_elastic"] = dict(elastic)
    top["children"].pop("slurmdbd", None)
    top["vars"]["metalslurm_rest"] = {"enabled": False}
    top["vars"]["metalslurm_topology"] = {**top["vars"]["metalslurm_topology"],
                                          "source": "ibnetdiscover", "plugin": plugin}
    return inventory


@dataclass(frozen=True)
class Rendered:
    slurm_conf: str      # as the lab runs it
    gres_conf: str
    topology_conf: str
    nodes: tuple[str, ...]
    seconds: float       # ansible-playbook's run


def render(workdir: Path, nodes: Sequence[str], topology_conf: str, plugin: str,
           tuning: bool, static: int | None = None,
           elastic: Mapping[str, int] | None = None) -> Rendered:
    """The controller role's own tasks/render.yml for ``nodes`` (Slurm 24.11), with the
    size tuning on or off, plus ``topology_conf``; written to ``workdir``/etc. ``static``
    and ``elastic``: as :func:`lab_inventory`."""
    from tests.slurm_render import run_render

    out = workdir / f"render-{'tuned' if tuning else 'untuned'}"
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    proc = run_render(out, (RELEASE,), {"slurm_controller_size_tuning": tuning},
                      inventory=lab_inventory(nodes, plugin, static, elastic), node_facts=False)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise LabError("the controller role could not render slurm.conf: "
                       + proc.stdout[-2000:])
    conf, names = lab_slurm_conf((out / RELEASE / "slurm.conf").read_text())
    if sorted(names) != sorted(nodes):
        raise LabError("the rendered slurm.conf does not list the lab's nodes")
    gres = (out / RELEASE / "gres.conf").read_text()
    etc = workdir / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    for name, text in (("slurm.conf", conf), ("gres.conf", gres),
                       ("topology.conf", topology_conf),
                       ("cgroup.conf", (out / RELEASE / "cgroup.conf").read_text())):
        (etc / name).write_text(text)
    (workdir / "nodes.txt").write_text("\n".join(names) + "\n")
    return Rendered(conf, gres, topology_conf, tuple(names), seconds)


# --------------------------------------------------------------------------- the container

_CONTAINERFILE = """\
FROM {base}
RUN apt-get update -qq \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends {packages} \\
 && rm -rf /var/lib/apt/lists/* \\
 && mkdir -p /opt/lab/bin && ln -sf /usr/sbin/slurmd-wlm /opt/lab/bin/slurmd \\
 && {useradds}
"""

# Runs in the container: the munge key (made here, never written outside the container),
# slurmctld, then one slurmd per line of /lab/nodes.txt, 16 started at a time. slurmd's
# program name must be 'slurmd' (Slurm tells its daemons apart by it): /opt/lab/bin/slurmd
# links the packaged binary (the node image diverts /usr/sbin/slurmd to a wrapper).
_START = """\
set -eu
for i in 0 1 2 3 4 5 6 7; do
    mknod -m 0666 /dev/nvidia$i c 195 $i 2>/dev/null || : > /dev/nvidia$i
done
install -d -o slurm -g slurm {state} {ctl_log} {ctl_run}
install -d /var/lib/slurm/slurmd /run/slurmd
install -d -o slurm -g slurm /var/log/slurm
cp /lab/etc/* /etc/slurm/
dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
install -d -o munge -g munge /run/munge
runuser -u munge -- /usr/sbin/munged --force
{before_slurmctld}
/usr/sbin/slurmctld
xargs -a /lab/nodes.txt -P 16 -I NODE \\
    sh -c 'mkdir -p /var/lib/slurm/slurmd/NODE && exec /opt/lab/bin/slurmd -N NODE'
"""


def lab_image(log: Log = print) -> str:
    """The lab's image: the project's cached Debian 13 node image with Slurm's packages."""
    base = ensure_image("debian13", log=log)
    useradds = " && ".join(f"useradd -m -u {2001 + i} {u}" for i, u in enumerate(USERS))
    text = _CONTAINERFILE.format(base=base, packages=" ".join(PACKAGES), useradds=useradds)
    ref = f"localhost/metalslurm-scalelab:{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    if image_exists(ref):
        return ref
    log(f"building {ref} (Slurm {RELEASE} packages over {base})")
    with tempfile.TemporaryDirectory() as context:
        (Path(context) / "Containerfile").write_text(text)
        podman("--runtime", "runc", "build", "-q", "-t", ref, context, timeout=900)
    return ref


@dataclass
class Lab:
    """One lab container. ``start`` replaces any container of an earlier run."""

    workdir: Path
    log: Log = print
    image: str = ""
    nodes: tuple[str, ...] = ()

    def start(self, rendered: Rendered, timeout: float | None = None,
              elastic_setup: str | None = None) -> float:
        """Start slurmctld and every slurmd; seconds until sinfo shows every node idle.
        With ``elastic_setup`` (shell lines run before slurmctld starts) no slurmd is started:
        the nodes are CLOUD nodes, ready when sinfo shows them all idle and powered down."""
        self.image = self.image or lab_image(self.log)
        self.stop()
        self.nodes = rendered.nodes
        settings = settings_of(rendered.slurm_conf)
        host = re.match(r"([^(]+)", settings["SlurmctldHost"])
        if not host:
            raise LabError("slurm.conf has no SlurmctldHost")
        lab_dir = self.workdir / "lab"
        lab_dir.mkdir(parents=True, exist_ok=True)
        (lab_dir / "start.sh").write_text(_START.format(
            state=settings["StateSaveLocation"],
            ctl_log=str(Path(settings["SlurmctldLogFile"]).parent),
            ctl_run=str(Path(settings["SlurmctldPidFile"]).parent),
            before_slurmctld=elastic_setup or ""))
        (lab_dir / "nodes.txt").write_text(
            "" if elastic_setup is not None else "\n".join(rendered.nodes) + "\n")
        (lab_dir / "all-nodes.txt").write_text("\n".join(rendered.nodes) + "\n")
        etc = lab_dir / "etc"
        etc.mkdir(exist_ok=True)
        for f in (self.workdir / "etc").iterdir():
            (etc / f.name).write_text(f.read_text())
        # The controller's name from slurm.conf, resolving to the loopback address.
        podman("--runtime", "runc", "run", "-d", "--name", CONTAINER, "--init",
               "--hostname", host.group(1), "--add-host", f"{host.group(1)}:127.0.0.1",
               "--label", "metalslurm.scalelab=1", *RUN_LIMITS,
               "-v", f"{lab_dir.resolve()}:/lab:ro", self.image, "sleep", "infinity")
        began = time.monotonic()
        self.sh("bash /lab/start.sh", timeout=600)
        limit = timeout or 120 + 0.2 * len(rendered.nodes)
        while True:
            idle = self.idle_count("idle~" if elastic_setup is not None else "idle")
            if idle == len(rendered.nodes):
                return time.monotonic() - began
            if time.monotonic() - began > limit:
                raise LabError(f"{idle} of {len(rendered.nodes)} nodes idle after {limit:.0f} s")
            time.sleep(1)

    def idle_count(self, state: str = "idle") -> int:
        """Nodes whose short state (sinfo's %t) is ``state``: idle, or idle~ (powered down)."""
        out = self.sh(f"sinfo -h -N -o '%N %t' | awk '$2 == \"{state}\" {{print $1}}' "
                      "| sort -u | wc -l", check=False)
        return int(out.strip() or 0) if out.strip().isdigit() else 0

    def sh(self, script: str, user: str | None = None, timeout: float = 600,
           check: bool = True) -> str:
        args = ["exec"] + (["-u", user] if user else []) + [CONTAINER, "bash", "-c", script]
        proc = podman(*args, check=False, timeout=timeout)
        if check and proc.returncode != 0:
            raise LabError(f"in the lab, {script[:80]!r} failed: "
                           f"{(proc.stderr or proc.stdout).strip()[-500:]}")
        return proc.stdout

    def popen(self, script: str, user: str | None = None) -> subprocess.Popen[str]:
        args = ["podman", "exec"] + (["-u", user] if user else []) + [CONTAINER, "bash", "-c",
                                                                      script]
        return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    def stop(self) -> None:
        remove_containers([CONTAINER])

    def slurmctld_usage(self) -> dict[str, float]:
        """slurmctld's CPU seconds (user + system) and memory (RSS, peak RSS) in KiB."""
        out = self.sh("p=$(pgrep -o -x slurmctld); getconf CLK_TCK; cut -d' ' -f14,15 "
                      "/proc/$p/stat; grep -E '^Vm(RSS|HWM):' /proc/$p/status")
        lines = out.split("\n")
        tick = int(lines[0])
        utime, stime = (int(x) for x in lines[1].split())
        mem = {m.group(1): float(m.group(2)) for m in re.finditer(r"Vm(RSS|HWM):\s+(\d+)", out)}
        return {"cpu_s": (utime + stime) / tick, "rss_kib": mem["RSS"], "hwm_kib": mem["HWM"]}

    def slurmd_memory_kib(self) -> float:
        """The proportional set size of every slurmd together (shared pages split)."""
        out = self.sh("for p in $(pgrep -x slurmd); do awk '/^Pss:/{print $2}' "
                      "/proc/$p/smaps_rollup; done | awk '{s+=$1} END {print s+0}'")
        return float(out.strip() or 0)


# --------------------------------------------------------------------------- sdiag


@dataclass(frozen=True)
class Sdiag:
    counters: dict[str, float]        # top-level "Jobs submitted: 10" and the like
    main: dict[str, float]            # main scheduler: "Mean cycle", "Max cycle", ...
    backfill: dict[str, float]
    rpcs: dict[str, tuple[int, int]]  # message type -> (count, average microseconds)


_NUMBER = re.compile(r"^\s*([A-Za-z][A-Za-z ()/_.-]*?):\s+(-?\d+(?:\.\d+)?)\s*$")
_RPC = re.compile(r"^\s*([A-Z][A-Z0-9_]+)\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:(\d+)")
# "Job states ts:  Sat Nov 28 05:21:01 2026 (1795843261)": when slurmctld last counted its
# pending and running jobs (the "Jobs pending" and "Jobs running" lines below it).
_JOB_STATES_TS = re.compile(r"^Job states ts:.*\((\d+)\)\s*$")


def parse_sdiag(text: str) -> Sdiag:
    """sdiag's text output (Slurm 22.05 to 24.11): counters, the main and backfill scheduler
    sections, and the RPC counts by message type."""
    counters: dict[str, float] = {}
    main: dict[str, float] = {}
    backfill: dict[str, float] = {}
    rpcs: dict[str, tuple[int, int]] = {}
    section = counters
    in_types = False
    for line in text.splitlines():
        if line.startswith("Main schedule statistics"):
            section, in_types = main, False
            continue
        if line.startswith("Backfilling stats"):
            section, in_types = backfill, False
            continue
        if line.startswith("Remote Procedure Call statistics by message type"):
            in_types = True
            continue
        if line.startswith("Remote Procedure Call statistics by user") or \
                line.startswith("Pending RPC statistics"):
            in_types = False
            section = {}
            continue
        if in_types:
            m = _RPC.match(line)
            if m:
                rpcs[m.group(1)] = (int(m.group(2)), int(m.group(3)))
            continue
        m = _JOB_STATES_TS.match(line)
        if m and section is counters:
            counters["Job states ts"] = float(m.group(1))
            continue
        m = _NUMBER.match(line)
        if m and m.group(1) not in section:
            section[m.group(1).strip()] = float(m.group(2))
    if "Jobs submitted" not in counters:
        raise LabError("not sdiag's output (no 'Jobs submitted' line)")
    return Sdiag(counters, main, backfill, rpcs)


def top_rpcs(sdiag: Sdiag, count: int = 6) -> list[tuple[str, int, int]]:
    ranked = sorted(sdiag.rpcs.items(), key=lambda kv: (-kv[1][0], kv[0]))
    return [(name, c, ave) for name, (c, ave) in ranked[:count]]


# --------------------------------------------------------------------------- the burst


@dataclass(frozen=True)
class Burst:
    jobs: int
    submitted: int
    submit_seconds: float
    start_seconds: float      # from the first submission (held: the release) until every
    finish_seconds: float     # job had started; ... until every one had ended
    sdiag: Sdiag              # held: from the release on
    usage_before: dict[str, float]
    usage_after: dict[str, float]
    refused: int              # sbatch calls that gave no job id
    held: bool = False        # submitted to a DOWN partition, then released in one update
    submit_sdiag: Sdiag | None = None   # held: what the submissions alone cost
    sinfo_ms: tuple[float, ...] = ()    # what a user waited for sinfo, polled in the run
    sdiag_unanswered: int = 0           # polls whose sdiag got no answer in MessageTimeout
    refusals: tuple[str, ...] = ()      # what sbatch said when it refused (the first 5 kinds)
    ended_otherwise: int = 0            # jobs gone from the queue outside sdiag's completed,
                                        # cancelled and failed counters (time limit, node fail)
    drained: tuple[str, ...] = ()       # "<nodes> <reason>" for nodes drained at the end

    @property
    def submits_per_s(self) -> float:
        return self.submitted / self.submit_seconds

    @property
    def starts_per_s(self) -> float:
        return self.submitted / self.start_seconds

    @property
    def cpu_seconds(self) -> float:
        return self.usage_after["cpu_s"] - self.usage_before["cpu_s"]


# Polled every half second while a burst runs: sdiag's counters, then how long a user's
# sinfo takes (node and partition read locks: it waits while the scheduler holds them).
PROBE_MARK = "\n== sinfo us: "
PROBE = ("sdiag; t=$(date +%s%N); sinfo -h -o %D >/dev/null; "
         f"printf '{PROBE_MARK.strip(chr(10))}%d\\n' $(( ($(date +%s%N) - t) / 1000 ))")


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0 to 100) by the nearest rank; None for no values."""
    ordered = sorted(v for v in values if v == v)   # NaN (a missing probe) left out
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def ended(counters: Mapping[str, float]) -> float:
    """Jobs that have left the queue, by sdiag's counters (cheap to ask for, unlike squeue
    over thousands of jobs, which would load the slurmctld being measured)."""
    return sum(counters.get(f"Jobs {how}", 0) for how in ("completed", "canceled", "failed"))


def queue_empty(counters: Mapping[str, float], since: float) -> bool:
    """sdiag's count of pending and running jobs, taken after ``since`` (epoch seconds), is 0.

    Jobs that end by their time limit or a node failure leave the queue without entering the
    completed, cancelled or failed counters: this ends a burst where ``ended`` never would
    (slurmctld recounts about once a minute)."""
    return (counters.get("Job states ts", 0) > since
            and counters.get("Jobs pending", -1) == 0 and counters.get("Jobs running", -1) == 0)


ONE_CPU_JOB = "-p debug -N1 -n1 --time=1 -o /dev/null -e /dev/null --wrap true"
# A whole node a job, as training jobs take them: at most one job step per node runs at once.
# A held burst of one-CPU jobs starts as many as the nodes' CPUs allow (224 a node), every
# slurmstepd in the one container: 10,000 released on 128 nodes reached 30,000 threads and
# slurmctld died ('_agent_retry: pthread_create error Resource temporarily unavailable').
WHOLE_NODE_JOB = "-p debug -N1 --exclusive --time=1 -o /dev/null -e /dev/null --wrap true"


def burst(lab: Lab, jobs: int, users: Sequence[str] = USERS,
          job_args: str = ONE_CPU_JOB,
          timeout: float = 3600, held: bool = False, partition: str = "debug") -> Burst:
    """``jobs`` short batch jobs, submitted by ``users`` at once (one sbatch per job, the
    users in parallel): how fast they go in, start and end, and what slurmctld spent.

    ``held``: the partition is DOWN while they are submitted (jobs queue, none starts) and
    set UP in one update: starts are then timed alone, not bounded by the submissions (one
    sbatch process each); sdiag is read after the submissions and reset at the release."""
    lab.sh("sdiag -r >/dev/null")
    if held:
        lab.sh(f"scontrol update PartitionName={partition} State=DOWN")
    released = not held
    try:
        before = lab.slurmctld_usage()
        share = [jobs // len(users) + (1 if i < jobs % len(users) else 0)
                 for i in range(len(users))]
        began = time.monotonic()
        procs = [lab.popen(f"for i in $(seq {n}); do sbatch --parsable {job_args} "
                           f"|| echo refused; done", user=u)
                 for u, n in zip(users, share, strict=True)]
        submitted = refused = 0
        why: dict[str, None] = {}   # sbatch's errors, each once, in order
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            ids = [x for x in out.split() if x.split(";")[0].isdigit()]
            submitted += len(ids)
            refused += out.split().count("refused")
            why.update((line.strip(), None) for line in (err or "").splitlines() if line.strip())
        submit_seconds = time.monotonic() - began
        submit_sdiag = None
        if held:
            submit_sdiag = sdiag_answer(lab)
            lab.sh("sdiag -r >/dev/null")
            began = time.monotonic()
            lab.sh(f"scontrol update PartitionName={partition} State=UP")
            released = True
        released_at = time.time()
        start_seconds = 0.0
        probes: list[float] = []
        unanswered = 0
        counters: dict[str, float] = {}
        while True:
            text, _, probe = lab.sh(PROBE).partition(PROBE_MARK)
            probes.append(float(probe.strip() or "nan") / 1000)
            now = time.monotonic() - began
            try:
                counters = parse_sdiag(text).counters
            except LabError:    # slurmctld too busy to answer within MessageTimeout
                unanswered += 1
                if now > timeout:
                    raise
                continue
            if not start_seconds and counters.get("Jobs started", 0) >= submitted:
                start_seconds = now
            if start_seconds and ended(counters) >= submitted:
                break
            if queue_empty(counters, released_at):
                start_seconds = start_seconds or now
                break
            if now > timeout:
                raise LabError(f"{submitted - ended(counters):.0f} jobs still queued after "
                               f"{timeout:.0f} s")
            time.sleep(0.5)
        finish_seconds = time.monotonic() - began
        after = lab.slurmctld_usage()
    finally:
        if not released:
            lab.sh(f"scontrol update PartitionName={partition} State=UP", check=False)
    drained = lab.sh(f"sinfo -h -p {partition} -t drain,draining,drained -o '%D %E'",
                     check=False)
    return Burst(jobs, submitted, submit_seconds, start_seconds, finish_seconds,
                 sdiag_answer(lab), before, after, refused, held, submit_sdiag,
                 tuple(probes), unanswered, tuple(why)[:5],
                 max(0, submitted - int(ended(counters))),
                 tuple(line.strip() for line in drained.splitlines() if line.strip()))


def sdiag_answer(lab: Lab, tries: int = 5) -> Sdiag:
    """sdiag, asked again while a busy slurmctld does not answer in time."""
    for attempt in range(tries):
        try:
            return parse_sdiag(lab.sh("sdiag"))
        except LabError:
            if attempt == tries - 1:
                raise
            time.sleep(2)
    raise AssertionError("unreachable")


def burst_summary(b: Burst) -> dict[str, Any]:
    s = b.sdiag
    return {
        "jobs": b.jobs, "submitted": b.submitted, "refused": b.refused,
        "submit_s": round(b.submit_seconds, 2), "start_s": round(b.start_seconds, 2),
        "finish_s": round(b.finish_seconds, 2),
        "submits_per_s": round(b.submits_per_s, 1), "starts_per_s": round(b.starts_per_s, 1),
        "main_mean_cycle_us": s.main.get("Mean cycle"),
        "main_max_cycle_us": s.main.get("Max cycle"),
        "main_cycles": s.main.get("Total cycles"),
        "bf_mean_cycle_us": s.backfill.get("Mean cycle"),
        "bf_max_cycle_us": s.backfill.get("Max cycle"),
        "bf_cycles": s.backfill.get("Total cycles"),
        "backfilled_jobs": s.backfill.get("Total backfilled jobs (since last slurm start)"),
        "top_rpcs": top_rpcs(s),
        "held": b.held,
        "sinfo_ms_p50": percentile(b.sinfo_ms, 50), "sinfo_ms_p95": percentile(b.sinfo_ms, 95),
        "sinfo_ms_max": percentile(b.sinfo_ms, 100), "sinfo_probes": len(b.sinfo_ms),
        "sdiag_unanswered": b.sdiag_unanswered, "refusals": list(b.refusals),
        "ended_otherwise": b.ended_otherwise,
        "drained_nodes": sum(int(d.split()[0]) for d in b.drained if d.split()[0].isdigit()),
        "drain_reasons": list(b.drained)[:5],
        "submit_top_rpcs": top_rpcs(b.submit_sdiag) if b.submit_sdiag else None,
        "submit_main_mean_cycle_us": b.submit_sdiag.main.get("Mean cycle")
        if b.submit_sdiag else None,
        "slurmctld_cpu_s": round(b.cpu_seconds, 2),
        "slurmctld_rss_mib": round(b.usage_after["rss_kib"] / 1024, 1),
        "slurmctld_peak_rss_mib": round(b.usage_after["hwm_kib"] / 1024, 1),
    }


def summary_line(label: str, row: Mapping[str, Any]) -> str:
    since = "after their release" if row.get("held") else "after the first submission"
    return (f"{label}: {row['submitted']} jobs, {row['submits_per_s']}/s in, "
            f"{row['starts_per_s']}/s started, all started {row['start_s']} s and done "
            f"{row['finish_s']} s {since}; main cycle "
            f"mean {row['main_mean_cycle_us']} us, backfill mean {row['bf_mean_cycle_us']} us; "
            f"slurmctld {row['slurmctld_cpu_s']} CPU s, {row['slurmctld_peak_rss_mib']} MiB peak"
            + (f"; {row['ended_otherwise']} ended outside sdiag's counters (time limit, node "
               "failure)" if row.get("ended_otherwise") else "")
            + (f"; nodes drained at the end: {', '.join(row['drain_reasons'])}"
               if row.get("drained_nodes") else ""))
