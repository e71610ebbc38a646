"""'metalslurm backup' and 'metalslurm restore' on the Debian 13 cluster: the controller's
container destroyed with everything on it (its accounting database, slurmctld's state),
made anew by 'local up', and the backup restored onto it: the history sacct shows, the held
job in the queue, the QOS usage and the job-id counter are back, and the cluster runs jobs.

Real here: mysqldump and mysql against the cluster's MariaDB, slurmctld stopped and started
by systemd, its StateSaveLocation archived and put back, the controller's container removed
and created from its prepared image, the configure run that 'local up' does. Leaves the
cluster restored and working, the replaced state beside the restored one.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
import subprocess

import pytest

from infra.ops.configure import run_playbook
from tests.e2e.cluster import JOB_TIMEOUT, metalslurm, ssh_root, wait_for

HISTORY = "JobID,User,Account,State,ExitCode,NodeList,Start,End"


@pytest.fixture(scope="module")
def cluster(debian13):
    debian13.ready_for_configures()
    wait_for("gpu-001 and gpu-002 to be idle", lambda: set(debian13.ctl(
        "sinfo --noheader --Node --nodes=gpu-[001-002] --format=%N/%T").stdout.split())
        == {"gpu-001/idle", "gpu-002/idle"}, timeout=180)
    return debian13


def history(cluster, jobs: list[str]) -> list[str]:
    return cluster.ctl(f"sacct --allocations --noheader --parsable2 --jobs={','.join(jobs)} "
                       f"--format={HISTORY}").stdout.splitlines()


def qos_usage(cluster) -> float:
    """alice's QOS's usage (team-a-gpu: her account's default), as slurmctld holds it."""
    out = cluster.ctl("scontrol show assoc_mgr flags=qos qos=team-a-gpu").stdout
    return float(re.search(r"UsageRaw=([0-9.]+)", out)[1])


def queue_view(cluster, job: str) -> str:
    return cluster.ctl(f"squeue --noheader --jobs={job} --format='%T %r %u'",
                       check=False).stdout.strip()


def succeeds(cluster, verb: str, dest, said: str) -> None:
    """'metalslurm backup' or 'restore' with ``dest``: exit 0, its one line matching ``said``."""
    run = metalslurm(verb, "-i", str(cluster.inventory), str(dest), timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.fullmatch(said, run.stdout.strip()), run.stdout


def test_a_controller_made_anew_gets_history_queue_and_usage_back(cluster, tmp_path):
    """alice's finished jobs, bob's held one and the QOS usage are backed up; the controller's
    container is removed and 'local up' makes it anew (none of them there); the restore
    brings each back exactly, and bob's job, released, runs."""
    # Each runs some seconds: usage is counted in whole seconds, and a job of none adds none.
    done = cluster.submit("alice", "--nodelist=gpu-001 --time=5 --wrap='sleep 3'")
    failed = cluster.submit("alice", "--nodelist=gpu-002 --time=5 --wrap='sleep 3; exit 3'")
    held = cluster.submit("bob", "--hold --nodelist=gpu-002 --time=5 --wrap=hostname")
    for job, state in ((done, "COMPLETED"), (failed, "FAILED")):
        assert cluster.wait_until_done(job) == state
    wait_for("the jobs' ends in the accounting database", lambda: len([
        r for r in history(cluster, [done, failed]) if "|COMPLETED|" in r or "|FAILED|" in r])
        == 2, timeout=60)
    before = history(cluster, [done, failed])
    assert [r.split("|")[:5] for r in before] == [
        [done, "alice", "team-a", "COMPLETED", "0:0"],
        [failed, "alice", "team-a", "FAILED", "3:0"]]
    assert queue_view(cluster, held) == "PENDING JobHeldUser bob"
    # The jobs' usage reaches the QOS at the priority plugin's next calculation (every
    # minute: the stack's PriorityCalcPeriod); each changes the figure (it decays), so a
    # change means one ran after the jobs ended, and the next is a minute away.
    ended = qos_usage(cluster)
    usage = wait_for("a usage calculation after the jobs", lambda: (
        (value := qos_usage(cluster)) != ended and value > 0) and value, timeout=150)

    dest = tmp_path / "backup"
    succeeds(cluster, "backup", dest,
        rf"backup of cluster {cluster.name} \(Slurm 24\.11\.\S+\) in {dest}: the accounting "
        r"database slurm_acct_db, slurmctld's state \(1 jobs in the queue\), the inventory; "
        r"\d+ secret files listed, not copied; \d+ KiB; slurmctld stopped \d+\.\d s; "
        r"\d+\.\d s in all")
    assert dest.stat().st_mode & 0o777 == 0o700
    assert {p.name: p.stat().st_mode & 0o777 for p in dest.iterdir()} == {
        "accounting.sql.gz": 0o600, "slurmctld-state.tar.gz": 0o600, "inventory.yml": 0o600,
        "metalslurm-backup.json": 0o600}
    manifest = json.loads((dest / "metalslurm-backup.json").read_text())
    assert manifest["queue"] == {"PENDING": 1}
    secrets = {s["path"]: (s["owner"], s["mode"]) for s in manifest["secrets_not_copied"]}
    assert secrets["/etc/munge/munge.key"] == ("munge", "0400")
    assert secrets["/etc/slurm/slurmdbd.conf"] == ("slurm", "0600")
    # Read without printing it (cluster.ctl echoes what a command says into the test's log).
    munge_key = base64.b64decode(ssh_root(cluster.state, cluster.address("ctl"),
                                          "base64 -w0 /etc/munge/munge.key").stdout)
    assert len(munge_key) >= 32
    contents = [gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
                for p in dest.iterdir()]
    assert not any(munge_key in c for c in contents)
    dump = gzip.decompress((dest / "accounting.sql.gz").read_bytes())
    assert f"INSERT INTO `{cluster.name}_job_table` VALUES".encode() in dump

    # The controller, and everything on it, gone; made anew from its prepared image.
    subprocess.run(["podman", "rm", "--force", "--time", "2", f"{cluster.name}-ctl"],
                   check=True, capture_output=True)
    up = metalslurm("local", "up", "--stack", str(cluster.stack), "--no-verify", timeout=1200)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-2000:]
    assert history(cluster, [done, failed]) == []
    assert queue_view(cluster, held) == ""
    assert qos_usage(cluster) < usage / 2

    succeeds(cluster, "restore", dest,
        rf"restored cluster {cluster.name} from {dest} \(taken \S+ on Slurm 24\.11\.\S+\): "
        r"the accounting database, slurmctld's state \(1 jobs in the queue; the state it "
        r"replaced is in /var/lib/slurm/slurmctld\.replaced-\d{8}T\d{6}Z\); slurmctld "
        r"stopped \d+\.\d s; \d+\.\d s in all")
    assert history(cluster, [done, failed]) == before
    assert queue_view(cluster, held) == "PENDING JobHeldUser bob"
    # What decays between the backup and now (PriorityDecayHalfLife 7 days: minutes are
    # less than 0.1 %) is all that may differ; the controller made anew had none of it.
    assert usage * 0.999 <= qos_usage(cluster) <= usage

    # A second restore would replace bob's job: refused, naming it.
    again = metalslurm("restore", "-i", str(cluster.inventory), str(dest))
    assert (again.returncode, again.stderr.strip()) == (1, (
        "error: the controller's queue holds 1 jobs (1 PENDING), which a restore replaces: "
        "cancel them (scancel) or give --force"))

    # The restored cluster runs jobs: bob releases his; new jobs number on from the backup's.
    cluster.login(f"scontrol release {held}", user="bob")
    assert cluster.wait_until_done(held, timeout=JOB_TIMEOUT) == "COMPLETED"
    later = cluster.submit("alice", "--nodelist=gpu-001 --time=5 --wrap=true")
    assert int(later) > int(held)
    assert cluster.wait_until_done(later) == "COMPLETED"

    # Nothing the restore put back is something the roles would change.
    again = run_playbook(cluster.inventory, out=lambda _line: None)
    assert again.ok, again.failures
    assert again.changed_tasks == []
