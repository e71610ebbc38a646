"""`metalslurm report usage`: GPU-hours and chargeback from recorded sacct output.

Expected totals are written out below from each job's known duration and GPU count (see
tests/fixtures/slurm/sacct/README.md), never taken from the code under test."""

import csv
import io
from datetime import datetime

import pytest

from infra.cli import main
from infra.ops import report

WINDOW = (datetime(2026, 5, 1), datetime(2026, 6, 1))
# (account, user, gpu type) -> [(hours inside the window, GPUs), ...] per job record
KNOWN = {
    ("team-a", "alice", "h100"): [(4, 8),      # 101: 10:00-14:00, 8 GPUs
                                  (4, 2),      # 102: running since 05-31 20:00, clipped at 06-01
                                  (0.5, 1),    # 110_1: array task, 30 min
                                  (0.5, 1)],   # 110_2
    ("team-b", "alice", "a100"): [(24, 1)],    # 109: a whole day, TIMEOUT still used the GPU
    ("team-b", "bob", "h100"): [(2, 4),        # 103: started 04-30 22:00, 2 h inside May
                                (1.5, 16),     # 104 first run, preempted and requeued
                                (2, 16)],      # 104 second run
    ("team-b", "erin", None): [(0.5, 1)],      # 108: untyped gres/gpu=1
}
# carol's 105 used no GPU, 106 never started, dave's 107 was cancelled while pending.
PRICES = {"h100": 4.21, "a100": 1.04, "default": 2.00}


def hours(key):
    return sum(h * gpus for h, gpus in KNOWN[key])


@pytest.fixture
def sacct_text(repo):
    return (repo / "tests/fixtures/slurm/sacct/usage-2026-05.txt").read_text()


def test_gpu_hours_per_user_match_the_known_jobs(sacct_text):
    rows = report.usage_from_sacct(sacct_text, *WINDOW)
    assert {(r.account, r.user, r.gpu_type): r.gpu_hours for r in rows} == {
        key: pytest.approx(hours(key)) for key in KNOWN}
    assert {(r.account, r.user, r.gpu_type): r.jobs for r in rows} == {
        key: len(jobs) for key, jobs in KNOWN.items()}


def test_typed_and_untyped_gpu_tres_are_not_double_counted():
    assert report.gpus_from_tres("billing=16,cpu=16,gres/gpu:h100=2,gres/gpu=2,node=1") == {
        "h100": 2}
    assert report.gpus_from_tres("cpu=8,gres/gpu=1") == {None: 1}
    assert report.gpus_from_tres("cpu=4,mem=16G,node=1") == {}
    assert report.gpus_from_tres("gres/gpu:a100=1,gres/gpu:h100=2,gres/gpu=3") == {
        "a100": 1, "h100": 2}


def test_steps_are_ignored_even_without_allocations(repo):
    text = (repo / "tests/fixtures/slurm/sacct/with-steps.txt").read_text()
    rows = report.usage_from_sacct(text, *WINDOW)
    assert [(r.user, r.gpu_type, r.jobs, r.gpu_hours) for r in rows] == [
        ("alice", "h100", 1, 2.0)]  # one hour on two GPUs, not four times that


def test_a_window_clips_both_ends(sacct_text):
    # 2026-05-10 08:30 to 11:00: bob's 104 ran 08:30-09:30 (first run) and 10:00-11:00
    rows = report.usage_from_sacct(sacct_text, datetime(2026, 5, 10, 8, 30),
                                   datetime(2026, 5, 10, 11, 0))
    assert [(r.user, r.gpu_hours) for r in rows] == [("bob", 16 * 1 + 16 * 1)]


def test_csv_chargeback_prices_each_gpu_type(sacct_text, tmp_path, capsys):
    recorded = tmp_path / "sacct.txt"
    recorded.write_text(sacct_text)
    rc = main(["report", "usage", "--from-file", str(recorded), "--start", "2026-05-01",
               "--end", "2026-06-01T00:00:00", "--price", "h100=4.21", "--price", "a100=1.04",
               "--price", "default=2", "--csv"])
    assert rc == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    by_user = {(r["account"], r["user"], r["gpu_type"]): r for r in rows if r["scope"] == "user"}
    for (account, user, gpu_type), _ in KNOWN.items():
        row = by_user[(account, user, gpu_type or "(untyped)")]
        expected_hours = hours((account, user, gpu_type))
        assert float(row["gpu_hours"]) == pytest.approx(expected_hours)
        price = PRICES[gpu_type or "default"]
        assert float(row["cost"]) == pytest.approx(expected_hours * price, abs=0.005)
    accounts = {r["account"]: r for r in rows if r["scope"] == "account"}
    team_b = [k for k in KNOWN if k[0] == "team-b"]
    assert float(accounts["team-b"]["gpu_hours"]) == pytest.approx(sum(hours(k) for k in team_b))
    assert float(accounts["team-b"]["cost"]) == pytest.approx(
        sum(hours(k) * PRICES[k[2] or "default"] for k in team_b), abs=0.005)
    total = next(r for r in rows if r["scope"] == "total")
    assert float(total["gpu_hours"]) == pytest.approx(sum(hours(k) for k in KNOWN))
    assert float(total["cost"]) == pytest.approx(
        sum(hours(k) * PRICES[k[2] or "default"] for k in KNOWN), abs=0.01)


def test_text_table_without_prices(sacct_text, tmp_path, capsys):
    recorded = tmp_path / "sacct.txt"
    recorded.write_text(sacct_text)
    assert main(["report", "usage", "--from-file", str(recorded), "--start", "2026-05-01",
                 "--end", "2026-06-01"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == ("GPU usage 2026-05-01 00:00:00 to 2026-06-01 00:00:00 "
                                   "(controller time)")
    total_line = next(line for line in out.splitlines() if line.startswith("TOTAL"))
    assert total_line.split()[-1] == f"{sum(hours(k) for k in KNOWN):.2f}"
    assert "cost" not in out


def test_a_gpu_type_without_price_is_said_not_guessed(sacct_text):
    rows = report.usage_from_sacct(sacct_text, *WINDOW)
    out = report.format_text(rows, {"h100": 4.21}, *WINDOW)
    assert "no price for: (untyped), a100" in out


def test_prices_from_a_yaml_file_and_the_command_line(tmp_path):
    prices = tmp_path / "prices.yaml"
    prices.write_text("h100: 4.21\nA100: 1.04\n")
    assert report.parse_prices(["h100=3.5"], prices) == {"h100": 3.5, "a100": 1.04}
    with pytest.raises(report.ReportError, match="write TYPE=PRICE"):
        report.parse_prices(["h100"])


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-05-01", datetime(2026, 5, 1)),
    ("2026-05-01T08:30", datetime(2026, 5, 1, 8, 30)),
    ("now", datetime(2026, 5, 20, 15, 4, 5)),
    ("now-7days", datetime(2026, 5, 13, 15, 4, 5)),
    ("now-2hours", datetime(2026, 5, 20, 13, 4, 5)),
    ("today", datetime(2026, 5, 20)),
])
def test_slurm_time_forms(text, expected):
    assert report.parse_time(text, datetime(2026, 5, 20, 15, 4, 5, 123)) == expected


def test_default_window_is_this_month_so_far():
    assert report.default_window(datetime(2026, 5, 20, 15, 4, 5, 9)) == (
        datetime(2026, 5, 1), datetime(2026, 5, 20, 15, 4, 5))


def test_sacct_command_asks_for_allocations_and_every_run_of_requeued_jobs():
    command = report.sacct_command(*WINDOW)
    assert command[:6] == ["sacct", "--allusers", "--duplicates", "--allocations",
                           "--parsable2", "--noheader"]
    assert "--starttime=2026-05-01T00:00:00" in command
    assert command[-1] == ("--format=JobID,User,Account,Partition,State,Start,End,Elapsed,"
                           "ElapsedRaw,AllocTRES,NNodes")


def test_bad_input_is_a_clear_error(tmp_path, capsys):
    recorded = tmp_path / "sacct.txt"
    recorded.write_text("101|alice|team-a\n")
    assert main(["report", "usage", "--from-file", str(recorded), "--start", "2026-05-01"]) == 2
    assert "sacct line 1 has 3 fields, expected 11" in capsys.readouterr().err
    assert main(["report", "usage", "--from-file", str(recorded), "--start", "yesterday-ish"]
                ) == 2
    assert "is not a time" in capsys.readouterr().err
