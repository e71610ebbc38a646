"""The acceptance gate's verdicts and history (infra/accept/verdicts.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from infra.accept.verdicts import (
    Measurement,
    append_history,
    drain_reason,
    judge,
    read_history,
)

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def m(node: str, value: float | None, run: str = "r2", test: str = "nccl_1node",
      hardware: str = "h100", when: str = "2026-11-27T11:00:00+00:00", error: str = "",
      unit: str = "GB/s"):
    return Measurement(run, when, node, test, hardware, value, unit, error)


FLEET = [m(f"gpu-{i:03d}", v, run="r1") for i, v in enumerate((478, 481, 476, 480), 1)]


def test_a_figure_under_the_floor_fails_with_the_figure_and_floor_in_the_reason():
    v = judge(m("gpu-009", 402.4), 460, FLEET)
    assert (v.passed, v.reason, v.fleet_median) == (False, "nccl_1node 402 GB/s < 460", 479)
    assert drain_reason([v]) == "metalslurm-accept: nccl_1node 402 GB/s < 460"


def test_above_the_floor_but_more_than_the_fraction_below_the_fleet_median_fails():
    # 479 median; 10 % below is 431.1: 425 fails, 435 passes.
    assert judge(m("gpu-009", 425), 400, FLEET).reason == (
        "nccl_1node 425 GB/s < 90% of fleet median 479")
    assert judge(m("gpu-009", 435), 400, FLEET).passed


def test_a_repaired_node_is_compared_with_its_own_past():
    own = [m("gpu-009", 520, run=f"r0{i}") for i in range(3)]
    v = judge(m("gpu-009", 462), 460, FLEET + own)
    # The others' median 479 passes it; its own past (520, less 10 %: 468) does not.
    assert (v.fleet_median, v.own_median) == (479, 520)
    assert v.reason == "nccl_1node 462 GB/s < 90% of own median 520"


def test_medians_need_enough_figures_of_the_same_test_and_hardware():
    few = FLEET[:2] + [m("gpu-005", 100, test="nccl_pair"), m("gpu-006", 100, hardware="a100")]
    v = judge(m("gpu-009", 300), None, few)
    assert (v.passed, v.fleet_median, v.own_median) == (True, None, None)


def test_the_current_runs_other_nodes_count_and_its_own_figure_does_not():
    run = [m("gpu-001", 480), m("gpu-002", 482), m("gpu-003", 478), m("gpu-004", 300)]
    v = judge(run[3], None, run)
    assert (v.fleet_median, v.passed) == (480, False)


def test_a_test_without_a_figure_fails_with_its_error():
    v = judge(m("gpu-009", None, error="timed out"), 460, FLEET)
    assert (v.passed, v.reason) == (False, "nccl_1node timed out")


def test_the_history_round_trips_keeps_its_window_and_skips_cut_lines(tmp_path):
    path = tmp_path / "accept" / "history.jsonl"
    old = m("gpu-001", 470, run="r0", when="2026-05-01T00:00:00+00:00")
    append_history(path, [old, *FLEET])
    with path.open("a") as handle:
        handle.write('{"run": "r1", "node": "gpu-0\n')  # a line cut short
    append_history(path, [m("gpu-009", 402)])
    history, unreadable = read_history(path, NOW, window_days=90)
    assert (history, unreadable) == ([*FLEET, m("gpu-009", 402)], 1)
    assert read_history(tmp_path / "none.jsonl", NOW) == ([], 0)


@pytest.mark.parametrize("failed", [[], ["a"]])
def test_a_node_with_no_failed_test_gets_no_reason(failed):
    verdicts = [judge(m("gpu-001", 480), 460, FLEET)]
    if failed:
        verdicts.append(judge(m("gpu-001", 190, test="ib_write_bw:mlx5_0", hardware="ndr",
                                   unit="Gb/s"), 380, []))
    assert drain_reason(verdicts) == (
        "metalslurm-accept: ib_write_bw:mlx5_0 190 Gb/s < 380" if failed else "")
