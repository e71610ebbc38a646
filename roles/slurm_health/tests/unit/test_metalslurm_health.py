"""The node health checker (roles/slurm_health/files/metalslurm-health), run as the nodes
run it: each check against fixtures (the GPU ones against a stand-in nvidia-smi that
replays tests/fixtures/gpu, labelled as such), the deadline against a check that hangs, and
the drain/return decisions, end to end through main() with stand-in sinfo and scontrol
that record what they were asked."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import pytest

from tests.paths import REPO

PROGRAM = REPO / "roles" / "slurm_health" / "files" / "metalslurm-health"
GPU_FIXTURES = REPO / "tests" / "fixtures" / "gpu"

_loader = importlib.machinery.SourceFileLoader("metalslurm_health", str(PROGRAM))
_spec = importlib.util.spec_from_loader("metalslurm_health", _loader)
health = importlib.util.module_from_spec(_spec)
sys.modules["metalslurm_health"] = health  # dataclasses look their module up there
_loader.exec_module(health)


def config(**over) -> dict:
    cfg = json.loads(json.dumps(health.DEFAULTS))
    cfg.update(node="gpu-001", gpus={"count": 8, "type": "h100"}, munge=False)
    cfg.update(over)
    return cfg


def stand_in(bin_dir: Path, name: str, script: str) -> Path:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return path


@pytest.fixture
def bin_dir(tmp_path, monkeypatch):
    d = tmp_path / "bin"
    d.mkdir()
    monkeypatch.setenv("PATH", f"{d}:{os.environ['PATH']}")
    return d


def smi_replaying(bin_dir: Path, fixture: str) -> None:
    """A stand-in nvidia-smi (not NVIDIA's) that prints a fixture for -q -x."""
    stand_in(bin_dir, "nvidia-smi", f'[ "$1 $2" = "-q -x" ] && exec cat {GPU_FIXTURES / fixture}\n'
             "exit 9\n")


# ---- GPUs --------------------------------------------------------------------------------

def test_the_fixture_parses_into_eight_h100s_with_their_bus_ids():
    gpus = health.parse_nvidia_smi_xml((GPU_FIXTURES / "dgx-h100-healthy.xml").read_text())
    assert [g["bus_id"] for g in gpus] == [f"00000000:{b}:00.0" for b in
                                           ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")]
    assert {g["name"] for g in gpus} == {"NVIDIA H100 80GB HBM3"}
    assert all(g["ecc_uncorrected"] == 0 and not g["remap_pending"] for g in gpus)


def test_stand_in_nvidia_smi_healthy_passes(bin_dir):
    smi_replaying(bin_dir, "dgx-h100-healthy.xml")
    assert [(r.check, r.ok, r.detail) for r in health.check_gpus(config())] == [
        ("gpu_count", True, "8 of 8 GPUs (h100)"),
        ("gpu_ecc", True, "uncorrected ECC errors within 0 on every GPU"),
        ("gpu_rows", True, "no failed or pending row remapping")]


def test_stand_in_nvidia_smi_ecc_errors_and_a_pending_remap_fail(bin_dir):
    smi_replaying(bin_dir, "dgx-h100-ecc.xml")
    results = {r.check: r for r in health.check_gpus(config())}
    assert results["gpu_count"].ok
    assert (results["gpu_ecc"].ok, results["gpu_ecc"].detail) == (
        False, "00000000:5D:00.0 has 2 uncorrected ECC errors (limit 0)")
    assert (results["gpu_rows"].ok, results["gpu_rows"].detail) == (
        False, "00000000:5D:00.0 has a remap or retirement pending (reset the GPU)")
    # A higher ECC threshold tolerates the two errors; the pending remap still fails.
    relaxed = {r.check: r.ok for r in health.check_gpus(config(max_ecc_uncorrected=2))}
    assert relaxed == {"gpu_count": True, "gpu_ecc": True, "gpu_rows": False}


def test_a_recorded_h100_on_driver_580_parses_and_passes(bin_dir):
    # Recorded on a real H100 (tests/fixtures/gpu/h100-vm-record.txt says where and how).
    gpus = health.parse_nvidia_smi_xml((GPU_FIXTURES / "h100-vm-smi.xml").read_text())
    assert gpus == [{"bus_id": "00000000:00:06.0", "name": "NVIDIA H100 80GB HBM3",
                     "uuid": "GPU-92f5db81-0a99-a977-66da-a93c1ccc49d5", "ecc_uncorrected": 0,
                     "retired_pending": False, "remap_failed": False, "remap_pending": False,
                     "unrepairable": False, "repair_pending": []}]
    smi_replaying(bin_dir, "h100-vm-smi.xml")
    assert [(r.check, r.ok) for r in health.check_gpus(config(gpus={"count": 1, "type": "h100"}))
            ] == [("gpu_count", True), ("gpu_ecc", True), ("gpu_rows", True)]


def test_a_recorded_h200_parses_and_passes_as_an_h200_and_fails_as_anything_else(bin_dir):
    # Recorded on a lent H200 (tests/fixtures/gpu/h200-vm-record.txt says where and how).
    [gpu] = health.parse_nvidia_smi_xml((GPU_FIXTURES / "h200-vm-smi.xml").read_text())
    assert (gpu["name"], gpu["uuid"], gpu["ecc_uncorrected"]) == (
        "NVIDIA H200", "GPU-3d836c38-b663-c548-b16b-05b9b70632ce", 0)
    smi_replaying(bin_dir, "h200-vm-smi.xml")
    assert [(r.check, r.ok) for r in health.check_gpus(config(gpus={"count": 1, "type": "h200"}))
            ] == [("gpu_count", True), ("gpu_ecc", True), ("gpu_rows", True)]
    first = health.check_gpus(config(gpus={"count": 1, "type": "h100"}))[0]
    assert (first.ok, first.detail) == (False, "1 GPU(s) are not h100: 00000000:00:06.0")


@pytest.mark.parametrize(("name", "kind", "same"), [
    # Product names as NVIDIA's drivers print them (the H100 and H200 ones recorded here).
    ("NVIDIA H100 80GB HBM3", "h100", True),
    ("NVIDIA H200", "H200", True),
    ("NVIDIA A100-SXM4-80GB", "a100", True),
    ("NVIDIA L40S", "l40s", True),
    ("NVIDIA GH200 480GB", "gh200", True),
    # A type that is only a part of another's name is not that GPU.
    ("NVIDIA GH200 480GB", "h200", False),
    ("NVIDIA A100-SXM4-80GB", "a10", False),
    ("NVIDIA L40S", "l4", False),
    ("NVIDIA H200", "h20", False),
])
def test_a_gpus_type_is_a_whole_word_of_its_product_name(name, kind, same):
    assert health.is_gpu_type(name, kind) is same


@pytest.mark.parametrize(("element", "detail"), [
    ("unrepairable_memory", "00000000:00:06.0 has unrepairable memory (replace the GPU)"),
    ("channel_repair_pending", "00000000:00:06.0 has a CHANNEL repair pending (reset the GPU)"),
    ("tpc_repair_pending", "00000000:00:06.0 has a TPC repair pending (reset the GPU)"),
])
def test_driver_580s_memory_repair_flags_fail_the_rows_check(bin_dir, tmp_path, element,
                                                                detail):
    recorded = (GPU_FIXTURES / "h100-vm-smi.xml").read_text()
    assert recorded.count(f"<{element}>No</{element}>") == 1
    (tmp_path / "smi.xml").write_text(recorded.replace(f"<{element}>No</{element}>",
                                                       f"<{element}>Yes</{element}>"))
    stand_in(bin_dir, "nvidia-smi", f'[ "$1 $2" = "-q -x" ] && exec cat {tmp_path / "smi.xml"}\n'
             "exit 9\n")
    rows = health.check_gpus(config(gpus={"count": 1, "type": "h100"}))[2]
    assert (rows.check, rows.ok, rows.detail) == ("gpu_rows", False, detail)


def test_stand_in_nvidia_smi_lost_gpu_fails_the_count(bin_dir):
    smi_replaying(bin_dir, "dgx-h100-lost-gpu.xml")
    first = health.check_gpus(config())[0]
    assert (first.check, first.ok, first.detail) == ("gpu_count", False, "7 of 8 GPUs")


def test_a_gpu_of_another_type_fails_the_count(bin_dir):
    smi_replaying(bin_dir, "dgx-h100-healthy.xml")
    first = health.check_gpus(config(gpus={"count": 8, "type": "a100"}))[0]
    assert (first.ok, first.detail.split(":")[0]) == (False, "8 GPU(s) are not a100")


def test_nvidia_smi_failing_fails_with_its_message(bin_dir):
    stand_in(bin_dir, "nvidia-smi", "echo 'Unable to determine the device handle for GPU "
             "0000:BA:00.0: GPU is lost.' >&2; exit 15\n")
    [result] = health.check_gpus(config())
    assert (result.check, result.ok) == ("gpu_count", False)
    assert result.detail == ("nvidia-smi failed (15): Unable to determine the device handle "
                             "for GPU 0000:BA:00.0: GPU is lost.")


def test_without_nvidia_smi_the_driver_checks_skip(bin_dir, monkeypatch):
    monkeypatch.setenv("PATH", str(bin_dir))
    results = health.check_gpus(config())
    assert [(r.check, r.skipped) for r in results] == [
        ("gpu_count", True), ("gpu_ecc", True), ("gpu_rows", True)]
    assert results[0].detail == "no nvidia-smi (no NVIDIA driver)"


def test_device_nodes_are_counted_and_the_missing_ones_named(tmp_path):
    (tmp_path / "dev").mkdir()
    for i in (0, 1, 3, 4, 5, 6, 7):
        (tmp_path / "dev" / f"nvidia{i}").touch()
    (tmp_path / "dev" / "nvidiactl").touch()
    r = health.check_gpu_devices(config(), root=tmp_path)
    assert (r.ok, r.detail) == (False, "7 of 8 GPU devices (missing /dev/nvidia2)")
    (tmp_path / "dev" / "nvidia0").unlink()
    assert health.check_gpu_devices(config(), root=tmp_path).detail == \
        "6 of 8 GPU devices (missing /dev/nvidia0,2)"
    (tmp_path / "dev" / "nvidia0").touch()
    (tmp_path / "dev" / "nvidia2").touch()
    assert health.check_gpu_devices(config(), root=tmp_path).detail == "8 of 8 GPU devices"
    assert health.check_gpu_devices(config(gpus={"count": 0}), root=tmp_path).skipped


# Kernel log records as /dev/kmsg gives them ("prio,seq,usec since boot,flags;message");
# the NVRM Xid message's shape is the one in NVIDIA's Xid documentation.
KMSG = [(1000.0, "NVRM: Xid (PCI:0000:ba:00): 79, pid='<unknown>', name=<unknown>, GPU has "
                 "fallen off the bus."),
        (5000.0, "NVRM: Xid (PCI:0000:2a:00): 13, pid=4242, name=python, Graphics Exception"),
        (5100.0, "mlx5_core 0000:1a:00.0: Port module event: module 0, Cable plugged")]


def test_a_critical_xid_inside_the_window_fails_and_ages_out():
    fails = health.check_xid(config(), reader=lambda: KMSG, uptime=lambda: 1600.0)
    assert (fails.ok, fails.detail) == (False, "Xid 79 on 0000:ba:00 600 s ago")
    # An hour later (the default window) it no longer counts; Xid 13 (an application's
    # fault) never does.
    later = health.check_xid(config(), reader=lambda: KMSG, uptime=lambda: 5200.0)
    assert (later.ok, later.detail) == (True, "no critical Xid in the last 3600 s")


def test_a_user_chosen_path_in_a_kernel_message_is_no_xid():
    # What Linux 5.18+ logs for a program run with an empty argv, the path being the user's:
    # a kernel record, but not the driver's; the match is anchored at the message's start.
    forged = [(1000.0, "process '/tmp/NVRM: Xid (PCI:0000:3b:00.0): 79' launched "
                       "'/tmp/NVRM: Xid (PCI:0000:3b:00.0): 79' with NULL argv: empty string "
                       "added")]
    r = health.check_xid(config(), reader=lambda: forged, uptime=lambda: 1100.0)
    assert (r.ok, r.detail) == (True, "no critical Xid in the last 3600 s")


def test_only_the_kernels_own_records_are_read(tmp_path):
    # prio 4 = facility 0 (kernel), level 4; prio 12 = facility 1 (user), level 4: written to
    # /dev/kmsg by a process, not by the driver.
    path = tmp_path / "kmsg"
    path.write_text("12,813,1000000,-;NVRM: Xid (PCI:0000:ba:00): 79, pid=1, forged\n")
    assert health.read_kmsg(str(path)) == []


def test_an_unreadable_kernel_log_skips_the_xid_check():
    def denied():
        raise PermissionError(1, "Operation not permitted")
    r = health.check_xid(config(), reader=denied, uptime=lambda: 1.0)
    assert (r.skipped, r.detail) == (True, "cannot read the kernel log (Operation not permitted)")


def test_kmsg_records_are_read_with_their_timestamps(tmp_path):
    # A regular file stands in for /dev/kmsg, which returns one record per read.
    record = "4,812,1000000,-;NVRM: Xid (PCI:0000:ba:00): 79, pid=1, GPU has fallen off the bus."
    path = tmp_path / "kmsg"
    path.write_text(record + "\n")
    assert health.read_kmsg(str(path)) == [(1.0, record.split(";", 1)[1])]


# ---- fabric, storage, space ----------------------------------------------------------------

def ib_port(root: Path, dev: str, port: int, state: str, rate: str, layer="InfiniBand"):
    p = root / "sys/class/infiniband" / dev / "ports" / str(port)
    p.mkdir(parents=True)
    (p / "state").write_text(state + "\n")
    (p / "rate").write_text(rate + "\n")
    (p / "link_layer").write_text(layer + "\n")


def test_infiniband_ports_must_be_active_at_the_rate(tmp_path):
    ib_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "400 Gb/sec (4X NDR)")
    ib_port(tmp_path, "mlx5_1", 1, "1: DOWN", "10 Gb/sec (4X SDR)")
    ib_port(tmp_path, "mlx5_2", 1, "4: ACTIVE", "200 Gb/sec (4X HDR)")
    ib_port(tmp_path, "mlx5_3", 1, "4: ACTIVE", "100 Gb/sec", layer="Ethernet")
    r = health.check_ib(config(ib={"ports": 3, "rate_gbps": 400}), root=tmp_path)
    assert (r.ok, r.detail) == (False, "1 of 3 ports ACTIVE at 400 Gb/s (mlx5_1/1 DOWN, "
                                       "mlx5_2/1 at 200 Gb/s)")
    ok = health.check_ib(config(ib={"ports": 2, "rate_gbps": 200}), root=tmp_path)
    assert (ok.ok, ok.detail) == (True, "2 of 2 ports ACTIVE at 200 Gb/s or more")
    assert health.check_ib(config(), root=tmp_path).skipped


MOUNTINFO = """\
22 1 0:21 / / rw,relatime - overlay overlay rw
35 22 253:0 /srv/home /home rw,relatime - ext4 /dev/vda rw
36 22 253:0 /srv/shared /shared rw,relatime - ext4 /dev/vda rw
"""


def test_a_shared_path_that_is_not_mounted_fails(tmp_path):
    r = health.check_mounts(config(mounts=["/home", "/scratch"]), mountinfo=MOUNTINFO)
    assert (r.ok, r.detail) == (False, "/scratch is not mounted")


def test_a_mount_that_does_not_answer_fails_within_the_time_limit(bin_dir):
    stand_in(bin_dir, "stat", "sleep 30\n")  # a hung server: stat never returns
    start = time.monotonic()
    r = health.check_mounts(config(mounts=["/home"], check_timeout=1), mountinfo=MOUNTINFO)
    assert (r.ok, r.detail) == (False, "/home did not answer within 1 s")
    assert time.monotonic() - start < 10


def test_mounted_paths_that_answer_pass():
    r = health.check_mounts(config(mounts=["/"]), mountinfo=MOUNTINFO)
    assert (r.ok, r.detail) == (True, "/ mounted and answering")


def test_free_space_below_the_floor_fails(tmp_path):
    st = os.statvfs(tmp_path)
    free = st.f_bavail * st.f_frsize // (1024 * 1024)
    r = health.check_free_space(config(free_space={str(tmp_path): free + 10**6}))
    assert not r.ok and r.detail.startswith(f"{tmp_path} has ")
    assert r.detail.endswith(f"MiB free (needs {free + 10**6})")
    assert health.check_free_space(config(free_space={str(tmp_path): 1})).ok
    # A path the node does not have (no container cache) is not checked.
    assert health.check_free_space(config(free_space={"/nonexistent": 1})).ok


def test_munge_that_does_not_answer_fails(bin_dir):
    stand_in(bin_dir, "munge", "echo 'munge: Error: Failed to access \"/run/munge/munge."
             "socket.2\": No such file or directory' >&2; exit 6\n")
    stand_in(bin_dir, "unmunge", "exit 0\n")
    r = health.check_munge(config(munge=True))
    assert (r.ok, r.detail) == (False, 'munge: munge: Error: Failed to access '
                                       '"/run/munge/munge.socket.2": No such file or directory')


# ---- the deadline, and what a failure turns into -------------------------------------------

def test_a_check_that_hangs_fails_at_the_deadline_and_the_others_report():
    def hangs(_cfg):
        time.sleep(30)

    start = time.monotonic()
    results = health.run_checks(config(deadline=1), checks=[
        ("stuck", hangs), ("free_space", lambda cfg: health.Result("free_space", True, "x"))])
    assert time.monotonic() - start < 5
    assert [(r.check, r.ok, r.detail) for r in results] == [
        ("stuck", False, "did not finish within 1 s"), ("free_space", True, "x")]


def test_a_check_that_crashes_fails_rather_than_passing():
    def crashes(_cfg):
        raise KeyError("gpus")

    [r] = health.run_checks(config(), checks=[("broken", crashes)])
    assert (r.ok, r.detail) == (False, "check failed: KeyError: 'gpus'")


def test_the_drain_reason_names_each_failed_check_and_its_figure():
    results = [health.Result("gpu_devices", False, "7 of 8 GPU devices (missing /dev/nvidia2)"),
               health.Result("munge", True, "munged answers"),
               health.Result("mounts", False, "/shared is not mounted")]
    assert health.drain_reason(results) == (
        "metalslurm-health: gpu_devices: 7 of 8 GPU devices (missing /dev/nvidia2); "
        "mounts: /shared is not mounted")
    assert health.drain_reason(results[1:2]) is None


@pytest.mark.parametrize(("state", "reason", "wanted", "action"), [
    ("idle", "none", "metalslurm-health: munge: x", ("drain", "metalslurm-health: munge: x")),
    ("mixed", "none", "metalslurm-health: munge: x", ("drain", "metalslurm-health: munge: x")),
    ("drained", "metalslurm-health: munge: x", "metalslurm-health: munge: x", None),
    ("drained", "metalslurm-health: munge: x", "metalslurm-health: mounts: y",
     ("reason", "metalslurm-health: mounts: y")),
    ("draining", "metalslurm-health: munge: x", None, ("resume", "")),
    ("drained", "metalslurm-health: munge: x", None, ("resume", "")),
    # Drained by a person (or by Slurm for another reason): never touched.
    ("drained", "maintenance", None, None),
    ("drained", "maintenance", "metalslurm-health: munge: x", None),
    ("idle", "none", None, None),
], ids=["drain-idle", "drain-mixed", "already-drained", "new-reason", "resume-draining",
        "resume-drained", "person-healthy", "person-failing", "healthy"])
def test_decide(state, reason, wanted, action):
    assert health.decide(state, reason, wanted) == action


def slurm_stand_ins(bin_dir: Path, tmp_path: Path, state: str, reason: str) -> Path:
    """sinfo printing one node state; scontrol recording its arguments."""
    calls = tmp_path / "scontrol.calls"
    stand_in(bin_dir, "sinfo", f"echo '{state}|{reason}'\n")
    stand_in(bin_dir, "scontrol", f'echo "$@" >> {calls}\n')
    return calls


def write_config(tmp_path: Path, **over) -> Path:
    path = tmp_path / "health.json"
    cfg = {"node": "gpu-001", "gpus": {"count": 8, "type": "h100"}, "munge": False,
           "nvidia_smi": "nvidia-smi-absent", "state_dir": str(tmp_path / "state")}
    cfg.update(over)
    path.write_text(json.dumps(cfg))
    return path


def test_main_drains_a_failing_node(bin_dir, tmp_path, capsys):
    calls = slurm_stand_ins(bin_dir, tmp_path, "idle", "none")
    cfg = write_config(tmp_path, gpus={"count": 0}, free_space={str(tmp_path): 10**9})
    assert health.main(["--config", str(cfg)]) == 1
    [call] = calls.read_text().splitlines()
    assert call.startswith("update NodeName=gpu-001 State=DRAIN Reason=metalslurm-health: ")
    assert "free_space: " in call and "(needs 1000000000)" in call
    assert "FAIL  free_space" in capsys.readouterr().out


def test_main_returns_a_node_it_drained_once_healthy(bin_dir, tmp_path):
    calls = slurm_stand_ins(bin_dir, tmp_path, "drained", "metalslurm-health: munge: x")
    cfg = write_config(tmp_path, gpus={"count": 0})
    assert health.main(["--config", str(cfg)]) == 0
    assert calls.read_text().splitlines() == ["update NodeName=gpu-001 State=RESUME"]
    last = json.loads((tmp_path / "state" / "last.json").read_text())
    assert (last["node"], last["healthy"], last["action"], last["error"]) == (
        "gpu-001", True, ["resume", ""], None)


def test_main_leaves_a_node_drained_by_a_person(bin_dir, tmp_path):
    calls = slurm_stand_ins(bin_dir, tmp_path, "drained", "maintenance")
    assert health.main(["--config", str(write_config(tmp_path, gpus={"count": 0}))]) == 0
    assert not calls.exists()


def test_a_node_slurm_cannot_show_is_reported_not_acted_on(bin_dir, tmp_path, capsys):
    stand_in(bin_dir, "sinfo", "echo 'slurm_load_node: Unable to contact slurm controller' "
             ">&2; exit 1\n")
    calls = tmp_path / "scontrol.calls"
    stand_in(bin_dir, "scontrol", f'echo "$@" >> {calls}\n')
    assert health.main(["--config", str(write_config(tmp_path, gpus={"count": 0}))]) == 2
    assert not calls.exists()
    assert "sinfo could not show node gpu-001: slurm_load_node: Unable to contact" in \
        capsys.readouterr().err
    assert json.loads((tmp_path / "state" / "last.json").read_text())["error"].startswith(
        "sinfo could not show node gpu-001")


def test_dry_run_prints_every_check_and_touches_nothing(bin_dir, tmp_path, capsys):
    calls = slurm_stand_ins(bin_dir, tmp_path, "idle", "none")
    smi_replaying(bin_dir, "dgx-h100-lost-gpu.xml")
    cfg = write_config(tmp_path, nvidia_smi="nvidia-smi", gpus={"count": 8, "type": "h100"})
    assert health.main(["--dry-run", "--config", str(cfg)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in out[:-1]] == [
        "gpu_devices", "gpu_count", "gpu_ecc", "gpu_rows", "gpu_xid", "ib_ports", "mounts",
        "munge", "free_space"]
    assert "FAIL  gpu_count        7 of 8 GPUs" in out
    assert out[-1].startswith("node gpu-001: would drain: metalslurm-health: ")
    assert not calls.exists()


def test_json_with_only_runs_those_checks_prints_them_and_touches_nothing(bin_dir, tmp_path,
                                                                          capsys):
    """What the acceptance gate runs before and after its load (infra/accept/gate.py)."""
    calls = slurm_stand_ins(bin_dir, tmp_path, "idle", "none")
    smi_replaying(bin_dir, "dgx-h100-ecc.xml")
    cfg = write_config(tmp_path, nvidia_smi="nvidia-smi")
    assert health.main(["--json", "--only", "gpus,gpu_xid", "--config", str(cfg)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert (doc["node"], doc["healthy"]) == ("gpu-001", False)
    assert [(r["check"], r["ok"]) for r in doc["results"]] == [
        ("gpu_count", True), ("gpu_ecc", False), ("gpu_rows", False), ("gpu_xid", True)]
    assert doc["results"][1]["detail"] == ("00000000:5D:00.0 has 2 uncorrected ECC errors "
                                           "(limit 0)")
    assert not calls.exists() and not (tmp_path / "state").exists()


@pytest.mark.parametrize("args, said", [
    (["--only", "gpus,disks"], "--only: disks is not a check; give some of gpu_devices, gpus"),
    (["--only", ","], "--only: nothing is not a check"),
])
def test_an_unknown_check_is_refused_naming_the_ones_there_are(args, said, capsys):
    with pytest.raises(SystemExit) as exit_:
        health.main(args)
    assert exit_.value.code == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize("content", [b"", b"{not json", b"\x89PNG\r\n\x1a\n\x00", b"[1, 2]"])
def test_an_unreadable_settings_file_is_one_line_and_exit_2(tmp_path, capsys, content):
    path = tmp_path / "health.json"
    path.write_bytes(content)
    assert health.main(["--dry-run", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"metalslurm-health: --config {path}: ") and "\n" not in err
    assert err.endswith("give the file the slurm_health role writes")
