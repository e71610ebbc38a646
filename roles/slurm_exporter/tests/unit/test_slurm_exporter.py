"""The Slurm exporter (roles/slurm_exporter/files/metalslurm-slurm-exporter) against Slurm's
recorded outputs (tests/fixtures/slurm/exporter, README there), through a stand-in runner in
place of the Slurm commands: no Slurm, no container, no network beyond one loopback scrape.

Checked: the metric values of each recorded cluster state (nodes and their flags, GPUs by
status, jobs and pending reasons), text and JSON giving the same metrics, the JSON probe on a
Slurm that refuses --json, the GPU-seconds counter counting each run once over refreshes, a
failed or timed-out command, a scrape answered while a refresh hangs, --standby (config alone
while the primary controller answers, everything while a backup runs the cluster), the
primary's exporter the other way round (config alone while a backup runs the cluster, and no
change on a single controller), and the copies of other programs' constants."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import math
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

import pytest
from metalslurm_power import actions as power_actions
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from infra.ops.report import gpus_from_tres as report_gpus_from_tres
from tests.paths import FIXTURES, REPO

PROGRAM = REPO / "roles" / "slurm_exporter" / "files" / "metalslurm-slurm-exporter"
_loader = importlib.machinery.SourceFileLoader("metalslurm_slurm_exporter", str(PROGRAM))
_spec = importlib.util.spec_from_loader("metalslurm_slurm_exporter", _loader)
exporter_mod = importlib.util.module_from_spec(_spec)
sys.modules["metalslurm_slurm_exporter"] = exporter_mod  # dataclasses look their module up there
_loader.exec_module(exporter_mod)
RECORDED = FIXTURES / "slurm" / "exporter"
# When the local cluster's outputs were recorded (tests/fixtures/slurm/exporter/README.md), and
# a start of the exporter before every job in them ended.
LOCAL_NOW = datetime(2026, 11, 26, 10, 27, 11).timestamp()
STARTED = datetime(2026, 11, 26, 10, 0, 0).timestamp()


# ---- a stand-in for the Slurm commands ---------------------------------------------------------

Answer = str | Exception | Callable[[Sequence[str]], object]


class FakeSlurm:
    """Answers each command (by the exporter's command name) with a recorded output, an
    exception to raise (TimeoutExpired...), or a function of argv; records every call."""

    def __init__(self, **answers: Answer) -> None:
        self.answers: dict[str, Answer] = {"sacct": ""}
        self.answers.update(answers)
        self.calls: list[list[str]] = []

    @staticmethod
    def command_of(argv: Sequence[str]) -> str:
        name = Path(argv[0]).name
        if name == "scontrol":
            return "config" if "config" in argv else "nodes"
        if name == "squeue":
            return "jobs"
        return name + ("_json" if "--json" in argv else "")

    def __call__(self, argv: Sequence[str], timeout: float) -> object:
        self.calls.append(list(argv))
        key = self.command_of(argv)
        answer = self.answers.get(key)
        if answer is None:  # as Slurm 22.05 answers --json
            return exporter_mod.Completed(1, "", f"{argv[0]}: unrecognized option '--json'\n"
                                                 f'Try "{argv[0]} --help" for more information')
        if isinstance(answer, Exception):
            raise answer
        if callable(answer):
            answer = answer(argv)
            if isinstance(answer, exporter_mod.Completed):
                return answer
        return exporter_mod.Completed(0, str(answer), "")


def recorded(path: str) -> str:
    return (RECORDED / path).read_text()


def local_cluster(**over: Answer) -> FakeSlurm:
    """The Debian 13 local cluster (Slurm 24.11.5), JSON for sdiag and sshare."""
    answers: dict[str, Answer] = {
        "nodes": recorded("local-24.11/scontrol-show-nodes.txt"),
        "jobs": recorded("local-24.11/squeue.txt"),
        "sdiag_json": recorded("local-24.11/sdiag.json"),
        "sdiag": recorded("local-24.11/sdiag.txt"),
        "config": recorded("local-24.11/scontrol-show-config.txt"),
        "sshare_json": recorded("local-24.11/sshare.json"),
        "sshare": recorded("local-24.11/sshare.txt"),
        "sacct": recorded("local-24.11/sacct.txt"),
    }
    answers.update(over)
    return FakeSlurm(**answers)


def single(release: str, moment: str, **over: Answer) -> FakeSlurm:
    """A one-container cluster of that release (22.05.8 / 24.11.5), text everywhere."""
    answers: dict[str, Answer] = {
        "nodes": recorded(f"single-{release}/scontrol-show-nodes-{moment}.txt"),
        "jobs": recorded(f"single-{release}/squeue-{moment}.txt"),
        "sdiag": recorded(f"single-{release}/sdiag-{moment}.txt"),
        "config": recorded(f"single-{release}/scontrol-show-config.txt"),
        "sshare": "",
    }
    answers.update(over)
    return FakeSlurm(**answers)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def started(slurm: FakeSlurm, **kwargs: object):
    """An exporter started at STARTED, its clock at LOCAL_NOW (``exporter.clock.now``)."""
    clock = Clock(STARTED)
    exporter = exporter_mod.Exporter(runner=slurm, clock=clock, **kwargs)
    clock.now = LOCAL_NOW
    return exporter


def refreshed(slurm: FakeSlurm, **kwargs: object):
    exporter = started(slurm, **kwargs)
    exporter.refresh()
    return exporter


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(exporter) -> Samples:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in exporter.collect() for s in family.samples}


def value(exporter, name: str, **labels: str) -> float | None:
    return samples(exporter).get((name, tuple(sorted(labels.items()))))


def series(exporter, name: str, key: str) -> dict[str, float]:
    """``{label value: sample value}`` of one metric, by one label (the others dropped)."""
    return {dict(labels)[key]: v for (n, labels), v in samples(exporter).items() if n == name}


def node_states(exporter) -> dict[str, str]:
    return {dict(labels)["node"]: dict(labels)["state"]
            for (n, labels), _ in samples(exporter).items() if n == "slurm_node_state"}


def node_flags(exporter, node: str) -> set[str]:
    return {dict(labels)["flag"] for (n, labels), _ in samples(exporter).items()
            if n == "slurm_node_flag" and dict(labels)["node"] == node}


# ---- nodes -------------------------------------------------------------------------------------

def test_local_cluster_node_states():
    assert node_states(refreshed(local_cluster())) == {
        "gpu-001": "allocated", "gpu-002": "idle", "gpu-003": "idle", "gpu-004": "idle"}


@pytest.mark.parametrize("node, flags", [
    ("gpu-001", set()), ("gpu-002", set()),
    ("gpu-003", {"cloud", "powered_down"}), ("gpu-004", {"cloud", "powered_down"})])
def test_local_cluster_node_flags(node, flags):
    assert node_flags(refreshed(local_cluster()), node) == flags


@pytest.mark.parametrize("status, gpus", [
    ("total", 32), ("allocated", 8), ("idle", 8), ("unavailable", 16)])
def test_local_cluster_gpus_by_status(status, gpus):
    assert value(refreshed(local_cluster()), "slurm_gpus", type="h100", status=status) == gpus


@pytest.mark.parametrize("node, allocated", [("gpu-001", 8), ("gpu-002", 0), ("gpu-003", 0)])
def test_local_cluster_node_gpus_allocated(node, allocated):
    exporter = refreshed(local_cluster())
    assert value(exporter, "slurm_node_gpus", node=node, type="h100") == 8
    assert value(exporter, "slurm_node_gpus_allocated", node=node, type="h100") == allocated


def test_local_cluster_node_counts():
    exporter = refreshed(local_cluster())
    assert series(exporter, "slurm_nodes", "state") == {
        "allocated": 1, "idle": 3, "mixed": 0, "down": 0, "future": 0, "unknown": 0, "error": 0}
    flagged = series(exporter, "slurm_nodes_flagged", "flag")
    assert {f: n for f, n in flagged.items() if n} == {"cloud": 2, "powered_down": 2}
    assert set(flagged) >= set(exporter_mod.CONTRACT_FLAGS)


# The one-container clusters (README): gpu-001 drained by metalslurm-health with a running job,
# gpu-002 drained by metalslurm-accept with no slurmd, gpu-003 a cloud node resuming (running)
# and after ResumeTimeout (resume-timeout).
RELEASES = ["22.05", "24.11"]


@pytest.mark.parametrize("release", RELEASES)
def test_single_running_node_states(release):
    exporter = refreshed(single(release, "running"))
    assert node_states(exporter) == {"gpu-001": "mixed", "gpu-002": "unknown",
                                     "gpu-003": "mixed"}


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("node, flags", [
    ("gpu-001", {"drain", "draining"}),
    ("gpu-002", {"drain", "drained", "not_responding"}),
    ("gpu-003", {"cloud", "not_responding", "powering_up"})])
def test_single_running_node_flags(release, node, flags):
    assert node_flags(refreshed(single(release, "running")), node) == flags


@pytest.mark.parametrize("release", RELEASES)
def test_single_drain_info(release):
    exporter = refreshed(single(release, "running"))
    drains = {(n, labels): v for (n, labels), v in samples(exporter).items()
              if n == "slurm_node_drain_info"}
    assert drains == {
        ("slurm_node_drain_info", (("node", "gpu-001"), ("owner", "metalslurm-health"),
                                   ("reason", "metalslurm-health: gpu_count=7 < 8 "
                                              "(nvidia-smi)"))): 1.0,
        ("slurm_node_drain_info", (("node", "gpu-002"), ("owner", "metalslurm-accept"),
                                   ("reason", "metalslurm-accept: nccl bus bandwidth "
                                              "310 GB/s"))): 1.0}


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("status, gpus", [
    # gpu-001: 1 allocated, 7 free but draining; gpu-002: 8 on a drained node; gpu-003: 1
    # allocated to the job that waits for it, 7 on a node powering up.
    ("total", 24), ("allocated", 2), ("idle", 0), ("unavailable", 22)])
def test_single_running_gpus_by_status(release, status, gpus):
    assert value(refreshed(single(release, "running")), "slurm_gpus", type="h100",
                 status=status) == gpus


def test_resume_timeout_24_11_is_a_failed_resume():
    exporter = refreshed(single("24.11", "resume-timeout"))
    assert node_states(exporter)["gpu-003"] == "down"
    assert node_flags(exporter, "gpu-003") == {"cloud", "powered_down", "resume_failed"}


def test_resume_timeout_22_05_leaves_no_reason():
    """Slurm 22.05 puts a cloud node that missed ResumeTimeout back as idle~ with no reason:
    nothing tells a failed resume apart there, unless the power program set its reason."""
    exporter = refreshed(single("22.05", "resume-timeout"))
    assert node_states(exporter)["gpu-003"] == "idle"
    assert node_flags(exporter, "gpu-003") == {"cloud", "powered_down"}


@pytest.mark.parametrize("state, reason, base, flags", [
    ("IDLE", "", "idle", set()),
    ("IDLE+DRAIN", "x", "idle", {"drain", "drained"}),
    ("ALLOCATED+DRAIN", "x", "allocated", {"drain", "draining"}),
    ("MIXED+DRAIN", "x", "mixed", {"drain", "draining"}),
    ("IDLE+COMPLETING+DRAIN", "x", "idle", {"completing", "drain", "draining"}),
    ("DOWN+DRAIN+NOT_RESPONDING", "x", "down", {"drain", "drained", "not_responding"}),
    ("IDLE+CLOUD+POWERED_DOWN", "", "idle", {"cloud", "powered_down"}),
    ("IDLE+CLOUD+POWER_DOWN+POWERED_DOWN", "", "idle", {"cloud", "power_down", "powered_down"}),
    ("IDLE+CLOUD+POWERING_DOWN", "", "idle", {"cloud", "powering_down"}),
    ("IDLE+MAINTENANCE+RESERVED", "", "idle", {"maint", "reserved"}),
    ("MIXED+REBOOT_REQUESTED", "", "mixed", {"reboot_requested"}),
    ("FUTURE", "", "future", set()),
    ("DOWN+FAIL", "", "down", {"fail"}),
    # sinfo's suffixes, read although scontrol spells the flags out
    ("idle~", "", "idle", {"powered_down"}),
    ("down*", "", "down", {"not_responding"}),
    ("mix#", "", "mix", {"powering_up"}),
    ("idle%", "", "idle", {"powering_down"}),
    ("down!", "", "down", {"power_down"}),
    ("alloc@", "", "alloc", {"reboot_requested"}),
    # what makes a failed resume
    ("IDLE+CLOUD+POWERED_DOWN", "metalslurm: power on failed: bmc timeout", "idle",
     {"cloud", "powered_down", "resume_failed"}),
    ("DOWN+CLOUD+POWERED_DOWN", "ResumeTimeout reached", "down",
     {"cloud", "powered_down", "resume_failed"}),
    ("DOWN+NOT_RESPONDING", "Not responding", "down", {"not_responding"}),
    ("DOWN+CLOUD+NOT_RESPONDING", "Not responding", "down",
     {"cloud", "not_responding", "resume_failed"}),
    ("DOWN+DRAIN", "metalslurm-health: gpu missing", "down", {"drain", "drained"}),
])
def test_node_state(state, reason, base, flags):
    assert exporter_mod.node_state(state.split("+"), reason) == (base, frozenset(flags))


def test_node_state_json_list_form():
    """Slurm's JSON lists the same words (scontrol --json show nodes on 24.11)."""
    assert exporter_mod.node_state(["IDLE", "CLOUD", "POWERED_DOWN"], "") == (
        "idle", frozenset({"cloud", "powered_down"}))


@pytest.mark.parametrize("reason, owner", [
    ("metalslurm-health: gpu_count=7 < 8", "metalslurm-health"),
    ("metalslurm-accept: nccl bus bandwidth 310 GB/s", "metalslurm-accept"),
    ("metalslurm-power: x", "metalslurm-power"),
    ("metalslurm: power on failed: bmc timeout", "metalslurm-power"),
    ("Kill task failed", "other"),
    ("maintenance: bios update", "other"),
    ("", "other"),
])
def test_drain_owner(reason, owner):
    assert exporter_mod.drain_owner(reason) == owner


def test_reason_with_comment_after_it():
    line = ("NodeName=gpu-009 Gres=gpu:8 State=IDLE+DRAIN Reason=disk: /scratch=98% full "
            "[admin@2026-11-26T10:00:00] Comment=ticket=42")
    [node] = exporter_mod.parse_nodes_text(line)
    assert (node.reason, dict(node.gpus)) == ("disk: /scratch=98% full", {"": 8})


@pytest.mark.parametrize("gres, gpus", [
    ("gpu:h100:8", {"h100": 8}),
    ("gpu:h100:8(S:0-1)", {"h100": 8}),
    ("gpu:H100:4(S:0,1),gpu:a100:4(S:1)", {"h100": 4, "a100": 4}),
    ("gpu:8", {"": 8}),
    ("gpu:8(S:0)", {"": 8}),
    ("gpu:h100:2(IDX:0-1)", {"h100": 2}),
    ("gpu:h100:0(IDX:N/A)", {"h100": 0}),
    ("gpu:(null):2(IDX:0-1)", {"": 2}),
    ("gpu:h100:8,nvme:1", {"h100": 8}),
    ("shard:h100:64,gpu:h100:8", {"h100": 8}),
    ("(null)", {}),
    ("", {}),
])
def test_gpus_from_gres(gres, gpus):
    assert exporter_mod.gpus_from_gres(gres) == gpus


# ---- jobs --------------------------------------------------------------------------------------

def test_local_cluster_jobs_by_state():
    exporter = refreshed(local_cluster())
    jobs = {(dict(labels)["state"], dict(labels)["partition"], dict(labels)["account"]): v
            for (n, labels), v in samples(exporter).items() if n == "slurm_jobs"}
    assert jobs == {("pending", "debug", "team-a"): 2, ("pending", "debug", "team-b"): 1,
                    ("pending", "priority", "team-b"): 1, ("pending", "train", "root"): 1,
                    ("pending", "train", "team-b"): 1, ("running", "train", "team-a"): 2}


def test_local_cluster_pending_reasons():
    exporter = refreshed(local_cluster())
    pending = {(dict(labels)["partition"], dict(labels)["account"], dict(labels)["reason"]): v
               for (n, labels), v in samples(exporter).items() if n == "slurm_jobs_pending"}
    assert pending == {("debug", "team-a", "BeginTime"): 1,
                       ("debug", "team-a", "ReqNodeNotAvail"): 1,
                       ("debug", "team-b", "QOSGrpGRESMinutes"): 1,
                       ("priority", "team-b", "QOSGrpGRESMinutes"): 1,
                       ("train", "root", "ReqNodeNotAvail"): 1,
                       ("train", "team-b", "QOSGrpGRESMinutes"): 1}


@pytest.mark.parametrize("partition, reason, submitted", [
    ("debug", "QOSGrpGRESMinutes", "2026-11-26T10:02:47"),
    ("debug", "ReqNodeNotAvail", "2026-11-26T10:26:55"),
    ("train", "ReqNodeNotAvail", "2026-11-26T10:26:54")])
def test_local_cluster_pending_longest(partition, reason, submitted):
    expected = LOCAL_NOW - datetime.fromisoformat(submitted).timestamp()
    assert value(refreshed(local_cluster()), "slurm_jobs_pending_longest_seconds",
                 partition=partition, reason=reason) == expected


def test_local_cluster_job_gpus():
    """Only jobs holding an allocation count: squeue prints a pending job's requested TRES in
    the tres-alloc field."""
    assert series(refreshed(local_cluster()), "slurm_job_gpus_allocated", "account") == {
        "team-a": 8}


@pytest.mark.parametrize("release", RELEASES)
def test_single_pending_reasons(release):
    exporter = refreshed(single(release, "running"))
    reasons = {dict(labels)["reason"] for (n, labels), _ in samples(exporter).items()
               if n == "slurm_jobs_pending"}
    assert reasons == {"BeginTime", "JobHeldUser", "Priority", "ReqNodeNotAvail", "Resources"}


@pytest.mark.parametrize("text, reason", [
    ("Resources", "Resources"),
    ("None", "None"),
    ("ReqNodeNotAvail, UnavailableNodes:gpu-[001-004]", "ReqNodeNotAvail"),
    ("ReqNodeNotAvail, May be reserved for other job", "ReqNodeNotAvail"),
    ("ReqNodeNotAvail, Reserved for maintenance", "ReqNodeNotAvail"),
    ("Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority "
     "partitions", "Resources"),
    ("RaisedSignal:9(Killed)", "RaisedSignal"),
    ("Reservation maint_42 was deleted", "Reservation maint_N was deleted"),
    ("uid 1000 not in group permitted to use this partition (gpu). groups allowed: x",
     "uid N not in group permitted to use this partition"),
])
def test_pending_reason(text, reason):
    assert exporter_mod.pending_reason(text) == reason


def test_squeue_format_fields_are_cut_by_nothing():
    fmt = exporter_mod.squeue_format()
    assert fmt.split(",") == [f"{f}:0\x1f" for f in exporter_mod.SQUEUE_FIELDS[:-1]] + [
        "tres-alloc:0"]


# ---- sdiag and sshare: JSON and text -----------------------------------------------------------

def sdiag_metrics(exporter) -> Samples:
    # sdiag's own RPC is counted between the two recorded calls: left out of the comparison
    return {k: v for k, v in samples(exporter).items()
            if k[0].startswith(("slurm_scheduler", "slurm_rpc", "slurm_dbd"))
            and ("type", "REQUEST_STATS_INFO") not in k[1]}


@pytest.mark.parametrize("text, json_", [
    ("local-24.11/sdiag.txt", "local-24.11/sdiag.json"),
    ("local-24.11/sdiag-dbd-away.txt", "local-24.11/sdiag-dbd-away.json"),
    ("single-24.11/sdiag-running.txt", "single-24.11/sdiag-running.json")])
def test_sdiag_text_and_json_agree(text, json_):
    from_text = refreshed(FakeSlurm(nodes="", jobs="", sdiag=recorded(text), sshare=""))
    from_json = refreshed(FakeSlurm(nodes="", jobs="", sdiag_json=recorded(json_), sshare=""))
    assert from_text.json_ok["sdiag"] is False and from_json.json_ok["sdiag"] is True
    assert sdiag_metrics(from_text) == sdiag_metrics(from_json)
    assert len(sdiag_metrics(from_text)) > 20


@pytest.mark.parametrize("name, labels, expected", [
    ("slurm_scheduler_threads", {}, 1),
    ("slurm_scheduler_agent_queue_size", {}, 0),
    ("slurm_scheduler_jobs", {"event": "submitted"}, 4),
    ("slurm_scheduler_jobs", {"event": "completed"}, 2),
    ("slurm_scheduler_jobs", {"event": "canceled"}, 2),
    ("slurm_scheduler_cycle_seconds", {"cycle": "main", "stat": "max"}, 0.002693),
    ("slurm_scheduler_cycle_seconds", {"cycle": "main", "stat": "mean"}, 0.000481),
    ("slurm_scheduler_cycle_seconds", {"cycle": "backfill", "stat": "last"}, 0.000654),
    ("slurm_scheduler_cycle_seconds", {"cycle": "backfill", "stat": "mean"}, 0.000619),
    ("slurm_scheduler_backfilled_jobs", {}, 3),
])
def test_sdiag_values(name, labels, expected):
    exporter = refreshed(FakeSlurm(nodes="", jobs="", sdiag=recorded("local-24.11/sdiag.txt"),
                                   sshare=""))
    assert value(exporter, name, **labels) == pytest.approx(expected)


def test_accounting_queue_and_its_limit_while_slurmdbd_is_away():
    """slurmdbd stopped on the local cluster: 22 records held; MaxDBDMsgs 20016 (2 x
    MaxJobCount 10000 + 4 x its 4 nodes)."""
    exporter = refreshed(local_cluster(sdiag_json=recorded("local-24.11/sdiag-dbd-away.json")))
    assert value(exporter, "slurm_dbd_agent_queue_size") == 22
    assert value(exporter, "slurm_dbd_agent_queue_limit") == 20016
    assert value(exporter, "slurm_exporter_command_up", command="config") == 1


def test_accounting_queue_is_empty_while_slurmdbd_keeps_up():
    exporter = refreshed(local_cluster())
    assert value(exporter, "slurm_dbd_agent_queue_size") == 0
    assert value(exporter, "slurm_dbd_agent_queue_limit") == 20016


@pytest.mark.parametrize("release", ["22.05", "24.11"])
def test_no_queue_limit_is_reported_without_slurmdbd(release):
    """Without slurmdbd Slurm prints MaxDBDMsgs = 0 on both releases: no limit, not 0."""
    exporter = refreshed(single(release, "running"))
    assert value(exporter, "slurm_exporter_command_up", command="config") == 1
    assert value(exporter, "slurm_dbd_agent_queue_limit") is None
    assert value(exporter, "slurm_dbd_agent_queue_size") == 0


def test_unreadable_config_is_a_failed_command_and_reports_no_limit():
    exporter = refreshed(local_cluster(config="slurm_load_ctl_conf: nothing\n"))
    assert value(exporter, "slurm_exporter_command_up", command="config") == 0
    assert value(exporter, "slurm_dbd_agent_queue_limit") is None
    assert value(exporter, "slurm_dbd_agent_queue_size") == 0


# ---- controllers: the ping lines at the end of scontrol show config ------------------------------

def controllers(exporter) -> dict[tuple[str, str, str], float]:
    """``{(host, controller_role, index): value}`` of slurm_controller_up."""
    return {(d["host"], d["controller_role"], d["index"]): v
            for (n, labels), v in samples(exporter).items() if n == "slurm_controller_up"
            for d in [dict(labels)]}


def config_with_pings(*pings: str) -> str:
    """A unit test input, not a recording: ``scontrol show config``'s shape (``Key = value``
    lines, a blank line, then one ping line per SlurmctldHost, scontrol.c) cut down to a few
    keys, for the controller sets no recording has (the two-controller cluster's recordings
    will be tests/fixtures/slurm/exporter/local-ha-24.11/)."""
    hosts = "".join(f"SlurmctldHost[{i}]        = ctl{i + 1 if i else ''}\n"
                    for i in range(len(pings)))
    return ("Configuration data as of 2026-12-03T20:26:41\n"
            "ClusterName             = ms-e2e13\n"
            "MaxDBDMsgs              = 20016\n"
            f"{hosts}\n" + "".join(line + "\n" for line in pings))


@pytest.mark.parametrize("cluster, host", [
    (lambda: local_cluster(), "ctl"),
    (lambda: single("22.05", "running"), "gpu-001"),
    (lambda: single("24.11", "running"), "gpu-001"),
], ids=["local-24.11", "single-22.05", "single-24.11"])
def test_one_controller_gives_only_the_primary_series(cluster, host):
    assert controllers(refreshed(cluster())) == {(host, "primary", "0"): 1}


@pytest.mark.parametrize("pings, expected", [
    (("Slurmctld(primary) at ctl is UP", "Slurmctld(backup) at ctl2 is UP"),
     {("ctl", "primary", "0"): 1, ("ctl2", "backup", "1"): 1}),
    (("Slurmctld(primary) at ctl is UP", "Slurmctld(backup) at ctl2 is DOWN"),
     {("ctl", "primary", "0"): 1, ("ctl2", "backup", "1"): 0}),
    (("Slurmctld(primary) at ctl is DOWN", "Slurmctld(backup) at ctl2 is UP"),
     {("ctl", "primary", "0"): 0, ("ctl2", "backup", "1"): 1}),
    # three or more: scontrol numbers every backup ("backup%d" with its index)
    (("Slurmctld(primary) at ctl is DOWN", "Slurmctld(backup1) at ctl2 is UP",
      "Slurmctld(backup2) at ctl3 is DOWN"),
     {("ctl", "primary", "0"): 0, ("ctl2", "backup", "1"): 1, ("ctl3", "backup", "2"): 0}),
], ids=["both-up", "backup-down", "primary-down", "three"])
def test_controllers_from_the_ping_lines(pings, expected):
    exporter = refreshed(local_cluster(config=config_with_pings(*pings)))
    assert controllers(exporter) == expected
    # The primary DOWN and a backup UP: the primary's exporter is passive, without the limit.
    primary_up = expected[("ctl", "primary", "0")] == 1
    assert value(exporter, "slurm_dbd_agent_queue_limit") == (20016 if primary_up else None)


def test_the_root_only_banner_after_a_down_controller_is_no_controller():
    text = config_with_pings("Slurmctld(primary) at ctl is UP",
                             "Slurmctld(backup) at ctl2 is DOWN")
    text += ("*****************************************\n"
             "** RESTORE SLURMCTLD DAEMON TO SERVICE **\n"
             "*****************************************\n")
    exporter = refreshed(local_cluster(config=text))
    assert controllers(exporter) == {("ctl", "primary", "0"): 1, ("ctl2", "backup", "1"): 0}


def test_a_failed_config_drops_the_controllers_and_keeps_the_limit():
    """A stale UP would hide a controller that went away since: no series, while MaxDBDMsgs
    (which only changes with slurm.conf) is kept."""
    slurm = local_cluster(config=config_with_pings("Slurmctld(primary) at ctl is UP",
                                                   "Slurmctld(backup) at ctl2 is UP"))
    exporter = refreshed(slurm)
    assert len(controllers(exporter)) == 2
    slurm.answers["config"] = subprocess.TimeoutExpired("scontrol", 10)
    exporter.refresh()
    assert value(exporter, "slurm_exporter_command_up", command="config") == 0
    assert controllers(exporter) == {}
    assert value(exporter, "slurm_dbd_agent_queue_limit") == 20016


def test_no_controller_answering_is_a_failed_command_not_a_row_of_zeros():
    """scontrol exits 1 when no controller answers (its config ask or its pings): no series,
    never a made-up 0; the failed command says it."""
    exporter = refreshed(local_cluster(config=lambda argv: exporter_mod.Completed(
        1, "", "slurm_load_ctl_conf error: Unable to contact slurm controller (connect "
               "failure)\n")))
    assert value(exporter, "slurm_exporter_command_up", command="config") == 0
    assert controllers(exporter) == {}


def test_ping_lines_without_a_configuration_report_no_controller():
    exporter = refreshed(local_cluster(config="Slurmctld(primary) at ctl is UP\n"))
    assert value(exporter, "slurm_exporter_command_up", command="config") == 0
    assert controllers(exporter) == {}


def test_a_configuration_without_ping_lines_reports_no_controller():
    exporter = refreshed(local_cluster(config=config_with_pings()))
    assert value(exporter, "slurm_exporter_command_up", command="config") == 1
    assert value(exporter, "slurm_dbd_agent_queue_limit") == 20016
    assert controllers(exporter) == {}


def test_controllers_in_the_scrape():
    exporter = refreshed(local_cluster(config=config_with_pings(
        "Slurmctld(primary) at ctl is DOWN", "Slurmctld(backup) at ctl2 is UP")))
    text = generate_latest(exporter_mod.registry_for(exporter)).decode()
    assert "# TYPE slurm_controller_up gauge" in text
    assert 'slurm_controller_up{controller_role="primary",host="ctl",index="0"} 0.0' in text
    assert 'slurm_controller_up{controller_role="backup",host="ctl2",index="1"} 1.0' in text


# ---- --standby: the exporter on the backup controller's machine ---------------------------------

PRIMARY_UP = config_with_pings("Slurmctld(primary) at ctl is UP", "Slurmctld(backup) at ctl2 is UP")
BACKUP_DOWN = config_with_pings("Slurmctld(primary) at ctl is UP",
                                "Slurmctld(backup) at ctl2 is DOWN")
PRIMARY_DOWN = config_with_pings("Slurmctld(primary) at ctl is DOWN",
                                 "Slurmctld(backup) at ctl2 is UP")
NO_CONTROLLER = exporter_mod.Completed(
    1, "", "slurm_load_ctl_conf error: Unable to contact slurm controller (connect failure)\n")
# What a standby serves while the primary runs the cluster: the config ask's answer and the
# exporter's own series (the GPU-seconds counter's family is there, without a sample).
STANDBY_SERIES = {"slurm_up", "slurm_exporter_command_up", "slurm_exporter_slurm_commands_total",
                  "slurm_exporter_last_success_timestamp_seconds",
                  "slurm_exporter_refresh_duration_seconds",
                  "slurm_exporter_min_interval_seconds", "slurm_controller_up"}


def asked(slurm: FakeSlurm) -> list[str]:
    """The exporter's commands, in the order it ran them (sdiag --json counted as sdiag)."""
    return [FakeSlurm.command_of(argv).removesuffix("_json") for argv in slurm.calls]


def names(exporter) -> set[str]:
    return {n for n, _ in samples(exporter)}


@pytest.mark.parametrize("config", [PRIMARY_UP, BACKUP_DOWN], ids=["both-up", "backup-down"])
def test_standby_asks_only_config_while_the_primary_answers(config):
    slurm = local_cluster(config=config)
    refreshed(slurm, standby=True)
    assert asked(slurm) == ["config"]


@pytest.mark.parametrize("config", [PRIMARY_UP, BACKUP_DOWN], ids=["both-up", "backup-down"])
def test_standby_serves_only_the_controllers_while_the_primary_answers(config):
    """No series of the cluster (counted once, by the primary's exporter), no command_up of
    nodes, jobs and sdiag (SlurmControllerDown), and no queue limit without its queue."""
    exporter = refreshed(local_cluster(config=config), standby=True)
    assert names(exporter) == STANDBY_SERIES
    assert series(exporter, "slurm_exporter_command_up", "command") == {"config": 1}
    assert value(exporter, "slurm_up") == 1
    assert value(exporter, "slurm_exporter_last_success_timestamp_seconds") == LOCAL_NOW
    assert controllers(exporter) == {("ctl", "primary", "0"): 1,
                                     ("ctl2", "backup", "1"): 1 if config is PRIMARY_UP else 0}


def test_standby_counts_the_commands_it_ran():
    exporter = refreshed(local_cluster(config=PRIMARY_UP), standby=True)
    assert series(exporter, "slurm_exporter_slurm_commands_total", "command") == {
        "nodes": 0, "jobs": 0, "sdiag": 0, "config": 1, "sshare": 0, "sacct": 0}


def test_standby_asks_every_command_while_a_backup_runs_the_cluster():
    slurm = local_cluster(config=PRIMARY_DOWN)
    refreshed(slurm, standby=True)
    assert asked(slurm) == ["config", "nodes", "jobs", "sdiag", "sshare", "sacct"]


def test_standby_serves_what_the_primary_s_exporter_would_while_a_backup_runs_the_cluster():
    """The same series as the primary's exporter serves while the primary answers (it is
    passive now), but for the controllers' state."""
    standby = refreshed(local_cluster(config=PRIMARY_DOWN), standby=True)
    primary_s = refreshed(local_cluster(config=PRIMARY_UP))
    assert ({k: v for k, v in samples(standby).items() if k[0] != "slurm_controller_up"}
            == {k: v for k, v in samples(primary_s).items() if k[0] != "slurm_controller_up"})
    assert controllers(standby) == {("ctl", "primary", "0"): 0, ("ctl2", "backup", "1"): 1}
    assert {"slurm_node_state", "slurm_jobs", "slurm_scheduler_threads",
            "slurm_dbd_agent_queue_limit", "slurm_account_gpu_seconds_total",
            "slurm_controller_up"} <= names(standby)
    assert series(standby, "slurm_exporter_command_up", "command") == dict.fromkeys(
        exporter_mod.COMMANDS, 1)


@pytest.mark.parametrize("failure", [NO_CONTROLLER, subprocess.TimeoutExpired("scontrol", 10)],
                         ids=["no-controller", "timeout"])
def test_standby_whose_config_fails_reports_config_alone(failure):
    """No controller answers: command_up 0 for config and nothing else asked. Not nodes, jobs
    and sdiag at 0: the primary's exporter reports those where its machine lives, and where it
    is gone SlurmControllerDown reads the standby's config 0 (the alert rules)."""
    slurm = local_cluster(config=failure if isinstance(failure, Exception)
                          else lambda argv: failure)
    exporter = refreshed(slurm, standby=True)
    assert asked(slurm) == ["config"]
    assert series(exporter, "slurm_exporter_command_up", "command") == {"config": 0}
    assert value(exporter, "slurm_up") == 0
    assert names(exporter) == STANDBY_SERIES - {
        "slurm_controller_up", "slurm_exporter_last_success_timestamp_seconds"}


def test_standby_before_its_first_refresh_reports_config_alone():
    exporter = started(local_cluster(), standby=True)
    assert series(exporter, "slurm_exporter_command_up", "command") == {"config": 0}
    assert value(exporter, "slurm_up") == 0


def test_standby_switches_with_the_primary_between_refreshes():
    """What the active period served goes with the primary's return: the cluster's series,
    the command_up of the other commands, the queue limit and the usage counters."""
    slurm = local_cluster(config=PRIMARY_UP)
    exporter = refreshed(slurm, standby=True)
    assert names(exporter) == STANDBY_SERIES
    slurm.answers["config"] = PRIMARY_DOWN
    exporter.refresh()
    assert value(exporter, "slurm_node_state", node="gpu-001", state="allocated") == 1
    assert len(series(exporter, "slurm_account_gpu_seconds_total", "account")) > 1
    assert series(exporter, "slurm_exporter_command_up", "command") == dict.fromkeys(
        exporter_mod.COMMANDS, 1)
    slurm.answers["config"] = PRIMARY_UP
    exporter.refresh()
    assert names(exporter) == STANDBY_SERIES
    assert series(exporter, "slurm_exporter_command_up", "command") == {"config": 1}
    assert asked(slurm) == ["config", "config", "nodes", "jobs", "sdiag", "sshare", "sacct",
                            "config"]


def test_standby_counts_usage_from_each_takeover_on():
    """A backup that takes over again, hours later: the sacct window starts at that refresh
    (as at an exporter's start), not at the exporter's start or its last active ask."""
    slurm = local_cluster(config=PRIMARY_DOWN)
    exporter = refreshed(slurm, standby=True)
    slurm.answers["config"] = PRIMARY_UP
    exporter.clock.now += 3600
    exporter.refresh()
    slurm.answers["config"] = PRIMARY_DOWN
    exporter.clock.now += 3600
    exporter.refresh()
    starts = [a for argv in slurm.calls if FakeSlurm.command_of(argv) == "sacct"
              for a in argv if a.startswith("--starttime=")]
    takeover = datetime.fromtimestamp(LOCAL_NOW + 2 * 3600)
    assert starts == ["--starttime=2026-11-26T10:00:00",
                      f"--starttime={takeover:%Y-%m-%dT%H:%M:%S}"]
    # the recorded allocations ended before the takeover: counters at 0, from sshare
    assert set(series(exporter, "slurm_account_gpu_seconds_total", "account").values()) == {0}


def test_active_standby_whose_config_fails_keeps_the_usage_counters_only():
    """While a backup runs the cluster a failed config ask is no answer at all: nothing of the
    cluster is served, and the counters stay as a failed sacct leaves them."""
    slurm = local_cluster(config=PRIMARY_DOWN)
    exporter = refreshed(slurm, standby=True)
    usage = series(exporter, "slurm_account_gpu_seconds_total", "account")
    slurm.answers["config"] = lambda argv: NO_CONTROLLER
    exporter.refresh()
    assert series(exporter, "slurm_exporter_command_up", "command") == {"config": 0}
    assert series(exporter, "slurm_account_gpu_seconds_total", "account") == usage
    assert names(exporter) - STANDBY_SERIES == {"slurm_account_gpu_seconds_total"}
    slurm.answers["config"] = PRIMARY_DOWN
    exporter.refresh()
    assert series(exporter, "slurm_account_gpu_seconds_total", "account") == usage


def test_standby_once(capsys):
    assert exporter_mod.main(["--once", "--standby"],
                             runner=local_cluster(config=PRIMARY_UP)) == 0
    out = capsys.readouterr().out
    assert 'slurm_controller_up{controller_role="primary",host="ctl",index="0"} 1.0' in out
    assert 'slurm_exporter_command_up{command="config"} 1.0' in out
    assert 'slurm_exporter_command_up{command="nodes"}' not in out
    assert "slurm_node_state{" not in out


# ---- the primary's exporter (no --standby) while a backup runs the cluster -----------------------

def sacct_starts(slurm: FakeSlurm) -> list[str]:
    return [a.removeprefix("--starttime=") for argv in slurm.calls
            if FakeSlurm.command_of(argv) == "sacct" for a in argv if a.startswith("--starttime=")]


def at(epoch: float) -> str:
    return f"{datetime.fromtimestamp(epoch):%Y-%m-%dT%H:%M:%S}"


def ended_at(job: str, account: str, end: float) -> str:
    """One sacct line: an allocation of 4 H100 for 600 s (2400 GPU-seconds)."""
    return (f"{job}|{account}|600|billing=1,cpu=1,gres/gpu:h100=4,gres/gpu=4,node=1|"
            f"{at(end)}|COMPLETED\n")


SWITCHES = "primary's exporter: "
THREE_PRIMARY_DOWN = config_with_pings("Slurmctld(primary) at ctl is DOWN",
                                       "Slurmctld(backup1) at ctl2 is DOWN",
                                       "Slurmctld(backup2) at ctl3 is UP")


@pytest.mark.parametrize("config", [PRIMARY_DOWN, THREE_PRIMARY_DOWN], ids=["two", "three"])
def test_primary_s_exporter_asks_only_config_while_a_backup_runs_the_cluster(config):
    slurm = local_cluster(config=config)
    refreshed(slurm)
    assert asked(slurm) == ["config"]


def test_primary_s_exporter_serves_only_the_controllers_while_a_backup_runs_the_cluster():
    """What a passive standby serves: the standby on the backup's machine serves the cluster
    (once), and nodes, jobs and sdiag have no command_up here (SlurmControllerDown)."""
    exporter = refreshed(local_cluster(config=PRIMARY_DOWN))
    assert names(exporter) == STANDBY_SERIES
    assert series(exporter, "slurm_exporter_command_up", "command") == {"config": 1}
    assert value(exporter, "slurm_up") == 1
    assert controllers(exporter) == {("ctl", "primary", "0"): 0, ("ctl2", "backup", "1"): 1}


@pytest.mark.parametrize("config", [
    PRIMARY_UP, BACKUP_DOWN,
    # No backup UP: none took over (scontrol exits 1 when none answers; were it to print
    # this, the primary's exporter would still be the one to report it).
    config_with_pings("Slurmctld(primary) at ctl is DOWN", "Slurmctld(backup) at ctl2 is DOWN"),
    config_with_pings("Slurmctld(primary) at ctl is DOWN"),
    config_with_pings(),  # no ping lines at all
    lambda argv: NO_CONTROLLER, subprocess.TimeoutExpired("scontrol", 10),
], ids=["both-up", "backup-down", "both-down", "one-down", "no-pings", "no-controller",
        "timeout"])
def test_primary_s_exporter_asks_every_command_unless_a_backup_runs_the_cluster(config):
    slurm = local_cluster(config=config)
    exporter = refreshed(slurm)
    assert asked(slurm) == ["config", "nodes", "jobs", "sdiag", "sshare", "sacct"]
    assert set(series(exporter, "slurm_exporter_command_up", "command")) == set(
        exporter_mod.COMMANDS)
    assert value(exporter, "slurm_node_state", node="gpu-001", state="allocated") == 1


# The commands a refresh asked on each recorded single-controller cluster before the primary's
# exporter could go passive (2 refreshes: 22.05 refuses --json on the first), the same
# arguments, config now first: a single controller sees no change.
SQUEUE_ARGV = ["squeue", "--all", "--noheader", "--array",
               "--Format=JobArrayID:0\x1f,State:0\x1f,Partition:0\x1f,Account:0\x1f,"
               "Reason:0\x1f,SubmitTime:0\x1f,tres-alloc:0"]
SSHARE_TEXT_ARGV = ["sshare", "--parsable2", "--noheader",
                    "--format=Account,User,NormUsage,FairShare,LevelFS"]


def single_controller_asks(first: list[list[str]], again: list[list[str]]) -> list[list[str]]:
    def sacct(start: str) -> list[str]:
        return ["sacct", "--allusers", "--allocations", "--duplicates", "--noheader",
                "--parsable2", f"--starttime={start}", "--endtime=now",
                "--state=BF,CA,CD,DL,F,NF,OOM,PR,RQ,TO",
                "--format=JobIDRaw,Account,ElapsedRaw,AllocTRES,End,State"]
    head = [["scontrol", "show", "config"],
            ["scontrol", "--all", "--future", "--details", "--oneliner", "show", "nodes"],
            SQUEUE_ARGV]
    return [*head, *first, sacct("2026-11-26T10:00:00"),
            *head, *again, sacct("2026-11-26T10:17:11")]


_LOCAL_JSON = [["sdiag", "--json"], ["sshare", "--json"]]
_REFUSED_THEN_TEXT = [["sdiag", "--json"], ["sdiag"], ["sshare", "--json"], SSHARE_TEXT_ARGV]
_TEXT = [["sdiag"], SSHARE_TEXT_ARGV]


@pytest.mark.parametrize("cluster, expected", [
    (lambda: local_cluster(), single_controller_asks(_LOCAL_JSON, _LOCAL_JSON)),
    (lambda: single("22.05", "running"), single_controller_asks(_REFUSED_THEN_TEXT, _TEXT)),
    (lambda: single("24.11", "running"), single_controller_asks(_REFUSED_THEN_TEXT, _TEXT)),
], ids=["local-24.11", "single-22.05", "single-24.11"])
def test_single_controller_asks_what_it_asked_before(cluster, expected):
    slurm = cluster()
    exporter = refreshed(slurm)
    exporter.refresh()
    assert slurm.calls == expected
    assert not exporter.snapshot.passive
    assert set(series(exporter, "slurm_exporter_command_up", "command")) == set(
        exporter_mod.COMMANDS)


def test_primary_s_exporter_switches_with_the_primary_between_refreshes(caplog):
    """Passive while a backup runs the cluster, everything again when the primary is back;
    one INFO line each switch, none while the mode stays."""
    caplog.set_level("INFO")
    slurm = local_cluster(config=PRIMARY_UP)
    exporter = refreshed(slurm)
    assert value(exporter, "slurm_node_state", node="gpu-001", state="allocated") == 1
    slurm.answers["config"] = PRIMARY_DOWN
    exporter.refresh()
    exporter.refresh()
    assert names(exporter) == STANDBY_SERIES
    slurm.answers["config"] = PRIMARY_UP
    exporter.refresh()
    assert value(exporter, "slurm_node_state", node="gpu-001", state="allocated") == 1
    assert series(exporter, "slurm_exporter_command_up", "command") == dict.fromkeys(
        exporter_mod.COMMANDS, 1)
    every = ["config", "nodes", "jobs", "sdiag", "sshare", "sacct"]
    assert asked(slurm) == [*every, "config", "config", *every]
    switches = [r.getMessage() for r in caplog.records
                if r.levelname == "INFO" and r.getMessage().startswith(SWITCHES)]
    assert len(switches) == 2
    assert "serving the controllers' state only" in switches[0]
    assert "asking every command" in switches[1]


def test_primary_s_exporter_counts_usage_around_a_passive_period():
    """Before the passive hour its own jobs, after it the jobs that end from its return on;
    the job that ended in the passive hour is the standby's (active then) and not counted
    here, nor are the jobs counted before it counted again."""
    slurm = local_cluster(config=PRIMARY_UP)
    exporter = refreshed(slurm)
    assert value(exporter, "slurm_account_gpu_seconds_total", account="team-a") == 5402
    slurm.answers["config"] = PRIMARY_DOWN
    exporter.clock.now += 3600
    exporter.refresh()
    assert series(exporter, "slurm_account_gpu_seconds_total", "account") == {}
    back = LOCAL_NOW + 2 * 3600
    slurm.answers["config"] = PRIMARY_UP
    slurm.answers["sacct"] = (recorded("local-24.11/sacct.txt")
                              + ended_at("18", "team-b", LOCAL_NOW + 1800)
                              + ended_at("19", "team-b", back + 10))
    exporter.clock.now = back
    exporter.refresh()
    exporter.clock.now += 30
    exporter.refresh()
    assert sacct_starts(slurm) == ["2026-11-26T10:00:00", at(back), at(back)]
    assert series(exporter, "slurm_account_gpu_seconds_total", "account") == {
        "team-a": 0, "team-b": 2400, "root": 0}


def test_passive_primary_s_exporter_whose_config_fails_asks_all_but_sacct(caplog):
    """No controller answers after a passive refresh: nodes, jobs, sdiag and sshare are asked
    as without a backup (their failures are SlurmControllerDown), the mode stays, and sacct
    is not asked: the standby, whose mode stays too, counts the jobs that end meanwhile."""
    caplog.set_level("INFO")
    slurm = local_cluster(config=PRIMARY_DOWN)
    exporter = refreshed(slurm)
    slurm.answers["config"] = lambda argv: NO_CONTROLLER
    exporter.clock.now += 60
    exporter.refresh()
    assert asked(slurm) == ["config", "config", "nodes", "jobs", "sdiag", "sshare"]
    assert series(exporter, "slurm_exporter_command_up", "command") == {
        "config": 0, "nodes": 1, "jobs": 1, "sdiag": 1, "sshare": 1}
    assert series(exporter, "slurm_account_gpu_seconds_total", "account") == {}
    slurm.answers["config"] = PRIMARY_DOWN
    exporter.refresh()
    assert names(exporter) == STANDBY_SERIES
    slurm.answers["config"] = PRIMARY_UP
    exporter.clock.now += 60
    exporter.refresh()
    assert sacct_starts(slurm) == [at(LOCAL_NOW + 120)]
    # going passive at the first refresh, back at the last: the failed ask switched nothing
    switches = [r.getMessage() for r in caplog.records if r.getMessage().startswith(SWITCHES)]
    assert len(switches) == 2


def test_primary_s_exporter_once_while_a_backup_runs_the_cluster(capsys):
    assert exporter_mod.main(["--once"], runner=local_cluster(config=PRIMARY_DOWN)) == 0
    out = capsys.readouterr().out
    assert 'slurm_controller_up{controller_role="backup",host="ctl2",index="1"} 1.0' in out
    assert 'slurm_exporter_command_up{command="nodes"}' not in out
    assert "slurm_node_state{" not in out


def test_sdiag_text_22_05_rpcs():
    exporter = refreshed(single("22.05", "running"))
    assert value(exporter, "slurm_rpc_calls", type="REQUEST_SUBMIT_BATCH_JOB") == 13
    assert value(exporter, "slurm_rpc_seconds", type="REQUEST_SUBMIT_BATCH_JOB") == 0.009473
    # no backfill cycle yet: sdiag prints no mean
    assert value(exporter, "slurm_scheduler_cycle_seconds", cycle="backfill", stat="mean") == 0


def test_sshare_text_and_json_agree():
    from_text = refreshed(FakeSlurm(nodes="", jobs="", sdiag="",
                                    sshare=recorded("local-24.11/sshare.txt")))
    from_json = refreshed(FakeSlurm(nodes="", jobs="", sdiag="",
                                    sshare_json=recorded("local-24.11/sshare.json")))
    for name in ("slurm_account_fairshare", "slurm_account_usage_normalized"):
        text_values = series(from_text, name, "account")
        json_values = series(from_json, name, "account")
        assert set(text_values) == set(json_values) == {"team-a", "team-b"}
        for account, v in text_values.items():  # text has 6 decimals
            assert v == pytest.approx(json_values[account], abs=1e-6), (name, account)


def test_sshare_values():
    exporter = refreshed(local_cluster())
    assert value(exporter, "slurm_account_fairshare", account="team-a") == pytest.approx(
        0.6622516556291391)
    assert math.isinf(value(exporter, "slurm_account_fairshare", account="team-b") or 0)
    assert series(exporter, "slurm_account_usage_normalized", "account") == {
        "team-a": 1.0, "team-b": 0.0}


REFUSED = {"sdiag_json": lambda argv: exporter_mod.Completed(
               1, "", recorded("single-22.05/sdiag-json.stderr")),
           "sshare_json": lambda argv: exporter_mod.Completed(
               1, "", recorded("single-22.05/sshare-json.stderr"))}


def test_refused_json_falls_back_to_text_at_once():
    slurm = single("22.05", "running", **REFUSED)
    exporter = refreshed(slurm)
    assert exporter.json_ok == {"sdiag": False, "sshare": False}
    assert value(exporter, "slurm_up") == 1
    assert value(exporter, "slurm_scheduler_threads") == 3


def test_refused_json_is_not_asked_again():
    slurm = single("22.05", "running", **REFUSED)
    exporter = refreshed(slurm)
    exporter.refresh()
    asked = [FakeSlurm.command_of(argv) for argv in slurm.calls]
    assert asked.count("sdiag_json") == 1 and asked.count("sdiag") == 2
    assert value(exporter, "slurm_exporter_slurm_commands_total", command="sdiag") == 3


def test_json_that_timed_out_is_tried_again():
    slurm = local_cluster(sdiag_json=subprocess.TimeoutExpired("sdiag", 10))
    exporter = refreshed(slurm)
    assert exporter.json_ok["sdiag"] is None
    assert value(exporter, "slurm_exporter_command_up", command="sdiag") == 0
    slurm.answers["sdiag_json"] = recorded("local-24.11/sdiag.json")
    exporter.refresh()
    assert exporter.json_ok["sdiag"] is True
    assert value(exporter, "slurm_exporter_command_up", command="sdiag") == 1


# ---- usage: the GPU-seconds counter ------------------------------------------------------------

def test_gpu_seconds_from_local_sacct():
    # 4: 2 H100 x 900 s; 11: 4 x 900; 16: 1 x 2; 2 (root): 2 x 0; 9 (team-b): no allocation
    assert series(refreshed(local_cluster()), "slurm_account_gpu_seconds_total", "account") == {
        "team-a": 5402, "root": 0, "team-b": 0}


def test_gpu_seconds_counted_once_over_refreshes():
    slurm = local_cluster()
    exporter = refreshed(slurm)
    exporter.refresh()
    assert value(exporter, "slurm_account_gpu_seconds_total", account="team-a") == 5402


def test_gpu_seconds_adds_what_ended_since():
    slurm = local_cluster()
    exporter = refreshed(slurm)
    slurm.answers["sacct"] = recorded("local-24.11/sacct.txt") + (
        "18|team-b|600|billing=1,cpu=1,gres/gpu:h100=4,gres/gpu=4,mem=11713M,node=1|"
        "2026-11-26T10:30:00|COMPLETED\n")
    exporter.refresh()
    exporter.refresh()
    assert series(exporter, "slurm_account_gpu_seconds_total", "account") == {
        "team-a": 5402, "root": 0, "team-b": 2400}


def test_gpu_seconds_counts_each_requeued_run():
    """A requeued job: one REQUEUED record per earlier run (--duplicates), same JobIDRaw."""
    sacct = ("104|team-b|5400|billing=256,cpu=256,gres/gpu:h100=16,gres/gpu=16,node=2|"
             "2026-11-26T10:05:00|REQUEUED\n"
             "104|team-b|7200|billing=256,cpu=256,gres/gpu:h100=16,gres/gpu=16,node=2|"
             "2026-11-26T10:20:00|COMPLETED\n"
             "108|team-a|1800|billing=8,cpu=8,gres/gpu=1,node=1|2026-11-26T10:21:00|TIMEOUT\n"
             "108.batch|team-a|1800|cpu=8,gres/gpu=1,node=1|2026-11-26T10:21:00|TIMEOUT\n")
    exporter = refreshed(FakeSlurm(nodes="", jobs="", sdiag="", sshare="", sacct=sacct))
    exporter.refresh()
    assert value(exporter, "slurm_exporter_command_up", command="sacct") == 1
    assert series(exporter, "slurm_account_gpu_seconds_total", "account") == {
        "team-b": 16 * (5400 + 7200), "team-a": 1800, "root": 0}


def test_records_slurmdbd_takes_late_are_counted_after_an_outage():
    """slurmdbd away: slurmctld holds 22 records, so the window stays at the exporter's start;
    an hour later slurmdbd has them, one of a job that ended at 10:05 (well before the margin):
    it is counted."""
    slurm = local_cluster(sdiag_json=recorded("local-24.11/sdiag-dbd-away.json"), sacct="")
    exporter = refreshed(slurm)
    assert exporter.sacct_start == STARTED
    exporter.clock.now += 3600
    slurm.answers["sdiag_json"] = recorded("local-24.11/sdiag.json")
    slurm.answers["sacct"] = ("18|team-b|600|billing=1,cpu=1,gres/gpu:h100=4,gres/gpu=4,node=1|"
                              "2026-11-26T10:05:00|COMPLETED\n")
    exporter.refresh()
    assert value(exporter, "slurm_account_gpu_seconds_total", account="team-b") == 2400
    assert exporter.sacct_start == LOCAL_NOW + 3600 - exporter_mod.SACCT_MARGIN_SECONDS


def test_sdiag_without_the_accounting_queue_reports_none():
    """A Slurm whose sdiag does not print the queue: no metric, rather than a 0 that would
    keep the accounting alerts quiet whatever happens."""
    text = "".join(line for line in recorded("local-24.11/sdiag.txt").splitlines(keepends=True)
                   if not line.startswith("DBD Agent queue size"))
    exporter = refreshed(local_cluster(sdiag_json=None, sdiag=text))
    assert value(exporter, "slurm_exporter_command_up", command="sdiag") == 1
    assert value(exporter, "slurm_scheduler_threads") == 1
    assert value(exporter, "slurm_dbd_agent_queue_size") is None


def test_a_failed_config_keeps_the_last_limit():
    slurm = local_cluster()
    exporter = refreshed(slurm)
    slurm.answers["config"] = subprocess.TimeoutExpired("scontrol", 10)
    exporter.refresh()
    assert value(exporter, "slurm_exporter_command_up", command="config") == 0
    assert value(exporter, "slurm_dbd_agent_queue_limit") == 20016


def test_sacct_window():
    """From the exporter's start, then from a margin before the last successful ask."""
    slurm = local_cluster()
    exporter = refreshed(slurm)
    exporter.clock.now += 3600
    exporter.refresh()
    starts = [a for argv in slurm.calls if FakeSlurm.command_of(argv) == "sacct"
              for a in argv if a.startswith("--starttime=")]
    second = datetime.fromtimestamp(LOCAL_NOW - exporter_mod.SACCT_MARGIN_SECONDS)
    assert starts == ["--starttime=2026-11-26T10:00:00",
                      f"--starttime={second:%Y-%m-%dT%H:%M:%S}"]
    sacct_argv = next(argv for argv in slurm.calls if FakeSlurm.command_of(argv) == "sacct")
    assert sacct_argv[1:6] == ["--allusers", "--allocations", "--duplicates", "--noheader",
                               "--parsable2"]
    assert "--format=JobIDRaw,Account,ElapsedRaw,AllocTRES,End,State" in sacct_argv


def test_counted_keys_are_bounded_by_the_window():
    exporter = refreshed(local_cluster())
    # the 9 records counted; kept: those that ended in the next window (10:17:11 on)
    assert sorted(job for job, _ in exporter.counted) == ["11", "12", "14", "16", "4", "9"]
    exporter.clock.now += 2 * 3600
    exporter.refresh()  # every recorded job ended before this window: none kept, none counted
    assert exporter.counted == {}
    assert value(exporter, "slurm_account_gpu_seconds_total", account="team-a") == 5402


def test_records_ended_before_the_window_are_not_counted():
    """Jobs that ended before the exporter started (sacct's window is wider than ours)."""
    exporter = exporter_mod.Exporter(runner=local_cluster(), clock=Clock(LOCAL_NOW))
    exporter.refresh()
    # Every account sshare knows starts at 0 (so increase() sees its first job), and root.
    assert series(exporter, "slurm_account_gpu_seconds_total", "account") == {
        "team-a": 0, "team-b": 0, "root": 0}


def test_an_account_without_jobs_yet_has_a_counter_at_zero():
    # root too: sshare's rows leave the tree's top out, but the root user's jobs (an admin's,
    # a health check's) are charged to it, and a counter born with them loses them.
    slurm = local_cluster(sacct="")
    exporter = refreshed(slurm)
    assert series(exporter, "slurm_account_gpu_seconds_total", "account") == {
        "team-a": 0, "team-b": 0, "root": 0}


def test_without_sshare_no_counter_is_made_up():
    exporter = refreshed(local_cluster(sacct="", sshare_json=subprocess.TimeoutExpired(
        "sshare", 10), sshare=subprocess.TimeoutExpired("sshare", 10)))
    assert series(exporter, "slurm_account_gpu_seconds_total", "account") == {}


def test_failed_sacct_keeps_the_window():
    exporter = refreshed(local_cluster(sacct=subprocess.TimeoutExpired("sacct", 10)))
    exporter.clock.now += 3600
    exporter.refresh()
    assert exporter.sacct_start == STARTED


TRES_CASES = [
    "", "billing=16,cpu=16,gres/gpu:h100=2,gres/gpu=2,mem=64G,node=1",
    "cpu=1,mem=11713M,node=1,billing=1,gres/gpu=1", "gres/gpu=4", "gres/gpu:H100=4",
    "gres/gpu:a100=2,gres/gpu:h100=2,gres/gpu=4", "gres/gpu:h100=2,gres/gpu:h100=3",
    "gres/gpumem=80G,gres/gpuutil=100,gres/gpu=1", "gres/gpu=x", "gres/gpu=", "gres/gpu:=2",
    "gres/gpu = 3", " gres/gpu:h100 =2", "gres/shard=8,gres/gpu:h100=1", "gres/gpu=0",
    "gres/gpu:h100=0,gres/gpu=0", "license/matlab=1,gres/gpu:l40s=8", "billing=1",
    "gres/gpu:h100:mig=3", "gres/gpu=2,gres/gpu=3", "node=2,gres/gpu:h100=16,gres/gpu=16",
]


@pytest.mark.parametrize("tres", TRES_CASES)
def test_gpus_from_tres_is_report_py_s(tres):
    assert exporter_mod.gpus_from_tres(tres) == report_gpus_from_tres(tres)


# ---- failures and freshness --------------------------------------------------------------------

def test_timed_out_command_sets_up_to_0(caplog):
    exporter = refreshed(local_cluster(jobs=subprocess.TimeoutExpired("squeue", 10)))
    assert value(exporter, "slurm_up") == 0
    assert series(exporter, "slurm_exporter_command_up", "command") == {
        "nodes": 1, "jobs": 0, "sdiag": 1, "config": 1, "sshare": 1, "sacct": 1}
    assert "timed out after 10s" in caplog.text and caplog.text.count("failed") == 1


def test_timed_out_command_keeps_the_others_metrics():
    exporter = refreshed(local_cluster(jobs=subprocess.TimeoutExpired("squeue", 10)))
    names = {n for n, _ in samples(exporter)}
    assert {"slurm_node_state", "slurm_gpus", "slurm_scheduler_threads",
            "slurm_account_fairshare", "slurm_account_gpu_seconds_total"} <= names
    assert not names & {"slurm_jobs", "slurm_jobs_pending"}


def test_failed_command_is_logged_once_per_refresh_with_its_reason(caplog):
    refreshed(local_cluster(nodes=lambda argv: exporter_mod.Completed(
        1, "", "slurm_load_node error: Unable to contact slurm controller (connect failure)")))
    lines = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert lines == ["nodes failed (scontrol --all --future --details --oneliner show nodes): "
                     "exit 1: slurm_load_node error: Unable to contact slurm controller "
                     "(connect failure)"]


def test_unreadable_output_is_a_failed_command():
    exporter = refreshed(local_cluster(jobs="12\x1fRUNNING\n"))
    assert value(exporter, "slurm_exporter_command_up", command="jobs") == 0
    assert value(exporter, "slurm_exporter_command_up", command="nodes") == 1


def test_missing_binary_is_a_failed_command():
    exporter = refreshed(local_cluster(sdiag_json=FileNotFoundError(2, "No such file", "sdiag")))
    assert value(exporter, "slurm_exporter_command_up", command="sdiag") == 0


def test_all_answered():
    exporter = refreshed(local_cluster())
    assert value(exporter, "slurm_up") == 1
    assert value(exporter, "slurm_exporter_last_success_timestamp_seconds") == LOCAL_NOW
    assert value(exporter, "slurm_exporter_min_interval_seconds") == 30
    assert series(exporter, "slurm_exporter_slurm_commands_total", "command") == dict.fromkeys(
        exporter_mod.COMMANDS, 1)


def test_one_refresh_runs_at_most_six_commands():
    slurm = local_cluster()
    exporter = refreshed(slurm)
    exporter.refresh()
    assert len(slurm.calls) == 2 * 6


def test_before_the_first_refresh():
    exporter = started(local_cluster())
    assert value(exporter, "slurm_up") == 0
    assert value(exporter, "slurm_node_state", node="gpu-001", state="allocated") is None


def test_exposition_is_valid_and_has_no_duplicate_series():
    exporter = refreshed(local_cluster())
    text = generate_latest(exporter_mod.registry_for(exporter)).decode()
    parsed = [(s.name, tuple(sorted(s.labels.items())))
              for family in text_string_to_metric_families(text) for s in family.samples]
    assert len(parsed) == len(set(parsed)) > 100


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_scrape_while_a_refresh_hangs_answers_at_once():
    release = threading.Event()
    slurm = local_cluster()
    exporter = refreshed(slurm)
    slurm.answers["nodes"] = lambda argv: release.wait(30) and recorded(
        "local-24.11/scontrol-show-nodes.txt")
    registry = exporter_mod.registry_for(exporter)
    port = free_port()
    exporter_mod.start_http_server(port, addr="127.0.0.1", registry=registry)
    refresher = threading.Thread(target=exporter.refresh, daemon=True)
    refresher.start()
    try:
        time.sleep(0.2)
        assert refresher.is_alive()
        began = time.monotonic()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            body = answer.read().decode()
        assert time.monotonic() - began < 1.0
        assert 'slurm_node_state{node="gpu-001",state="allocated"} 1.0' in body
    finally:
        release.set()
        refresher.join(5)


def test_refresh_loop_waits_min_interval_between_refreshes():
    slurm = local_cluster()
    exporter = exporter_mod.Exporter(runner=slurm, min_interval=5)
    stop = threading.Event()
    loop = threading.Thread(target=exporter.run_forever, args=(stop,), daemon=True)
    loop.start()
    time.sleep(0.5)
    stop.set()
    loop.join(5)
    assert not loop.is_alive()
    assert len(slurm.calls) == len(exporter_mod.COMMANDS) == 6


def test_commands_come_from_bin_dir(tmp_path):
    slurm = local_cluster()
    refreshed(slurm, bin_dir=str(tmp_path))
    assert {Path(argv[0]).parent for argv in slurm.calls} == {tmp_path}


# ---- command line ------------------------------------------------------------------------------

def test_defaults():
    args = exporter_mod.parse_args([])
    assert (args.listen_address, args.min_interval, args.command_timeout, args.slurm_bin_dir,
            args.standby, args.once) == (("127.0.0.1", 9341), 30.0, 10.0, None, False, False)


def test_help_says_what_standby_is_for(capsys):
    with pytest.raises(SystemExit) as exit_:
        exporter_mod.parse_args(["--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--standby for the backup controller's machine" in text
    assert "while the primary is DOWN and a backup runs the cluster" in text


@pytest.mark.parametrize("text, address", [
    ("10.40.0.10:9341", ("10.40.0.10", 9341)), ("[::1]:9341", ("::1", 9341)),
    ("ctl-01:1", ("ctl-01", 1))])
def test_listen_address(text, address):
    assert exporter_mod.parse_args(["--listen-address", text]).listen_address == address


@pytest.mark.parametrize("argv", [
    ["--listen-address", "9341"], ["--listen-address", "ctl:"], ["--listen-address", ":9341"],
    ["--listen-address", "ctl:70000"], ["--min-interval", "4"], ["--min-interval", "x"],
    ["--min-interval", "nan"], ["--command-timeout", "0"], ["--command-timeout", "-1"],
    ["--slurm-bin-dir", "/nonexistent/bin"], ["--unknown"]])
def test_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        exporter_mod.parse_args(argv)
    assert exit_.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_once_prints_the_metrics(capsys):
    assert exporter_mod.main(["--once"], runner=local_cluster()) == 0
    out = capsys.readouterr().out
    assert 'slurm_gpus{status="total",type="h100"} 32.0' in out
    assert "slurm_up 1.0" in out


def test_once_exits_1_when_a_command_failed(capsys):
    slurm = local_cluster(sshare_json=subprocess.TimeoutExpired("sshare", 10))
    assert exporter_mod.main(["--once"], runner=slurm) == 1
    assert "slurm_up 0.0" in capsys.readouterr().out


# ---- what other programs write into Slurm ------------------------------------------------------

def test_power_reason_prefix_is_the_power_program_s():
    assert exporter_mod.POWER_REASON_PREFIX == power_actions.REASON_PREFIX


def test_slurm_resume_reasons_are_the_power_program_s():
    assert exporter_mod.SLURM_RESUME_REASONS == power_actions.SLURM_RESUME_REASONS


def test_health_drains_are_owned_by_metalslurm_health():
    loader = importlib.machinery.SourceFileLoader(
        "metalslurm_health_for_exporter_test",
        str(REPO / "roles" / "slurm_health" / "files" / "metalslurm-health"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    health = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = health
    loader.exec_module(health)
    assert exporter_mod.drain_owner(health.REASON_PREFIX + " gpu missing") == "metalslurm-health"


def test_the_recorded_answer_of_a_cluster_with_a_backup_controller():
    """``scontrol show config`` recorded on tests/e2e/test_failover.py's cluster (both
    controllers up): its two SlurmctldHost lines and ping lines, and the controller's
    exporter serving the cluster."""
    text = recorded("local-ha-24.11/scontrol-show-config-both-up.txt")
    assert "SlurmctldHost[1]        = ctl2(10.78.16.9)" in text
    slurm = local_cluster(config=text)
    exporter = refreshed(slurm)
    assert controllers(exporter) == {("ctl", "primary", "0"): 1, ("ctl2", "backup", "1"): 1}
    # MaxDBDMsgs: 2 x MaxJobCount (10,000) + 4 x its 2 compute nodes.
    assert value(exporter, "slurm_dbd_agent_queue_limit") == 20008
