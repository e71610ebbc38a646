"""The scale lab's elastic run (bench/scale/elastic.py, podman_standin.py): the power programs'
real ``local`` driver against the podman API stand-in (here with a stand-in slurmd that only
writes its pid file and sleeps), the analysis of the programs' event log, and the command
line's refusals. The run itself is the benchmark (``python -m bench.scale.elastic``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from metalslurm_power.drivers import make_driver
from metalslurm_power.drivers.base import OFF, ON

from bench.scale import elastic
from bench.scale.podman_standin import failing_nodes

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "bench/scale/podman_standin.py"
NODES = [f"gpu-{i:04d}" for i in range(1, 21)]

# A "slurmd" for the stand-in to start: like slurmd -b -N NODE, it forks into the background
# and writes its pid file; it then sleeps until it is stopped.
FAKE_SLURMD = """\
#!/bin/sh
[ "$1" = -b ] && [ "$2" = -N ] || exit 64
node=$3
( echo "$@" >> "{log}"; exec sleep 300 ) &
echo $! > "{pids}/$node.pid"
"""


@pytest.fixture
def standin(tmp_path):
    """The stand-in on a unix socket in tmp_path, failing every 10th node's first start."""
    pids = tmp_path / "run"
    pids.mkdir()
    slurmd = tmp_path / "slurmd"
    slurmd.write_text(FAKE_SLURMD.format(log=tmp_path / "slurmd.log", pids=pids))
    slurmd.chmod(0o755)
    (tmp_path / "nodes.txt").write_text("\n".join(NODES) + "\n")
    sock = tmp_path / "podman.sock"
    record = tmp_path / "calls.jsonl"
    proc = subprocess.Popen(
        [sys.executable, str(STANDIN), "--socket", str(sock), "--record", str(record),
         "--nodes-file", str(tmp_path / "nodes.txt"), "--delay", "0.05", "--fail-every", "10",
         "--fail-mode", "once", "--slurmd", str(slurmd), "--spool", str(tmp_path / "spool"),
         "--pid-dir", str(pids)])
    # Until it accepts a connection: its socket file exists from bind(), before listen(),
    # and a call in between is refused (seen once on a loaded machine).
    for _ in range(200):
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as probe:
            probe.connect(str(sock))
            break
        time.sleep(0.05)
    driver = make_driver("local", {n: {"container": f"metalslurm-{n}", "socket": str(sock)}
                                   for n in NODES}, {})
    yield driver, record, pids
    proc.terminate()
    proc.wait(timeout=10)
    for pid_file in pids.glob("*.pid"):
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_failing_nodes_are_every_tenth_in_sorted_order():
    assert failing_nodes(list(reversed(NODES)), 10) == {"gpu-0010", "gpu-0020"}
    assert failing_nodes(NODES, 0) == set()
    assert len(failing_nodes([f"n{i:04d}" for i in range(1000)], 10)) == 100


def test_local_driver_powers_standin_machines_on_and_off(standin):
    driver, record, pids = standin
    on = driver.power_on(NODES[:12])
    assert [n for n, r in on.items() if not r.ok] == ["gpu-0010"]
    assert "injected failure" in on["gpu-0010"].error
    assert {r.power for n, r in on.items() if r.ok} == {ON}
    assert {r.address for n, r in on.items() if r.ok} == {"127.0.0.1"}
    assert sorted(p.stem for p in pids.glob("*.pid")) == [n for n in NODES[:12]
                                                          if n != "gpu-0010"]
    # The second start of a node that failed once succeeds (--fail-mode once).
    assert driver.power_on(["gpu-0010"])["gpu-0010"].ok
    status = driver.status(NODES[:13])
    assert [n for n, r in status.items() if r.power == OFF] == ["gpu-0013"]
    off = driver.power_off(NODES[:3], force=True)
    assert all(r.ok and r.power == OFF for r in off.values())
    assert {n: r.power for n, r in driver.status(NODES[:4]).items()} == {
        "gpu-0001": OFF, "gpu-0002": OFF, "gpu-0003": OFF, "gpu-0004": ON}
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    counted = Counter((c["action"], c["ok"]) for c in calls)
    assert counted[("start", False)] == 1 and counted[("start", True)] == 12
    assert counted[("stop", True)] == 3
    assert all(c["t"] - c["began"] >= 0.049 for c in calls)  # answered after the delay


def test_unknown_container_is_a_404_the_driver_reports(standin):
    driver, _, _ = standin
    other = make_driver("local", {"gpu-9999": {"container": "metalslurm-gpu-9999",
                                               "socket": driver.params["gpu-0001"]["socket"]}},
                        {})
    result = other.power_on(["gpu-9999"])["gpu-9999"]
    assert not result.ok and "HTTP 404" in result.error


def event(program, name, run, t, **fields):
    return {"program": program, "event": name, "run": run, "t": t, **fields}


EVENTS = [
    event("resume", "invoked", "a", 100.5, invoked_t=100.0, hostlist="gpu-[0001-0100]"),
    event("resume", "worker_start", "a", 100.6, count=100),
    event("resume", "invoked", "b", 161.0, invoked_t=160.9, hostlist="gpu-[0101-0150]"),
    event("resume", "worker_start", "b", 161.1, count=50),
    event("resume", "invoked", "c", 170.0, invoked_t=170.0, hostlist="gpu-0151"),
    event("resume", "worker_start", "c", 170.1, count=1),
    event("suspend", "invoked", "d", 300.0, invoked_t=300.0, hostlist="gpu-0001"),
    {"program": "resume", "phase": "driver", "event": "driver_end", "action": "power_on",
     "duration_s": 2.5},
    {"program": "resume", "phase": "driver", "event": "driver_end", "action": "power_on",
     "duration_s": 3.5},
    {"program": "resume", "phase": "driver", "event": "power_on", "node": "gpu-0001", "ok": True},
    {"program": "resume", "phase": "driver", "event": "power_on", "node": "gpu-0010", "ok": False},
]


def test_program_calls_pair_invocations_with_their_node_counts():
    calls = elastic.program_calls(EVENTS, "resume")
    assert [(c.t, c.nodes) for c in calls] == [(100.0, 100), (160.9, 50), (170.0, 1)]
    assert [c.hostlist for c in elastic.program_calls(EVENTS, "suspend")] == ["gpu-0001"]
    summary = elastic.summarize_calls(calls, began=90.0)
    assert summary == {"calls": 3, "nodes": 151, "first_s": 10.0, "last_s": 80.0,
                       "sizes": [100, 50, 1], "at_s": [10.0, 70.9, 80.0]}
    assert elastic.summarize_calls([], 0.0) == {"calls": 0}


def test_max_in_window_counts_nodes_per_minute():
    calls = elastic.program_calls(EVENTS, "resume")
    # 100 at t=100 alone in its minute; 50 at 160.9 and 1 at 170 share the next one (51).
    assert elastic.max_in_window([c.t for c in calls], [c.nodes for c in calls]) == 100
    assert elastic.max_in_window([0, 30, 59.9, 60.0], [10, 10, 10, 10]) == 30
    assert elastic.max_in_window([], []) == 0


def test_driver_calls_count_batches_and_nodes():
    d = elastic.driver_calls(EVENTS, "power_on")
    assert (d.batches, d.batch_seconds, d.nodes_ok, d.nodes_failed) == (2, [2.5, 3.5], 1, 1)


SINFO = """\
gpu-0001 idle~
gpu-0001 idle~
gpu-0002 alloc#
gpu-0003 down~
gpu-0004 idle%
gpu-0005 drain
"""


def test_state_counts_take_each_node_once_and_stuck_names_what_is_not_at_rest():
    counts = elastic.state_counts(SINFO)
    assert counts == Counter({"idle~": 1, "alloc#": 1, "down~": 1, "idle%": 1, "drain": 1})
    assert elastic.stuck(counts) == {"alloc#": 1, "down~": 1, "idle%": 1, "drain": 1}
    assert elastic.stuck(elastic.state_counts("gpu-0001 idle~\n")) == {}


def test_power_config_is_the_roles_shape_for_the_cloud_nodes():
    inventory = {"all": {"hosts": {
        "gpu-0001": {"metalslurm_node_state": "static",
                     "metalslurm_power": {"driver": "local", "container": "metalslurm-gpu-0001"}},
        "gpu-0002": {"metalslurm_node_state": "cloud",
                     "metalslurm_power": {"driver": "local", "container": "metalslurm-gpu-0002"}},
        "ctl": {}}}}
    config = elastic.power_config(inventory, {"resume_timeout": 120, "orphan_after": 120})
    assert config["nodes"] == {"gpu-0002": {"driver": "local", "container": "metalslurm-gpu-0002"}}
    assert (config["stuck_after"], config["orphan_after"], config["batch_size"]) == (120, 120, 50)
    # The programs' own parser takes it.
    from metalslurm_power.config import parse_config

    assert parse_config(config).driver_of("gpu-0002") == "local"


@pytest.mark.parametrize(("argv", "message"), [
    (["--nodes", "8"], "--nodes: between 32"),
    (["--nodes", "64", "--job-nodes", "65"], "--job-nodes: between 1 and --nodes (64)"),
    (["--delay", "-1"], "--delay: seconds between 0 and 60"),
    (["--fail-every", "-2"], "--fail-every: 0 (no failures) or more"),
])
def test_command_line_refuses_bad_numbers(argv, message, capsys, tmp_path):
    assert elastic.main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_the_programs_run_from_the_wheel_the_role_builds(tmp_path):
    """The lab runs the slurm_elastic role's wheel as it is (a pure-Python zip on PYTHONPATH)."""
    from ansible_collections.metalslurm.cluster.plugins.module_utils.wheel import build_wheel

    wheel = build_wheel(elastic.POWER_PROJECT, tmp_path)
    script = tmp_path / "metalslurm-reconcile"
    script.write_text(elastic.program_wrapper("reconcile", wheel.name)
                      .replace("/lab/power", str(tmp_path))
                      .replace("/usr/bin/python3", sys.executable))
    script.chmod(0o755)
    proc = subprocess.run([str(script), "--help"], capture_output=True, text=True, check=False,
                          env={"PATH": os.environ["PATH"]})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: metalslurm-reconcile")
