"""The backup controller (metalslurm:controller.backup): the controller's machine is stopped
while one job runs and one waits; the backup slurmctld takes over (timed against
SlurmctldTimeout), the running job completes, the waiting one starts, a new sbatch is
accepted; the controller's machine comes back, its slurmctld takes control back at its start
(the documented way back, docs/how-to/failover.md), and sacct shows all three jobs once
slurmdbd (on the controller) is reachable again.

Its cluster is the small one it shares with the module of machines made anew
(tests/e2e/stacks/Pulumi.e2e-ha.yaml, conftest.py ha_cluster: ctl with slurmdbd, ctl2 the
backup, which share slurmctld's state through one host directory mounted into both, a
login node with Prometheus, gpu-001 static, where its jobs run, and gpu-002 elastic), from
the Debian 13 prepared images the other modules use. It leaves both controllers in their
roles. The failover's time is appended to .metalslurm/e2e-failover-timings.txt.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import time
import urllib.parse

import pytest

from tests.e2e.cluster import (
    HA_CLUSTER,
    HA_SUBMIT_HOST,
    HTTP_GET,
    REPO,
    LocalStack,
    console,
    metalslurm,
    ssh_user,
    wait_for,
)

PROMETHEUS = "http://10.78.16.253:9090"  # on the login node (the stack's monitoring.host)

CLUSTER = HA_CLUSTER
LOGIN = HA_SUBMIT_HOST
TIMINGS = REPO / ".metalslurm" / "e2e-failover-timings.txt"
# The stack's SlurmctldTimeout: the backup takes over after this long without an answer.
SLURMCTLD_TIMEOUT = 20
STATE_DIR = "/var/lib/slurm/ha/slurmctld"
# Where the test's jobs wait before they end (a file the test makes on the node).
RELEASE = "/run/metalslurm-e2e-failover-release"


@pytest.fixture(scope="module")
def cluster(ha_cluster):
    try:
        yield ha_cluster
    finally:
        # The controller's machine is started again should a test have left it stopped.
        subprocess.run(["podman", "start", f"{CLUSTER}-ctl"], capture_output=True, check=False)


def ping(cluster: LocalStack) -> dict[str, str]:
    """``scontrol ping`` from the login node: each controller's role and state, e.g.
    {"primary ctl": "UP", "backup ctl2": "DOWN"}."""
    out = cluster.on(LOGIN, "scontrol ping", check=False).stdout
    return {f"{m.group(1)} {m.group(2)}": m.group(3)
            for m in re.finditer(r"Slurmctld\((\w+)\) at (\S+) is (\w+)", out)}


def prometheus(cluster: LocalStack, path: str) -> dict:
    """Prometheus' API answer, asked on the login node (the monitoring host), logged in."""
    out = cluster.on(LOGIN, f"python3 -c {shlex.quote(HTTP_GET)} {shlex.quote(PROMETHEUS + path)} "
                     "login").stdout
    return json.loads(out)["data"]


def commands_by_exporter(cluster: LocalStack) -> dict[str, int]:
    """How many Slurm commands each Slurm exporter reports on (its node label)."""
    query = urllib.parse.quote("count by (node) (slurm_exporter_command_up)")
    return {r["metric"]["node"]: int(r["value"][1])
            for r in prometheus(cluster, f"/api/v1/query?query={query}")["result"]}


def active_alerts(cluster: LocalStack, name: str) -> list[dict]:
    return [a for a in prometheus(cluster, "/api/v1/alerts")["alerts"]
            if a["labels"]["alertname"] == name]


def answers(cluster: LocalStack) -> bool:
    """Whether a slurmctld in control answers the login node (a backup in standby refuses)."""
    return cluster.on(LOGIN, "squeue -h -o %i", check=False).returncode == 0


def state(cluster: LocalStack, job: str) -> str:
    return cluster.on(LOGIN, f"squeue -h -j {job} -o %T", check=False).stdout.strip()


def test_both_controllers_run_from_the_same_files_and_state(cluster):
    assert ping(cluster) == {"primary ctl": "UP", "backup ctl2": "UP"}
    conf = {node: cluster.on(node, "sha256sum /etc/slurm/slurm.conf").stdout.split()[0]
            for node in ("ctl", "ctl2")}
    assert conf["ctl"] == conf["ctl2"]
    hosts = cluster.on("ctl2", "grep ^SlurmctldHost= /etc/slurm/slurm.conf").stdout.split()
    assert hosts == ["SlurmctldHost=ctl(10.78.16.10)", "SlurmctldHost=ctl2(10.78.16.9)"]
    assert cluster.on("ctl2", "scontrol show config | grep ^StateSaveLocation"
                      ).stdout.split()[-1] == STATE_DIR
    # One directory, seen from both: what the controller saved (its heartbeat, which the
    # backup reads to decide whether to take over), the backup reads.
    listing = {node: cluster.on(node, f"stat -c '%U %a' {STATE_DIR} && sha256sum "
                                f"{STATE_DIR}/clustername && ls {STATE_DIR}").stdout
               for node in ("ctl", "ctl2")}
    assert listing["ctl"] == listing["ctl2"]
    assert listing["ctl"].splitlines()[0] == "slurm 700"
    assert "heartbeat" in listing["ctl"].split()
    # Both Slurm exporters are scraped: the controller's asks its six commands, the
    # backup's (--standby) only the configuration, whose ping lines it reports.
    assert wait_for("both exporters scraped", lambda: commands_by_exporter(cluster) == {
        "ctl": 6, "ctl2": 1} or None, timeout=60)
    query = urllib.parse.quote("slurm_controller_up")
    seen = sorted((r["metric"]["node"], r["metric"]["host"], r["metric"]["controller_role"],
                   r["value"][1]) for r in prometheus(cluster, f"/api/v1/query?query={query}"
                                                      )["result"])
    assert seen == [("ctl", "ctl", "primary", "1"), ("ctl", "ctl2", "backup", "1"),
                    ("ctl2", "ctl", "primary", "1"), ("ctl2", "ctl2", "backup", "1")]
    # slurmd and sackd fetch their configuration from either controller.
    assert "--conf-server ctl:6817,ctl2:6817" in cluster.on(
        "gpu-001", "cat /etc/default/slurmd").stdout
    # A user reaches the login node with her key, never the backup controller (the
    # service hosts are the admins' alone: roles/infra_access).
    assert ssh_user(cluster, "alice", cluster.address(LOGIN), "id -un").stdout.strip() == "alice"
    denied = ssh_user(cluster, "alice", cluster.address("ctl2"), "id -un")
    assert denied.returncode != 0 and "alice" not in denied.stdout


def backup_pid(cluster: LocalStack) -> str:
    """The backup slurmctld's process (the same through a takeover and a handing back)."""
    return cluster.on("ctl2", "systemctl show --property=ExecMainPID --value slurmctld"
                      ).stdout.strip()


def stop_controller_machine(cluster: LocalStack, label: str) -> None:
    """Stop the controller's container; wait for the backup to answer (timed)."""
    stopped = time.monotonic()
    assert subprocess.run(["podman", "stop", "-t", "5", f"{CLUSTER}-ctl"],
                          capture_output=True, check=False).returncode == 0
    gone = time.monotonic()
    wait_for("the backup slurmctld in control", lambda: answers(cluster),
             timeout=SLURMCTLD_TIMEOUT + 120, every=1)
    took_over = time.monotonic()
    assert ping(cluster) == {"primary ctl": "DOWN", "backup ctl2": "UP"}
    with TIMINGS.open("a") as out:
        out.write(f"{time.strftime('%H:%M:%S')} {label}: controller's machine stopped in "
                  f"{gone - stopped:.1f} s; backup answering {took_over - gone:.1f} s after "
                  f"(SlurmctldTimeout {SLURMCTLD_TIMEOUT} s)\n")


def start_controller_machine(cluster: LocalStack, label: str) -> None:
    """Start the controller's container; its slurmctld takes control back at its start
    (timed: the machine's boot included)."""
    started = time.monotonic()
    assert subprocess.run(["podman", "start", f"{CLUSTER}-ctl"], capture_output=True,
                          check=False).returncode == 0
    wait_for("the controller in control again",
             lambda: ping(cluster) == {"primary ctl": "UP", "backup ctl2": "UP"}
             and cluster.on("ctl", "scontrol show config >/dev/null", check=False
                            ).returncode == 0, timeout=240, every=2)
    with TIMINGS.open("a") as out:
        out.write(f"{time.strftime('%H:%M:%S')} {label}: the controller in control "
                  f"{time.monotonic() - started:.1f} s after its machine was started\n")


def test_the_backup_takes_over_when_the_controller_machine_stops(cluster):
    cluster.backup_pid = backup_pid(cluster)  # type: ignore[attr-defined]
    assert console(f"{CLUSTER}-gpu-001", f"rm -f {RELEASE}").returncode == 0
    running = cluster.submit("alice", f"-w gpu-001 --exclusive --wrap='while ! test -e "
                             f"{RELEASE}; do sleep 1; done'")
    waiting = cluster.submit("alice", "-w gpu-001 --exclusive --wrap='hostname'")
    wait_for(f"job {running} running", lambda: state(cluster, running) == "RUNNING")
    assert state(cluster, waiting) == "PENDING"

    stop_controller_machine(cluster, "failover")

    # Prometheus, on the login node, still scrapes the backup's exporter: it now asks every
    # command (the backup runs the cluster) and the alert says so, naming the controller.
    wait_for("the backup's exporter asking every command",
             lambda: commands_by_exporter(cluster).get("ctl2") == 6, timeout=90)
    [alert] = wait_for("SlurmBackupControllerInControl",
                       lambda: active_alerts(cluster, "SlurmBackupControllerInControl"),
                       timeout=90)
    assert alert["labels"]["host"] == "ctl" and alert["state"] in ("pending", "firing")

    # The backup knows both jobs from the shared state: the running one goes on.
    assert state(cluster, running) == "RUNNING"
    assert state(cluster, waiting) == "PENDING"
    assert console(f"{CLUSTER}-gpu-001", f"touch {RELEASE}").returncode == 0
    wait_for(f"job {waiting} started after {running}",
             lambda: state(cluster, running) == "" and state(cluster, waiting) in
             ("RUNNING", "COMPLETING", ""), timeout=120)
    third = cluster.submit("alice", "-w gpu-001 --wrap='hostname'")
    wait_for(f"jobs {waiting} and {third} done",
             lambda: state(cluster, waiting) == "" and state(cluster, third) == "",
             timeout=120)
    cluster.jobs = (running, waiting, third)  # type: ignore[attr-defined]


def test_the_controller_takes_control_back_and_accounting_catches_up(cluster):
    jobs = getattr(cluster, "jobs", None)
    if jobs is None:
        pytest.skip("the failover test did not run its jobs")
    # The controller's slurmctld starts at boot and asks the backup for control back.
    start_controller_machine(cluster, "failback")
    log = cluster.on("ctl2", "cat /var/log/slurm/slurmctld.log").stdout
    assert "Relinquishing control" in log or "relinquish" in log.lower(), log[-3000:]
    # The backup's records reach slurmdbd: every job, as it ended.
    rows = wait_for("sacct rows for the three jobs", lambda: (
        (r := cluster.on(LOGIN, "sacct -X -n -P -o JobID,User,State,NodeList -j "
                         + ",".join(jobs), check=False).stdout.split())
        and len(r) == 3 and r), timeout=180, every=5)
    assert sorted(rows) == sorted(f"{job}|alice|COMPLETED|gpu-001" for job in jobs)
    # A job submitted now runs under the controller.
    job = cluster.submit("alice", "-w gpu-001 --wrap='hostname'")
    assert cluster.wait_until_done(job) == "COMPLETED"


def test_the_backup_takes_over_again_while_slurmdbd_is_away(cluster):
    """Slurm reads its cluster ID only as slurmctld starts: a backup that had control and
    gave it back is restarted in standby (metalslurm-slurmctld-standby), else it could not
    take over a second time while slurmdbd, on the controller's machine, is away."""
    before = getattr(cluster, "backup_pid", None)
    if before is None:
        pytest.skip("the failover test did not run")
    wait_for("the backup slurmctld restarted in standby",
             lambda: backup_pid(cluster) not in ("", "0", before), timeout=120)
    wait_for("the backup in standby again",
             lambda: ping(cluster) == {"primary ctl": "UP", "backup ctl2": "UP"}, timeout=60)
    seen = int(cluster.on("ctl2", "wc -l < /var/log/slurm/slurmctld.log").stdout)
    stop_controller_machine(cluster, "second failover")
    job = cluster.submit("alice", "-w gpu-001 --wrap='hostname'")
    wait_for(f"job {job} done under the backup", lambda: state(cluster, job) == "",
             timeout=120)
    log = cluster.on("ctl2", f"tail -n +{seen + 1} /var/log/slurm/slurmctld.log").stdout
    assert "Running as primary controller" in log
    assert "Still don't know my ClusterID" not in log
    start_controller_machine(cluster, "second failback")
    [[job_state]] = wait_for(f"sacct's row for job {job}", lambda: cluster.sacct_rows(
        job, "State"), timeout=180, every=5)
    assert job_state == "COMPLETED"


def test_a_configure_after_the_failovers_changes_nothing(cluster):
    """Both controllers back in their roles, the backup restarted in standby: a second run
    of the playbook finds nothing to change on either."""
    proc = metalslurm("local", "up", "--stack", str(cluster.stack), "--no-verify")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert re.search(r"^configure successful in \d+\.\d s, 0 changed task\(s\)$", proc.stdout,
                     re.M), proc.stdout[-4000:]
    assert ping(cluster) == {"primary ctl": "UP", "backup ctl2": "UP"}
