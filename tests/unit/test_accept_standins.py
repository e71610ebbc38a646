"""The STAND-IN measuring tools of the acceptance gate's local-cluster tests
(tests/fixtures/accept/standin): what they print is read by the production parsers, and
their knobs move the figures as a slow GPU or a degraded port would."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from infra.accept.parsers import parse_all_reduce_perf, parse_dcgmi_diag, parse_ib_write_bw
from tests.paths import REPO

STANDIN = REPO / "tests/fixtures/accept/standin/metalslurm-accept-standin"


@pytest.fixture
def tools(tmp_path):
    bin_dir, knobs = tmp_path / "bin", tmp_path / "knobs"
    bin_dir.mkdir()
    knobs.mkdir()
    for name in ("all_reduce_perf", "ib_write_bw", "dcgmi"):
        (bin_dir / name).symlink_to(STANDIN)
    # scontrol show hostnames, as the nodes have it, for a two-node job's node list
    (bin_dir / "scontrol").write_text('#!/bin/sh\necho "$3" | tr , "\\n"\n')
    (bin_dir / "scontrol").chmod(0o755)

    def run(tool: str, *args: str, host: str = "gpu-001", nodelist: str = "",
            timeout: float = 20, **extra: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
               "METALSLURM_STANDIN_DIR": str(knobs), "METALSLURM_STANDIN_HOST": host, **extra}
        env.pop("SLURM_JOB_NODELIST", None)
        if nodelist:
            env["SLURM_JOB_NODELIST"] = nodelist
        return subprocess.run([sys.executable, str(bin_dir / tool), *args], env=env,
                              capture_output=True, text=True, timeout=timeout, check=False)

    def knob(node: str, **values) -> None:
        (knobs / node).write_text(json.dumps(values))
    return run, knob


def test_all_reduce_perf_gives_the_h100_figure_and_the_slowest_nodes_in_a_pair(tools):
    run, knob = tools
    single = parse_all_reduce_perf(run("all_reduce_perf", "-b", "1G", "-e", "16G").stdout)
    assert (single.largest_size, round(single.busbw, 1), single.problem) == (
        17179869184, 480.0 - 0.1, "")
    knob("gpu-002", nccl=0.8)
    pair = parse_all_reduce_perf(run("all_reduce_perf", nodelist="gpu-001,gpu-002").stdout)
    assert round(pair.busbw, 1) == round(470.0 * 0.8 - 0.1, 1)
    # only task 0 prints, as mpirun's rank 0 does
    quiet = run("all_reduce_perf", nodelist="gpu-001,gpu-002", SLURM_PROCID="1")
    assert (quiet.returncode, quiet.stdout) == (0, "")


def test_ib_write_bw_scales_the_port_given_and_takes_the_lower_of_both_ends(tools):
    run, knob = tools
    knob("gpu-001", ib={"mlx5_1": 0.5})
    assert parse_ib_write_bw(run("ib_write_bw", "-d", "mlx5_0", "--report_gbits").stdout
                             ).gbits == 392.0
    degraded = parse_ib_write_bw(run("ib_write_bw", "-d", "mlx5_1", "--report_gbits",
                                     "gpu-002", host="gpu-003").stdout)
    assert (degraded.device, degraded.gbits) == ("mlx5_1", 392.0)  # gpu-001 not in this pair
    client = parse_ib_write_bw(run("ib_write_bw", "-d", "mlx5_1", "--report_gbits",
                                   "gpu-001", host="gpu-002").stdout)
    assert client.gbits == 196.0


def test_dcgmi_passes_or_fails_the_gpu_a_knob_names_with_dcgms_exit_status(tools):
    run, knob = tools
    ok = run("dcgmi", "diag", "-r", "3", "-j")
    assert ok.returncode == 0
    parsed = parse_dcgmi_diag(ok.stdout)
    assert (parsed.version, len(parsed.results), parsed.failures) == ("4.2.3", 7 * 8, [])
    knob("gpu-001", dcgm_fail={"test": "memory", "gpu": 3, "warning": "Pending row remap"})
    bad = run("dcgmi", "diag", "-r", "2", "-j")
    assert bad.returncode == 226
    assert parse_dcgmi_diag(bad.stdout).failures == ["memory GPU 3: Pending row remap"]


def test_a_hang_knob_makes_the_tool_run_until_it_is_killed(tools):
    run, knob = tools
    knob("gpu-001", hang=["nccl"])
    with pytest.raises(subprocess.TimeoutExpired):
        run("all_reduce_perf", timeout=2)
