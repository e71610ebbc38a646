"""``metalslurm maintain --reboot`` (infra/ops/maintain.py) against the stand-in slurmctld of
tests/unit/maintain_standins.py; the lock against the real flock; the command line."""

from __future__ import annotations

import re
import subprocess
from types import SimpleNamespace

import pytest

from infra import cli
from infra.ops import maintain as m
from tests.paths import REPO
from tests.unit.maintain_standins import (
    SHOW,
    FakeNode,
    FakeNodeShell,
    FakeSlurm,
    changes,
    runner,
    write_inventory,
)


def test_a_busy_node_reboots_after_its_job_and_the_idle_one_at_once_one_at_a_time():
    slurm = FakeSlurm({"gpu-001": FakeNode({"ALLOCATED"}, job_ends=9),
                       "gpu-002": FakeNode({"IDLE"})})
    shell = FakeNodeShell({})
    run, lines = runner(slurm, shell)
    result = run.run(["gpu-001", "gpu-002"])
    assert changes(slurm) == [
        "reboot gpu-002",
        "scontrol update nodename=gpu-002 state=resume",
        "reboot gpu-001",
        "scontrol update nodename=gpu-001 state=resume"]
    assert [(p.node, p.ok, p.outcome) for p in result.done] == [
        ("gpu-002", True, "back in service"), ("gpu-001", True, "back in service")]
    # gpu-002: issued at the first poll, back at the second; gpu-001 was asked then, and its
    # reboot issued only as its job ended (tick 9), back one poll later.
    assert slurm.nodes["gpu-002"].boot == 2002
    assert slurm.nodes["gpu-001"].boot == 2010
    assert [n.states for n in slurm.nodes.values()] == [{"IDLE"}, {"IDLE"}]
    assert "gpu-001: waiting for its jobs to end (drained, reboot pending)" in lines
    assert [n for n, _c in shell.ran] == ["gpu-002", "gpu-001"]
    assert shell.ran[0][1] == "/usr/local/sbin/metalslurm-health"


def test_a_batch_of_two_asks_both_at_once():
    slurm = FakeSlurm({"gpu-001": FakeNode({"IDLE"}), "gpu-002": FakeNode({"IDLE"}),
                       "gpu-003": FakeNode({"IDLE"})})
    run, _lines = runner(slurm, FakeNodeShell({}), batch=2)
    run.run(["gpu-001", "gpu-002", "gpu-003"])
    verbs = [c.split()[-1] if c.startswith("reboot") else "resume " + c.split()[2]
             for c in changes(slurm)]
    assert verbs == ["gpu-001", "gpu-002", "resume nodename=gpu-001",
                     "resume nodename=gpu-002", "gpu-003", "resume nodename=gpu-003"]


@pytest.mark.parametrize("recording", ["single-22.05/scontrol-show-nodes-resume-timeout.txt",
                                       "local-24.11/scontrol-show-nodes.txt"])
def test_slurms_own_node_lines_are_read_on_both_releases(recording):
    """Real 'scontrol --oneliner show node' output of 22.05 and 24.11 (tests/fixtures/slurm/
    exporter, recorded with ISO times): names, states, boot times and reasons."""
    text = (REPO / "tests/fixtures/slurm/exporter" / recording).read_text()
    views = m.parse_nodes(text)
    assert len(views) == text.count("NodeName=") and views
    for line in text.splitlines():
        name = re.search(r"NodeName=(\S+)", line)[1]
        state = re.search(r" State=(\S+)", line)[1]
        assert views[name].states == frozenset(state.split("+"))
        boot = re.search(r" BootTime=(\S+)", line)[1]
        assert (views[name].boot_time > 0) is (boot not in ("None", "Unknown"))
        reason = re.search(r" Reason=(.*) \[", line)
        assert views[name].reason == (reason[1] if reason else "")


def test_a_node_line_with_a_reboot_request_is_read():
    line = ("NodeName=gpu-001 Arch=x86_64 State=DOWN+DRAIN+REBOOT_ISSUED ThreadsPerCore=1 "
            "BootTime=1796247996 SlurmdStartTime=1796247997 ExtSensorsTemp=n/s "
            "Reason=metalslurm-maintain: reboot requested at 1796248000 : reboot issued "
            "[root@1796248000]")
    view = m.parse_nodes(line)["gpu-001"]
    assert (view.states, view.boot_time, view.requested_at) == (
        frozenset({"DOWN", "DRAIN", "REBOOT_ISSUED"}), 1796247996, 1796248000)
    assert view.taken_up and not view.rebooted_since(1796248000)


def test_a_node_failing_its_health_check_stays_out_with_the_checkers_reason():
    slurm = FakeSlurm({"gpu-001": FakeNode({"IDLE"})})
    run, lines = runner(slurm, FakeNodeShell({"gpu-001": False}, slurm))
    result = run.run(["gpu-001"])
    # The checker drained it itself; nothing resumed it.
    assert changes(slurm) == ["reboot gpu-001"]
    assert slurm.nodes["gpu-001"].states == {"DOWN", "DRAIN"}
    assert [p.node for p in result.failed] == ["gpu-001"]
    assert result.failed[0].outcome == (
        "failed its health check after the reboot: drained by the checker (metalslurm-health: "
        "gpus: 7 of 8 GPUs (GPU 3 missing)); it returns the node once it passes")
    assert f"gpu-001: FAILED: {result.failed[0].outcome}" in lines


def test_a_node_back_in_service_before_the_resume_is_left_so_and_the_run_goes_on():
    """Seen in a rehearsal: the node read DOWN after its reboot, then was idle (returned by
    slurmctld) by the time the health check had passed; slurmctld refuses the resume."""
    slurm = FakeSlurm({"gpu-001": FakeNode({"IDLE"}), "gpu-002": FakeNode({"IDLE"})})
    run, lines = runner(slurm, FakeNodeShell({}, slurm, returned=frozenset({"gpu-001"})))
    result = run.run(["gpu-001", "gpu-002"])
    assert [(p.node, p.ok, p.outcome) for p in result.done] == [
        ("gpu-001", True, "back in service"), ("gpu-002", True, "back in service")]
    assert changes(slurm) == [
        "reboot gpu-001", "scontrol update nodename=gpu-001 state=resume",
        "reboot gpu-002", "scontrol update nodename=gpu-002 state=resume"]
    assert [n.states for n in slurm.nodes.values()] == [{"IDLE"}, {"IDLE"}]
    assert not [line for line in lines if "FAILED" in line or "stopped" in line]


def test_a_resume_slurm_refuses_while_the_node_is_still_down_stops_the_run():
    slurm = FakeSlurm({"gpu-001": FakeNode({"IDLE"})})
    run, _lines = runner(slurm, FakeNodeShell({}))
    real = slurm.run

    def refusing(command: str, check: bool = True, **kwargs):
        if command.endswith("state=resume"):
            raise RuntimeError(f"on ctl: {command!r} failed (1): slurm_update error: "
                               "Invalid node state specified")
        return real(command, check, **kwargs)

    slurm.run = refusing  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="Invalid node state specified"):
        run.run(["gpu-001"])
    assert slurm.nodes["gpu-001"].states == {"DOWN"}


def test_a_checker_that_cannot_run_leaves_the_node_down():
    slurm = FakeSlurm({"gpu-001": FakeNode({"IDLE"})})
    run, _lines = runner(slurm, FakeNodeShell({}, exit_status=2))
    result = run.run(["gpu-001"])
    assert slurm.nodes["gpu-001"].states == {"DOWN"}
    assert result.failed[0].outcome.startswith(
        "failed its health check after the reboot: /usr/local/sbin/metalslurm-health ended "
        "with exit status 2 (metalslurm-health: bad config); the node stays out of service")


def test_with_the_gate_on_a_rebooted_node_is_drained_into_it_not_resumed():
    slurm = FakeSlurm({"gpu-001": FakeNode({"IDLE"})})
    run, _lines = runner(slurm, FakeNodeShell({}), gate=True)
    result = run.run(["gpu-001"])
    assert changes(slurm)[-1] == ("scontrol update nodename=gpu-001 state=drain "
                                  "reason='metalslurm-accept: rebooted by metalslurm maintain'")
    assert result.done[0].outcome.startswith("handed to the acceptance gate")


def test_with_the_health_checker_off_nothing_runs_on_the_node():
    slurm = FakeSlurm({"gpu-001": FakeNode({"IDLE"})})
    shell = FakeNodeShell({"gpu-001": False})
    run, _lines = runner(slurm, shell, health=None)
    assert run.run(["gpu-001"]).done[0].ok
    assert shell.ran == []


def test_a_node_drained_by_someone_else_is_left_alone():
    slurm = FakeSlurm({"gpu-001": FakeNode({"IDLE", "DRAIN"}, reason="bad fan"),
                       "gpu-002": FakeNode({"IDLE"})})
    run, lines = runner(slurm, FakeNodeShell({}))
    result = run.run(["gpu-001", "gpu-002"])
    assert result.skipped == {"gpu-001": "drained (DRAIN+IDLE, bad fan): left alone; return it "
                                         "to service or give another node"}
    assert all("gpu-001" not in c for c in changes(slurm))


def test_an_elastic_node_is_left_alone():
    slurm = FakeSlurm({"gpu-003": FakeNode({"IDLE"}), "gpu-001": FakeNode({"IDLE"})})
    lines: list[str] = []
    run = m.Maintain(slurm, FakeNodeShell({}), m.Settings(1, None, False, frozenset({"gpu-003"})),
                     log=lines.append, poll=0, clock=slurm.clock,
                     monotonic=lambda: float(slurm.tick), sleep=slurm.sleep)
    result = run.run(["gpu-003", "gpu-001"])
    assert list(result.skipped) == ["gpu-003"]
    assert [p.node for p in result.done] == ["gpu-001"]
    assert all("gpu-003" not in c for c in changes(slurm))


@pytest.mark.parametrize("states, said", [
    ({"IDLE", "NOT_RESPONDING"}, "not responding (IDLE+NOT_RESPONDING, no reason)"),
    ({"IDLE", "CLOUD", "POWERED_DOWN"}, "an elastic node"),
    ({"DOWN"}, "down (DOWN, no reason)"),
    ({"IDLE", "FAIL"}, "failing (FAIL+IDLE, no reason)"),
    ({"IDLE", "REBOOT_REQUESTED"}, "has a reboot pending that this command did not ask for"),
])
def test_nodes_slurm_could_not_or_should_not_reboot_are_left_alone(states, said):
    slurm = FakeSlurm({"gpu-001": FakeNode(set(states))})
    run, _lines = runner(slurm, FakeNodeShell({}))
    result = run.run(["gpu-001"])
    assert result.skipped["gpu-001"].startswith(said) and changes(slurm) == []


def test_a_node_resumed_earlier_that_kept_this_commands_reason_is_rebooted_again():
    """Without accounting Slurm keeps a resumed node's reason: an idle node with an old
    'reboot requested' reason is not taken for one back from this run's reboot."""
    slurm = FakeSlurm({"gpu-001": FakeNode({"IDLE"}, boot=1950, reason="metalslurm-maintain: "
                                           "reboot requested at 1900 : reboot complete")})
    run, _lines = runner(slurm, FakeNodeShell({}))
    result = run.run(["gpu-001"])
    assert changes(slurm)[0] == "reboot gpu-001"
    assert slurm.nodes["gpu-001"].boot > 2000 and result.done[0].ok


def test_a_node_the_checker_drained_at_boot_is_checked_not_taken_for_another_change():
    """slurmd runs the checker before it registers: a failing one puts its own reason, and
    nextstate=DOWN leaves the node DOWN with it. It is checked again and drained for good."""
    slurm = FakeSlurm({"gpu-001": FakeNode({"IDLE"})})
    shell = FakeNodeShell({"gpu-001": False}, slurm)
    original = slurm.sleep

    def sleep(seconds: float) -> None:
        original(seconds)
        node = slurm.nodes["gpu-001"]
        if node.reason.endswith("reboot complete"):
            node.reason = "metalslurm-health: gpus: 7 of 8 : reboot complete"

    slurm.sleep = sleep  # type: ignore[method-assign]
    run, lines = runner(slurm, shell)
    result = run.run(["gpu-001"])
    assert [n for n, _c in shell.ran] == ["gpu-001"]
    assert result.failed[0].outcome.startswith("failed its health check after the reboot")
    assert slurm.nodes["gpu-001"].states == {"DOWN", "DRAIN"}


def test_a_run_stopped_by_a_failing_slurm_names_the_nodes_under_way():
    slurm = FakeSlurm({"gpu-001": FakeNode({"ALLOCATED"}, job_ends=50)})
    calls = {"n": 0}
    real_run = slurm.run

    def run_cmd(command: str, **kwargs):
        if command.startswith(SHOW.strip()):
            calls["n"] += 1
            if calls["n"] > 3:
                return SimpleNamespace(returncode=1, stdout="", stderr="slurm_load_node: "
                                       "Unable to contact slurm controller")
        return real_run(command, **kwargs)

    slurm.run = run_cmd  # type: ignore[method-assign]
    run, lines = runner(slurm, FakeNodeShell({}))
    with pytest.raises(m.MaintainError, match=r"scontrol failed 60 times .* Unable to contact"):
        run.run(["gpu-001"])
    assert lines[-1] == ("stopped with gpu-001 (waiting for its jobs to end (drained, reboot "
                         "pending)) under way: Slurm keeps each where it is; the same command "
                         "again goes on with them")


def test_a_run_stopped_half_way_is_taken_up_where_each_node_was():
    # gpu-001 rebooted after an earlier run asked (its request's time in the reason); gpu-002
    # still waits for its job with the earlier request pending: neither is asked again.
    slurm = FakeSlurm({
        "gpu-001": FakeNode({"DOWN"}, boot=1950, reason="metalslurm-maintain: reboot requested "
                            "at 1900 : reboot issued : reboot complete"),
        "gpu-002": FakeNode({"ALLOCATED", "DRAIN", "REBOOT_REQUESTED"}, job_ends=4,
                            reason="metalslurm-maintain: reboot requested at 1900")})
    run, lines = runner(slurm, FakeNodeShell({}), batch=2)
    result = run.run(["gpu-002", "gpu-001"])
    assert [c for c in changes(slurm) if c.startswith("reboot")] == []
    assert [(p.node, p.ok) for p in result.done] == [("gpu-001", True), ("gpu-002", True)]
    assert "gpu-001: its reboot was asked for by an earlier run (down): taken up" in lines


def test_a_node_that_does_not_come_back_is_reported_and_left_down():
    slurm = FakeSlurm({"gpu-001": FakeNode({"IDLE"})}, timeout_on={"gpu-001"})
    run, lines = runner(slurm, FakeNodeShell({}))
    result = run.run(["gpu-001"])
    assert [p.node for p in result.failed] == ["gpu-001"]
    assert "did not register within ResumeTimeout" in result.failed[0].outcome
    assert not any("state=resume" in c for c in changes(slurm))


def test_a_resumed_node_slurmctld_never_reaches_is_reported():
    slurm = FakeSlurm({"gpu-001": FakeNode({"IDLE"})}, unreachable={"gpu-001"})
    run, lines = runner(slurm, FakeNodeShell({}))
    result = run.run(["gpu-001"])
    assert [p.node for p in result.failed] == ["gpu-001"]
    assert result.failed[0].outcome == ("resumed, but slurmctld has not reached its slurmd in "
                                        "120 s (IDLE+NOT_RESPONDING)")
    assert "gpu-001: resumed; waiting for slurmctld to reach it" in lines


def test_a_node_slurm_does_not_know_stops_the_run_before_any_change():
    slurm = FakeSlurm({"gpu-001": FakeNode({"IDLE"})})
    run, _lines = runner(slurm, FakeNodeShell({}))
    with pytest.raises(m.MaintainError, match="Slurm does not know gpu-009"):
        run.run(["gpu-001", "gpu-009"])
    assert changes(slurm) == []


@pytest.mark.parametrize("cancel_keeps_drain", [False, True])
def test_a_node_whose_jobs_outlast_max_wait_is_not_rebooted_and_goes_on_running_them(
        cancel_keeps_drain):
    slurm = FakeSlurm({"gpu-001": FakeNode({"ALLOCATED"}, job_ends=50),
                       "gpu-002": FakeNode({"IDLE"})}, cancel_keeps_drain=cancel_keeps_drain)
    run, lines = runner(slurm, FakeNodeShell({}), max_wait=5)
    result = run.run(["gpu-001", "gpu-002"])
    # gpu-002 first (idle; answering again at tick 3), then gpu-001 asked at tick 3 and
    # called off at the first look 5 ticks later.
    assert changes(slurm) == [
        "reboot gpu-002", "scontrol update nodename=gpu-002 state=resume",
        "reboot gpu-001", "squeue --noheader --nodelist=gpu-001 --format='%i|%u|%L'",
        "scontrol cancel_reboot gpu-001"] + (
            ["scontrol update nodename=gpu-001 state=resume"] if cancel_keeps_drain else [])
    assert slurm.tick == 8
    assert slurm.nodes["gpu-001"].states == {"ALLOCATED"}
    assert slurm.nodes["gpu-001"].boot == 1000  # never rebooted
    assert [p.node for p in result.called_off] == ["gpu-001"] and result.failed == []
    assert lines[-1] == ("gpu-001: NOT rebooted: job 17 (alice, 1:02:03 left) still ran after "
                         "--max-wait 5 s; its reboot was called off and it is back in service")


def test_a_reboot_slurm_issued_as_it_was_called_off_goes_on():
    """The job ended between the last look and the call-off: Slurm had issued the reboot and
    refuses to cancel it; the node is rebooted and returned as any other."""
    slurm = FakeSlurm({"gpu-001": FakeNode({"ALLOCATED"}, job_ends=50)})
    real_run = slurm.run

    def run_cmd(command: str, **kwargs):
        if command.startswith("squeue"):
            slurm.nodes["gpu-001"].states = {"DOWN", "DRAIN", "REBOOT_ISSUED"}
        return real_run(command, **kwargs)

    slurm.run = run_cmd  # type: ignore[method-assign]
    run, _lines = runner(slurm, FakeNodeShell({}), max_wait=3)
    result = run.run(["gpu-001"])
    assert [(p.node, p.ok, p.outcome) for p in result.done] == [
        ("gpu-001", True, "back in service")]
    assert slurm.nodes["gpu-001"].boot > 2000 and slurm.nodes["gpu-001"].states == {"IDLE"}


def test_a_node_drained_by_another_while_it_waited_is_called_off_and_left_drained():
    slurm = FakeSlurm({"gpu-001": FakeNode({"ALLOCATED"}, job_ends=50)},
                      cancel_keeps_drain=True)
    real_run = slurm.run

    def run_cmd(command: str, **kwargs):
        if command.startswith("squeue"):
            slurm.nodes["gpu-001"].reason = "bad fan"
        return real_run(command, **kwargs)

    slurm.run = run_cmd  # type: ignore[method-assign]
    run, lines = runner(slurm, FakeNodeShell({}), max_wait=2)
    result = run.run(["gpu-001"])
    assert not any("state=resume" in c for c in changes(slurm))
    assert result.called_off[0].outcome.endswith(
        "its reboot was called off and it is left allocated+drain (bad fan)")


def test_with_max_wait_0_busy_nodes_are_left_alone_and_idle_ones_rebooted():
    slurm = FakeSlurm({"gpu-001": FakeNode({"MIXED"}), "gpu-002": FakeNode({"IDLE"})})
    run, _lines = runner(slurm, FakeNodeShell({}), max_wait=0)
    result = run.run(["gpu-001", "gpu-002"])
    assert result.skipped == {"gpu-001": "runs jobs and --max-wait is 0: left alone"}
    assert [p.node for p in result.done if p.ok] == ["gpu-002"]
    assert all("gpu-001" not in c for c in changes(slurm))


def test_max_wait_applies_to_a_request_taken_up_from_an_earlier_run():
    slurm = FakeSlurm({"gpu-001": FakeNode(
        {"ALLOCATED", "DRAIN", "REBOOT_REQUESTED"}, job_ends=50,
        reason="metalslurm-maintain: reboot requested at 1900")})
    run, _lines = runner(slurm, FakeNodeShell({}), max_wait=0)
    result = run.run(["gpu-001"])
    assert changes(slurm)[-1] == "scontrol cancel_reboot gpu-001"
    assert result.called_off and slurm.nodes["gpu-001"].states == {"ALLOCATED"}


# ---- the command line ----------------------------------------------------------------


@pytest.mark.parametrize("argv, message", [
    (["--nodes", "gpu-001", "--reboot", "--batch", "0"], "--batch"),
    (["--nodes", "gpu-001", "--reboot", "--batch", "101%"],
     "--batch 101%: give the number of nodes out of service at once"),
    (["--nodes", "gpu-001"], "--reboot"),
    (["--nodes", "gpu-[001", "--reboot"], "--nodes"),
    (["--nodes", "gpu-002", "--reboot"], "--nodes gpu-002: names gpu-002, not compute nodes"),
    (["--nodes", "ctl", "--reboot"], "not compute nodes of the inventory (gpu-001)"),
    (["--nodes", "gpu-001", "--reboot", "--max-wait", "-1"],
     "--max-wait: is -1.0; give the seconds to wait for a node's running jobs"),
    (["--nodes", "gpu-001", "--reboot", "--max-wait", "nan"], "--max-wait: is nan"),
    (["--nodes", "gpu-001", "--reboot", "--max-wait", "1e9"], "from 0 (do not wait) to 604800"),
])
def test_bad_input_is_one_line_and_exit_2_before_anything_runs(tmp_path, capsys, argv,
                                                                 message, monkeypatch):
    def no_ssh(*_a, **_k):
        raise AssertionError("nothing may run before the inputs are checked")

    monkeypatch.setattr("infra.accept.remote.Remote.__init__", no_ssh)
    inventory = write_inventory(tmp_path)
    assert cli.main(["maintain", "-i", str(inventory), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_an_unreadable_inventory_is_refused(tmp_path, capsys):
    (tmp_path / "inv.yml").write_bytes(b"\x00\x01binary")
    assert cli.main(["maintain", "-i", str(tmp_path / "inv.yml"), "--nodes", "gpu-001",
                     "--reboot"]) == 2
    assert capsys.readouterr().err.startswith("error: --inventory")


def test_bad_health_settings_in_the_inventory_are_one_line_not_a_traceback(tmp_path, capsys):
    inventory = write_inventory(tmp_path, metalslurm_health={"intervall": 10})
    assert cli.main(["maintain", "-i", str(inventory), "--nodes", "gpu-001", "--reboot"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --inventory: its metalslurm_health is not valid (")
    assert len(err.strip().splitlines()) == 1


def test_a_max_wait_that_is_no_number_is_one_line_and_exit_2(tmp_path, capsys):
    inventory = write_inventory(tmp_path)
    with pytest.raises(SystemExit) as stop:
        cli.main(["maintain", "-i", str(inventory), "--nodes", "gpu-001", "--reboot",
                  "--max-wait", "1h"])
    assert stop.value.code == 2
    assert capsys.readouterr().err == ("error: metalslurm maintain: argument --max-wait: "
                                       "invalid float value: '1h' (see 'metalslurm maintain "
                                       "--help')\n")


# ---- one run at a time ---------------------------------------------------------------


class LocalShell:
    """The controller's shell as this machine's bash (for the lock, which is flock's)."""

    def start(self, command: str) -> subprocess.Popen[str]:
        return subprocess.Popen(["bash", "-c", command], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def run(self, command: str, check: bool = True, timeout: float = 120,
            stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                              check=check, timeout=timeout, input=stdin)


def test_a_second_run_is_refused_naming_the_first_and_runs_once_it_has_ended(tmp_path):
    lock = str(tmp_path / "maintain.lock")
    shell = LocalShell()
    with m.controller_lock(shell, "alice@ops pid 1, nodes gpu-001", lock):
        with (pytest.raises(m.MaintainError) as refused,
              m.controller_lock(shell, "bob@ops pid 2, nodes gpu-002", lock)):
            raise AssertionError("the second run got the lock")
        assert str(refused.value) == (
            "another metalslurm run (maintain, backup or restore) holds the cluster's lock "
            f"(alice@ops pid 1, nodes gpu-001; {lock} on the controller): wait for it to end, "
            "then run this again")
    with m.controller_lock(shell, "bob@ops pid 2, nodes gpu-002", lock):
        assert (tmp_path / "maintain.lock.who").read_text() == "bob@ops pid 2, nodes gpu-002\n"


def test_the_lock_goes_with_a_run_that_dies(tmp_path):
    """The lock is flock's on a process the run keeps over SSH: however the run ends, its
    end of the connection closes (here: the pipe, as when the run is killed), the process
    reads the end of its input and ends, and the lock with it."""
    lock = str(tmp_path / "maintain.lock")
    shell = LocalShell()
    holder = shell.start(f"exec flock --nonblock {lock} sh -c 'echo held && exec cat'")
    assert holder.stdout.readline().strip() == "held"
    with (pytest.raises(m.MaintainError, match="holds the cluster's lock"),
          m.controller_lock(shell, "bob", lock)):
        pass
    holder.stdin.close()
    holder.wait(timeout=10)
    with m.controller_lock(shell, "bob", lock):
        pass


def test_a_lock_that_cannot_be_taken_says_why(tmp_path):
    with (pytest.raises(m.MaintainError, match=r"could not take the cluster's lock on the "
                        r"controller \(exit status \d+: flock: .*No such file or directory\)"),
          m.controller_lock(LocalShell(), "bob", str(tmp_path / "no" / "such" / "lock"))):
        pass


@pytest.mark.parametrize("value, nodes, batch", [
    ("1", 4, 1), ("3", 4, 3), ("50%", 4, 2), ("25%", 16, 4), ("10%", 4, 1), ("100%", 7, 7),
    (2, 4, 2)])
def test_batch_is_a_number_or_a_share_of_the_nodes_given(value, nodes, batch):
    assert m.checked_batch(value, nodes) == batch


@pytest.mark.parametrize("value", ["0", "0%", "101%", "-1", "x", "1.5", "%", ""])
def test_a_bad_batch_is_refused(value):
    from infra.stack.inputs import InputError

    with pytest.raises(InputError, match="--batch"):
        m.checked_batch(value, 4)
