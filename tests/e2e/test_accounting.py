"""Multi-tenant scheduling on the Debian 13 cluster: accounts, QOS limits, preemption with
requeue, shared /home, and the GPU-hour usage report, all through real Slurm jobs.

Runs on the session's shared Debian 13 cluster and leaves it as it found it (every job
finished). Two teams: alice in team-a (720 GPU-hours), bob in team-b with a tiny GPU
budget; mallory has a login but no Slurm account.
"""

from __future__ import annotations

import csv
import io
import time

import pytest

from tests.e2e.cluster import metalslurm, wait_for


@pytest.fixture(scope="module")
def cluster(debian13):
    assert debian13.up.returncode == 0, debian13.up.stdout[-3000:]
    return debian13


def test_a_job_is_accounted_to_its_account_with_its_gpus(cluster):
    job = cluster.submit("alice", "--partition=train --gres=gpu:h100:2 --time=5 "
                         "--wrap='sleep 1'")
    assert cluster.wait_until_done(job) == "COMPLETED"
    [row] = cluster.sacct_rows(job, "User,Account,QOS,Partition,AllocTRES")
    user, account, qos, partition, tres = row
    assert (user, account, qos, partition) == ("alice", "team-a", "team-a-gpu", "train")
    assert "gres/gpu=2" in tres.split(","), tres
    assert "gres/gpu:h100=2" in tres.split(","), tres


def test_a_user_without_an_association_is_rejected(cluster):
    proc = cluster.ctl("srun --time=1 true", "mallory", check=False)
    assert proc.returncode != 0
    assert "Invalid account or account/partition combination specified" in proc.stderr


def test_a_qos_gpu_budget_holds_a_job_that_would_exceed_it(cluster):
    # team-b-gpu allows 10 GPU-minutes; 1 GPU for 60 minutes would exceed it.
    job = cluster.submit("bob", "--gres=gpu:h100:1 --time=60 --wrap='sleep 1'")
    try:
        reason = wait_for(f"job {job} to be held", lambda: cluster.job_field(job, "%T %r")
                          if "PENDING" in cluster.job_field(job, "%T %r") and "QOS" in
                          cluster.job_field(job, "%r") else None, timeout=60)
        assert reason == "PENDING QOSGrpGRESMinutes", reason
    finally:
        cluster.ctl(f"scancel {job}")
    # Within the budget (1 GPU for 5 minutes) the same user runs.
    ok = cluster.submit("bob", "--gres=gpu:h100:1 --time=5 --wrap='sleep 1'")
    assert cluster.wait_until_done(ok) == "COMPLETED"


def test_a_gpu_job_without_a_time_limit_gets_the_partitions_default_and_runs(cluster):
    """alice's 720 GPU-hour budget covers 2 GPUs for train's DefaultTime (1 day), so a job
    that gives no --time runs at once instead of pending with QOSGrpGRESMinutes."""
    job = cluster.submit("alice", "--gres=gpu:h100:2 --wrap=hostname")
    assert cluster.wait_until_done(job, timeout=120) == "COMPLETED"
    assert cluster.sacct_rows(job, "Partition,Timelimit,QOS") == [
        ["train", "1-00:00:00", "team-a-gpu"]]


def test_a_job_without_a_time_limit_beyond_the_budget_is_held_with_the_reason(cluster):
    """bob's 10 GPU-minute budget cannot cover 1 GPU for the default day: the job pends
    with QOSGrpGRESMinutes, which tells him to give a shorter --time
    (docs/reference/accounting.md)."""
    job = cluster.submit("bob", "--gres=gpu:h100:1 --wrap=hostname")
    try:
        assert wait_for(f"job {job} to be held", lambda: cluster.job_field(job, "%T %r %l")
                        if "QOS" in cluster.job_field(job, "%r") else None, timeout=60) == \
            "PENDING QOSGrpGRESMinutes 1-00:00:00"
    finally:
        cluster.ctl(f"scancel {job}")


def test_a_priority_job_preempts_a_train_job_which_is_requeued_and_completes(cluster):
    train = cluster.submit("alice", "--partition=train --nodes=2 --exclusive --time=10 "
                           "--wrap='sleep 25'")
    wait_for(f"train job {train} to run", lambda: cluster.job_field(train, "%T") == "RUNNING")
    # On a node the train job holds: with elastic capacity free, Slurm would rather power
    # up a node than preempt.
    urgent = cluster.submit("alice", "--partition=priority --nodes=1 --nodelist=gpu-001 "
                            "--exclusive --time=5 --wrap='sleep 3'")
    assert cluster.wait_until_done(urgent) == "COMPLETED"
    restarts = cluster.ctl(f"scontrol show job {train}").stdout
    assert "Restarts=1" in restarts, restarts
    cluster.release_requeued(train)
    assert cluster.wait_until_done(train, timeout=600) == "COMPLETED"
    states = [r[0] for r in cluster.sacct_rows(train, "State", duplicates=True)]
    assert states[0] in ("PREEMPTED", "REQUEUED") and states[-1] == "COMPLETED", states


def test_a_file_written_in_home_on_one_node_is_read_on_another(cluster):
    cluster.ctl("srun --nodelist=gpu-001 --time=1 sh -c 'hostname > $HOME/written-by'",
                "alice")
    read = cluster.ctl("srun --nodelist=gpu-002 --time=1 cat /home/alice/written-by", "alice")
    assert read.stdout.strip() == "gpu-001"
    owner = cluster.on("gpu-002", "stat -c %U:%a /home/alice/written-by").stdout.strip()
    assert owner.startswith("alice:")


def test_the_usage_report_counts_the_gpu_seconds_of_known_jobs(cluster):
    """Two jobs of known size and length; the report's totals must match them within the
    few seconds Slurm adds around a job's command."""
    start = cluster.ctl("date +%Y-%m-%dT%H:%M:%S").stdout.strip()
    time.sleep(1)
    big = cluster.submit("alice", "--partition=train --nodes=2 --gres=gpu:h100:8 --time=5 "
                         "--wrap='sleep 30'")
    small = cluster.submit("bob", "--gres=gpu:h100:1 --time=2 --wrap='sleep 20'")
    for job in (big, small):
        assert cluster.wait_until_done(job) == "COMPLETED"
    time.sleep(1)
    end = cluster.ctl("date +%Y-%m-%dT%H:%M:%S").stdout.strip()
    proc = metalslurm("report", "usage", "--stack", str(cluster.stack), "--start", start,
                      "--end", end, "--price", "h100=4.21", "--csv")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {(r["scope"], r["account"], r["user"]): r
            for r in csv.DictReader(io.StringIO(proc.stdout))}
    alice = rows[("user", "team-a", "alice")]
    bob = rows[("user", "team-b", "bob")]
    # 2 nodes x 8 GPUs x 30 s, and 1 GPU x 20 s; Slurm's elapsed time is a few seconds longer
    # (the job's prolog and step launch: 4 s on two nodes on a loaded machine, 2026-12-01).
    assert (alice["gpu_type"], alice["jobs"]) == ("h100", "1")
    big_gpus, big_seconds, small_gpus, small_seconds, slack = 16, 30, 1, 20, 6
    assert big_gpus * big_seconds <= int(alice["gpu_seconds"]) <= \
        big_gpus * (big_seconds + slack), alice
    assert small_gpus * small_seconds <= int(bob["gpu_seconds"]) <= \
        small_gpus * (small_seconds + slack), bob
    total = rows[("total", "", "")]
    assert int(total["gpu_seconds"]) == int(alice["gpu_seconds"]) + int(bob["gpu_seconds"])
    assert float(alice["cost"]) == pytest.approx(int(alice["gpu_seconds"]) / 3600 * 4.21,
                                                 abs=0.005)
