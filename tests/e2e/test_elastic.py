"""Elastic nodes on the Debian 13 cluster: gpu-003 and gpu-004 are State=CLOUD, powered
down (containers stopped) until jobs need them. Real slurmctld power saving, the real
Resume/Suspend/ResumeFail programs, the local power driver over podman's REST API.

Runs on the session's shared Debian 13 cluster (SuspendTime 15 s, SuspendTimeout 10 s,
ResumeTimeout 90 s, reconciler every 20 s) and leaves both elastic nodes powered down.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from infra.ops.configure import run_playbook
from tests.e2e.cluster import POWER_DOWN_WITHIN, wait_for

ELASTIC = ["gpu-003", "gpu-004"]


@pytest.fixture(scope="module")
def cluster(debian13):
    assert debian13.up.returncode == 0, debian13.up.stdout[-3000:]
    # Earlier modules' jobs (a requeued job, say) may have powered an elastic node up.
    debian13.wait_for_elastic_nodes_down()
    yield debian13
    debian13.wait_for_elastic_nodes_down()


def test_a_job_on_powered_down_nodes_resumes_them_and_they_power_down_after(cluster):
    job = cluster.ctl("sbatch --parsable --nodes=2 --nodelist=gpu-[003-004] --time=5 "
                      "-o /dev/null --wrap='srun hostname'").stdout.strip()
    assert cluster.wait_until_done(job) == "COMPLETED"
    [[nodelist]] = cluster.sacct_rows(job, "NodeList")
    assert nodelist == "gpu-[003-004]"
    assert cluster.power_events("power_on", "gpu-003", ok=True)
    assert cluster.power_events("power_on", "gpu-004", ok=True)
    wait_for("both elastic nodes to power down again", cluster.all_powered_down,
             timeout=POWER_DOWN_WITHIN)
    assert [cluster.container_state(n) for n in ELASTIC] == ["exited", "exited"]


def test_a_failed_resume_returns_the_node_to_the_pool_and_the_job_runs_after_a_retry(cluster):
    # The driver's call fails for real: podman has no container by that name for a while.
    node, away = f"{cluster.name}-gpu-004", f"{cluster.name}-gpu-004-away"
    subprocess.run(["podman", "rename", node, away], check=True)
    try:
        failures_before = len(cluster.power_events("power_on", "gpu-004", ok=False))
        job = cluster.ctl("sbatch --parsable --nodes=1 --nodelist=gpu-004 --time=5 "
                          "-o /dev/null --wrap='hostname'").stdout.strip()
        wait_for("the failed power-on to be logged", lambda: len(cluster.power_events(
            "power_on", "gpu-004", ok=False)) > failures_before, timeout=60)
        # Back in the pool, powered down: not DOWN or DRAINED for a person to find.
        wait_for("gpu-004 to be back in the pool",
                 lambda: cluster.slurm_state("gpu-004") == "idle~", timeout=90)
        # ... after the role's default 3 power-on calls (slurm_elastic_power_on_attempts).
        failures = cluster.power_events("power_on", "gpu-004", ok=False)
        assert len(failures) - failures_before == 3
    finally:
        subprocess.run(["podman", "rename", away, node], check=True)
    # The job was requeued when its node went back to the pool.
    cluster.release_requeued(job)
    assert cluster.wait_until_done(job, timeout=400) == "COMPLETED"
    [[nodelist]] = cluster.sacct_rows(job, "NodeList")
    assert nodelist == "gpu-004"
    wait_for("gpu-004 to power down again", cluster.all_powered_down, timeout=POWER_DOWN_WITHIN)


def test_a_node_started_by_hand_is_adopted_by_slurm_and_suspended(cluster):
    """Its slurmd registers, so Slurm takes it as an idle node and its own power saving
    stops it again after SuspendTime."""
    subprocess.run(["podman", "start", f"{cluster.name}-gpu-003"], check=True,
                   capture_output=True)
    wait_for("gpu-003 to register", lambda: cluster.slurm_state("gpu-003") == "idle",
             timeout=60)
    suspends = len(cluster.power_events("power_off", "gpu-003", ok=True))
    wait_for("Slurm to power gpu-003 down again", cluster.all_powered_down,
             timeout=POWER_DOWN_WITHIN)
    assert len(cluster.power_events("power_off", "gpu-003", ok=True)) > suspends


def _hold_slurmd(cluster, node: str, hold: bool) -> None:
    """Keep slurmd from starting on the (stopped) node container's next boot, or let it."""
    container = f"{cluster.name}-{node}"
    root = subprocess.run(["podman", "mount", container], capture_output=True, text=True,
                          check=True).stdout.strip()
    try:
        # Sorts after the roles' drop-ins (metalslurm.conf resets ConditionPathExists).
        dropin = Path(root) / "etc/systemd/system/slurmd.service.d/zz-e2e-hold.conf"
        if hold:
            dropin.write_text("[Unit]\nConditionPathExists=/nonexistent\n")
        else:
            dropin.unlink(missing_ok=True)
    finally:
        subprocess.run(["podman", "unmount", container], capture_output=True, check=False)


def test_a_machine_on_without_slurm_is_stopped_by_the_reconciler(cluster):
    """A machine that is on while Slurm holds its node powered down, and whose slurmd never
    registers (a broken boot, a leftover that keeps billing): the reconciler stops it."""
    _hold_slurmd(cluster, "gpu-003", hold=True)
    try:
        subprocess.run(["podman", "start", f"{cluster.name}-gpu-003"], check=True,
                       capture_output=True)
        # orphanAfter (40 s) counts from the first reconcile that sees it on (every 20 s).
        wait_for("the reconciler to stop the orphan",
                 lambda: cluster.container_state("gpu-003") != "running", timeout=150)
    finally:
        subprocess.run(["podman", "stop", "-t", "2", f"{cluster.name}-gpu-003"],
                       capture_output=True, check=False)
        _hold_slurmd(cluster, "gpu-003", hold=False)
    assert any("gpu-003" in e.get("orphans", [])
               for e in cluster.power_events("reconcile_summary"))
    wait_for("gpu-003 to be powered down in Slurm",
             lambda: cluster.slurm_state("gpu-003") == "idle~", timeout=POWER_DOWN_WITHIN)


def test_a_slurmctld_restart_while_a_node_resumes_loses_no_job(cluster):
    job = cluster.ctl("sbatch --parsable --nodes=1 --nodelist=gpu-003 --time=5 -o /dev/null "
                      "--wrap='sleep 2'").stdout.strip()
    wait_for("gpu-003 to be powering up", lambda: cluster.slurm_state("gpu-003").endswith("#"),
             timeout=60, every=0.5)
    cluster.ctl("systemctl restart slurmctld")
    assert cluster.wait_until_done(job) == "COMPLETED"
    wait_for("gpu-003 to power down again", cluster.all_powered_down, timeout=POWER_DOWN_WITHIN)


def test_what_slurmctlds_scripts_started_outlives_its_restart(cluster):
    """The power programs' workers detach from ResumeProgram (double fork, setsid) but stay
    in slurmctld's control group: a restart of slurmctld that killed the whole group killed
    a resume before it powered the machine on (seen in CI: the node then waited out
    ResumeTimeout powering up, and its job more than 240 s). A stand-in worker in that group,
    in flight through the restart; slurmctld and its slurmscriptd are new after it."""
    group = cluster.ctl("systemctl show --property=ControlGroup --value slurmctld").stdout.strip()
    # systemd's own hierarchy: cgroup v1's name=systemd one where the host has it, else v2's.
    procs = (f"$(d=/sys/fs/cgroup/systemd{group}; [ -d $d ] || d=/sys/fs/cgroup{group}; "
             "echo $d/cgroup.procs)")

    def members() -> dict[str, str]:
        """{command: pid} of the processes in the group."""
        out = cluster.ctl(f"ps -o pid=,args= -p \"$(paste -sd, {procs})\"").stdout
        return {args: pid for pid, args in (line.split(None, 1)
                                            for line in out.strip().splitlines())}

    daemons = {"/usr/sbin/slurmctld --systemd", "slurmctld: slurmscriptd"}
    before = members()
    assert set(before) == daemons, before
    pid = cluster.ctl(f"setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $! && "
                      f"echo $! > {procs}").stdout.strip()

    def restarted() -> dict[str, str] | None:
        now = members()
        return now if set(now) == daemons | {"sleep 600"} else None

    try:
        assert any(line.endswith(f":{group}") for line in
                   cluster.ctl(f"cat /proc/{pid}/cgroup").stdout.splitlines())
        cluster.ctl("systemctl restart slurmctld")
        # The stand-in still runs; the daemons are new ones (none of the old left behind).
        after = wait_for("slurmctld and its slurmscriptd after the restart", restarted,
                         timeout=60, every=1)
        assert after["sleep 600"] == pid, after
        assert not {after[d] for d in daemons} & {before[d] for d in daemons}, (before, after)
        assert cluster.ctl("systemctl is-active slurmctld").stdout.strip() == "active"
    finally:
        cluster.ctl(f"kill {pid}", check=False)


def test_a_configure_limited_by_tags_sets_powered_down_nodes_aside(cluster):
    """'configure --tags configure' with both elastic nodes powered down: the probe that
    sets them aside runs under any tag, so the run completes without touching them."""
    cluster.wait_for_elastic_nodes_down()
    result = run_playbook(cluster.inventory, tags="configure", out=lambda _line: None)
    assert result.ok, result.failures
    assert result.changed_tasks == []
    assert {h: result.stats.get("dark", {}).get(h, 0) for h in ELASTIC} == {
        "gpu-003": 0, "gpu-004": 0}
    # Only the probe's own steps ran on the powered-down nodes.
    assert {h: result.stats["ok"].get(h, 0) for h in ELASTIC} == {"gpu-003": 1, "gpu-004": 1}
    assert cluster.all_powered_down()
