"""The power programs (resume, suspend, resume-fail, reconcile) with a fake scontrol on PATH.

The fake (power_helpers/fake_scontrol.py) prints the line shape recorded from Slurm 24.11.5 and
applies the state transitions recorded there (tests/fixtures/slurm/). Driver calls go to a
recording stub driver, or to the real local driver pointed at a missing podman socket when a
power-on must fail; the drivers themselves are tested against real protocol servers in
test_power_drivers.py (stand-in machines) and tests/e2e/test_power_drivers.py (podman
containers).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from metalslurm_power import actions, join
from metalslurm_power.config import ConfigError, load_config, parse_config
from metalslurm_power.drivers.base import OFF, ON, NodeResult, PowerDriver
from metalslurm_power.eventlog import EventLog
from metalslurm_power.slurm import NodeState, Slurm, parse_show_node
from power_helpers.env import (
    FIXTURES,
    REPO,
    SCRIPTS,
    FakeSlurm,
    read_log,
    write_config,
)

MISSING_SOCKET = "/nonexistent/metalslurm-test/podman.sock"


class RecordingDriver(PowerDriver):
    """A stub driver for the programs' logic: remembers each batch, reports what it is told."""

    name = "local"
    batches: list[tuple[str, list[str]]] = []

    def __init__(self, params, credentials=None, power=None, address=None, fail=()):
        super().__init__(params, credentials)
        self.power = dict(power or {})
        self.address = address or {}
        self.fail = set(fail)

    def _result(self, node: str, power: str) -> NodeResult:
        if node in self.fail:
            return NodeResult.failed(node, "BMC said no")
        self.power[node] = power
        return NodeResult(node, True, power=power, address=self.address.get(node))

    def power_on(self, nodes: Sequence[str]) -> dict[str, NodeResult]:
        self.batches.append(("on", list(nodes)))
        return {n: self._result(n, ON) for n in nodes}

    def power_off(self, nodes: Sequence[str], force: bool = False) -> dict[str, NodeResult]:
        self.batches.append(("off-force" if force else "off", list(nodes)))
        return {n: self._result(n, OFF) for n in nodes}

    def status(self, nodes: Sequence[str]) -> dict[str, NodeResult]:
        self.batches.append(("status", list(nodes)))
        return {n: NodeResult(n, True, power=self.power.get(n, OFF)) for n in nodes}


@pytest.fixture()
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    fake = FakeSlurm(tmp_path / "slurm")
    monkeypatch.setenv("FAKE_SLURM_DIR", str(fake.root))
    return fake


def local_nodes(*names: str, socket: str = MISSING_SOCKET) -> dict[str, dict]:
    return {n: {"driver": "local", "container": f"ms-{n}", "socket": socket} for n in names}


def context(tmp_path: Path, fake: FakeSlurm, nodes: dict[str, dict], driver: RecordingDriver,
            dry_run: bool = False, **settings) -> actions.Context:
    config = load_config(write_config(tmp_path / "power.json", fake, nodes, **settings))
    log = EventLog(config.log_file, "test", dry_run=dry_run)
    return actions.Context(config=config, log=log,
                           slurm=Slurm(log, config.slurm_bin, dry_run=dry_run),
                           dry_run=dry_run, driver_factory=lambda name, params, creds: driver)


def run_program(program: str, hostlist: str, config: Path, fake: FakeSlurm, *extra: str,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``metalslurm-<program>``, the console script slurmctld runs."""
    return subprocess.run(
        [str(SCRIPTS / f"metalslurm-{program}"), hostlist, "--config", str(config), *extra],
        capture_output=True, text=True, env=fake.env(**(env or {})), timeout=60, check=False)


# --- scontrol output parsing (recorded Slurm 24.11.5 output) -------------------------------

RECORDED_STATES = {
    "MIXED+CLOUD+NOT_RESPONDING+POWERING_UP": ("MIXED", False, True, False),
    "DOWN+CLOUD+NOT_RESPONDING+POWERING_UP": ("DOWN", False, True, False),
    "DOWN+CLOUD+POWER_DOWN+NOT_RESPONDING": ("DOWN", False, False, True),
    "IDLE+CLOUD+POWER_DOWN+NOT_RESPONDING": ("IDLE", False, False, True),
    "DOWN+CLOUD+POWERED_DOWN": ("DOWN", True, False, False),
    "IDLE+CLOUD+POWERED_DOWN": ("IDLE", True, False, False),
    "IDLE+CLOUD+POWER_DOWN+POWERED_DOWN": ("IDLE", True, False, True),
}


def recorded_lines() -> dict[str, str]:
    lines = (FIXTURES / "scontrol-show-node-24.11-cloud-states.txt").read_text().splitlines()
    return {line.split("State=")[1].split()[0]: line for line in lines}


@pytest.mark.parametrize("state", sorted(RECORDED_STATES))
def test_parse_recorded_cloud_state(state: str) -> None:
    node = next(iter(parse_show_node(recorded_lines()[state]).values()))
    base, powered_down, powering_up, powering_down = RECORDED_STATES[state]
    assert (node.base, node.powered_down, node.powering_up, node.powering_down) == (
        base, powered_down, powering_up, powering_down), node


def test_parse_recorded_reason_keeps_spaces() -> None:
    node = parse_show_node(recorded_lines()["DOWN+CLOUD+POWERED_DOWN"])["gpu-003"]
    assert node.reason == "ResumeTimeout reached [slurm@2026-11-22T12:55:05]"


def test_parse_recorded_registered_nodes() -> None:
    text = (FIXTURES / "scontrol-show-node-24.11-registered.txt").read_text()
    nodes = parse_show_node(text)
    assert {n: (s.state, s.addr) for n, s in nodes.items()} == {
        "gpu-001": ("IDLE", "gpu-001"), "gpu-002": ("IDLE", "gpu-002")}


# --- hostlists, batches, config ----------------------------------------------------------

def test_expand_hostlist_with_scontrol(tmp_path: Path, fake: FakeSlurm) -> None:
    slurm = Slurm(EventLog(tmp_path / "log", "test"), str(fake.bin))
    assert slurm.expand("gpu-[001-003],cpu-[1,3]") == [
        "gpu-001", "gpu-002", "gpu-003", "cpu-1", "cpu-3"]
    assert fake.calls() == [["show", "hostnames", "gpu-[001-003],cpu-[1,3]"]]


def test_empty_hostlist_is_a_no_op(tmp_path: Path, fake: FakeSlurm) -> None:
    config = write_config(tmp_path / "power.json", fake, local_nodes("gpu-001"))
    proc = run_program("resume", "", config, fake, "--foreground")
    assert proc.returncode == 0, proc.stderr
    assert fake.calls() == []
    end = read_log(tmp_path / "power.log")[-1]
    assert (end["event"], end["note"]) == ("program_end", "empty hostlist: no-op")


@pytest.mark.parametrize(("count", "size", "expected"), [
    (5, 2, [2, 2, 1]), (4, 2, [2, 2]), (1, 50, [1]), (0, 3, []),
])
def test_batches(count: int, size: int, expected: list[int]) -> None:
    names = [f"n{i}" for i in range(count)]
    got = list(actions.batches(names, size))
    assert [len(b) for b in got] == expected
    assert [n for b in got for n in b] == names


def test_driver_called_in_batches(tmp_path: Path, fake: FakeSlurm) -> None:
    names = [f"gpu-{i:03d}" for i in range(1, 6)]
    fake.set_nodes({n: "IDLE+CLOUD+POWERING_UP" for n in names})
    RecordingDriver.batches = []
    ctx = context(tmp_path, fake, local_nodes(*names), RecordingDriver({}), batch_size=2)
    assert actions.resume(ctx, names) == 0
    assert RecordingDriver.batches == [
        ("on", names[0:2]), ("on", names[2:4]), ("on", names[4:5])]


def test_config_problems_are_all_listed() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"batch_size": 0, "nodes": {
            "a": {"driver": "redfish"}, "b": {"driver": "smoke-signals"},
            "c": {"driver": "oci", "mode": "launch-terminate"}}})
    text = str(err.value)
    for expected in ("batch_size", "nodes.a.endpoint", "nodes.b.driver",
                     "nodes.c.compartment_id", "nodes.c.subnet_id"):
        assert expected in text


@pytest.mark.parametrize(("key", "value", "message"), [
    ("power_on_attempts", 0, "power_on_attempts: must be an integer >= 1, got 0"),
    ("power_on_attempts", "3", "power_on_attempts: must be an integer >= 1, got '3'"),
    ("power_on_attempts", True, "power_on_attempts: must be an integer >= 1, got True"),
    ("status_batches", 0, "status_batches: must be an integer >= 1, got 0"),
    ("power_on_retry_delay", -1, "power_on_retry_delay: must be a number of seconds >= 0"),
])
def test_bad_retry_and_batch_settings_are_refused(key: str, value: object, message: str) -> None:
    raw = {"stuck_after": 60, "orphan_after": 60, key: value}
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config(raw)


def test_a_config_without_the_providers_times_is_refused() -> None:
    """stuck_after and orphan_after depend on the provider's machines: the program has no
    default for them (their owner is module_utils/elastic.py; the role writes them)."""
    with pytest.raises(ConfigError) as err:
        parse_config({"nodes": {}})
    assert "stuck_after: required" in str(err.value)
    assert "orphan_after: required" in str(err.value)
    config = parse_config({"stuck_after": 1200, "orphan_after": 900})
    assert (config.stuck_after, config.orphan_after) == (1200.0, 900.0)


def test_credentials_never_logged(tmp_path: Path, fake: FakeSlurm) -> None:
    fake.set_nodes({"gpu-001": "MIXED+CLOUD+NOT_RESPONDING+POWERING_UP"})
    config = write_config(tmp_path / "power.json", fake, local_nodes("gpu-001"))
    run_program("resume", "gpu-001", config, fake, "--foreground")
    assert "s3cr3t-never-logged" not in (tmp_path / "power.log").read_text()


# --- resume ------------------------------------------------------------------------------

def test_resume_sets_nodeaddr_and_hostname(tmp_path: Path, fake: FakeSlurm) -> None:
    fake.set_nodes({"gpu-001": "IDLE+CLOUD+POWERING_UP", "gpu-002": "IDLE+CLOUD+POWERING_UP"})
    driver = RecordingDriver({}, address={"gpu-001": "10.77.0.21"})
    ctx = context(tmp_path, fake, local_nodes("gpu-001", "gpu-002"), driver)
    assert actions.resume(ctx, ["gpu-001", "gpu-002"]) == 0
    assert fake.updates() == [
        ["update", "nodename=gpu-001", "nodeaddr=10.77.0.21", "nodehostname=gpu-001"]]


def test_failed_power_on_returns_node_to_pool(tmp_path: Path, fake: FakeSlurm) -> None:
    """The real local driver fails (no podman socket): the node must end up idle~."""
    fake.set_nodes({"gpu-001": "MIXED+CLOUD+NOT_RESPONDING+POWERING_UP"})
    config = write_config(tmp_path / "power.json", fake, local_nodes("gpu-001"))
    proc = run_program("resume", "gpu-001", config, fake, "--foreground")
    assert proc.returncode == 1, proc.stderr
    assert fake.states() == {"gpu-001": "IDLE+CLOUD+POWERED_DOWN"}
    update = fake.updates()[0]
    assert update[:3] == ["update", "nodename=gpu-001", "state=POWER_DOWN_FORCE"]
    assert update[3].startswith("reason=metalslurm: power on failed: PodmanError")
    events = {e["event"]: e for e in read_log(tmp_path / "power.log")}
    assert events["power_on"]["ok"] is False and "podman API" in events["power_on"]["error"]
    assert events["back_in_pool"]["ok"] is True


def test_failed_power_on_of_a_down_node_is_resumed_first(tmp_path: Path,
                                                         fake: FakeSlurm) -> None:
    """DOWN + POWER_DOWN_FORCE alone sticks at DOWN+POWER_DOWN (recorded on 24.11)."""
    fake.set_nodes({"gpu-001": "DOWN+CLOUD+NOT_RESPONDING+POWERING_UP"},
                   reasons={"gpu-001": "Not responding"})
    ctx = context(tmp_path, fake, local_nodes("gpu-001"), RecordingDriver({}, fail={"gpu-001"}))
    assert actions.resume(ctx, ["gpu-001"]) == 1
    assert [u[2] for u in fake.updates()] == ["state=RESUME", "state=POWER_DOWN_FORCE"]
    assert fake.states() == {"gpu-001": "IDLE+CLOUD+POWERED_DOWN"}


def test_one_failed_node_does_not_touch_the_others(tmp_path: Path, fake: FakeSlurm) -> None:
    fake.set_nodes({"gpu-001": "IDLE+CLOUD+POWERING_UP", "gpu-002": "IDLE+CLOUD+POWERING_UP"})
    RecordingDriver.batches = []
    ctx = context(tmp_path, fake, local_nodes("gpu-001", "gpu-002"),
                  RecordingDriver({}, fail={"gpu-002"}))
    actions.resume(ctx, ["gpu-001", "gpu-002"])
    assert all(u[1] == "nodename=gpu-002" for u in fake.updates())
    assert ("off-force", ["gpu-002"]) in RecordingDriver.batches
    assert fake.states()["gpu-001"] == "IDLE+CLOUD+POWERING_UP"


class FlakyDriver(RecordingDriver):
    """Fails a node's first ``times`` power-on calls (a BMC that times out), then works."""

    def __init__(self, params, flaky: dict[str, int]):
        super().__init__(params)
        self.left = dict(flaky)

    def power_on(self, nodes: Sequence[str]) -> dict[str, NodeResult]:
        self.batches.append(("on", list(nodes)))
        out = {}
        for n in nodes:
            if self.left.get(n, 0) > 0:
                self.left[n] -= 1
                out[n] = NodeResult.failed(n, "BMC timed out")
            else:
                out[n] = self._result(n, ON)
        return out


def test_a_power_on_that_fails_once_is_tried_again_and_no_job_is_requeued(
        tmp_path: Path, fake: FakeSlurm) -> None:
    """Returning a node requeues its job (two minutes' BeginTime, then ResumeRate again):
    a BMC that times out once must cost a retry, not that."""
    fake.set_nodes({"gpu-001": "IDLE+CLOUD+POWERING_UP", "gpu-002": "IDLE+CLOUD+POWERING_UP"})
    RecordingDriver.batches = []
    slept: list[float] = []
    ctx = context(tmp_path, fake, local_nodes("gpu-001", "gpu-002"),
                  FlakyDriver({}, {"gpu-002": 1}), power_on_retry_delay=7)
    ctx.sleep = slept.append
    assert actions.resume(ctx, ["gpu-001", "gpu-002"]) == 0
    assert RecordingDriver.batches == [("on", ["gpu-001", "gpu-002"]), ("on", ["gpu-002"])]
    assert slept == [7.0]
    assert fake.updates() == []  # nothing returned to the pool
    retry = [e for e in read_log(tmp_path / "power.log") if e["event"] == "power_on_retry"]
    assert [(e["nodes"], e["attempt"], e["of"], e["errors"]) for e in retry] == [
        (["gpu-002"], 2, 3, ["BMC timed out"])]


@pytest.mark.parametrize(("attempts", "calls"), [(1, 1), (3, 3)])
def test_a_node_that_keeps_failing_is_returned_after_its_attempts(
        tmp_path: Path, fake: FakeSlurm, attempts: int, calls: int) -> None:
    fake.set_nodes({"gpu-001": "IDLE+CLOUD+POWERING_UP"})
    RecordingDriver.batches = []
    ctx = context(tmp_path, fake, local_nodes("gpu-001"), FlakyDriver({}, {"gpu-001": 99}),
                  power_on_attempts=attempts)
    assert actions.resume(ctx, ["gpu-001"]) == 1
    assert [b for b in RecordingDriver.batches if b[0] == "on"] == [("on", ["gpu-001"])] * calls
    assert fake.states() == {"gpu-001": "IDLE+CLOUD+POWERED_DOWN"}


class SlowStatusDriver(RecordingDriver):
    """Counts how many status batches run at once. Each batch waits (at most 10 s) until
    ``expect`` batches have started, so a loaded machine that starts the pool's threads
    late still sees them together, then holds its batch 0.2 s more, so a pool that allowed
    more than ``expect`` would start one more meanwhile."""

    def __init__(self, params, expect: int):
        super().__init__(params)
        self.changed = threading.Condition()
        self.expect = expect
        self.running = self.most = 0

    def status(self, nodes: Sequence[str]) -> dict[str, NodeResult]:
        with self.changed:
            self.running += 1
            self.most = max(self.most, self.running)
            self.changed.notify_all()
            self.changed.wait_for(lambda: self.most >= self.expect, timeout=10)
        time.sleep(0.2)
        with self.changed:
            self.running -= 1
        return {n: NodeResult(n, True, power=OFF) for n in nodes}


@pytest.mark.parametrize(("status_batches", "most"), [(1, 1), (3, 3)])
def test_status_batches_are_read_several_at_a_time_and_power_actions_never(
        tmp_path: Path, fake: FakeSlurm, status_batches: int, most: int) -> None:
    names = [f"gpu-{i:03d}" for i in range(1, 9)]  # 4 batches of 2
    driver = SlowStatusDriver({}, most)
    ctx = context(tmp_path, fake, local_nodes(*names), driver, status_batches=status_batches)
    results = actions.call_driver(ctx, "status", names)
    assert sorted(results) == names and all(r.power == OFF for r in results.values())
    assert driver.most == most
    RecordingDriver.batches = []
    actions.call_driver(ctx, "power_off", names)
    assert [b[1] for b in RecordingDriver.batches] == [names[i:i + 2] for i in range(0, 8, 2)]


def test_resume_of_a_node_missing_from_the_config(tmp_path: Path, fake: FakeSlurm) -> None:
    fake.set_nodes({"gpu-009": "IDLE+CLOUD+POWERING_UP"})
    ctx = context(tmp_path, fake, local_nodes("gpu-001"), RecordingDriver({}))
    assert actions.resume(ctx, ["gpu-009"]) == 1
    assert fake.states() == {"gpu-009": "IDLE+CLOUD+POWERED_DOWN"}


def test_settle_timeout_leaves_the_rest_to_reconcile(tmp_path: Path, fake: FakeSlurm,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SUSPEND_S", "30")  # SuspendTimeout longer than we wait
    fake.set_nodes({"gpu-001": "IDLE+CLOUD+POWERING_UP"})
    ctx = context(tmp_path, fake, local_nodes("gpu-001"), RecordingDriver({}, fail={"gpu-001"}),
                  settle_timeout=0.3)
    actions.resume(ctx, ["gpu-001"])
    last = read_log(tmp_path / "power.log")[-1]
    assert (last["event"], last["ok"]) == ("back_in_pool", False)
    assert "reconcile" in last["error"]


# --- suspend / resume-fail ---------------------------------------------------------------

def test_suspend_powers_off_without_touching_slurm(tmp_path: Path, fake: FakeSlurm) -> None:
    fake.set_nodes({"gpu-001": "IDLE+CLOUD+POWERING_DOWN"})
    RecordingDriver.batches = []
    ctx = context(tmp_path, fake, local_nodes("gpu-001"), RecordingDriver({}))
    assert actions.suspend(ctx, ["gpu-001"]) == 0
    assert RecordingDriver.batches == [("off", ["gpu-001"])]
    assert fake.updates() == []


def test_resume_fail_after_resume_timeout(tmp_path: Path, fake: FakeSlurm) -> None:
    """Recorded 24.11: after ResumeTimeout the node is DOWN+CLOUD+POWERED_DOWN and stays DOWN."""
    fake.set_nodes({"gpu-003": "DOWN+CLOUD+POWERED_DOWN"},
                   reasons={"gpu-003": "ResumeTimeout reached"})
    config = write_config(tmp_path / "power.json", fake, local_nodes("gpu-003"))
    proc = run_program("resume-fail", "gpu-003", config, fake, "--foreground")
    assert proc.returncode == 1  # the machine could not be reached to power it off
    assert fake.updates() == [["update", "nodename=gpu-003", "state=RESUME"]]
    assert fake.states() == {"gpu-003": "IDLE+CLOUD+POWERED_DOWN"}


# --- dry run, detach, crash --------------------------------------------------------------

@pytest.mark.parametrize("how", ["flag", "config"])
def test_dry_run_changes_nothing(tmp_path: Path, fake: FakeSlurm, how: str) -> None:
    fake.set_nodes({"gpu-001": "MIXED+CLOUD+NOT_RESPONDING+POWERING_UP"})
    config = write_config(tmp_path / "power.json", fake, local_nodes("gpu-001"),
                          dry_run=how == "config")
    extra = ["--dry-run"] if how == "flag" else []
    proc = run_program("resume", "gpu-001", config, fake, "--foreground", *extra)
    assert proc.returncode == 0, proc.stderr
    assert fake.updates() == []
    assert fake.states() == {"gpu-001": "MIXED+CLOUD+NOT_RESPONDING+POWERING_UP"}
    events = read_log(tmp_path / "power.log")
    assert all(e.get("dry_run") for e in events)
    power_on = [e for e in events if e["event"] == "power_on"]
    assert power_on == [pytest.approx(power_on[0])] and power_on[0]["skipped"] == "dry run"


def test_programs_return_at_once_and_work_detached(tmp_path: Path, fake: FakeSlurm) -> None:
    fake.set_nodes({"gpu-001": "MIXED+CLOUD+NOT_RESPONDING+POWERING_UP"})
    config = write_config(tmp_path / "power.json", fake, local_nodes("gpu-001"))
    # The detached work's first scontrol call waits for a file made only after the program
    # returned: a program that waited for its work would never return (run_program's timeout).
    release = tmp_path / "release"
    proc = run_program("resume", "gpu-001", config, fake,
                       env={"FAKE_SCONTROL_WAIT_FOR": str(release)})
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr
    assert not any(e["event"] == "program_end" for e in read_log(tmp_path / "power.log"))
    release.touch()
    deadline = time.monotonic() + 20
    events: list[dict] = []
    while time.monotonic() < deadline:
        events = read_log(tmp_path / "power.log")
        if any(e["event"] == "program_end" for e in events):
            break
        time.sleep(0.1)
    by_event = {e["event"]: e for e in events}
    assert "program_end" in by_event, events
    invoked, detached = by_event["invoked"], by_event["detached"]
    assert detached["pid"] != invoked["pid"]
    assert detached["sid"] != invoked["pid"]  # own session: not killed with slurmctld's group
    assert fake.states() == {"gpu-001": "IDLE+CLOUD+POWERED_DOWN"}


def test_crash_is_logged_with_traceback(tmp_path: Path, fake: FakeSlurm) -> None:
    config = write_config(tmp_path / "power.json", fake, local_nodes("gpu-001"),
                          slurm_bin=str(tmp_path / "no-slurm-here"))
    proc = run_program("suspend", "gpu-001", config, fake, "--foreground")
    assert proc.returncode == 1
    crash = read_log(tmp_path / "power.log")[-1]
    assert crash["event"] == "crash"
    assert "SlurmError" in crash["error"] and "Traceback" in crash["traceback"]


def test_bad_config_is_reported_to_slurmctld(tmp_path: Path, fake: FakeSlurm) -> None:
    config = tmp_path / "power.json"
    config.write_text(json.dumps({"nodes": {"gpu-001": {"driver": "telepathy"}}}))
    proc = run_program("resume", "gpu-001", config, fake)
    assert proc.returncode == 2
    assert "nodes.gpu-001.driver" in proc.stderr


@pytest.mark.parametrize("program", ["resume", "suspend", "resume-fail", "reconcile"])
def test_console_scripts_run_the_programs(tmp_path: Path, fake: FakeSlurm, program: str) -> None:
    config = write_config(tmp_path / "power.json", fake, local_nodes("gpu-001"))
    proc = run_program(program, "", config, fake, "--foreground", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    ends = [e for e in read_log(tmp_path / "power.log") if e["event"] == "program_end"]
    assert [(e["program"], e["rc"]) for e in ends] == [(program, 0)]


# --- reconcile ---------------------------------------------------------------------------

NOW = 1_800_000_000.0


def node(state: str, reason: str = "") -> NodeState:
    base, *flags = state.split("+")
    return NodeState(name="n", base=base, flags=frozenset(flags), reason=reason)


@pytest.mark.parametrize(("state", "reason", "power", "started", "expected"), [
    ("IDLE+CLOUD+POWERED_DOWN", "", ON, None, ["power_off"]),  # orphan keeps billing
    ("IDLE+CLOUD+POWERED_DOWN", "", OFF, None, []),
    ("IDLE+CLOUD+POWERING_DOWN", "", ON, None, []),  # SuspendProgram is on it
    ("MIXED+CLOUD+NOT_RESPONDING+POWERING_UP", "", OFF, NOW - 900, ["return"]),
    ("MIXED+CLOUD+NOT_RESPONDING+POWERING_UP", "", OFF, NOW - 30, []),  # still booting
    ("MIXED+CLOUD+NOT_RESPONDING+POWERING_UP", "", OFF, None, []),  # resume just started
    ("MIXED+CLOUD+NOT_RESPONDING+POWERING_UP", "", ON, NOW - 900, []),  # ResumeTimeout's job
    ("DOWN+CLOUD+POWERED_DOWN", "ResumeTimeout reached [slurm@x]", OFF, None, ["resume"]),
    ("DOWN+CLOUD+POWERED_DOWN", "ResumeTimeout reached [slurm@x]", ON, None,
     ["resume", "power_off"]),
    ("DOWN+CLOUD+POWERED_DOWN", "disk replaced, do not use [admin@x]", OFF, None, []),
    ("DOWN+CLOUD+NOT_RESPONDING", "metalslurm: power on failed", ON, None, ["return"]),
    ("DOWN+CLOUD+NOT_RESPONDING", "bad DIMM [admin@x]", ON, None, []),
    ("IDLE+CLOUD", "", ON, None, []),  # running a node Slurm uses
    ("ALLOCATED+CLOUD", "", ON, None, []),
])
def test_reconcile_decisions(state: str, reason: str, power: str, started: float | None,
                             expected: list[str]) -> None:
    got = actions.decide({"n": node(state, reason)}, {"n": NodeResult("n", True, power=power)},
                         {} if started is None else {"n": started}, NOW, stuck_after=600)
    assert [d.action for d in got] == expected


@pytest.mark.parametrize(("on_for", "expected"), [
    (None, ["wait"]),  # first seen on: maybe started by hand, its slurmd may still register
    (119, ["wait"]),
    (120, ["power_off"]),
])
def test_a_machine_on_while_powered_down_gets_orphan_after_to_register(
        on_for: float | None, expected: list[str]) -> None:
    got = actions.decide({"n": node("IDLE+CLOUD+POWERED_DOWN")},
                         {"n": NodeResult("n", True, power=ON)}, {}, NOW, stuck_after=600,
                         on_since={} if on_for is None else {"n": NOW - on_for},
                         orphan_after=120)
    assert [d.action for d in got] == expected


def test_reconcile_unknown_power_changes_nothing() -> None:
    got = actions.decide({"n": node("IDLE+CLOUD+POWERED_DOWN")},
                         {"n": NodeResult.failed("n", "BMC unreachable")}, {}, NOW, 600)
    assert got == []


def test_reconcile_program(tmp_path: Path, fake: FakeSlurm) -> None:
    fake.set_nodes({"gpu-001": "IDLE+CLOUD+POWERED_DOWN",
                    "gpu-002": "DOWN+CLOUD+POWERED_DOWN",
                    "gpu-003": "IDLE+CLOUD"},
                   reasons={"gpu-002": "ResumeTimeout reached"})
    RecordingDriver.batches = []
    driver = RecordingDriver({}, power={"gpu-001": ON, "gpu-003": ON})
    ctx = context(tmp_path, fake, local_nodes("gpu-001", "gpu-002", "gpu-003"), driver,
                  batch_size=10, orphan_after=0)
    assert actions.reconcile(ctx, ["gpu-001", "gpu-002", "gpu-003"]) == 0
    assert ("off-force", ["gpu-001"]) in RecordingDriver.batches
    assert driver.power == {"gpu-001": OFF, "gpu-003": ON}
    assert fake.updates() == [["update", "nodename=gpu-002", "state=RESUME"]]
    assert fake.states()["gpu-002"] == "IDLE+CLOUD+POWERED_DOWN"


def test_reconcile_stops_a_machine_on_while_powered_down_only_after_orphan_after(
        tmp_path: Path, fake: FakeSlurm) -> None:
    fake.set_nodes({"gpu-001": "IDLE+CLOUD+POWERED_DOWN", "gpu-002": "IDLE+CLOUD+POWERED_DOWN"})
    RecordingDriver.batches = []
    driver = RecordingDriver({}, power={"gpu-001": ON, "gpu-002": ON})
    ctx = context(tmp_path, fake, local_nodes("gpu-001", "gpu-002"), driver, orphan_after=60)
    actions.reconcile(ctx, ["gpu-001", "gpu-002"])
    assert driver.power == {"gpu-001": ON, "gpu-002": ON}  # first seen on: waited for
    state = json.loads(ctx.config.state_file.read_text())
    first_seen = state["on_while_powered_down"]
    assert sorted(first_seen) == ["gpu-001", "gpu-002"]
    # gpu-002's slurmd registered meanwhile; gpu-001 is still on after orphan_after.
    fake.set_nodes({"gpu-001": "IDLE+CLOUD+POWERED_DOWN", "gpu-002": "IDLE+CLOUD"})
    state["on_while_powered_down"]["gpu-001"] -= 61
    ctx.config.state_file.write_text(json.dumps(state))
    actions.reconcile(ctx, ["gpu-001", "gpu-002"])
    assert driver.power == {"gpu-001": OFF, "gpu-002": ON}
    assert json.loads(ctx.config.state_file.read_text())["on_while_powered_down"] == {}
    decisions = [(e["node"], e["action"]) for e in read_log(tmp_path / "power.log")
                 if e["event"] == "reconcile_decision"]
    assert decisions == [("gpu-001", "wait"), ("gpu-002", "wait"), ("gpu-001", "power_off")]


@pytest.mark.parametrize("given", [[], ["--orphan-after", "0"]], ids=["config's", "0"])
def test_reconcile_in_the_foreground_prints_its_summary_and_takes_orphan_after(
        tmp_path: Path, fake: FakeSlurm, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], given: list[str]) -> None:
    """The playbook powers off the machines it has just configured that Slurm holds powered
    down with --orphan-after 0; the timer waits the config's orphan_after (600 s here)."""
    from functools import partial

    from metalslurm_power import cli

    fake.set_nodes({"gpu-001": "IDLE+CLOUD+POWERED_DOWN"})
    driver = RecordingDriver({}, power={"gpu-001": ON})
    monkeypatch.setattr(actions, "Context", partial(
        actions.Context, driver_factory=lambda name, params, creds: driver))
    config = write_config(tmp_path / "power.json", fake, local_nodes("gpu-001"),
                          state_file=str(tmp_path / "state.json"))
    rc = cli.main("reconcile", ["gpu-001", "--config", str(config), "--foreground", *given])
    assert rc == 0
    off = ["gpu-001"] if given else []
    assert json.loads(capsys.readouterr().out) == {
        "checked": 1, "powered_off": off, "power_off_failed": [], "returned": [],
        "resumed": []}
    assert driver.power == {"gpu-001": OFF if given else ON}


def test_a_power_off_that_fails_is_named_and_fails_the_reconcile(
        tmp_path: Path, fake: FakeSlurm, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Only the machines that went off are powered_off; one left on is named, and the
    program fails, so the playbook does not report the machines off."""
    from functools import partial

    from metalslurm_power import cli

    class Failing(RecordingDriver):
        def power_off(self, nodes: Sequence[str], force: bool = False) -> dict[str, NodeResult]:
            done = super().power_off([n for n in nodes if n != "gpu-002"], force)
            self.power["gpu-002"] = ON
            return {**done, "gpu-002": NodeResult.failed("gpu-002", "BMC timed out")}

    fake.set_nodes({"gpu-001": "IDLE+CLOUD+POWERED_DOWN", "gpu-002": "IDLE+CLOUD+POWERED_DOWN"})
    driver = Failing({}, power={"gpu-001": ON, "gpu-002": ON})
    monkeypatch.setattr(actions, "Context", partial(
        actions.Context, driver_factory=lambda name, params, creds: driver))
    config = write_config(tmp_path / "power.json", fake, local_nodes("gpu-001", "gpu-002"),
                          state_file=str(tmp_path / "state.json"))
    rc = cli.main("reconcile", ["gpu-[001-002]", "--config", str(config), "--foreground",
                                "--orphan-after", "0"])
    assert rc == 1
    summary = json.loads(capsys.readouterr().out)
    assert (summary["powered_off"], summary["power_off_failed"]) == (["gpu-001"], ["gpu-002"])
    assert driver.power == {"gpu-001": OFF, "gpu-002": ON}


@pytest.mark.parametrize("value", ["-1", "soon", "nan"])
def test_reconcile_refuses_an_orphan_after_that_is_not_seconds(
        tmp_path: Path, fake: FakeSlurm, value: str) -> None:
    config = write_config(tmp_path / "power.json", fake, local_nodes("gpu-001"))
    proc = run_program("reconcile", "gpu-001", config, fake, "--foreground",
                       "--orphan-after", value)
    assert proc.returncode == 2
    assert f"argument --orphan-after: {value!r} is not a number of seconds (0 or more)" \
        in proc.stderr, proc.stderr
    assert not (tmp_path / "power.log").exists()


def test_reconcile_dry_run(tmp_path: Path, fake: FakeSlurm) -> None:
    fake.set_nodes({"gpu-001": "IDLE+CLOUD+POWERED_DOWN"})
    RecordingDriver.batches = []
    driver = RecordingDriver({}, power={"gpu-001": ON})
    ctx = context(tmp_path, fake, local_nodes("gpu-001"), driver, dry_run=True, orphan_after=0)
    actions.reconcile(ctx, ["gpu-001"])
    assert RecordingDriver.batches == [("status", ["gpu-001"])]
    decision = [e for e in read_log(tmp_path / "power.log")
                if e["event"] == "reconcile_decision"]
    assert [(d["node"], d["action"]) for d in decision] == [("gpu-001", "power_off")]


def test_power_log_gives_the_resume_timeline(tmp_path: Path, fake: FakeSlurm) -> None:
    import importlib.util

    path = REPO / "bench/power_log.py"
    spec = importlib.util.spec_from_file_location("power_log", path)
    power_log = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(power_log)
    fake.set_nodes({"gpu-001": "IDLE+CLOUD+POWERING_UP"})
    ctx = context(tmp_path, fake, local_nodes("gpu-001"),
                  RecordingDriver({}, address={"gpu-001": "10.77.0.21"}))
    ctx.log.program = "resume"
    ctx.log.event("invoked", phase="program")
    ctx.log.event("worker_start", phase="program", nodes=["gpu-001"])
    actions.resume(ctx, ["gpu-001"])
    timeline = power_log.resume_timeline(power_log.read_events(tmp_path / "power.log"), "gpu-001")
    order = ["invoked", "driver_start", "driver_end", "powered_on", "nodeaddr_set"]
    assert all(timeline[k] is not None for k in order), timeline
    assert [timeline[k] for k in order] == sorted(timeline[k] for k in order)
    assert timeline["ok"] is True


# --- machines made anew: join requests and the join service --------------------------------

def test_resume_asks_the_join_service_for_launched_machines_only(
        tmp_path: Path, fake: FakeSlurm) -> None:
    fake.set_nodes({"gpu-001": "IDLE+CLOUD+POWERING_UP", "gpu-002": "IDLE+CLOUD+POWERING_UP"})
    requests = tmp_path / "requests"
    requests.mkdir()
    nodes = local_nodes("gpu-001", "gpu-002")
    nodes["gpu-002"]["mode"] = "launch-terminate"
    ctx = context(tmp_path, fake, nodes, RecordingDriver({}), join={"requests": str(requests)})
    assert actions.resume(ctx, ["gpu-001", "gpu-002"]) == 0
    assert sorted(p.name for p in requests.iterdir()) == ["gpu-002"]
    events = [e for e in read_log(tmp_path / "power.log") if e["event"] == "join_request"]
    assert [(e["node"], e["ok"]) for e in events] == [("gpu-002", True)]


def test_a_failed_power_on_asks_for_no_join(tmp_path: Path, fake: FakeSlurm) -> None:
    fake.set_nodes({"gpu-002": "MIXED+CLOUD+NOT_RESPONDING+POWERING_UP"})
    requests = tmp_path / "requests"
    requests.mkdir()
    nodes = local_nodes("gpu-002")  # no podman socket: the real driver fails
    nodes["gpu-002"]["mode"] = "launch-terminate"
    config = write_config(tmp_path / "power.json", fake, nodes, join={"requests": str(requests)})
    assert run_program("resume", "gpu-002", config, fake, "--foreground").returncode == 1
    assert list(requests.iterdir()) == []


def test_the_join_service_takes_only_its_launched_nodes(tmp_path: Path) -> None:
    requests = tmp_path / "requests"
    requests.mkdir()
    for name in ("gpu-003", "gpu-001", "ctl", "..x", "gpu-003.log", "x e.so y"):
        (requests / name).write_text("planted content is never read")
    os.utime(requests / "gpu-003", (1000.0, 1000.0))
    refused: list[tuple[str, str]] = []
    took = join.take_requests(requests, {"gpu-003", "gpu-004"},
                              lambda event, **f: refused.append((f["node"], f["error"])),
                              now=lambda: 5000.0)
    assert took == [("gpu-003", 1000.0)]  # asked at its file's time
    assert list(requests.iterdir()) == []  # every request taken, refused or not
    # A name that is no node name is logged as its repr.
    assert sorted(n for n, _ in refused) == ["'..x'", "'x e.so y'", "ctl", "gpu-001",
                                             "gpu-003.log"]
    assert join.launched_nodes({"all": {"hosts": {
        "gpu-003": {"ansible_host": "10.0.0.13", "metalslurm_power": {"mode": "launch-terminate"}},
        "gpu-001": {"metalslurm_power": {"driver": "local"}}, "ctl": None}}}) == {
            "gpu-003": "10.0.0.13"}


def test_a_request_that_is_not_a_plain_file_is_removed_and_refused(tmp_path: Path) -> None:
    """SlurmUser writes the requests directory: a directory (whose entries would stay and
    start the service again and again), a link or a FIFO is removed, never followed."""
    requests, outside = tmp_path / "requests", tmp_path / "outside"
    requests.mkdir()
    outside.mkdir()
    (outside / "keep").write_text("root's")
    (requests / "gpu-003").mkdir()
    (requests / "gpu-003" / "escape").symlink_to(outside)
    (requests / "gpu-004").symlink_to(outside / "keep")
    os.mkfifo(requests / "gpu-005")
    refused: list[tuple[str, str]] = []
    took = join.take_requests(requests, {"gpu-003", "gpu-004", "gpu-005"},
                              lambda event, **f: refused.append((f["node"], f["error"])))
    assert took == []
    assert sorted(refused) == [(n, "not a plain file") for n in ("gpu-003", "gpu-004", "gpu-005")]
    assert list(requests.iterdir()) == []
    assert (outside / "keep").read_text() == "root's"


def test_a_request_that_arrives_during_a_join_is_taken_at_once(tmp_path: Path) -> None:
    """One service run joins gpu-003; gpu-004's request arrives while it runs and is joined
    beside it, its deadline counted from its own request."""
    requests = tmp_path / "requests"
    requests.mkdir()
    (requests / "gpu-003").touch()
    started: dict[str, float | None] = {}
    release = threading.Event()

    def fake_join(join_dir, node, address, timeout, resume_fail, log, asked=None):
        started[node] = asked
        if node == "gpu-003":
            (requests / "gpu-004").touch()
            os.utime(requests / "gpu-004", (time.time() - 30, time.time() - 30))
            assert release.wait(10)
        else:
            release.set()
        return True

    assert join.serve(requests, tmp_path, {"gpu-003": "10.0.0.13", "gpu-004": "10.0.0.14"},
                      100, ["resume-fail"], lambda event, **f: None, join=fake_join,
                      sleep=lambda s: time.sleep(0.01)) is True
    assert sorted(started) == ["gpu-003", "gpu-004"]
    assert time.time() - 31 < started["gpu-004"] < time.time() - 29


def _serve_with_a_second_request(tmp_path: Path, first_ok: bool, resuming: bool
                                 ) -> list[tuple[str, float | None]]:
    """gpu-003's join, which ends ``first_ok``; gpu-003 asked for again (60 s ago) while it
    runs, the way Slurm resumes a node that a failed join's ResumeFailProgram has just
    returned, its job requeued; slurmctld has it powering up after it: ``resuming``.
    The joins run, in order, with the time each was asked."""
    requests = tmp_path / "requests"
    requests.mkdir(parents=True)
    (requests / "gpu-003").touch()
    joins: list[tuple[str, float | None]] = []
    asked_for: list[str] = []

    def fake_join(join_dir, node, address, timeout, resume_fail, log, asked=None):
        joins.append((node, asked))
        if len(joins) == 1:
            (requests / "gpu-003").touch()
            os.utime(requests / "gpu-003", (time.time() - 60, time.time() - 60))
            wait_for_taken = time.monotonic() + 10
            while (requests / "gpu-003").exists() and time.monotonic() < wait_for_taken:
                time.sleep(0.01)
            return first_ok
        return True

    def powering_up(node: str) -> bool:
        asked_for.append(node)
        return resuming

    joined = join.serve(requests, tmp_path, {"gpu-003": "10.0.0.13"}, 100, ["resume-fail"],
                        lambda event, **f: None, join=fake_join,
                        sleep=lambda s: time.sleep(0.01), resuming=powering_up)
    assert joined is first_ok  # a failed join fails the service's run
    assert list(requests.iterdir()) == []
    assert asked_for == ([] if first_ok else ["gpu-003"])
    return joins


def test_a_node_resumed_again_while_its_failed_join_ends_is_joined_again(
        tmp_path: Path) -> None:
    """Seen in CI: the new resume's request was taken while the failed join was still
    running, and dropped; the node waited out ResumeTimeout with its machine up."""
    joins = _serve_with_a_second_request(tmp_path, first_ok=False, resuming=True)
    assert [node for node, _ in joins] == ["gpu-003", "gpu-003"]
    assert time.time() - 61 < joins[1][1] < time.time() - 59


def test_a_request_answered_by_the_join_that_ran_is_not_joined_again(tmp_path: Path) -> None:
    """Asked again while the join runs: a join that succeeds answers both, and after one
    that fails a node Slurm does not have powering up needs none (the failed resume's)."""
    assert [n for n, _ in _serve_with_a_second_request(
        tmp_path / "ok", first_ok=True, resuming=True)] == ["gpu-003"]
    assert [n for n, _ in _serve_with_a_second_request(
        tmp_path / "failed", first_ok=False, resuming=False)] == ["gpu-003"]


def test_powering_up_reads_the_flag_sinfo_prints() -> None:
    assert join.powering_up("gpu-003", run=_fake_run([], sinfo="mixed#\n")) is True
    assert join.powering_up("gpu-003", run=_fake_run([], sinfo="idle~\n")) is False
    assert join.powering_up("gpu-003", run=_fake_run([], sinfo="")) is False


def test_a_join_counts_its_deadline_from_the_request(tmp_path: Path) -> None:
    """A request taken 90 s after it was made has 10 s of a 100 s timeout left."""
    deadlines: list[float] = []
    events: list[tuple[str, dict]] = []

    def answers(address, deadline):
        deadlines.append(deadline - time.monotonic())
        return False

    assert join.join_one(tmp_path, "gpu-003", "10.0.0.13", 100, ["resume-fail"],
                         lambda event, **f: events.append((event, f)), run=_fake_run([]),
                         answers=answers, asked=time.time() - 90) is False
    assert 8 < deadlines[0] <= 10
    assert events[0] == ("join_start", {"node": "gpu-003", "waited_s": 90.0})


def test_without_a_kit_every_request_goes_to_resume_fail_at_once(
        tmp_path: Path, fake: FakeSlurm) -> None:
    requests = tmp_path / "requests"
    requests.mkdir()
    (requests / "gpu-003").touch()
    marker = tmp_path / "failed"
    rc = join.main(["--requests", str(requests), "--log", str(tmp_path / "power.log"),
                    "--join-dir", str(tmp_path / "join"), "--timeout", "100",
                    "--resume-fail", f"sh -c 'echo $0 >> {marker}'"])
    assert rc == 2
    assert list(requests.iterdir()) == []
    ends = [e for e in read_log(tmp_path / "power.log") if e["event"] == "join_end"]
    assert [(e["node"], e["ok"]) for e in ends] == [("gpu-003", False)]
    assert "inventory cannot be read" in ends[0]["error"]


def test_a_resume_whose_join_cannot_be_asked_for_fails_at_once(
        tmp_path: Path, fake: FakeSlurm) -> None:
    """No request written (the directory is gone): nothing would configure the machine, so
    it is powered off and the node returned, not left until ResumeTimeout."""
    fake.set_nodes({"gpu-002": "IDLE+CLOUD+POWERING_UP"})
    nodes = local_nodes("gpu-002")
    nodes["gpu-002"]["mode"] = "launch-terminate"
    RecordingDriver.batches.clear()
    ctx = context(tmp_path, fake, nodes, RecordingDriver({}),
                  join={"requests": str(tmp_path / "gone")})
    assert actions.resume(ctx, ["gpu-002"]) == 1
    assert RecordingDriver.batches == [("on", ["gpu-002"]), ("off-force", ["gpu-002"])]
    assert fake.states() == {"gpu-002": "IDLE+CLOUD+POWERED_DOWN"}
    update = [u for u in fake.updates() if "state=POWER_DOWN_FORCE" in u][0]
    assert update[3].startswith("reason=metalslurm: power on failed: no join asked for")


def test_the_power_log_is_never_written_through_a_planted_link(tmp_path: Path) -> None:
    """The join service appends to SlurmUser's power log as root: a symbolic link, a hard
    link or a FIFO at the log's name is refused."""
    target = tmp_path / "ld.so.preload"
    target.write_text("")
    for plant in ("symlink", "hardlink", "fifo"):
        log = tmp_path / f"{plant}.log"
        if plant == "symlink":
            log.symlink_to(target)
        elif plant == "hardlink":
            os.link(target, log)
        else:
            os.mkfifo(log)
        EventLog(log, program="join").event("join_refused", node="x /tmp/e.so y")
    assert target.read_text() == ""
    EventLog(tmp_path / "power.log", program="join").event("join_start", node="gpu-003")
    assert read_log(tmp_path / "power.log")[0]["node"] == "gpu-003"


def _fake_run(calls: list[list[str]], playbook_rc: int = 0, sinfo: str = "mixed\n"):
    def run(argv, **kwargs):
        calls.append(list(argv))
        if argv[0] == "ansible-playbook":
            return subprocess.CompletedProcess(argv, playbook_rc)
        if argv[0] == "sinfo":
            return subprocess.CompletedProcess(argv, 0, stdout=sinfo)
        return subprocess.CompletedProcess(argv, 0)
    return run


def test_a_node_that_does_not_join_goes_to_resume_fail(tmp_path: Path) -> None:
    calls: list[list[str]] = []
    events: list[tuple[str, dict]] = []
    ok = join.join_one(tmp_path, "gpu-003", "10.0.0.13", 100, ["resume-fail", "--foreground"],
                       lambda event, **f: events.append((event, f)), run=_fake_run(calls, 2),
                       answers=lambda address, deadline: True)
    assert ok is False
    assert calls[0][:7] == ["ansible-playbook", "-i", str(tmp_path / "kit/inventory.yml"),
                            str(tmp_path / "kit/ansible/site.yml"), "--limit", "gpu-003",
                            "-e"]
    assert calls[1:] == [["resume-fail", "--foreground", "gpu-003"]]
    assert events[-1][0] == "join_end" and events[-1][1]["ok"] is False
    assert "ansible-playbook exit 2" in events[-1][1]["error"]


def test_a_run_that_leaves_the_node_unregistered_is_a_failure(tmp_path: Path) -> None:
    """The playbook set the node aside (its sshd not up yet): exit 0, nothing configured."""
    calls: list[list[str]] = []
    events: list[tuple[str, dict]] = []
    assert join.join_one(tmp_path, "gpu-003", "10.0.0.13", 100, ["resume-fail"],
                         lambda event, **f: events.append((event, f)),
                         run=_fake_run(calls, 0, sinfo="mixed#\n"),
                         answers=lambda address, deadline: True) is False
    assert calls[-1] == ["resume-fail", "gpu-003"]
    assert "does not have the node up" in events[-1][1]["error"]


def test_a_machine_that_never_boots_is_not_configured(tmp_path: Path) -> None:
    calls: list[list[str]] = []
    events: list[tuple[str, dict]] = []
    assert join.join_one(tmp_path, "gpu-003", "10.0.0.13", 100, ["resume-fail"],
                         lambda event, **f: events.append((event, f)), run=_fake_run(calls),
                         answers=lambda address, deadline: False) is False
    assert calls == [["resume-fail", "gpu-003"]]
    assert "did not answer" in events[-1][1]["error"]


def test_a_node_that_joins_is_left_alone(tmp_path: Path) -> None:
    calls: list[list[str]] = []
    assert join.join_one(tmp_path, "gpu-003", "10.0.0.13", 100, ["resume-fail"],
                         lambda e, **f: None, run=_fake_run(calls),
                         answers=lambda address, deadline: True) is True
    assert [c[0] for c in calls] == ["ansible-playbook", "sinfo"]
    assert (tmp_path / "known_hosts.d").is_dir()
