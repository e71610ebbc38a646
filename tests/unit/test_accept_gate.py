"""The acceptance gate's run (infra/accept/gate.py) against a FAKE controller: Slurm's
commands answered from a table of node states, each job "run" at once by writing what the
STAND-IN tools print (tests/fixtures/accept/standin, run for real here) into the run's
directory. What the fake leaves out (scheduling, powering nodes, srun) is the e2e test's
(tests/e2e/test_accept.py); here: which nodes, which jobs, the verdicts, the reasons, the
drains and the history."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from infra.accept.gate import Gate, GateError, GateNode, GateSettings
from infra.accept.verdicts import Verdict
from tests import accept_standins
from tests.paths import REPO

HEALTH = str(REPO / "ansible/roles/slurm_health/files/metalslurm-health")
NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
NODES = {f"gpu-00{i}": GateNode(f"gpu-00{i}", f"10.0.0.{i}", "h100", 8) for i in range(1, 5)}


class FakeController:
    """Answers the gate's commands; runs each job's tools (the stand-ins) at submission."""

    def __init__(self, tmp: Path, states: dict[str, tuple[str, str]]) -> None:
        self.states = dict(states)
        self.files: dict[str, str] = {}
        self.commands: list[str] = []
        self.reservations: list[str] = []
        self.jobs: list[tuple[str, list[str]]] = []
        self.knobs, self.bin = tmp / "knobs", tmp / "bin"
        accept_standins.install(self.bin, self.knobs)
        # The real health checker, reading the stand-in nvidia-smi (8 H100s; no device files
        # or kernel log here: its GPU count, ECC and row checks are the ones that run).
        self.health_config = tmp / "health.json"
        self.health_config.write_text(json.dumps({"gpus": {"count": 8, "type": "h100"}}))
        self.missing: set[str] = set()
        self.hang: set[tuple[str, str]] = set()  # (node, tool stem) killed at its limit

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

    def put(self, stem: str, rc: int, out: str = "") -> None:
        self.files[f"{stem}.rc"] = f"{rc}\n"
        self.files[f"{stem}.out"] = out

    def sbatch(self, words: list[str]) -> str:
        script, args = next((w, words[i + 1:]) for i, w in enumerate(words) if w.endswith(".sh"))
        nodes = words[words.index("-w") + 1].split(",")
        env = dict(kv.split("=", 1) for kv in words[
            next(i for i, w in enumerate(words) if w.startswith("--export="))][9:].split(",")[1:])
        out = args[0]
        self.jobs.append((Path(script).name, nodes))
        if script.endswith("node.sh"):
            node = nodes[0]
            health = ["--json", "--only", "gpus", "--config", str(self.health_config)]
            for stem, tool, targs in (("health_before", HEALTH, health),
                                      ("dcgm", "dcgmi", ["diag", "-r", env["GATE_DCGM_LEVEL"],
                                                         "-j"]),
                                      ("nccl_1node", "all_reduce_perf", []),
                                      ("health_after", HEALTH, health)):
                path = f"{out}/{stem}"
                if tool in self.missing:
                    self.files[f"{path}.rc"], self.files[f"{path}.err"] = "127\n", (
                        f"{tool} is not installed on {node}")
                elif tool == HEALTH and "metalslurm-health" in self.missing:
                    self.files[f"{path}.rc"] = "127\n"
                elif (node, stem) in self.hang:
                    self.put(path, 137)
                else:
                    self.put(path, *self.tool(tool, targs, node))
        else:
            a, b = args[1], args[2]
            self.put(f"{out}/nccl_pair", *self.tool("all_reduce_perf", [], a, f"{a},{b}"))
            for hca in env["GATE_HCAS"].split():
                self.put(f"{out}/ib_write_bw:{hca}",
                         *self.tool("ib_write_bw", ["-d", hca, "--report_gbits", b], a))
        return str(len(self.jobs))

    def run(self, command: str, check: bool = True, timeout: float = 120,
            stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        self.commands.append(command)
        out = ""
        words = shlex.split(command)
        if command.startswith("sinfo") and "--nodes=" in command:
            names = re.search(r"--nodes=(\S+)", command).group(1).split(",")
            out = "".join(f"{n}|{self.states[n][0]}|{self.states[n][1]}\n" for n in names
                          if n in self.states)
        elif command.startswith("sinfo"):
            out = "".join(f"{n}|{r}\n" for n, (_s, r) in self.states.items())
        elif command.startswith("scontrol show reservation"):
            out = "".join(f"ReservationName={r} Nodes=x\n" for r in self.reservations)
        elif command.startswith("scontrol create reservation"):
            self.reservations.append(re.search(r"reservationname=(\S+)", command).group(1))
        elif command.startswith("scontrol delete reservation="):
            self.reservations.remove(command.split("=", 1)[1])
        elif command.startswith("scontrol update nodename="):
            name = words[2].split("=", 1)[1]
            state = words[3].split("=", 1)[1]
            if state == "resume":
                self.states[name] = ("idle", "none")
            else:
                self.states[name] = ("drained", words[4].split("=", 1)[1])
        elif command.startswith("sbatch"):
            out = self.sbatch(words) + "\n"
        elif command.startswith("python3 -c"):
            root = words[-1]
            out = json.dumps({k[len(root) + 1:]: v for k, v in self.files.items()
                              if k.startswith(root + "/")})
        elif command.startswith("cat ") and "history" in command:
            out = self.files.get("history", "")
        elif "cat >>" in command:
            self.files["history"] = self.files.get("history", "") + (stdin or "")
        return subprocess.CompletedProcess(command, 0, out, "")

    def write(self, path: str, text: str, mode: str = "0644") -> None:
        self.files[path] = text

    def history(self) -> list[dict]:
        return [json.loads(line) for line in self.files.get("history", "").splitlines()]


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
    assert [nodes for script, nodes in controller.jobs if script == "pair.sh"] == [
        ["gpu-001", "gpu-002"], ["gpu-003", "gpu-004"],
        ["gpu-001", "gpu-003"], ["gpu-002", "gpu-004"]]
    assert result.drained == {"gpu-002": "metalslurm-accept: ib_write_bw:mlx5_1 196 Gb/s "
                                          "< 380 (with gpu-004)"}
    assert controller.states["gpu-002"] == ("drained", result.drained["gpu-002"])
    assert all(controller.states[n] == ("idle", "none")
               for n in ("gpu-001", "gpu-003", "gpu-004"))
    assert controller.reservations == []  # deleted, which returns the passing nodes
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
    assert [nodes for script, nodes in controller.jobs] == [["gpu-002"],
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


def test_an_earlier_runs_reservation_is_removed_first(controller):
    controller.reservations.append("metalslurm-accept-20261126T000000Z")
    g = gate(controller)
    g.run(["gpu-001", "gpu-002"])
    assert "removing the reservation metalslurm-accept-20261126T000000Z an earlier run left" \
        in g.said
    assert controller.reservations == []


def test_nothing_to_do_touches_nothing_and_no_partner_is_refused(controller):
    controller.states = {n: ("idle", "none") for n in NODES}
    result = gate(controller).run(None)
    assert (result.tested, controller.jobs, controller.reservations) == ([], [], [])
    controller.states = {"gpu-001": PENDING, **{n: ("down", "Not responding")
                                                for n in ("gpu-002", "gpu-003", "gpu-004")}}
    with pytest.raises(GateError, match="gpu-001 is the only node to test"):
        gate(controller).run(None)
    assert not any(c.startswith("scontrol create") for c in controller.commands)
