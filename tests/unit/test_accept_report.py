"""The acceptance gate's table and HTML page (infra/accept/report.py). The page is looked at
in a browser by the e2e test of the gate; here: what it holds."""

from __future__ import annotations

import re

from infra.accept.report import FAIL_COLOUR, PASS_COLOUR, format_table, render_html
from infra.accept.verdicts import Measurement, judge, judge_check

WHEN = "2026-11-27T10:00:00+00:00"
HISTORY = [Measurement("r1", "2026-11-26T10:00:00+00:00", f"gpu-{i:03d}", "nccl_1node", "h100",
                       v, "GB/s") for i, v in enumerate((478, 481, 476, 480), 1)]


def current():
    run = [Measurement("r2", WHEN, "gpu-001", "nccl_1node", "h100", 477, "GB/s"),
           Measurement("r2", WHEN, "gpu-002", "nccl_1node", "h100", 402, "GB/s"),
           Measurement("r2", WHEN, "gpu-003", "nccl_1node", "h100", None, "GB/s", "timed out"),
           Measurement("r2", WHEN, "gpu-001", "ib_write_bw:mlx5_0", "ndr", 391, "Gb/s"),
           Measurement("r2", WHEN, "gpu-002", "ib_write_bw:mlx5_0", "ndr", 390, "Gb/s")]
    floors = {"nccl_1node": 460, "ib_write_bw:mlx5_0": 380}
    return [judge(m, floors[m.test], HISTORY + run) for m in run]


def test_the_table_has_a_line_per_node_and_test_with_the_reason_of_each_failure():
    assert format_table(current()).splitlines() == [
        "node     test                figure     unit  floor  fleet median  own median  verdict",
        "gpu-001  ib_write_bw:mlx5_0  391        Gb/s  380    -             -           pass",
        # the others' figures, history and this run: 481 476 480 402, median 478; its own
        # past has one figure, fewer than a median needs
        "gpu-001  nccl_1node          477        GB/s  460    478           -           pass",
        "gpu-002  ib_write_bw:mlx5_0  390        Gb/s  380    -             -           pass",
        "gpu-002  nccl_1node          402        GB/s  460    478           -           "
        "FAIL: nccl_1node 402 GB/s < 460",
        "gpu-003  nccl_1node          timed out  GB/s  460    478           -           "
        "FAIL: nccl_1node timed out"]


def test_the_page_plots_each_test_with_a_dot_per_measured_node_coloured_by_verdict():
    page = render_html(current(), HISTORY)
    assert "2 of 3 nodes passed" not in page  # gpu-002 and gpu-003 failed
    assert "1 of 3 nodes passed; failed: gpu-002, gpu-003" in page
    plots = re.findall(r"<h2>([^<]+)</h2><svg", page)
    assert plots == ["ib_write_bw:mlx5_0", "nccl_1node"]
    dots = re.findall(r'<circle [^>]*fill="([^"]+)"><title>([^<]+)</title>', page)
    assert dots == [(PASS_COLOUR, "gpu-001: 391 Gb/s"), (PASS_COLOUR, "gpu-002: 390 Gb/s"),
                    (PASS_COLOUR, "gpu-001: 477 GB/s"), (FAIL_COLOUR, "gpu-002: 402 GB/s")]
    assert "gpu-003: timed out" in page  # a cross, not a dot
    assert "floor 460" in page and "fleet median 479" in page  # the history's alone


def test_the_page_is_self_contained_and_escapes_what_it_shows():
    run = [Measurement("r<1>", WHEN, "gpu-<b>", "nccl_1node", "h100", 470, "GB/s")]
    page = render_html([judge(run[0], 460, [])], [])
    assert "<script" not in page and "http" not in page.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")
    assert "gpu-&lt;b&gt;" in page and "gpu-<b>" not in page and "r&lt;1&gt;" in page


def test_a_pass_fail_test_is_in_the_table_but_not_plotted():
    dcgm = Measurement("r2", WHEN, "gpu-001", "dcgm_diag", "h100", 0.0, "failed tests")
    page = render_html([judge_check(dcgm, ""), *current()], HISTORY)
    assert "<td>dcgm_diag</td>" in page
    assert re.findall(r"<h2>([^<]+)</h2><svg", page) == ["ib_write_bw:mlx5_0", "nccl_1node"]
