"""The acceptance gate's parsers (infra/accept/parsers.py) on published runs of the real
tools (tests/fixtures/accept/README.md says where each comes from)."""

from __future__ import annotations

import json

import pytest

from infra.accept.parsers import (
    ToolOutputError,
    parse_all_reduce_perf,
    parse_dcgmi_diag,
    parse_health_json,
    parse_ib_write_bw,
)
from tests.paths import REPO

FIXTURES = REPO / "tests/fixtures/accept"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


@pytest.mark.parametrize("name, rows, smallest, oop, ip, oob", [
    # 2 DGX H100, -g 8, 8 B to 16 GiB (older format, "[0x1b]" device ids)
    ("all_reduce_perf-2x8-dgx-h100-8B-16G.txt", 32, 8, 472.35, 470.37, 0),
    # 2 x 8 H100 on OCI, one GPU a rank, 1 to 16 GiB
    ("all_reduce_perf-2x8-oci-h100-1G-16G.txt", 5, 1073741824, 464.57, 464.79, 0),
    # AWS p5 under 'srun -l': every line starts "0: ", no trailer
    ("all_reduce_perf-2x8-aws-p5-srun-prefix.txt", 32, 8, 487.09, 487.26, None),
    # nccl-tests 2.18.3 (wider #wrong columns, 2-decimal times) on Azure ND H100 v5
    ("all_reduce_perf-2.18.3-2x8-azure-ndv5-abridged.txt", 5, 8388608, 466.33, 466.97, 0),
])
def test_all_reduce_perf_gives_the_bus_bandwidth_at_the_largest_size(name, rows, smallest, oop,
                                                                     ip, oob):
    run = parse_all_reduce_perf(fixture(name))
    assert (len(run.sizes), run.sizes[0], run.largest_size) == (rows, smallest, 17179869184)
    assert (run.busbw_out_of_place[-1], run.busbw_in_place[-1]) == (oop, ip)
    assert run.busbw == pytest.approx((oop + ip) / 2)
    assert (run.out_of_bounds, run.problem) == (oob, "")


def test_wrong_values_make_the_figures_untrustworthy():
    text = fixture("all_reduce_perf-2x8-oci-h100-1G-16G.txt").replace(
        "464.57      0", "464.57      3").replace("Out of bounds values : 0 OK",
                                                 "Out of bounds values : 3 FAILED")
    assert parse_all_reduce_perf(text).problem == "3 wrong values (data corruption)"


# Recorded here (README: "Recorded on a lent GPU"): nccl-tests 2.13.6, built as the role builds
# it but with MPI=0, on one H200. Values read by hand from the files.
H200_RUNS = [
    # name, rows, smallest, largest
    ("all_reduce_perf-2.13.6-1xh200-8B-1G.txt", 28, 8, 1073741824),
    ("all_reduce_perf-2.13.6-1xh200-1G-4G.txt", 3, 1073741824, 4294967296),
]


@pytest.mark.parametrize("name, rows, smallest, largest", H200_RUNS)
def test_a_one_gpu_run_recorded_here_is_read_row_for_row(name, rows, smallest, largest):
    # the in-place algbw overflows its column (up to 14040429.21): rows are split on white space
    run = parse_all_reduce_perf(fixture(name))
    assert (len(run.sizes), run.sizes[0], run.largest_size) == (rows, smallest, largest)
    assert (run.wrong, run.out_of_bounds, run.problem) == (0, 0, "")


@pytest.mark.parametrize("name", [name for name, *_ in H200_RUNS])
def test_one_gpu_has_no_bus_bandwidth_so_the_gates_figure_is_zero(name):
    # busbw = algbw x 2(n-1)/n, 0 for one rank whatever the GPU moved; the trailer agrees
    text = fixture(name)
    run = parse_all_reduce_perf(text)
    assert set(run.busbw_out_of_place) == set(run.busbw_in_place) == {0.0}
    assert run.busbw == 0.0
    assert "# Avg bus bandwidth    : 0 \n" in text


def test_the_one_gpu_zero_comes_from_a_row_that_moved_data():
    # The 4 GiB row as recorded: out of place 1997.4 us, algbw 2150.29 GB/s (a copy in GPU
    # memory); in place 0.31 us (one rank's in-place all-reduce moves nothing).
    text = fixture("all_reduce_perf-2.13.6-1xh200-1G-4G.txt")
    rows = [line.split() for line in text.splitlines() if line.lstrip().startswith("4294967296")]
    assert rows == [["4294967296", "1073741824", "float", "sum", "-1", "1997.4", "2150.29", "0.00",
                     "0", "0.31", "14040429.21", "0.00", "0"]]
    assert parse_all_reduce_perf(text).busbw_out_of_place[-1] == 0.0


@pytest.mark.parametrize("text", ["", "# nThread 1 nGpus 8\n#\n", "\x00\x01binary"])
def test_all_reduce_perf_without_rows_is_refused(text):
    with pytest.raises(ToolOutputError, match="no result rows"):
        parse_all_reduce_perf(text)


def test_ib_write_bw_with_report_gbits_gives_the_average_at_the_largest_size():
    run = parse_ib_write_bw(fixture("ib_write_bw-a100-hdr-cuda-client.txt"))
    assert (run.device, run.link_type) == ("mlx5_0", "IB")
    assert (len(run.sizes), run.sizes[0], run.largest_size) == (23, 2, 8388608)
    # the first row is printed with six decimals (below 0.1 Gb/s) and no TABs
    assert (run.average_gbits[0], run.gbits) == (0.061, 80.96)


def test_ib_write_bw_in_mib_per_second_is_converted_to_gbits():
    run = parse_ib_write_bw(fixture("ib_write_bw-roce-duration-MB.txt"))
    assert run.gbits == pytest.approx(98.265, abs=0.001)  # 11714.10 MiB/s


def test_ib_write_bw_without_a_table_is_refused():
    with pytest.raises(ToolOutputError, match="no result table"):
        parse_ib_write_bw(" Couldn't connect to 10.0.0.2:18515\nUnable to open file descriptor "
                          "for socket connection")


def test_dcgm_4_names_the_failed_test_gpu_and_warning():
    run = parse_dcgmi_diag(fixture("dcgmi-diag-4.2.3-gb10-r1.json"))
    assert run.version == "4.2.3"
    assert [(r.category, r.test, r.gpu, r.status) for r in run.results] == [
        ("Deployment", "software", 0, "Fail")]
    assert run.failures == [
        "software GPU 0: Persistence Mode: Persistence mode for GPU 0 is disabled. Enable "
        "persistence mode by running \"nvidia-smi -i <gpuId> -pm 1 \" as root."]


def test_dcgm_3_results_are_read_with_their_string_gpu_ids():
    # DCGM 3.x's shape (NVIDIA/DCGM issue #139, version at the top level).
    doc = {"DCGM GPU Diagnostic": {"test_categories": [
        {"category": "Deployment",
         "tests": [{"name": "Denylist", "results": [{"status": "Pass"}]}]},
        {"category": "Hardware", "tests": [{"name": "GPU Memory", "results": [
            {"gpu_id": "0", "status": "Pass"},
            {"gpu_id": "1", "status": "Fail", "warnings": [
                {"warning": "Pending page retirements", "error_id": 3}]}]}]}]},
        "version": "3.3.9"}
    run = parse_dcgmi_diag(json.dumps(doc))
    assert run.version == "3.3.9"
    assert [(r.test, r.gpu, r.status) for r in run.results] == [
        ("Denylist", None, "Pass"), ("GPU Memory", 0, "Pass"), ("GPU Memory", 1, "Fail")]
    assert run.failures == ["GPU Memory GPU 1: Pending page retirements"]


@pytest.mark.parametrize("text, said", [
    ("", "no JSON document"),
    ("[1, 2]", "not an object"),
    ('{"other": {}}', "neither"),
    ('{"DCGM Diagnostic": {"version": "4.2.3", "runtime_error": "Unable to connect to the '
     'host engine"}}', "could not run: Unable to connect"),
    ('{"DCGM Diagnostic": {"test_categories": []}}', "no test results"),
])
def test_dcgm_output_that_says_nothing_is_refused_with_why(text, said):
    with pytest.raises(ToolOutputError, match=said):
        parse_dcgmi_diag(text)


# ---- metalslurm-health --json (the gate's GPU state before and after the load) --------------

def test_the_health_checkers_json_gives_its_failures_as_check_and_detail():
    text = json.dumps({"node": "gpu-003", "healthy": False, "results": [
        {"check": "gpu_count", "ok": True, "skipped": False, "detail": "8 of 8 GPUs (h100)"},
        {"check": "gpu_rows", "ok": False, "skipped": False,
         "detail": "00000000:5D:00.0 has a remap or retirement pending (reset the GPU)"},
        {"check": "gpu_xid", "ok": True, "skipped": True, "detail": "cannot read the log"}]})
    run = parse_health_json(text)
    assert run.failures == ("gpu_rows: 00000000:5D:00.0 has a remap or retirement pending "
                            "(reset the GPU)",)
    assert run.checked == 2


@pytest.mark.parametrize("text, said", [
    ("", "printed no JSON document"), ("[]", "no list of results"),
    ('{"results": [{"ok": true}]}', "no list of results")])
def test_health_output_that_is_not_the_checkers_is_refused(text, said):
    with pytest.raises(ToolOutputError, match=said):
        parse_health_json(text)
