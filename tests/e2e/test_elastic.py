"""Elastic nodes on the Debian 13 cluster: gpu-003 and gpu-004 are State=CLOUD, powered
down (containers stopped) until jobs need them. Real slurmctld power saving, the real
Resume/Suspend/ResumeFail programs, the local power driver over podman's REST API.

Runs after tests/e2e/test_accounting.py on the session's cluster (SuspendTime 30 s,
SuspendTimeout 15 s, ResumeTimeout 90 s, reconciler every 20 s).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.e2e.test_accounting import ctl, final_state, sacct_rows, wait_for

CLUSTER = "ms-e2e13"
ELASTIC = ["gpu-003", "gpu-004"]
# SuspendTime + SuspendTimeout + the power-saving thread's pass interval, with margin.
POWER_DOWN_WITHIN = 30 + 15 + 60
POWER_LOG = "/var/log/slurm/metalslurm-power.log"


@pytest.fixture(scope="module")
def cluster(debian13_up):
    assert debian13_up.returncode == 0, debian13_up.stdout[-3000:]
    # Earlier tests' jobs (a requeued job, say) may have powered an elastic node up.
    wait_for_elastic_nodes_down()


def wait_for_elastic_nodes_down() -> None:
    """Until both elastic nodes are powered down (Slurm's SuspendTime, or a resume that
    runs into ResumeTimeout, then the requeued job's run and SuspendTime again)."""
    wait_for("the elastic nodes to be powered down", all_powered_down, timeout=400)


def container_state(node: str) -> str:
    out = subprocess.run(["podman", "inspect", "--format", "{{.State.Status}}",
                          f"{CLUSTER}-{node}"], capture_output=True, text=True, check=False)
    return out.stdout.strip() or "absent"


def slurm_state(node: str) -> str:
    return ctl(f"sinfo --noheader --Node --partition=train --nodes={node} --format=%T"
               ).stdout.strip()


def all_powered_down() -> bool:
    return all(container_state(n) != "running" and slurm_state(n) == "idle~" for n in ELASTIC)


def power_events(event: str, node: str | None = None, ok: bool | None = None) -> list[dict]:
    lines = ctl(f"cat {POWER_LOG}").stdout.splitlines()
    events = [json.loads(line) for line in lines if line.startswith("{")]
    return [e for e in events if e.get("event") == event
            and (node is None or e.get("node") == node or node in e.get("nodes", []))
            and (ok is None or e.get("ok") is ok)]


def test_a_job_on_powered_down_nodes_resumes_them_and_they_power_down_after(cluster):
    job = ctl("sbatch --parsable --nodes=2 --nodelist=gpu-[003-004] --time=5 -o /dev/null "
              "--wrap='srun hostname'").stdout.strip()
    assert wait_for(f"job {job} to finish", lambda: final_state(job), timeout=240) == \
        "COMPLETED"
    [[nodelist]] = sacct_rows(job, "NodeList")
    assert nodelist == "gpu-[003-004]"
    assert power_events("power_on", "gpu-003", ok=True)
    assert power_events("power_on", "gpu-004", ok=True)
    wait_for("both elastic nodes to power down again", all_powered_down,
             timeout=POWER_DOWN_WITHIN)
    assert [container_state(n) for n in ELASTIC] == ["exited", "exited"]


def test_a_failed_resume_returns_the_node_to_the_pool_and_the_job_runs_after_a_retry(cluster):
    # The driver's call fails for real: podman has no container by that name for a while.
    subprocess.run(["podman", "rename", f"{CLUSTER}-gpu-004", f"{CLUSTER}-gpu-004-away"],
                   check=True)
    try:
        failures_before = len(power_events("power_on", "gpu-004", ok=False))
        job = ctl("sbatch --parsable --nodes=1 --nodelist=gpu-004 --time=5 -o /dev/null "
                  "--wrap='hostname'").stdout.strip()
        wait_for("the failed power-on to be logged",
                 lambda: len(power_events("power_on", "gpu-004", ok=False)) > failures_before,
                 timeout=60)
        # Back in the pool, powered down: not DOWN or DRAINED for a person to find.
        wait_for("gpu-004 to be back in the pool", lambda: slurm_state("gpu-004") == "idle~",
                 timeout=90)
    finally:
        subprocess.run(["podman", "rename", f"{CLUSTER}-gpu-004-away", f"{CLUSTER}-gpu-004"],
                       check=True)
    assert wait_for(f"job {job} to run after the retry", lambda: final_state(job),
                    timeout=400) == "COMPLETED"
    [[nodelist]] = sacct_rows(job, "NodeList")
    assert nodelist == "gpu-004"
    wait_for("gpu-004 to power down again", all_powered_down, timeout=POWER_DOWN_WITHIN)


def test_a_node_started_by_hand_is_adopted_by_slurm_and_suspended(cluster):
    """Its slurmd registers, so Slurm takes it as an idle node and its own power saving
    stops it again after SuspendTime."""
    subprocess.run(["podman", "start", f"{CLUSTER}-gpu-003"], check=True,
                   capture_output=True)
    wait_for("gpu-003 to register", lambda: slurm_state("gpu-003") == "idle", timeout=60)
    suspends = len(power_events("power_off", "gpu-003", ok=True))
    wait_for("Slurm to power gpu-003 down again", all_powered_down, timeout=POWER_DOWN_WITHIN)
    assert len(power_events("power_off", "gpu-003", ok=True)) > suspends


def _hold_slurmd(node: str, hold: bool) -> None:
    """Keep slurmd from starting on the (stopped) node container's next boot, or let it."""
    root = subprocess.run(["podman", "mount", f"{CLUSTER}-{node}"], capture_output=True,
                          text=True, check=True).stdout.strip()
    try:
        # Sorts after the roles' drop-ins (metalslurm.conf resets ConditionPathExists).
        dropin = Path(root) / "etc/systemd/system/slurmd.service.d/zz-e2e-hold.conf"
        if hold:
            dropin.write_text("[Unit]\nConditionPathExists=/nonexistent\n")
        else:
            dropin.unlink(missing_ok=True)
    finally:
        subprocess.run(["podman", "unmount", f"{CLUSTER}-{node}"], capture_output=True,
                       check=False)


def test_a_machine_on_without_slurm_is_stopped_by_the_reconciler(cluster):
    """A machine that is on while Slurm holds its node powered down, and whose slurmd never
    registers (a broken boot, a leftover that keeps billing): the reconciler stops it."""
    _hold_slurmd("gpu-003", hold=True)
    try:
        subprocess.run(["podman", "start", f"{CLUSTER}-gpu-003"], check=True,
                       capture_output=True)
        wait_for("the reconciler to stop the orphan",
                 lambda: container_state("gpu-003") != "running", timeout=90)
    finally:
        subprocess.run(["podman", "stop", "-t", "2", f"{CLUSTER}-gpu-003"],
                       capture_output=True, check=False)
        _hold_slurmd("gpu-003", hold=False)
    assert any("gpu-003" in e.get("orphans", []) for e in power_events("reconcile_summary"))
    wait_for("gpu-003 to be powered down in Slurm", lambda: slurm_state("gpu-003") == "idle~",
             timeout=POWER_DOWN_WITHIN)


def test_a_slurmctld_restart_while_a_node_resumes_loses_no_job(cluster):
    job = ctl("sbatch --parsable --nodes=1 --nodelist=gpu-003 --time=5 -o /dev/null "
              "--wrap='sleep 2'").stdout.strip()
    wait_for("gpu-003 to be powering up", lambda: slurm_state("gpu-003").endswith("#"),
             timeout=60, every=0.5)
    ctl("systemctl restart slurmctld")
    assert wait_for(f"job {job} to finish", lambda: final_state(job), timeout=240) == \
        "COMPLETED"
    wait_for("gpu-003 to power down again", all_powered_down, timeout=POWER_DOWN_WITHIN)
