"""The acceptance gate's run (infra/accept/gate.py) against a FAKE controller: Slurm's
commands answered from a table of node states, each job "run" at once by writing what the
STAND-IN tools print (tests/fixtures/accept/standin, run for real here) into its node's own
directory. The gate's programs run for real: the history program on the "controller"'s
directory, the collecting program on each "node"'s, their lines interleaved as srun may.
What the fake leaves out (scheduling, powering nodes, srun) is the e2e test's
(tests/e2e/test_accept.py); here: which nodes, which jobs, where files go, the verdicts, the
reasons, the drains, the history and what a run that stops half-way leaves."""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import stat
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import hostlist
import pytest

from infra.accept.gate import (
    COLLECT_PROGRAM,
    HISTORY_PATH,
    HISTORY_PROGRAM,
    NODE_SCRIPT,
    PAIR_SCRIPT,
    READ_TRIES,
    Gate,
    GateError,
    GateNode,
    read_collected,
)
from infra.accept.remote import RemoteError
from infra.accept.verdicts import Verdict
from infra.stack.accept import LOCAL_DIR, GateSettings
from tests import accept_standins
from tests.paths import REPO

HEALTH = str(REPO / "ansible/roles/slurm_health/files/metalslurm-health")
NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
RUN = "20261127T120000Z"
NODES = {f"gpu-00{i}": GateNode(f"gpu-00{i}", f"10.0.0.{i}", "h100", 8) for i in range(1, 5)}
UNREACHABLE = "error: Unable to contact slurm controller (connect failure)"


class FakeController:
    """Answers the gate's commands as the controller's root would; runs each job's tools
    (the stand-ins) at submission, into the results directory of the node its batch script
    runs on (``nodes/<node>``: that node's LOCAL_DIR); ``ctl`` is the controller's."""

    def __init__(self, tmp: Path, states: dict[str, tuple[str, str]]) -> None:
        self.states = dict(states)
        self.commands: list[str] = []
        self.scripts: list[str] = []  # what each sbatch read on its standard input
        self.reservations: dict[str, list[str]] = {}
        self.jobs: list[tuple[str, list[str]]] = []  # (node or pair, its nodes)
        self.ctl, self.node_dirs = tmp / "ctl", tmp / "nodes"
        self.knobs, self.bin = tmp / "knobs", tmp / "bin"
        accept_standins.install(self.bin, self.knobs)
        # The real health checker, reading the stand-in nvidia-smi (8 H100s; no device files
        # or kernel log here: its GPU count, ECC and row checks are the ones that run).
        self.health_config = tmp / "health.json"
        self.health_config.write_text(json.dumps({"gpus": {"count": 8, "type": "h100"}}))
        self.missing: set[str] = set()
        self.hang: set[tuple[str, str]] = set()  # (node, tool stem) killed at its limit
        self.failing: dict[str, int] = {}  # command name -> how many more times it fails
        self.listed: dict[str, int] = {}  # job id -> squeue answers that still list it
        self.interrupt: str | None = None  # Ctrl-C when a command with this in it is sent
        self.crash: set[str] = set()  # nodes that go down during their own job
        self.held: dict[str, str] = {}  # job id -> why Slurm holds it (its tools never ran)

    def knob(self, node: str, **values) -> None:
        (self.knobs / node).write_text(json.dumps(values))

    def tool(self, name: str, args: list[str], host: str, nodelist: str = "") -> tuple[int, str]:
        env = {**os.environ, "METALSLURM_STANDIN_DIR": str(self.knobs),
               "METALSLURM_STANDIN_HOST": host, "SLURM_JOB_NODELIST": nodelist,
               "PATH": f"{self.bin}:{os.environ['PATH']}"}
        fake_scontrol = self.bin / "scontrol"
        if not fake_scontrol.exists():
            fake_scontrol.write_text('#!/bin/sh\necho "$3" | tr , "\\n"\n')
            fake_scontrol.chmod(0o755)
        program = name if name == HEALTH else str(self.bin / name)
        proc = subprocess.run([sys.executable, program, *args], env=env,
                              capture_output=True, text=True, check=False, timeout=30)
        return proc.returncode, proc.stdout

    def sbatch(self, words: list[str], script: str) -> str:
        nodes = words[words.index("-w") + 1].split(",")
        exports = next(w for w in words if w.startswith("--export="))[len("--export="):]
        env = dict(kv.split("=", 1) for kv in exports.split(",")[1:])
        kind = {NODE_SCRIPT: "node", PAIR_SCRIPT: "pair"}[script]
        self.jobs.append((kind, nodes))
        # The batch script runs on the allocation's first node, in Slurm's node order.
        out = self.node_dirs / sorted(nodes)[0] / "runs" / env["GATE_RUN"] / env["GATE_DIR"]
        out.mkdir(parents=True, exist_ok=True)

        def put(stem: str, rc: int, text: str = "", err: str | None = None) -> None:
            (out / f"{stem}.rc").write_text(f"{rc}\n")
            (out / f"{stem}.out").write_text(text)
            if err is not None:
                (out / f"{stem}.err").write_text(err)
        if str(len(self.jobs)) in self.held:
            self.listed[str(len(self.jobs))] = 10 ** 6  # listed until cancelled
            return str(len(self.jobs))
        if kind == "node" and nodes[0] in self.crash:
            self.states[nodes[0]] = ("down*", "Not responding")
            return str(len(self.jobs))
        if kind == "node":
            node = nodes[0]
            health = ["--json", "--only", "gpus", "--config", str(self.health_config)]
            for stem, tool, targs in (("health_before", HEALTH, health),
                                      ("dcgm", "dcgmi", ["diag", "-r", env["GATE_DCGM_LEVEL"],
                                                         "-j"]),
                                      ("nccl_1node", "all_reduce_perf", []),
                                      ("health_after", HEALTH, health)):
                if tool in self.missing:
                    put(stem, 127, err=f"{tool} is not installed on {node}")
                elif tool == HEALTH and "metalslurm-health" in self.missing:
                    put(stem, 127)
                elif (node, stem) in self.hang:
                    put(stem, 137)
                else:
                    put(stem, *self.tool(tool, targs, node))
        else:
            a, b = env["GATE_A"], env["GATE_B"]
            put("nccl_pair", *self.tool("all_reduce_perf", [], a, f"{a},{b}"))
            for hca in env["GATE_HCAS"].split():
                put(f"ib_write_bw:{hca}",
                    *self.tool("ib_write_bw", ["-d", hca, "--report_gbits", b], a))
        return str(len(self.jobs))

    def program(self, words: list[str], stdin: str | None) -> subprocess.CompletedProcess[str]:
        """The history program, on the controller's directory."""
        args = [w.replace(LOCAL_DIR, str(self.ctl)) for w in words[3:]]
        return subprocess.run([sys.executable, "-c", words[2], *args], input=stdin or "",
                              capture_output=True, text=True, check=False, timeout=30)

    def collect(self, words: list[str]) -> str:
        """srun over the nodes: the collecting program on each one's directory, their lines
        interleaved one by one. A node that is down never runs it: srun waits until the
        gate's connection gives up."""
        outputs = []
        nodes = words[words.index("-w") + 1].split(",")
        if any("down" in self.states[n][0] for n in nodes):
            raise RemoteError(f"on ctl: {' '.join(words)[:120]!r} did not end in 900 s")
        for node in nodes:
            root = words[-1].replace(LOCAL_DIR, str(self.node_dirs / node))
            proc = subprocess.run([sys.executable, "-c", words[-2], root], check=True,
                                  env={**os.environ, "SLURMD_NODENAME": node},
                                  capture_output=True, text=True, timeout=30)
            outputs.append(proc.stdout.splitlines())
        return "".join(f"{line}\n" for lines in itertools.zip_longest(*outputs)
                       for line in lines if line is not None)

    def answer(self, command: str, stdin: str | None) -> subprocess.CompletedProcess[str]:
        words = shlex.split(command)
        if self.failing.get(words[0], 0) > 0:
            self.failing[words[0]] -= 1
            return subprocess.CompletedProcess(command, 1, "", f"{words[0]}: {UNREACHABLE}")
        if self.interrupt and self.interrupt in command:
            self.interrupt = None
            raise KeyboardInterrupt
        if command.startswith("python3 -c"):
            return self.program(words, stdin)
        return subprocess.CompletedProcess(command, 0, self.output(command, words, stdin), "")

    def output(self, command: str, words: list[str], stdin: str | None) -> str:
        """What a Slurm command prints, its effect made on the fake cluster."""
        if command.startswith("sinfo"):
            return self.sinfo(command)
        if command.startswith("squeue"):
            out = "".join(f"{j}|PENDING|{self.held[j]}\n" if j in self.held
                          else f"{j}|RUNNING|None\n"
                          for j, polls in self.listed.items() if polls > 0)
            self.listed = {j: polls - 1 for j, polls in self.listed.items()}
            return out
        if command.startswith("scancel ") and not command.startswith("scancel --res"):
            self.listed.pop(words[1], None)
            return ""
        if command.startswith("scontrol "):
            return self.scontrol(command, words)
        if command.startswith("sbatch"):
            self.scripts.append(stdin or "")
            return self.sbatch(words, stdin or "") + "\n"
        if command.startswith("srun"):
            return self.collect(words)
        if command.startswith("scancel --reservation="):
            return ""
        raise AssertionError(f"the fake controller does not know {command!r}")

    def sinfo(self, command: str) -> str:
        if "--nodes=" in command:
            names = re.search(r"--nodes=(\S+)", command).group(1).split(",")
            return "".join(f"{n}|{self.states[n][0]}|{self.states[n][1]}\n" for n in names
                           if n in self.states)
        return "".join(f"{n}|{r}\n" for n, (_s, r) in self.states.items())

    def scontrol(self, command: str, words: list[str]) -> str:
        """Reservations shown, created, updated and deleted; nodes drained and resumed."""
        if command.startswith("scontrol show reservation"):
            return "".join(f"ReservationName={r} StartTime=2026-11-26T00:00:00 "
                           f"EndTime=Unknown Nodes={hostlist.collect_hostlist(nodes)} "
                           f"NodeCnt={len(nodes)} Flags=MAINT,IGNORE_JOBS\n"
                           for r, nodes in self.reservations.items())
        if command.startswith("scontrol create reservation"):
            name = re.search(r"reservationname=(\S+)", command).group(1)
            self.reservations[name] = re.search(r"nodes=(\S+)", command).group(1).split(",")
        elif command.startswith("scontrol update reservationname="):
            name = words[2].split("=", 1)[1]
            self.reservations[name] = words[3].split("=", 1)[1].split(",")
        elif command.startswith("scontrol delete reservation="):
            del self.reservations[command.split("=", 1)[1]]
        elif command.startswith("scontrol update nodename="):
            state = words[3].split("=", 1)[1]
            for name in words[2].split("=", 1)[1].split(","):
                self.states[name] = (("idle", "none") if state == "resume"
                                     else ("drained", words[4].split("=", 1)[1]))
        else:
            raise AssertionError(f"the fake controller does not know {command!r}")
        return ""

    def run(self, command: str, check: bool = True, timeout: float = 120,
            stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        self.commands.append(command)
        proc = self.answer(command, stdin)
        if check and proc.returncode != 0:
            raise RemoteError(f"on ctl: {command[:120]!r} failed ({proc.returncode}): "
                              f"{proc.stderr.strip()}")
        return proc

    def history(self) -> list[dict]:
        path = self.ctl / "history.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]

    def sent(self, start: str) -> list[str]:
        return [c for c in self.commands if c.startswith(start)]


def gate(controller: FakeController, **settings) -> Gate:
    base = {"hcas": ("mlx5_0", "mlx5_1"), "timeouts": {"dcgm": 30, "nccl": 30,
                                                         "ib_write_bw": 10}}
    log: list[str] = []
    g = Gate(controller, GateSettings(**{**base, **settings}), NODES, log=log.append,
             poll=0, clock=lambda: NOW)
    g.said = log
    return g


PENDING = ("drained", "metalslurm-accept: new node")


@pytest.fixture
def controller(tmp_path):
    return FakeController(tmp_path, {n: PENDING for n in NODES})


def reasons(verdicts: list[Verdict], node: str) -> list[str]:
    return [v.reason for v in verdicts if v.measurement.node == node and not v.passed]


def test_a_degraded_port_is_named_in_two_rounds_and_only_its_node_is_drained(controller):
    controller.knob("gpu-002", ib={"mlx5_1": 0.5})
    g = gate(controller)
    result = g.run(None)
    assert (result.tested, result.rounds, result.jobs) == (list(NODES), 2, 8)
    assert [nodes for kind, nodes in controller.jobs if kind == "pair"] == [
        ["gpu-001", "gpu-002"], ["gpu-003", "gpu-004"],
        ["gpu-001", "gpu-003"], ["gpu-002", "gpu-004"]]
    assert result.drained == {"gpu-002": "metalslurm-accept: ib_write_bw:mlx5_1 196 Gb/s "
                                          "< 380 (with gpu-004)"}
    assert controller.states["gpu-002"] == ("drained", result.drained["gpu-002"])
    assert all(controller.states[n] == ("idle", "none")
               for n in ("gpu-001", "gpu-003", "gpu-004"))
    assert controller.reservations == {}  # deleted, which returns the passing nodes
    # The history: every node's single-node and two-node figures with their verdicts.
    rows = {(r["node"], r["test"]): (r["value"], r["passed"]) for r in controller.history()}
    assert rows[("gpu-002", "ib_write_bw:mlx5_1")] == (196.0, False)
    assert rows[("gpu-001", "nccl_1node")] == (pytest.approx(479.9), True)
    assert rows[("gpu-003", "dcgm_diag")] == (0.0, True)


def test_a_node_drained_by_someone_else_is_left_alone_and_a_lone_node_gets_a_partner(controller):
    controller.states.update({"gpu-001": ("drained", "maintenance"),
                              "gpu-003": ("idle~", "none"), "gpu-004": ("idle", "none")})
    g = gate(controller)
    result = g.run(["gpu-001", "gpu-002"])
    assert result.skipped == {"gpu-001": "drained by someone else (maintenance): left alone"}
    assert result.tested == ["gpu-002"]
    # gpu-004 is powered up: it partners gpu-002 (in the reservation, not judged).
    assert any("nodes=gpu-002,gpu-004" in c for c in controller.commands)
    assert [nodes for kind, nodes in controller.jobs] == [["gpu-002"],
                                                            ["gpu-002", "gpu-004"]]
    assert (result.passed, result.drained) == (["gpu-002"], {})
    assert controller.states["gpu-001"] == ("drained", "maintenance")
    assert {r["node"] for r in controller.history()} == {"gpu-002"}


def test_a_hang_fails_with_timed_out_and_a_missing_tool_says_so(controller):
    controller.hang.add(("gpu-003", "nccl_1node"))
    result = gate(controller).run(None)
    assert result.drained == {"gpu-003": "metalslurm-accept: nccl_1node timed out"}
    controller2 = FakeController(controller.knobs.parent / "second", {n: PENDING
                                                                      for n in NODES})
    controller2.missing.add("dcgmi")
    result = gate(controller2).run(["gpu-001", "gpu-002"])
    assert result.drained == {n: f"metalslurm-accept: dcgm_diag dcgmi is not installed on {n}"
                              for n in ("gpu-001", "gpu-002")}


def test_a_failing_gpu_is_named_with_dcgms_warning(controller):
    controller.knob("gpu-004", dcgm_fail={"test": "memory", "gpu": 5,
                                          "warning": "Pending row remap"})
    result = gate(controller, level="full").run(None)
    assert result.drained == {"gpu-004": "metalslurm-accept: dcgm_diag memory GPU 5: "
                                         "Pending row remap"}
    assert any("GATE_DCGM_LEVEL=3" in c for c in controller.commands)


def test_a_gpu_that_fails_under_load_is_named_by_the_health_checker_after_it(controller):
    """The real metalslurm-health reads the stand-in nvidia-smi before and after the load:
    gpu-003's GPU at 5D shows 2 uncorrected ECC errors and a pending row remap once the
    node's all_reduce_perf has run; gpu-001's from the start."""
    controller.knob("gpu-003", gpu_after_load="ecc")
    controller.knob("gpu-001", gpu="ecc")
    result = gate(controller).run(None)
    ecc = "gpu_ecc: 00000000:5D:00.0 has 2 uncorrected ECC errors (limit 0)"
    assert result.drained == {"gpu-003": f"metalslurm-accept: gpu_health after load: {ecc}",
                              "gpu-001": f"metalslurm-accept: gpu_health before load: {ecc}"}
    rows = {(r["node"], r["test"]): (r["value"], r["passed"]) for r in controller.history()}
    assert [rows[(n, "gpu_health")] for n in NODES] == [(2.0, False), (0.0, True),
                                                        (2.0, False), (0.0, True)]


def test_without_the_health_checker_the_gpu_state_is_not_judged_and_the_run_says_so(
        controller):
    controller.missing.add("metalslurm-health")
    g = gate(controller)
    result = g.run(None)
    assert (result.passed, result.drained) == (list(NODES), {})
    assert "gpu_health" not in {r["test"] for r in controller.history()}
    assert ("GPU state before and after the load not checked on gpu-001, gpu-002, gpu-003, "
            "gpu-004: no metalslurm-health there (metalslurm:health is off)") in g.said


def test_a_one_gpu_node_is_not_judged_on_single_node_bus_bandwidth(controller):
    """all_reduce_perf -g 1 prints busbw 0.00 on a real GPU (tests/fixtures/accept/
    all_reduce_perf-2.13.6-1xh200-8B-1G.txt): a one-GPU node would fail any floor. Its
    single-node figure is left out; DCGM, the health checks and the pairs still judge it."""
    nodes = {**NODES, "gpu-002": GateNode("gpu-002", "10.0.0.2", "h100", 1)}
    log: list[str] = []
    g = Gate(controller, GateSettings(hcas=("mlx5_0", "mlx5_1"), timeouts={
        "dcgm": 30, "nccl": 30, "ib_write_bw": 10}), nodes, log=log.append, poll=0,
        clock=lambda: NOW)
    result = g.run(None)
    assert (result.passed, result.drained) == (list(NODES), {})
    tests = {(r["node"], r["test"]) for r in controller.history()}
    assert ("gpu-002", "nccl_1node") not in tests and ("gpu-001", "nccl_1node") in tests
    assert ("gpu-002", "dcgm_diag") in tests and ("gpu-002", "gpu_health") in tests
    assert ("single-node NCCL bandwidth not judged on gpu-002: one GPU (nccl-tests' bus "
            "bandwidth is 0 for one rank)") in log


def test_nodes_that_only_fail_together_stay_drained_as_inconclusive(controller):
    # gpu-003 and gpu-004 are drained too (waiting for the gate): no node is in service.
    controller.knob("gpu-001", ib={"mlx5_0": 0.5})
    controller.knob("gpu-002", ib={"mlx5_0": 0.5})
    g = gate(controller)
    result = g.run(["gpu-001", "gpu-002"])
    assert result.drained == {n: "metalslurm-accept: nccl_pair inconclusive: no partner "
                                 "proven good" for n in ("gpu-001", "gpu-002")}
    assert "no node in service to partner the suspects: they stay inconclusive" in g.said


@pytest.mark.parametrize("bad, rounds", [(("gpu-002",), 3), (("gpu-001", "gpu-002"), 3)])
def test_when_every_pair_fails_a_node_in_service_partners_the_suspects(controller, bad, rounds):
    controller.states.update({"gpu-003": ("idle~", "none"), "gpu-004": ("idle", "none")})
    for node in bad:
        controller.knob(node, ib={"mlx5_0": 0.5})
    g = gate(controller)
    result = g.run(["gpu-001", "gpu-002"])
    assert ("every pair failed: gpu-004, a node in service, joins as a known-good partner "
            "(not under test)") in g.said
    assert any(c == f"scontrol update reservationname={g.reservation} "
                    "nodes=gpu-001,gpu-002,gpu-004" for c in controller.commands)
    assert result.rounds == rounds
    assert sorted(result.drained) == sorted(bad)
    assert result.passed == [n for n in ("gpu-001", "gpu-002") if n not in bad]
    assert all(r.endswith("(with gpu-004)") or r.endswith("(with gpu-001)")
               for r in result.drained.values())


def test_a_slow_node_fails_against_the_fleet_above_the_floor(controller):
    g = gate(controller)
    g.run(None)  # the history: four healthy nodes
    controller.states.update({n: PENDING for n in NODES})
    controller.knob("gpu-001", nccl=0.97)  # 465.6 GB/s: above the 460 floor
    later = gate(controller, fleet_fraction=0.02)
    later.run_id = "20261127T130000Z"
    result = later.run(None)
    assert result.drained["gpu-001"].startswith(
        "metalslurm-accept: nccl_1node 466 GB/s < 98% of fleet median 480")


def test_nothing_to_do_touches_nothing_and_no_partner_is_refused(controller):
    controller.states = {n: ("idle", "none") for n in NODES}
    result = gate(controller).run(None)
    assert (result.tested, controller.jobs, controller.reservations) == ([], [], {})
    controller.states = {"gpu-001": PENDING, **{n: ("down", "Not responding")
                                                for n in ("gpu-002", "gpu-003", "gpu-004")}}
    with pytest.raises(GateError, match="gpu-001 is the only node to test"):
        gate(controller).run(None)
    assert not any(c.startswith("scontrol create") for c in controller.commands)


# ---- nothing the gate runs as root touches a path a cluster user can write ----------------

def test_the_job_scripts_go_to_sbatch_on_its_standard_input(controller):
    gate(controller).run(None)
    assert controller.scripts == [NODE_SCRIPT] * 4 + [PAIR_SCRIPT] * 2  # one round: all pass
    assert [re.search(r" -o (\S+)", c).group(1) for c in controller.sent("sbatch")] == [
        "/dev/null"] * 6


def test_no_command_of_a_run_names_shared_storage(controller):
    gate(controller).run(None)
    assert [c for c in controller.commands if "/shared" in c] == []


def test_the_history_is_on_the_controllers_own_disk_for_root_alone(controller):
    gate(controller).run(None)
    history = controller.ctl / "history.jsonl"  # HISTORY_PATH, there
    assert HISTORY_PATH == "/var/lib/metalslurm/accept/history.jsonl"
    assert (stat.S_IMODE(history.stat().st_mode), stat.S_IMODE(controller.ctl.stat().st_mode),
            len(controller.history())) == (0o600, 0o700, 4 * 6)


def test_each_jobs_results_are_read_back_from_its_own_node_as_soon_as_it_ends(controller):
    """gpu-001's job is still listed by squeue twice: the other three nodes' results are
    read back first; the pairs' (one round: both pass) from their nodes once they end."""
    controller.listed = {"1": 2}
    gate(controller).run(None)
    assert [re.search(r" -w (\S+)", c).group(1) for c in controller.sent("srun")] == [
        "gpu-002,gpu-003,gpu-004", "gpu-001",
        "gpu-001,gpu-002,gpu-003,gpu-004"]
    assert all(f"--reservation=metalslurm-accept-{RUN} " in c for c in controller.sent("srun"))


def assert_only_gpu_003_did_not_run(result) -> None:
    """gpu-003 drained because none of its single-node tests ran; the others passed."""
    lost = "did not run (the job ended first)"
    assert result.drained == {"gpu-003": f"metalslurm-accept: dcgm_diag {lost}; nccl_1node "
                                         f"{lost}; gpu_health before load: {lost}"}
    assert result.passed == ["gpu-001", "gpu-002", "gpu-004"]


def test_a_node_that_goes_down_under_its_job_fails_and_the_others_are_judged(controller):
    controller.crash.add("gpu-003")
    g = gate(controller)
    result = g.run(None)
    assert_only_gpu_003_did_not_run(result)
    assert "gpu-003 is down*: the results it holds cannot be read back" in g.said


def test_a_job_slurm_holds_after_a_failed_launch_is_cancelled_and_its_node_fails(controller):
    """Seen on the local cluster: a node whose launch failed gets its job requeued held,
    which would have kept the gate waiting for ever."""
    controller.held = {"3": "launch failed requeued held"}
    g = gate(controller)
    result = g.run(None)
    assert_only_gpu_003_did_not_run(result)
    assert "job 3 on gpu-003 is held (launch failed requeued held): cancelled" in g.said
    assert controller.sent("scancel 3") == ["scancel 3"]


def test_the_node_script_keeps_its_results_on_its_node_in_a_directory_for_root_alone(tmp_path):
    """The real script under bash (its LOCAL_DIR moved into tmp_path), with the stand-in
    tools and no health checker on its PATH."""
    bin_dir, knobs, local = tmp_path / "bin", tmp_path / "knobs", tmp_path / "accept"
    accept_standins.install(bin_dir, knobs)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GATE_RUN": RUN,
           "GATE_DIR": "gpu-001", "GATE_PATH": str(bin_dir), "GATE_GPUS": "8",
           "GATE_DCGM_LEVEL": "2", "GATE_DCGM_TIMEOUT": "30", "GATE_NCCL_TIMEOUT": "30",
           "METALSLURM_STANDIN_DIR": str(knobs), "METALSLURM_STANDIN_HOST": "gpu-001"}
    script = NODE_SCRIPT.replace(LOCAL_DIR, str(local))
    proc = subprocess.run(["bash", "-s"], input=script, env=env, capture_output=True,
                          text=True, check=False, timeout=60)
    out = local / "runs" / RUN / "gpu-001"
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    assert (stat.S_IMODE(local.stat().st_mode), stat.S_IMODE(out.stat().st_mode)) == (
        0o700, 0o700)
    assert sorted(p.name for p in out.iterdir()) == [
        "dcgm.err", "dcgm.out", "dcgm.rc", "health_after.err", "health_after.rc",
        "health_before.err", "health_before.rc", "job.log", "nccl_1node.err",
        "nccl_1node.out", "nccl_1node.rc"]
    assert [(out / f"{stem}.rc").read_text() for stem in (
        "health_before", "dcgm", "nccl_1node", "health_after")] == ["127\n", "0\n", "0\n",
                                                                     "127\n"]


def run_collect(root: Path, node: str) -> list[str]:
    return subprocess.run([sys.executable, "-c", COLLECT_PROGRAM, str(root)],
                          env={**os.environ, "SLURMD_NODENAME": node}, capture_output=True,
                          text=True, check=True, timeout=30).stdout.splitlines()


def test_results_read_back_through_interleaved_lines_each_node_speaking_for_itself(tmp_path):
    big = "x" * 5000  # several lines of output
    for node, files in (("gpu-001", {"gpu-001/dcgm.out": big, "gpu-002/dcgm.rc": "0\n",
                                     "pairs/gpu-001+gpu-002/nccl_pair.rc": "0\n"}),
                        ("gpu-002", {"gpu-002/dcgm.rc": "1\n"})):
        for path, text in files.items():
            (tmp_path / node / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / node / path).write_text(text)
    lines = [run_collect(tmp_path / n, n) for n in ("gpu-001", "gpu-002")]
    interleaved = "\n".join(line for pair in itertools.zip_longest(*lines)
                            for line in pair if line is not None)
    assert max(len(line) for line in interleaved.splitlines()) < 1024
    assert read_collected(interleaved, ["gpu-001", "gpu-002"]) == {
        "gpu-001/dcgm.out": big, "pairs/gpu-001+gpu-002/nccl_pair.rc": "0\n",
        "gpu-002/dcgm.rc": "1\n"}


def test_results_that_came_back_cut_stop_the_run(tmp_path):
    (tmp_path / "gpu-001").mkdir()
    (tmp_path / "gpu-001" / "dcgm.out").write_text("y" * 5000)
    lines = run_collect(tmp_path, "gpu-001")
    with pytest.raises(GateError) as caught:
        read_collected("\n".join(lines[1:]), ["gpu-001"])
    assert str(caught.value) == (f"the results on gpu-001 came back incomplete "
                                 f"({len(lines) - 2} of {len(lines) - 1} lines)")


# ---- the history program, run for real ------------------------------------------------------

def history_program(tmp_path: Path, action: str, path: Path, text: str = ""):
    program = tmp_path / "history.py"
    program.write_text(HISTORY_PROGRAM)
    return subprocess.run([sys.executable, str(program), action, str(path)], input=text,
                          capture_output=True, text=True, check=False, timeout=30)


def test_the_history_program_appends_through_a_new_file_for_root_alone(tmp_path):
    path = tmp_path / "accept" / "history.jsonl"
    assert history_program(tmp_path, "read", path).stdout == ""  # none yet
    history_program(tmp_path, "append", path, '{"a": 1}\n')
    first = path.stat().st_ino
    proc = history_program(tmp_path, "append", path, '{"b": 2}\n')
    assert (proc.returncode, proc.stderr) == (0, "")
    assert (path.read_text(), stat.S_IMODE(path.stat().st_mode),
            stat.S_IMODE(path.parent.stat().st_mode), path.stat().st_ino != first,
            sorted(p.name for p in path.parent.iterdir())) == (
        '{"a": 1}\n{"b": 2}\n', 0o600, 0o700, True, ["history.jsonl"])
    assert history_program(tmp_path, "read", path).stdout == '{"a": 1}\n{"b": 2}\n'


def plant(kind: str, path: Path, target: Path) -> None:
    """What a hostile user would leave at the history's path."""
    if kind == "a symbolic link":
        path.symlink_to(target)
    elif kind == "a FIFO":
        os.mkfifo(path)
    else:
        os.link(target, path)


@pytest.mark.parametrize("action", ["append", "read"])
@pytest.mark.parametrize("kind, said", [("a symbolic link", "is a symbolic link"),
                                        ("a FIFO", "is a FIFO"),
                                        ("a hard link", "has 2 hard links")])
def test_the_history_program_refuses_a_planted_file_and_leaves_its_target_alone(
        tmp_path, action, kind, said):
    directory = tmp_path / "accept"
    directory.mkdir(mode=0o700)
    target = directory / "secret"  # the file the link would have the gate overwrite
    target.write_text("root's\n")
    target.chmod(0o640)
    path = directory / "history.jsonl"
    plant(kind, path, target)
    proc = history_program(tmp_path, action, path, '{"forged": true}\n')
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        1, "", f"{path} {said}: refused, neither followed, read nor replaced; move it away "
               "and run again\n")
    assert (target.read_text(), stat.S_IMODE(target.stat().st_mode),
            sorted(p.name for p in directory.iterdir())) == (
        "root's\n", 0o640, ["history.jsonl", "secret"])


def test_the_history_program_refuses_a_directory_others_can_write(tmp_path):
    directory = tmp_path / "accept"
    directory.mkdir()
    directory.chmod(0o777)
    proc = history_program(tmp_path, "append", directory / "history.jsonl", "{}\n")
    assert (proc.returncode, proc.stderr, sorted(directory.iterdir())) == (
        1, f"{directory} can be written by others than uid {os.geteuid()}: refused, neither "
           "followed, read nor replaced; move it away and run again\n", [])


# ---- a Slurm read that fails, a run that stops half-way, one that was stopped before ---------

def test_a_failing_squeue_stops_the_run_after_its_tries_instead_of_finishing(controller):
    controller.failing["squeue"] = READ_TRIES
    with pytest.raises(GateError) as caught:
        gate(controller).run(None)
    assert str(caught.value) == (f"squeue failed {READ_TRIES} times on the controller (exit "
                                 f"status 1: squeue: {UNREACHABLE}); run 'metalslurm accept' "
                                 "again once Slurm answers")
    assert (len(controller.sent("squeue")), controller.sent("srun")) == (READ_TRIES, [])
    assert controller.states == {n: ("drained", f"metalslurm-accept: run {RUN} interrupted, "
                                                "not judged") for n in NODES}


def test_a_squeue_that_fails_less_often_than_its_tries_is_waited_out(controller):
    controller.failing["squeue"] = READ_TRIES - 1
    result = gate(controller).run(None)
    assert (result.passed, result.drained, controller.reservations) == (list(NODES), {}, {})


def test_a_failing_sinfo_stops_the_run_before_any_reservation(controller):
    controller.failing["sinfo"] = READ_TRIES
    with pytest.raises(GateError, match=f"^sinfo failed {READ_TRIES} times on the controller"):
        gate(controller).run(None)
    assert (controller.reservations, controller.sent("scontrol update")) == ({}, [])


def test_a_run_stopped_half_way_drains_its_untested_nodes_and_keeps_its_reservation(
        controller):
    controller.interrupt = "GATE_DIR=pairs/"  # the first pair job: every node job has run
    g = gate(controller)
    with pytest.raises(KeyboardInterrupt):
        g.run(None)
    reason = f"metalslurm-accept: run {RUN} interrupted, not judged"
    assert controller.states == {n: ("drained", reason) for n in NODES}
    assert controller.reservations == {f"metalslurm-accept-{RUN}": list(NODES)}
    assert controller.sent("scancel") == [f"scancel --reservation=metalslurm-accept-{RUN}"]
    assert (f"run {RUN} stopped: gpu-001, gpu-002, gpu-003, gpu-004 drained ({reason}); the "
            f"reservation metalslurm-accept-{RUN} stays until the next run") in g.said


def test_a_run_stopped_while_concluding_drains_only_the_nodes_without_a_verdict(controller):
    """gpu-001 passed and gpu-002 failed (its drain is what fails): gpu-002 to gpu-004 have
    no verdict in force; gpu-001 stays in the reservation, undrained."""
    controller.knob("gpu-002", ib={"mlx5_1": 0.5})
    controller.interrupt = "scontrol update nodename=gpu-002 state=drain"
    with pytest.raises(KeyboardInterrupt):
        gate(controller).run(None)
    reason = f"metalslurm-accept: run {RUN} interrupted, not judged"
    assert controller.states == {"gpu-001": ("idle", "none"),
                                 **{n: ("drained", reason)
                                    for n in ("gpu-002", "gpu-003", "gpu-004")}}
    assert list(controller.reservations) == [f"metalslurm-accept-{RUN}"]


def test_nodes_left_in_an_earlier_runs_reservation_are_drained_into_the_gate_first(controller):
    """The earlier run resumed gpu-001 and gpu-002 and was stopped; it had drained gpu-002
    (its verdict); gpu-003 was drained by hand. gpu-001 would go back to service untested
    when the reservation goes: it is drained with the gate's prefix, and tested."""
    old = "metalslurm-accept-20261126T000000Z"
    controller.reservations[old] = ["gpu-001", "gpu-002", "gpu-003"]
    controller.states = {"gpu-001": ("idle", "none"),
                         "gpu-002": ("drained", "metalslurm-accept: nccl_1node timed out"),
                         "gpu-003": ("drained", "maintenance"), "gpu-004": ("idle", "none")}
    g = gate(controller)
    result = g.run(None)
    drain = ("scontrol update nodename=gpu-001 state=drain reason='metalslurm-accept: left "
             "untested by run 20261126T000000Z'")
    assert controller.commands.index(drain) < controller.commands.index(
        f"scontrol delete reservation={old}")
    assert (result.tested, result.passed, controller.reservations) == (
        ["gpu-001", "gpu-002"], ["gpu-001", "gpu-002"], {})
    assert controller.states["gpu-003"] == ("drained", "maintenance")
    assert [f"removing the reservation {old} an earlier run left"] == [
        line for line in g.said if line.startswith("removing")]
