"""Multi-tenant scheduling on the Debian 13 cluster: accounts, QOS limits, preemption with
requeue, shared /home, and the GPU-hour usage report, all through real Slurm jobs.

Runs first on the session's Debian 13 cluster (tests/e2e/test_local_cluster.py goes on
with it and tears it down). Two teams: alice in team-a, bob in team-b with a tiny GPU
budget; mallory has a login but no Slurm account.
"""

from __future__ import annotations

import csv
import io
import time

import pytest

from tests.e2e.conftest import DEBIAN13_STACK as STACK
from tests.e2e.conftest import metalslurm

JOB_TIMEOUT = 240


@pytest.fixture(scope="module")
def cluster(debian13_up):
    assert debian13_up.returncode == 0, debian13_up.stdout[-3000:]


def on(node: str, command: str, user: str | None = None, check: bool = True):
    if user:
        command = f"cd /home/{user} && runuser -u {user} -- {command}"
    proc = metalslurm("local", "exec", "--stack", str(STACK), node, "--", "sh", "-c", command)
    if check:
        assert proc.returncode == 0, (command, proc.stdout, proc.stderr)
    return proc


def ctl(command: str, user: str | None = None, check: bool = True):
    return on("ctl", command, user, check)


def submit(user: str, args: str) -> str:
    return ctl(f"sbatch --parsable --chdir=/home/{user} -o /dev/null {args}",
               user).stdout.strip().split(";")[0]


def job_field(job: str, fmt: str) -> str:
    return ctl(f"squeue --noheader --jobs={job} --format='{fmt}'", check=False).stdout.strip()


def wait_for(description: str, probe, timeout: float = JOB_TIMEOUT, every: float = 2.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {description} (last: {last!r})")


def sacct_rows(job: str, fields: str, duplicates: bool = False) -> list[list[str]]:
    dup = "--duplicates " if duplicates else ""
    out = ctl(f"sacct {dup}--allocations --noheader --parsable2 --jobs={job} "
              f"--format={fields}").stdout
    return [line.split("|") for line in out.splitlines() if line]


def final_state(job: str) -> str | None:
    rows = sacct_rows(job, "State")
    state = rows[-1][0] if rows else ""
    return state if state and state not in ("PENDING", "RUNNING", "REQUEUED") else None


def test_a_job_is_accounted_to_its_account_with_its_gpus(cluster):
    job = submit("alice", "--partition=train --gres=gpu:h100:2 --time=5 --wrap='sleep 1'")
    assert wait_for(f"job {job} to finish", lambda: final_state(job)) == "COMPLETED"
    [row] = sacct_rows(job, "User,Account,QOS,Partition,AllocTRES")
    user, account, qos, partition, tres = row
    assert (user, account, qos, partition) == ("alice", "team-a", "team-a-gpu", "train")
    assert "gres/gpu=2" in tres.split(","), tres
    assert "gres/gpu:h100=2" in tres.split(","), tres


def test_a_user_without_an_association_is_rejected(cluster):
    proc = ctl("srun --time=1 true", "mallory", check=False)
    assert proc.returncode != 0
    assert "Invalid account or account/partition combination specified" in proc.stderr


def test_a_qos_gpu_budget_holds_a_job_that_would_exceed_it(cluster):
    # team-b-gpu allows 10 GPU-minutes; 1 GPU for 60 minutes would exceed it.
    job = submit("bob", "--gres=gpu:h100:1 --time=60 --wrap='sleep 1'")
    try:
        reason = wait_for(f"job {job} to be held", lambda: job_field(job, "%T %r")
                          if "PENDING" in job_field(job, "%T %r") and "QOS" in
                          job_field(job, "%r") else None, timeout=60)
        assert reason == "PENDING QOSGrpGRESMinutes", reason
    finally:
        ctl(f"scancel {job}")
    # Within the budget (1 GPU for 5 minutes) the same user runs.
    ok = submit("bob", "--gres=gpu:h100:1 --time=5 --wrap='sleep 1'")
    assert wait_for(f"job {ok} to finish", lambda: final_state(ok)) == "COMPLETED"


def test_a_priority_job_preempts_a_train_job_which_is_requeued_and_completes(cluster):
    train = submit("alice", "--partition=train --nodes=2 --exclusive --time=10 "
                   "--wrap='sleep 25'")
    wait_for(f"train job {train} to run", lambda: job_field(train, "%T") == "RUNNING")
    # On a node the train job holds: with elastic capacity free, Slurm would rather power
    # up a node than preempt.
    urgent = submit("alice", "--partition=priority --nodes=1 --nodelist=gpu-001 --exclusive "
                    "--time=5 --wrap='sleep 3'")
    assert wait_for(f"priority job {urgent} to finish", lambda: final_state(urgent)) == \
        "COMPLETED"
    restarts = ctl(f"scontrol show job {train}").stdout
    assert "Restarts=1" in restarts, restarts
    assert wait_for(f"train job {train} to complete after its requeue",
                    lambda: final_state(train), timeout=600) == "COMPLETED"
    states = [r[0] for r in sacct_rows(train, "State", duplicates=True)]
    assert states[0] in ("PREEMPTED", "REQUEUED") and states[-1] == "COMPLETED", states


def test_a_file_written_in_home_on_one_node_is_read_on_another(cluster):
    ctl("srun --nodelist=gpu-001 --time=1 sh -c 'hostname > $HOME/written-by'", "alice")
    read = ctl("srun --nodelist=gpu-002 --time=1 cat /home/alice/written-by", "alice")
    assert read.stdout.strip() == "gpu-001"
    owner = on("gpu-002", "stat -c %U:%a /home/alice/written-by").stdout.strip()
    assert owner.startswith("alice:")


def test_the_usage_report_counts_the_gpu_seconds_of_known_jobs(cluster):
    """Two jobs of known size and length; the report's totals must match them within the
    few seconds Slurm adds around a job's command."""
    start = ctl("date +%Y-%m-%dT%H:%M:%S").stdout.strip()
    time.sleep(1)
    big = submit("alice", "--partition=train --nodes=2 --gres=gpu:h100:8 --time=5 "
                 "--wrap='sleep 30'")
    small = submit("bob", "--gres=gpu:h100:1 --time=2 --wrap='sleep 20'")
    for job in (big, small):
        assert wait_for(f"job {job} to finish", lambda job=job: final_state(job)) == "COMPLETED"
    time.sleep(1)
    end = ctl("date +%Y-%m-%dT%H:%M:%S").stdout.strip()
    proc = metalslurm("report", "usage", "--stack", str(STACK), "--start", start, "--end", end,
                      "--price", "h100=4.21", "--csv")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {(r["scope"], r["account"], r["user"]): r
            for r in csv.DictReader(io.StringIO(proc.stdout))}
    alice = rows[("user", "team-a", "alice")]
    bob = rows[("user", "team-b", "bob")]
    # 2 nodes x 8 GPUs x 30 s, and 1 GPU x 20 s; Slurm's elapsed time may be 0-3 s longer.
    assert (alice["gpu_type"], alice["jobs"]) == ("h100", "1")
    big_gpus, big_seconds, small_gpus, small_seconds, slack = 16, 30, 1, 20, 3
    assert big_gpus * big_seconds <= int(alice["gpu_seconds"]) <= \
        big_gpus * (big_seconds + slack), alice
    assert small_gpus * small_seconds <= int(bob["gpu_seconds"]) <= \
        small_gpus * (small_seconds + slack), bob
    total = rows[("total", "", "")]
    assert int(total["gpu_seconds"]) == int(alice["gpu_seconds"]) + int(bob["gpu_seconds"])
    assert float(alice["cost"]) == pytest.approx(int(alice["gpu_seconds"]) / 3600 * 4.21,
                                                 abs=0.005)
