"""End-to-end tests: real local clusters of podman nodes, configured by the real roles.

The Debian 13 modules of a pytest run share one cluster (``debian13``: the lane's,
METALSLURM_E2E_LANE; tests/schedule.sh runs two lanes at once), brought up once per session
from nothing (leftovers of earlier runs removed first) and removed at the end; each module
leaves it as it found it: jobs finished, elastic nodes powered down, the stack config's
settings in place, so modules run in any order, and in either lane unless they name lane
a's addresses. The backup controller's module and the module of machines made anew share
one small cluster (``ha_cluster``), brought up once for both when they run in one session
(the backup controller's first: tests/schedule.sh). The Debian 12 module brings up its own
small cluster. This file holds the
fixtures and hooks only: what the modules share is in tests/e2e/cluster.py (evidence of a
failure in tests/e2e/evidence.py); no test module imports another, nor this file. Each
module's wall time, the CPU-seconds the machine was busy meanwhile, and those of the module's
own run on the host (pytest and the programs it ran and waited for) are printed at the
end of the run.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

import infra.ops.configure
from infra.ops.local import stack_name
from tests.e2e.cluster import (
    CURRENT_TEST,
    DEBIAN13_STACK,
    HA_CLUSTER,
    HA_ELASTIC,
    HA_STACK,
    HA_SUBMIT_HOST,
    REPO,
    RUNS,
    AnsibleRun,
    LocalStack,
    children_cpu,
    cluster_containers,
    debian13_lane,
    e2e_stack,
    mark_up,
    metalslurm,
)
from tests.e2e.evidence import remove_finished_runs, save_evidence

# Seconds per module (setup + tests + teardown), and of the shared work counted in the
# module that used it first: the terminal summary prints them.
_MODULE_SECONDS: dict[str, float] = defaultdict(float)
# CPU-seconds the whole machine spent busy while each module ran (its tests' setup, call and
# teardown): with the wall time it says how much of a module is waiting (on Slurm's timers,
# jobs, alerts) and how much is work, which is what the schedule of the runs rests on.
_MODULE_BUSY: dict[str, float] = defaultdict(float)
# CPU-seconds this pytest process and the programs it ran and waited for (Ansible and its
# forks, ssh, podman's CLI, metalslurm) spent while each module ran: the host's share of a
# module's own cost, whatever runs beside it. Its node containers' share is not in it.
_MODULE_OWN: dict[str, float] = defaultdict(float)
_SHARED: dict[str, float] = {}
# Where the failed tests' evidence went.
_EVIDENCE_DIRS: list[Path] = []


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.e2e)


def pytest_sessionstart(session):
    remove_finished_runs()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and report.when in ("setup", "call"):
        try:
            _EVIDENCE_DIRS.append(save_evidence(item.nodeid))
        except Exception as exc:  # evidence must never hide the failure it explains
            sys.stderr.write(f"could not save the evidence of {item.nodeid}: {exc}\n")


def _machine_busy_seconds() -> float:
    """CPU-seconds every CPU of this machine has spent busy since it booted (/proc/stat)."""
    with open("/proc/stat") as stat:
        fields = [int(f) for f in stat.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    """CPU-seconds of this process and of its children it has waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime + children_cpu()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    before, own = _machine_busy_seconds(), _own_seconds()
    CURRENT_TEST[0] = item.nodeid
    yield
    module = item.nodeid.split("::", 1)[0]
    _MODULE_BUSY[module] += _machine_busy_seconds() - before
    _MODULE_OWN[module] += _own_seconds() - own


def pytest_runtest_logreport(report):
    _MODULE_SECONDS[report.nodeid.split("::", 1)[0]] += report.duration


@pytest.fixture(scope="session", autouse=True)
def _ansible_runs():
    """Every run_playbook of the session in RUNS (tests/e2e/cluster.py; the CLI's are added
    there): what it ran (its playbook, tags, limit, check), its seconds and host CPU."""
    real = infra.ops.configure._run_ansible

    def recorded(argv, playbook, env, on_event, *args, **kwargs):
        start, cpu = time.monotonic(), children_cpu()
        # Each task's step: from its start to the next task's (the linear strategy runs a
        # task on every host before the next starts).
        steps: dict[str, float] = defaultdict(float)
        current = ["", start]

        def timed(event):
            if event.get("event") == "playbook_on_task_start":
                now = time.monotonic()
                steps[current[0]] += now - current[1]
                current[:] = [event.get("event_data", {}).get("task") or "", now]
            return on_event(event)

        try:
            return real(argv, playbook, env, timed, *args, **kwargs)
        finally:
            steps[current[0]] += time.monotonic() - current[1]
            options = [a for a in argv[1:] if a not in ("-i", argv[argv.index("-i") + 1])]
            RUNS.append(AnsibleRun(CURRENT_TEST[0], " ".join([Path(playbook).name, *options]),
                                   time.monotonic() - start, children_cpu() - cpu,
                                   sorted(steps.items(), key=lambda kv: -kv[1])[:3]))

    infra.ops.configure._run_ansible = recorded
    yield
    infra.ops.configure._run_ansible = real


def _report_runs(terminalreporter) -> None:
    """The runs of Ansible per module (count, seconds, host CPU-seconds) and the slowest
    ten; every run in .metalslurm/e2e-ansible-runs-<pid>.tsv for a closer look."""
    if not RUNS:
        return
    terminalreporter.section("runs of Ansible per module (run_playbook, the CLI's configure "
                             "and up): count, seconds, the host's CPU-seconds")
    per_module: dict[str, list[AnsibleRun]] = defaultdict(list)
    for run in RUNS:
        per_module[run.test.split("::", 1)[0]].append(run)
    for module, runs in sorted(per_module.items()):
        terminalreporter.write_line(f"{len(runs):4d} runs {sum(r.seconds for r in runs):8.1f} s "
                                    f"{sum(r.cpu for r in runs):8.1f} CPU-s  {module}")
    terminalreporter.write_line("the slowest ten, each with its slowest task steps:")
    for run in sorted(RUNS, key=lambda r: -r.seconds)[:10]:
        terminalreporter.write_line(f"{run.seconds:8.1f} s {run.cpu:7.1f} CPU-s  {run.test}  "
                                    f"{run.what[:120]}")
        for task, seconds in run.slowest:
            terminalreporter.write_line(f"{'':20}{seconds:7.1f} s  {task or '(start)'}")
    ledger = REPO / ".metalslurm" / f"e2e-ansible-runs-{os.getpid()}.tsv"
    ledger.parent.mkdir(exist_ok=True)
    ledger.write_text("".join(
        f"{r.test}\t{r.what}\t{r.seconds:.1f}\t{r.cpu:.1f}\t"
        + "; ".join(f"{task or '(start)'} {seconds:.1f} s" for task, seconds in r.slowest)
        + "\n" for r in RUNS))


def pytest_terminal_summary(terminalreporter):
    _report_runs(terminalreporter)
    if _EVIDENCE_DIRS:
        terminalreporter.section("evidence of the failed tests (saved before teardown)")
        for path in _EVIDENCE_DIRS:
            terminalreporter.write_line(str(path))
    if not _MODULE_SECONDS:
        return
    terminalreporter.section("e2e durations per module (setup + tests + teardown), the "
                             "machine's busy CPU-seconds meanwhile, and the host's CPU-seconds "
                             "of the module's own run (pytest and the programs it ran)")
    cores = os.cpu_count() or 1
    for module, seconds in sorted(_MODULE_SECONDS.items()):
        busy = _MODULE_BUSY.get(module, 0.0)
        share = busy / (seconds * cores) if seconds else 0.0
        terminalreporter.write_line(f"{seconds:8.1f} s  {busy:8.1f} CPU-s ({share:4.0%} of "
                                    f"{cores} cores), its own {_MODULE_OWN.get(module, 0.0):7.1f}"
                                    f" CPU-s  {module}")
    for what, seconds in _SHARED.items():
        terminalreporter.write_line(f"{seconds:8.1f} s  ({what}, counted in the module that "
                                    "used it first)")
    terminalreporter.write_line(f"{sum(_MODULE_SECONDS.values()):8.1f} s  total")


@pytest.fixture(scope="session", autouse=True)
def _needs_root_and_podman():
    problems = []
    if os.geteuid() != 0:
        problems.append("run as root")
    for tool in ("podman", "runc", "debootstrap"):
        if shutil.which(tool) is None:
            problems.append(f"install {tool} ('make deps')")
    if problems:
        pytest.fail("the e2e tests need a real local cluster: " + ", ".join(problems),
                    pytrace=False)


@pytest.fixture(scope="session")
def debian13():
    """This lane's Debian 13 cluster, brought up once from nothing and shared by every
    module of the run that tests it; removed at the end of the session."""
    lane = debian13_lane()
    stack = e2e_stack(DEBIAN13_STACK, lane)
    name = yaml.safe_load(stack.read_text())["config"]["metalslurm:clusterName"]
    cluster = LocalStack(stack, name, stack_name(stack),
                         subprocess.CompletedProcess(["local", "up"], 0, "", ""),
                         elastic=("gpu-003", "gpu-004"), submit_host="login-001")
    if os.environ.get("METALSLURM_E2E_REUSE"):
        # Developer shortcut: test against the cluster a previous 'local up' left running.
        mark_up(lane, 0.0)
        yield cluster
        return
    start = time.monotonic()
    try:
        metalslurm("local", "down", "--stack", str(stack))
        assert cluster_containers(cluster.name) == []
        cluster.up = metalslurm("local", "up", "--stack", str(stack))
    finally:
        mark_up(lane, time.monotonic() - start)
    _SHARED[f"Debian 13 cluster {name} brought up"] = time.monotonic() - start
    yield cluster
    metalslurm("local", "down", "--stack", str(stack))


@pytest.fixture(scope="session")
def ha_cluster():
    """The small cluster of the backup controller's module and of the machines made anew
    (HA_STACK: ctl and its backup ctl2, a login node, gpu-001 static, gpu-002
    launch-terminate), brought up once per session from nothing and removed at its end
    (the controller's machine started first, should a test have left it stopped)."""
    stack, name = e2e_stack(HA_STACK), HA_CLUSTER
    cluster = LocalStack(stack, name, stack_name(stack),
                         subprocess.CompletedProcess(["local", "up"], 0, "", ""),
                         elastic=HA_ELASTIC, submit_host=HA_SUBMIT_HOST)
    if os.environ.get("METALSLURM_E2E_REUSE"):
        # Developer shortcut: test against the cluster a previous 'local up' left running.
        yield cluster
        return
    start = time.monotonic()
    metalslurm("local", "down", "--stack", str(stack))
    assert cluster_containers(name) == []
    cluster.up = metalslurm("local", "up", "--stack", str(stack), timeout=2400)
    _SHARED[f"the backup controller's cluster {name} brought up"] = time.monotonic() - start
    try:
        assert cluster.up.returncode == 0, cluster.up.stdout[-4000:]
        yield cluster
    finally:
        subprocess.run(["podman", "start", f"{name}-ctl"], capture_output=True, check=False)
        metalslurm("local", "down", "--stack", str(stack))
        assert cluster_containers(name) == []
