"""Machines made anew (launch-terminate): an elastic node that has no container while it is
powered down. A job on it makes Slurm resume it; the power driver asks the host's proxy to
create its container from the prepared compute image; the controller configures it with
the same playbook and roles (the join: metalslurm-join, limited to that node); slurmd
registers and the job runs. A suspend removes the container; the next job makes a new one.
A machine that cannot be configured is powered off and returned to the pool by
ResumeFailProgram, its job requeued, never left half joined. The static node's machine is
lost and 'up' makes it anew. Last, the elastic node goes back to
start-stop mode: the controller's join service, kit and secrets' copies are removed.

Its cluster is the small one it shares with the backup controller's module, which runs
first (tests/e2e/stacks/Pulumi.e2e-ha.yaml, conftest.py ha_cluster: ctl and its backup
ctl2, a login node, gpu-001 static, gpu-002 launch-terminate, monitoring on), from the
Debian 13 prepared images the other modules use (its install settings are theirs, so it
builds none). Its last test leaves gpu-002 in start-stop mode, in the stack file too. Each
resume's split (machine made, joined, job started) is appended to
.metalslurm/e2e-launched-timings.txt.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from datetime import datetime

import pytest
import yaml

from tests.e2e.cluster import (
    HA_CLUSTER,
    HA_ELASTIC,
    POWER_LOG,
    REPO,
    LocalStack,
    console,
    metalslurm,
    wait_for,
)

CLUSTER = HA_CLUSTER
[NODE] = HA_ELASTIC
CONTAINER = f"{CLUSTER}-{NODE}"
TIMINGS = REPO / ".metalslurm" / "e2e-launched-timings.txt"
JOIN_DIR = "/var/lib/metalslurm/join"
# ResumeTimeout of the stack (300 s) and a job's own seconds, with margin.
RESUME_WITHIN = 360
# SuspendTime + SuspendTimeout of the stack and the power-saving pass, with margin.
SUSPEND_WITHIN = 20 + 20 + 60
# The containers the resumes made, in order.
MADE: list[str] = []


@pytest.fixture(scope="module")
def cluster(ha_cluster):
    return ha_cluster


def container_id() -> str:
    out = subprocess.run(["podman", "inspect", "--format", "{{.Id}}", CONTAINER],
                         capture_output=True, text=True, check=False)
    return out.stdout.strip()


def seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


# A file each job waits for on its machine before it ends: the test looks at the machine
# while the job holds it (else SuspendTime, 20 s, may remove it first on a loaded machine:
# seen in CI).
RELEASE = "/run/metalslurm-e2e-release"


def join_ended_after(cluster: LocalStack, t: float) -> dict:
    """The node's first successful join_end after ``t``, waited for: its job can end before
    the join logs its end (the node takes the job once registered; the join checks the
    registration and ends its playbook after that, seconds on a loaded machine)."""
    return wait_for("the join's end", lambda: [
        e for e in cluster.power_events("join_end", NODE, ok=True) if e["t"] > t],
        timeout=120)[0]


def run_a_job(cluster: LocalStack, label: str,
              while_running: Callable[[], None] = lambda: None) -> str:
    """A job on the powered-down node; returns the id of the container it ran in, taken
    while the job holds its machine, after ``while_running`` has looked at it."""
    assert cluster.slurm_state(NODE) == "idle~" and container_id() == ""
    submitted = time.time()
    job = cluster.ctl(f"sbatch --parsable -w {NODE} -p train --time=5 -o /dev/null "
                      f"--wrap='srun hostname && while ! test -e {RELEASE}; do sleep 1; done'"
                      ).stdout.strip()
    wait_for(f"job {job} running on {NODE}",
             lambda: cluster.ctl(f"squeue -h -j {job} -o %T").stdout.strip() == "RUNNING",
             timeout=RESUME_WITHIN)
    made = container_id()
    try:
        while_running()
    finally:
        assert console(CONTAINER, f"touch {RELEASE}").returncode == 0
    assert cluster.wait_until_done(job, timeout=60) == "COMPLETED"
    [[start, nodelist]] = cluster.sacct_rows(job, "Start,NodeList")
    assert nodelist == NODE
    power_on = cluster.power_events("power_on", NODE, ok=True)[-1]
    joined = join_ended_after(cluster, power_on["t"])
    with TIMINGS.open("a") as out:
        out.write(f"{time.strftime('%H:%M:%S')} {label}: machine made {power_on['duration_s']} s, "
                  f"joined in {joined['duration_s']} s, submit to start "
                  f"{seconds(start) - submitted:.1f} s\n")
    return made


def test_up_makes_no_machine_for_a_launch_terminate_node(cluster):
    assert container_id() == ""
    assert cluster.slurm_state(NODE) == "idle~"
    # up's verify ran its srun checks on the static node: their allocation may still be
    # released (mixed, completing) for a moment on a loaded machine (seen in CI).
    wait_for("gpu-001 idle after the verify's jobs",
             lambda: cluster.slurm_state("gpu-001") == "idle", timeout=60)
    # The controller holds the kit and the secrets a new machine gets, root only.
    listing = cluster.ctl(f"stat -c '%n %U %a' {JOIN_DIR} {JOIN_DIR}/id_ed25519 "
                          f"{JOIN_DIR}/secrets/munge.key.b64").stdout.split("\n")
    assert listing[:3] == [f"{JOIN_DIR} root 700", f"{JOIN_DIR}/id_ed25519 root 600",
                           f"{JOIN_DIR}/secrets/munge.key.b64 root 600"]
    # ... and SlurmUser may leave requests, never read the kit.
    assert cluster.ctl(f"runuser -u slurm -- ls {JOIN_DIR}", check=False).returncode != 0


def test_a_job_makes_the_machine_which_joins_and_runs_it(cluster):
    def the_machine():
        image = subprocess.run(["podman", "inspect", "--format", "{{.ImageName}}", CONTAINER],
                               capture_output=True, text=True, check=True).stdout.strip()
        # The prepared compute image, held for this cluster (prepared.hold).
        assert image.startswith(f"localhost/metalslurm-held:{CLUSTER}_metalslurm-prepared_"
                                "trixie-compute-"), image
        # Same munge key as every other node (from the controller's kit, not the image). The
        # operator's known_hosts has no key of a machine made after 'up': its console.
        keys = {n: cluster.on(n, "sha256sum /etc/munge/munge.key").stdout.split()[0]
                for n in ("ctl", "gpu-001")}
        keys[NODE] = console(CONTAINER, "sha256sum /etc/munge/munge.key").stdout.split()[0]
        assert len(set(keys.values())) == 1, keys

    first = run_a_job(cluster, "first resume", while_running=the_machine)
    assert first
    MADE.append(first)
    # The new machine's sshd named pam_slurm_adopt right after its accounts were made (common),
    # before munge, the shared storage and slurmd: no user without a job there got a shell
    # during the join that would outlast it into the node's jobs.
    log = cluster.ctl(f"cat {JOIN_DIR}/logs/{NODE}.log").stdout
    pam = log.index("TASK [slurm_pam_adopt : Put pam_access and pam_slurm_adopt in sshd's "
                    "account stack]")
    accounts = log.index("TASK [common : ")
    assert accounts < pam < log.index("TASK [munge : ") < log.index(
        "TASK [slurm_compute : Register the node")
    assert log[pam:].splitlines()[1] == f"changed: [{NODE}]", log[pam:pam + 300]


def test_a_suspend_removes_the_machine_and_the_next_job_makes_a_new_one(cluster):
    wait_for(f"{NODE} powered down and its container gone",
             lambda: cluster.slurm_state(NODE) == "idle~" and container_id() == "",
             timeout=SUSPEND_WITHIN)
    second = run_a_job(cluster, "second resume")
    assert second and MADE and second != MADE[0]
    wait_for(f"{NODE} powered down again", lambda: container_id() == "",
             timeout=SUSPEND_WITHIN)


def test_a_machine_that_cannot_join_is_powered_off_and_returned(cluster):
    """The kit's munge key replaced by one no node has: the join's configure fails (the
    munge role refuses a key other than the controller's, before the new machine gets
    one), ResumeFailProgram removes the machine and returns the node to the pool, its job
    requeued. With the key back, Slurm resumes the node for the job (as soon as the
    requeued job may start: that can be before the failed join has ended, a request the
    join service then serves after it) and the job runs on a machine made anew."""
    key = f"{JOIN_DIR}/secrets/munge.key.b64"
    # A node that is still up would run the job without a join.
    wait_for(f"{NODE} powered down", lambda: cluster.slurm_state(NODE) == "idle~"
             and container_id() == "", timeout=SUSPEND_WITHIN)
    seen = len(cluster.ctl(f"cat {POWER_LOG}").stdout.splitlines())
    cluster.ctl(f"cp -p {key} {key}.good && head -c 1024 /dev/urandom | base64 -w0 > {key}")
    try:
        job = cluster.ctl(f"sbatch --parsable -w {NODE} -p train --time=5 -o /dev/null "
                          "--wrap=hostname").stdout.strip()
        wait_for("the failed join", lambda: cluster.power_events("join_end", NODE, ok=False),
                 timeout=RESUME_WITHIN)
    finally:
        cluster.ctl(f"mv -f {key}.good {key}", check=False)
    failed = cluster.power_events("join_end", NODE, ok=False)[-1]
    error = failed["error"]
    log = re.search(r"\(see (\S+)\)$", error).group(1)
    assert "ctl, which serves a Slurm cluster, holds another munge key than" in " ".join(
        cluster.ctl(f"cat {log}").stdout.split()), error
    # Requeued once ResumeFailProgram forced the node down (the job CONFIGURING until then),
    # then held about 2 minutes (BeginTime): let go as soon as it is pending again.
    wait_for(f"job {job} requeued", lambda: cluster.job_field(job, "%T") == "PENDING"
             and "Restarts=1 " in cluster.ctl(f"scontrol show job {job}").stdout, timeout=120,
             every=0.5)
    cluster.release_requeued(job, within=60)
    assert cluster.wait_until_done(job, timeout=RESUME_WITHIN) == "COMPLETED"
    restarts = cluster.ctl(f"scontrol show job {job}").stdout
    assert "Restarts=1 " in restarts, restarts
    # What happened to the node since the key was replaced, in order: a machine made, its
    # join failed, ResumeFailProgram powered it off; Slurm resumed the node again for the
    # job, a machine made anew joined.
    join_ended_after(cluster, failed["t"])
    lines = cluster.ctl(f"cat {POWER_LOG}").stdout.splitlines()[seen:]
    events = [json.loads(line) for line in lines if line.startswith("{")]
    shown = [e for e in events
             if e.get("node") == NODE and (e["event"] in ("power_on", "join_end")
                                           or (e["program"], e["event"]) == ("resume-fail",
                                                                             "power_off"))]
    steps = [(e["program"], e["event"], e.get("ok")) for e in shown]
    assert steps == [("resume", "power_on", True), ("join", "join_end", False),
                     ("resume-fail", "power_off", True), ("resume", "power_on", True),
                     ("join", "join_end", True)], (
        # First and short: pytest's summary line keeps the start of the message.
        " ".join(f"{e['ts'][11:19]}:{e['program']}:{e['event']}:{e.get('ok')}"
                 for e in shown), events)
    assert [e["jobs"] for e in events if e["event"] == "invoked"
            and e["program"] == "resume"] == [[{"job_id": int(job), "nodes": NODE}]] * 2
    wait_for(f"{NODE} powered down again", lambda: container_id() == "",
             timeout=SUSPEND_WITHIN)


def test_slurm_cannot_turn_the_join_service_against_root(cluster):
    """SlurmUser owns the power log's directory and writes the requests directory; the join
    service runs as root. A link planted at the log's name is not written through, and a
    request that is a directory, or names no node, is removed: the service keeps serving."""
    log = "/var/log/slurm/metalslurm-power.log"
    requests = "/run/metalslurm-join"
    wait_for(f"{NODE} powered down", lambda: container_id() == "", timeout=SUSPEND_WITHIN)
    since = cluster.ctl("date +%s").stdout.strip()
    cluster.ctl(f"runuser -u slurm -- sh -c 'mv {log} {log}.saved && "
                f"ln -s /etc/ld.so.preload {log} && mkdir {requests}/{NODE} && "
                f"touch \"{requests}/x e.so y\"'")
    try:
        wait_for("the planted requests taken",
                 lambda: cluster.ctl(f"ls -A {requests}").stdout.strip() == "", timeout=60)
        assert cluster.ctl("test -e /etc/ld.so.preload", check=False).returncode != 0
        assert cluster.ctl(f"test -L {log}", check=False).returncode == 0
        assert cluster.ctl("systemctl is-active metalslurm-join.path").stdout.strip() == "active"
        # Its refusals, which it would not write through the link, are in its journal.
        journal = cluster.ctl(f"journalctl -u metalslurm-join.service -o cat --since @{since}"
                              ).stdout
        assert f"cannot write {log}" in journal, journal[-2000:]
        refused = {json.loads(line)["node"]: json.loads(line)["error"]
                   for line in journal.splitlines() if '"event": "join_refused"' in line}
        assert refused == {NODE: "not a plain file", "'x e.so y'": "not an elastic node in "
                           "launch-terminate mode of this cluster"}, journal[-2000:]
    finally:
        cluster.ctl(f"runuser -u slurm -- sh -c 'rm -f {log} && mv {log}.saved {log}'",
                    check=False)
    assert container_id() == ""  # no machine made, no join run


def test_up_makes_a_failed_static_node_anew(cluster):
    """A static node's machine is lost (its container removed, disk and all): the next 'up'
    makes it anew from the prepared image and configures it, and it takes jobs again. The
    next test's 'up' then changes nothing."""
    static = "gpu-001"
    name = f"{CLUSTER}-{static}"
    inspect = ["podman", "inspect", "--format", "{{.Id}}", name]
    lost = subprocess.run(inspect, capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run(["podman", "rm", "--force", "--time", "0", name], check=True,
                   capture_output=True)
    started = time.monotonic()
    proc = metalslurm("local", "up", "--stack", str(cluster.stack), "--no-verify")
    assert proc.returncode == 0, proc.stdout[-3000:]
    made = subprocess.run(inspect, capture_output=True, text=True, check=True).stdout.strip()
    assert made and made != lost
    wait_for(f"{static} idle", lambda: cluster.slurm_state(static) == "idle", timeout=60)
    job = cluster.ctl(f"sbatch --parsable -w {static} -p train --time=5 -o /dev/null "
                      "--wrap='srun hostname'").stdout.strip()
    assert cluster.wait_until_done(job, timeout=120) == "COMPLETED"
    with TIMINGS.open("a") as out:
        out.write(f"{time.strftime('%H:%M:%S')} a lost static node made anew by up and its "
                  f"job done: {time.monotonic() - started:.1f} s\n")


def test_a_second_up_changes_nothing(cluster):
    wait_for(f"{NODE} powered down", lambda: container_id() == "", timeout=SUSPEND_WITHIN)
    proc = metalslurm("local", "up", "--stack", str(cluster.stack), "--no-verify")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert re.search(r"^configure successful in \d+\.\d s, 0 changed task\(s\)$", proc.stdout,
                     re.M), proc.stdout[-3000:]
    assert container_id() == ""


def test_leaving_launch_terminate_removes_the_join(cluster):
    """The stack's elastic node back in start-stop mode: the next 'up' makes its container
    (a machine that is kept), and the controller keeps nothing to configure machines with:
    no join service, no kit, no join key (root into the nodes), no copy of the munge key,
    and the node no longer lets the join key in. The run after that changes nothing."""
    wait_for(f"{NODE} powered down", lambda: container_id() == "", timeout=SUSPEND_WITHIN)
    # SlurmUser, who writes the requests directory, plants a link to root's files and
    # directories nested deeper than a recursive removal goes, once the path unit is stopped
    # (as the configure stops it first; before, the join service removes what is planted):
    # root removes them all, follows no link, and the run does not fail.
    cluster.ctl("systemctl stop metalslurm-join.path && runuser -u slurm -- sh -ec "
                "'cd /run/metalslurm-join; ln -s /etc/ssh link; "
                "i=0; while [ $i -lt 1500 ]; do mkdir d; cd d; i=$((i+1)); done'")
    doc = yaml.safe_load(cluster.stack.read_text())
    doc["config"]["metalslurm:local"]["elasticMode"] = "start-stop"
    cluster.stack.write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = metalslurm("local", "up", "--stack", str(cluster.stack), "--no-verify")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert re.search(r"^configure successful in \d+\.\d s, [1-9]\d* changed task\(s\)$",
                     proc.stdout, re.M), proc.stdout[-3000:]
    left = cluster.ctl(f"ls -d {JOIN_DIR} /run/metalslurm-join "
                       "/etc/tmpfiles.d/metalslurm-join.conf "
                       "/etc/systemd/system/metalslurm-join.* 2>&1; "
                       "systemctl show -p LoadState --value metalslurm-join.path "
                       "metalslurm-join.service", check=False).stdout.splitlines()
    assert [line for line in left if line and not line.startswith("ls: cannot access")] == [
        "not-found", "not-found"], left
    assert cluster.ctl("test -f /etc/ssh/sshd_config && systemctl list-units --failed --plain "
                       "--no-legend 'metalslurm-join*'").stdout == ""
    # Its machine is kept now: made by 'up', configured, then powered down by Slurm.
    assert container_id() != ""
    wait_for(f"{NODE} powered down in start-stop mode",
             lambda: cluster.slurm_state(NODE) == "idle~", timeout=SUSPEND_WITHIN)
    keys = (cluster.state / "nodes" / NODE / "authorized_keys").read_text()
    assert "metalslurm-join-" not in keys and keys.count("\n") == 1, keys
    again = metalslurm("local", "up", "--stack", str(cluster.stack), "--no-verify")
    assert again.returncode == 0, again.stdout[-3000:]
    assert re.search(r"^configure successful in \d+\.\d s, 0 changed task\(s\)$", again.stdout,
                     re.M), again.stdout[-3000:]
