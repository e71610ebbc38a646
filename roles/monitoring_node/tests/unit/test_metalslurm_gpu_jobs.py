"""The prolog/epilog that records which job holds which GPU
(roles/monitoring_node/files/metalslurm-gpu-jobs), run as slurmd runs it: with the job's
environment, against a stand-in nvidia-smi replaying the DGX H100 fixture of tests/fixtures/gpu
(labelled as such), into temporary state, textfile and DCGM mapping directories."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

PROGRAM = REPO / "roles" / "monitoring_node" / "files" / "metalslurm-gpu-jobs"
FIXTURE = REPO / "tests" / "fixtures" / "gpu" / "dgx-h100-healthy.xml"

_loader = importlib.machinery.SourceFileLoader("metalslurm_gpu_jobs", str(PROGRAM))
_spec = importlib.util.spec_from_loader("metalslurm_gpu_jobs", _loader)
gj = importlib.util.module_from_spec(_spec)
_loader.exec_module(gj)


@pytest.fixture()
def where(tmp_path):
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(f"#!/bin/sh\n# STAND-IN nvidia-smi: replays a fixture\n"
                   f"echo called >> {tmp_path}/smi-calls\nexec cat {FIXTURE}\n")
    smi.chmod(0o755)
    return {"state_dir": tmp_path / "state", "textfile": tmp_path / "textfile" / "gpu.prom",
            "dcgm_dir": tmp_path / "dcgm", "nvidia_smi": str(smi)}


def job(jobid: str, gpus: str, user: str = "alice", account: str = "team-a", **extra) -> dict:
    return {"SLURM_JOB_ID": jobid, "SLURM_JOB_USER": user, "SLURM_JOB_ACCOUNT": account,
            "SLURM_JOB_PARTITION": "train", "SLURM_JOB_GPUS": gpus, **extra}


def series(where) -> list[str]:
    return [line for line in where["textfile"].read_text().splitlines()
            if not line.startswith("#")]


def test_the_fixture_has_eight_gpus_with_their_minor_numbers():
    table = gj.parse_nvidia_smi(FIXTURE.read_text())
    assert sorted(table) == list(range(8))
    assert [table[m]["index"] for m in range(8)] == [str(i) for i in range(8)]
    assert all(v["uuid"].startswith("GPU-") for v in table.values())
    assert len({v["uuid"] for v in table.values()}) == 8


def test_a_recorded_h100_gives_its_index_and_uuid():
    # Recorded on a real H100 with driver 580 (tests/fixtures/gpu/h100-vm-record.txt, where
    # this program's prolog and epilog also ran against the live nvidia-smi).
    recorded = (FIXTURE.parent / "h100-vm-smi.xml").read_text()
    assert gj.parse_nvidia_smi(recorded) == {
        0: {"index": "0", "uuid": "GPU-92f5db81-0a99-a977-66da-a93c1ccc49d5"}}


def test_prolog_labels_exactly_the_jobs_gpus_and_epilog_removes_them(where):
    table = gj.parse_nvidia_smi(FIXTURE.read_text())
    assert gj.run(job("41", "2,5"), "metalslurm-prolog", **where) == "job 41 holds GPU(s) 2,5"
    assert series(where) == [
        f'metalslurm_gpu_job_info{{gpu="{m}",UUID="{table[m]["uuid"]}",minor="{m}",jobid="41",'
        f'user="alice",account="team-a",partition="train"}} 1' for m in (2, 5)]
    assert {p.name: p.read_text() for p in where["dcgm_dir"].iterdir()} == {"2": "41\n",
                                                                          "5": "41\n"}
    gj.run(job("42", "0", user="bob", account="team-b"), "metalslurm-prolog", **where)
    assert [line.split("jobid=")[1][:4] for line in series(where)] == ['"41"', '"41"', '"42"']
    assert gj.run(job("41", "2,5"), "metalslurm-epilog", **where) == "job 41 released its GPUs"
    assert series(where) == [
        f'metalslurm_gpu_job_info{{gpu="0",UUID="{table[0]["uuid"]}",minor="0",jobid="42",'
        'user="bob",account="team-b",partition="train"} 1']
    assert sorted(p.name for p in where["dcgm_dir"].iterdir()) == ["0"]


def test_slurmd_context_wins_over_the_name(where):
    gj.run(job("7", "1"), "metalslurm-prolog", **where)
    gj.run(job("7", "1", SLURM_SCRIPT_CONTEXT="epilog_slurmd"), "metalslurm-prolog", **where)
    assert series(where) == []


def test_gpus_are_read_once_per_boot(where):
    for jobid in ("1", "2", "3"):
        gj.run(job(jobid, jobid), "metalslurm-prolog", **where)
    calls = (Path(where["nvidia_smi"]).parent.parent / "smi-calls").read_text().splitlines()
    assert calls == ["called"]


def test_without_nvidia_smi_the_device_number_is_the_index_and_no_uuid(where):
    gj.run(job("9", "3"), "metalslurm-prolog", **{**where, "nvidia_smi": None})
    assert series(where) == ['metalslurm_gpu_job_info{gpu="3",UUID="",minor="3",jobid="9",'
                             'user="alice",account="team-a",partition="train"} 1']


def test_cuda_visible_devices_is_the_fallback_and_jobs_without_gpus_change_nothing(where):
    env = job("5", "")
    assert gj.run(env, "metalslurm-prolog", **where) == "job 5 has no GPUs here"
    assert not where["textfile"].exists()
    assert gj.run(env, "metalslurm-epilog", **where) == "job 5 had no GPUs here"
    gj.run({**env, "CUDA_VISIBLE_DEVICES": "4"}, "metalslurm-prolog", **where)
    assert [s.split("minor=")[1][:3] for s in series(where)] == ['"4"']


def test_a_job_whose_epilog_never_ran_is_dropped_when_its_gpu_is_given_again(where):
    gj.run(job("10", "0,1"), "metalslurm-prolog", **where)
    gj.run(job("11", "1,2", user="bob"), "metalslurm-prolog", **where)
    assert {s.split('jobid="')[1].split('"')[0] for s in series(where)} == {"11"}


def test_label_values_are_escaped(where):
    gj.run(job("12", "0", account='we"ird\\acct'), "metalslurm-prolog", **where)
    assert 'account="we\\"ird\\\\acct"' in series(where)[0]


def test_no_job_id_does_nothing():
    assert gj.run({}, "metalslurm-prolog") == "no SLURM_JOB_ID (''): nothing to do"


def test_a_failure_never_fails_the_prolog(tmp_path):
    """A failing prolog drains the node: even an unwritable state directory exits 0."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    env = {**os.environ, **job("13", "0")}
    code = (f"import importlib.machinery as m, pathlib, sys; mod = m.SourceFileLoader('g', "
            f"{str(PROGRAM)!r}).load_module(); mod.STATE_DIR = pathlib.Path({str(blocker)!r}); "
            f"mod.run.__defaults__ = (mod.STATE_DIR,) + mod.run.__defaults__[1:]; "
            f"sys.argv[0] = 'metalslurm-prolog'; sys.exit(mod.main())")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0
    assert proc.stderr.startswith("metalslurm-gpu-jobs: prolog of job 13: ")
