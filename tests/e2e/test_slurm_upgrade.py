"""'metalslurm configure --upgrade-slurm' on the Debian 13 cluster (Slurm 24.11) while a
two-node job runs: the newer build is a STAND-IN, Debian's own 24.11.5 packages relabelled
with a higher version (tests/e2e/slurm_standin.py says why and what that leaves out).

Real here: apt and dpkg replacing every Slurm package on every host, metalslurm's order
(slurmdbd's host, then slurmctld's, then the nodes and the login node), the backups, the
daemons restarted under a running job, the job's next step after the restart, a second run
changing nothing. Leaves the cluster on the stand-in build, its sources withdrawn.
"""

from __future__ import annotations

import pytest

from infra.ops.configure import run_playbook
from tests.e2e import slurm_standin
from tests.e2e.cluster import JOB_TIMEOUT, quoted, wait_for

HOSTS = ("ctl", "login-001", "gpu-001", "gpu-002")
GO = "/var/tmp/metalslurm-upgrade-test-go"  # not the job's private /tmp


@pytest.fixture(scope="module")
def cluster(debian13):
    assert debian13.up.returncode == 0, debian13.up.stdout[-3000:]
    wait_for("gpu-001 and gpu-002 to be idle", lambda: set(debian13.ctl(
        "sinfo --noheader --Node --nodes=gpu-[001-002] --format=%N/%T").stdout.split())
        == {"gpu-001/idle", "gpu-002/idle"}, timeout=180)
    yield debian13
    slurm_standin.withdraw(debian13, HOSTS)
    debian13.on("gpu-001", f"rm -f {GO}", check=False)


def started(cluster, host: str, unit: str) -> int:
    """When ``unit`` last became active on ``host``, in microseconds of the kernel's
    monotonic clock, which every node container shares with the host (0 if never)."""
    out = cluster.on(host, f"systemctl show --property=ActiveEnterTimestampMonotonic "
                           f"--value {unit}").stdout.strip()
    return int(out or 0)


def monotonic_now(cluster, host: str) -> int:
    """The shared monotonic clock now, in microseconds, as read on ``host``."""
    return int(float(cluster.on(host, "cut -d' ' -f1 /proc/uptime").stdout) * 1_000_000)


def upgrade(cluster):
    return run_playbook(cluster.inventory, extra_vars={"metalslurm_slurm_upgrade": True},
                        out=lambda _line: None)


def test_upgrade_slurm_goes_in_order_backs_up_and_keeps_the_running_job(cluster):
    """Every Slurm package on every host goes to the stand-in build; slurmdbd starts on it
    before slurmctld, slurmctld before any slurmd; the database and StateSaveLocation are
    backed up (root's only); alice's two-node job, running throughout, starts a step on both
    nodes after their slurmd restarted and completes; a second run changes nothing."""
    before = {h: slurm_standin.installed_of(cluster, h) for h in HOSTS}
    standin = slurm_standin.publish(cluster, HOSTS)
    job = cluster.submit("alice", "--nodes=2 --nodelist=gpu-[001-002] --time=10 --wrap="
                         + quoted(f"srun hostname; until [ -e {GO} ]; do sleep 1; "
                                  "done; srun hostname"))
    wait_for(f"job {job} to run", lambda: cluster.job_field(job, "%T") == "RUNNING",
             timeout=JOB_TIMEOUT)
    since = monotonic_now(cluster, "ctl")

    result = upgrade(cluster)
    assert result.ok, result.failures
    assert any("this run upgrades them, slurmdbd's host first" in n for n in result.notes), \
        result.notes

    after = {h: slurm_standin.installed_of(cluster, h) for h in HOSTS}
    assert after == {h: dict.fromkeys(before[h], standin) for h in HOSTS}
    dbd, ctld = started(cluster, "ctl", "slurmdbd"), started(cluster, "ctl", "slurmctld")
    slurmd = [started(cluster, n, "slurmd") for n in ("gpu-001", "gpu-002")]
    assert since < dbd < ctld < min(slurmd), (since, dbd, ctld, slurmd)
    assert started(cluster, "login-001", "sackd") > ctld
    for host in HOSTS:  # the upgrade's hold on the packages' restarts is gone
        assert cluster.on(host, "test ! -e /usr/sbin/policy-rc.d", check=False).returncode == 0

    backups = cluster.ctl("stat -c '%a %U' /var/backups/metalslurm; cd /var/backups/metalslurm"
                          " && stat -c '%a %U %n' *").stdout.splitlines()
    assert backups[0] == "700 root"
    names = sorted(line.split()[2] for line in backups[1:])
    old = before["ctl"]["slurm-client"]
    assert [n.rsplit("-", 1)[0] for n in names] == [f"slurm_acct_db-{old}",
                                                     f"slurmctld-state-{old}"], names
    assert {line.split()[0] for line in backups[1:]} == {"600"}
    assert "_job_table` (" in cluster.ctl(
        f"zcat /var/backups/metalslurm/{names[0]} | grep -m1 'CREATE TABLE .*_job_table'").stdout
    assert "./node_state" in cluster.ctl(
        f"tar -tzf /var/backups/metalslurm/{names[1]}").stdout.split()

    assert cluster.job_field(job, "%T") == "RUNNING"
    cluster.on("gpu-001", f"touch {GO}")
    assert cluster.wait_until_done(job) == "COMPLETED"
    steps = [line.split("|") for line in cluster.ctl(
        f"SLURM_TIME_FORMAT=%s sacct --noheader --parsable2 --jobs={job} "
        "--format=JobID,State,Start,NNodes").stdout.splitlines()]
    step1 = next(s for s in steps if s[0] == f"{job}.1")
    assert (step1[1], step1[3]) == ("COMPLETED", "2"), steps
    # The step started (epoch seconds) after both slurmd restarts (monotonic, made epoch).
    offset = int(cluster.ctl("date +%s").stdout) - monotonic_now(cluster, "ctl") / 1e6
    assert int(step1[2]) >= max(slurmd) / 1e6 + offset - 1, (step1, slurmd, offset)
    assert {s[1] for s in steps} == {"COMPLETED"}, steps

    again = upgrade(cluster)
    assert again.ok, again.failures
    assert again.changed_tasks == []
