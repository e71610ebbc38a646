"""Rolling reboots with 'metalslurm maintain --reboot' on the Debian 13 cluster (Slurm 24.11):
Slurm's own reboot of real node containers, a job running on one of them; and a rolling
package update ('--update') of munge, held, to a STAND-IN newer build (tests/e2e/
slurm_standin.py: Debian's own packages relabelled, since no newer build exists here).

What stands in for a server here, each labelled where it is made: the container's systemd
rebooting ends the container and podman's restart policy starts it again (the local
provider's --restart=always, infra/providers/node_container.py), as firmware boots a
server; and slurmd reports the container's start as the node's boot ('slurmd -b' with
SLURMD_BOOT_TIME, slurm_compute_boot_time_stand_in), since a container shares the host's
uptime. Everything else is real: RebootProgram, 'scontrol reboot ASAP nextstate=DOWN', the
drain, the job running to its end, slurmd registering again, the health checker, the
resume. Leaves gpu-001 and gpu-002 idle.
"""

from __future__ import annotations

import re
import subprocess
from datetime import datetime

import pytest

from tests.e2e import slurm_standin
from tests.e2e.cluster import JOB_TIMEOUT, metalslurm, wait_for

NODES = ("gpu-001", "gpu-002")

# A job that outlives the nodes updated before its own: it waits for its node's drain (at
# most DRAIN_WAIT s), then runs LINGER s more, several of maintain's polls (POLL_SECONDS).
DRAIN_WAIT = 240
LINGER = 10


@pytest.fixture(scope="module")
def cluster(debian13):
    assert debian13.up.returncode == 0, debian13.up.stdout[-3000:]
    wait_for("gpu-001 and gpu-002 to be idle", lambda: all(
        node_view(debian13, n) == ("idle", "none") for n in NODES), timeout=120)
    yield debian13
    for node in NODES:
        if node_view(debian13, node)[0] != "idle":
            debian13.ctl(f"scontrol update NodeName={node} State=RESUME", check=False)


def node_view(cluster, node: str) -> tuple[str, str]:
    state, _, reason = cluster.ctl(f"sinfo --noheader --Node --partition=train --nodes={node} "
                                   "--format='%T|%E'").stdout.strip().partition("|")
    return state, reason


def boot_time(cluster, node: str) -> int:
    out = cluster.ctl(f"scontrol show node {node}").stdout
    stamp = re.search(r"BootTime=(\S+)", out)[1]
    return int(datetime.fromisoformat(stamp).timestamp())


def container_started(cluster, node: str) -> str:
    return subprocess.run(["podman", "inspect", "--format", "{{.State.StartedAt}}",
                           f"{cluster.name}-{node}"], capture_output=True, text=True,
                          check=True).stdout.strip()


def running_job(cluster, seconds: int) -> str:
    """alice's job of ``seconds`` on gpu-001, once it runs."""
    return job_running(cluster, f"sleep {seconds}")


def job_until_drained(cluster) -> str:
    """alice's job on gpu-001, once it runs, that ends LINGER seconds after it sees its node
    drained (the run's turn for gpu-001 came while it ran), however long the nodes before
    it took; it fails (exit 3) if that never happens within DRAIN_WAIT seconds."""
    return job_running(cluster, "i=0; until scontrol show node gpu-001 | grep -q "
                                f'"State=[^ ]*DRAIN"; do i=$((i+1)); [ $i -lt {DRAIN_WAIT} ] '
                                f"|| exit 3; sleep 1; done; sleep {LINGER}")


def job_running(cluster, script: str) -> str:
    job = cluster.submit("alice", f"--nodelist=gpu-001 --time=5 --wrap='{script}'")
    wait_for(f"job {job} to run", lambda: cluster.job_field(job, "%T") == "RUNNING",
             timeout=JOB_TIMEOUT)
    return job


def maintain(cluster, nodes: str, *options: str, what: str = "--reboot"
             ) -> tuple[int, list[str]]:
    """'metalslurm maintain --reboot' (or ``what``) on ``nodes``: its exit status and its
    lines."""
    run = metalslurm("maintain", "-i", str(cluster.inventory), "--nodes", nodes, what,
                     *options, timeout=900)
    return run.returncode, (run.stdout + run.stderr).splitlines()


def test_a_rolling_reboot_waits_for_the_job_and_kills_nothing(cluster):
    """Two nodes in batches of one while a job runs on gpu-001: gpu-002 (idle) reboots at
    once, gpu-001 only after its job; both come back idle through the health checker; the
    job completes; the containers really restarted."""
    assert cluster.ctl("scontrol show config | grep -E '^RebootProgram'").stdout.split() == [
        "RebootProgram", "=", "/usr/sbin/reboot"]
    before = {n: (boot_time(cluster, n), container_started(cluster, n)) for n in NODES}
    since = cluster.ctl("date +%Y-%m-%dT%H:%M:%S").stdout.strip()
    job = job_until_drained(cluster)

    code, lines = maintain(cluster, "gpu-[001-002]", "--batch", "1")
    assert code == 0, lines
    said = [line for line in lines if line.startswith(NODES)]
    # Idle first, one at a time: gpu-002 was back before gpu-001's reboot was asked for.
    back = next(i for i, line in enumerate(said) if line.startswith("gpu-002: back in service"))
    assert said[0] == "gpu-002: reboot requested", said
    assert said.index("gpu-001: reboot requested (it waits for its jobs to end; it takes no "
                      "new one)") == back + 1, said
    assert "gpu-001: waiting for its jobs to end (drained, reboot pending)" in said
    for node in NODES:
        assert f"{node}: health check passed" in said
    assert any(re.fullmatch(r"2 rebooted and returned, 0 failed, 0 left alone; \d+ s; out of "
                            r"service \d+-\d+ s a node \(waiting for jobs not counted\)", line)
               for line in lines), lines

    # The job ran to its end; gpu-002 rebooted while it ran, gpu-001 only after it ended.
    assert cluster.wait_until_done(job) == "COMPLETED"
    (row,) = cluster.ctl(f"SLURM_TIME_FORMAT=%s sacct --allocations --noheader --parsable2 "
                         f"--jobs={job} --format=State,ExitCode,NodeList,Start,End"
                         ).stdout.splitlines()
    state, code, nodes, started, ended = row.split("|")
    assert (state, code, nodes) == ("COMPLETED", "0:0", "gpu-001")
    after = {n: (boot_time(cluster, n), container_started(cluster, n)) for n in NODES}
    assert int(started) < after["gpu-002"][0] < int(ended), (row, after)
    assert after["gpu-001"][0] >= int(ended), (row, after)
    for node in NODES:
        assert after[node][0] > before[node][0]
        assert after[node][1] != before[node][1], f"{node}'s container did not restart"
        assert node_view(cluster, node) == ("idle", "none")
    # No job of the window was killed (a reboot under a job would end it NODE_FAIL).
    killed = cluster.ctl(f"sacct --allocations --noheader --parsable2 --starttime={since} "
                         "--state=NODE_FAIL,FAILED,CANCELLED,TIMEOUT,PREEMPTED "
                         "--nodelist=gpu-001,gpu-002 --format=JobID,State").stdout
    assert killed.strip() == ""

    # slurmd restarted within one boot keeps its boot time: no reboot is reported.
    booted = boot_time(cluster, "gpu-002")
    cluster.on("gpu-002", "systemctl restart slurmd")
    wait_for("gpu-002 to answer again", lambda: node_view(cluster, "gpu-002") == (
        "idle", "none"), timeout=60)
    # slurmctld takes a registration's boot time as its own clock less slurmd's uptime, so
    # it may move by a second across a second's boundary; a reboot moves it by many.
    assert abs(boot_time(cluster, "gpu-002") - booted) <= 1


def test_a_job_longer_than_max_wait_keeps_its_node_in_service_unrebooted(cluster):
    """--max-wait 3 while a 30 s job runs on gpu-001: its reboot is called off (Slurm's
    cancel_reboot), and the node goes on running the job, in service, not rebooted; exit 1
    naming the job; the job completes."""
    before = (boot_time(cluster, "gpu-001"), container_started(cluster, "gpu-001"))
    job = running_job(cluster, 30)

    code, lines = maintain(cluster, "gpu-001", "--max-wait", "3")
    assert code == 1, lines
    assert any(re.fullmatch(rf"gpu-001: NOT rebooted: job {job} \(alice, [\d:]+ left\) still "
                            r"ran after --max-wait 3 s; its reboot was called off and it is "
                            r"back in service", line) for line in lines), lines
    assert any(line.startswith("0 rebooted and returned, 1 not rebooted (jobs past --max-wait), "
                               "0 failed, 0 left alone; ") for line in lines), lines
    state = cluster.ctl("scontrol show node gpu-001 | grep -o 'State=[^ ]*'").stdout.strip()
    assert state in ("State=MIXED", "State=ALLOCATED"), state  # no DRAIN, no REBOOT_*
    assert cluster.job_field(job, "%T") == "RUNNING"

    assert cluster.wait_until_done(job) == "COMPLETED"
    assert (boot_time(cluster, "gpu-001"), container_started(cluster, "gpu-001")) == before
    wait_for("gpu-001 to be idle", lambda: node_view(cluster, "gpu-001")[0] == "idle",
             timeout=60)


def test_bad_input_changes_nothing(cluster):
    for argv, named in ((["--nodes", "gpu-001", "--reboot", "--batch", "0"], "--batch"),
                        (["--nodes", "ctl", "--reboot"], "--nodes"),
                        (["--nodes", "gpu-001"], "--reboot"),
                        (["--nodes", "gpu-001", "--reboot", "--max-wait", "-5"], "--max-wait")):
        run = metalslurm("maintain", "-i", str(cluster.inventory), *argv)
        assert run.returncode == 2 and run.stderr.startswith(f"error: {named}"), run.stderr
    assert [node_view(cluster, n) for n in NODES] == [("idle", "none")] * 2


def test_a_second_run_at_once_is_refused_naming_the_first(cluster):
    """The cluster's lock (flock on the controller, held over SSH for a run's length): while
    another holds it, a run is refused before anything changes, naming the holder; once the
    holder's connection ends, the lock is free."""
    holder = subprocess.Popen(
        ["podman", "exec", "-i", f"{cluster.name}-ctl", "flock", "--nonblock", maintain_lock(),
         "sh", "-c", f"echo 'carol@ops pid 7' > {maintain_lock()}.who && echo held && exec cat"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        code, lines = maintain(cluster, "gpu-002")
        assert code == 1 and lines == [
            "error: another metalslurm run (maintain, backup or restore) holds the cluster's "
            f"lock (carol@ops pid 7; {maintain_lock()} on the controller): wait for it to end, "
            "then run this again"]
        assert node_view(cluster, "gpu-002") == ("idle", "none")
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    code, lines = maintain(cluster, "gpu-002", "--max-wait", "0", what="--update")
    assert code == 0 and "gpu-002: nothing newer to install: left in service" in lines, lines


def maintain_lock() -> str:
    from infra.ops.maintain import LOCK

    return LOCK


def started_at(cluster, node: str, unit: str) -> int:
    """When ``unit`` last started on ``node`` (seconds since the epoch, the host's clock)."""
    return int(cluster.on(node, f"date -d \"$(systemctl show -p ActiveEnterTimestamp --value "
                                f"{unit})\" +%s").stdout)


def test_a_rolling_update_installs_held_munge_after_the_job_and_kills_nothing(cluster):
    """--update in batches of one while alice's job runs on gpu-001: munge, held on both
    nodes, moves to the stand-in's newer build, gpu-002's at once (while the job runs),
    gpu-001's only after the job ended; munge and slurmd restarted, not the nodes; the holds
    kept; both back idle; the job COMPLETED; a second run finds nothing to install."""
    hosts = ("ctl", *NODES)
    for node in NODES:
        cluster.on(node, "apt-mark hold munge libmunge2")
    try:
        installed = slurm_standin.installed_of(cluster, "gpu-001", "munge")
        standin = slurm_standin.publish(cluster, NODES, "munge")
        before = {n: container_started(cluster, n) for n in NODES}
        since = cluster.ctl("date +%Y-%m-%dT%H:%M:%S").stdout.strip()
        job = job_until_drained(cluster)

        code, lines = maintain(cluster, "gpu-[001-002]", "--batch", "1", what="--update")
        assert code == 0, lines
        said = [line for line in lines if line.startswith(NODES)]
        moved = "; ".join(f"{p} {installed[p]} -> {standin}" for p in sorted(installed))
        assert said[:2] == [f"gpu-001: {moved}", f"gpu-002: {moved}"], said
        assert said[2] == "gpu-002: drained for its update", said
        assert f"gpu-002: installed {moved}" in said and f"gpu-001: installed {moved}" in said
        assert "gpu-001: waiting for its jobs to end (drained, update pending)" in said
        assert any(re.fullmatch(r"2 updated and returned, 0 failed, 0 left alone; \d+ s; out "
                                r"of service \d+-\d+ s a node \(waiting for jobs not counted\)",
                                line) for line in lines), lines

        assert cluster.wait_until_done(job) == "COMPLETED"
        (row,) = cluster.ctl(f"SLURM_TIME_FORMAT=%s sacct --allocations --noheader "
                             f"--parsable2 --jobs={job} --format=Start,End").stdout.splitlines()
        started, ended = (int(t) for t in row.split("|"))
        # gpu-002 was updated while the job ran; gpu-001 once it had ended.
        assert started < started_at(cluster, "gpu-002", "slurmd") < ended
        for unit in ("munge", "slurmd"):
            assert started_at(cluster, "gpu-001", unit) >= ended, unit
        for node in NODES:
            assert slurm_standin.installed_of(cluster, node, "munge") == {
                p: standin for p in installed}
            assert cluster.on(node, "apt-mark showhold").stdout.split() == [
                "libmunge2", "munge"]
            # Restarted, not rebooted: the container (the stand-in server) did not restart.
            assert container_started(cluster, node) == before[node]
            wait_for(f"{node} to be idle", lambda n=node: node_view(cluster, n) == (
                "idle", "none"), timeout=60)
        killed = cluster.ctl(f"sacct --allocations --noheader --parsable2 --starttime={since} "
                             "--state=NODE_FAIL,FAILED,CANCELLED,TIMEOUT,PREEMPTED "
                             "--nodelist=gpu-001,gpu-002 --format=JobID,State").stdout
        assert killed.strip() == ""
        # Both nodes run jobs with the controller on the older munge build.
        step = cluster.submit("alice", "--nodes=2 --nodelist=gpu-[001-002] --time=2 "
                              "--wrap='srun hostname'")
        assert cluster.wait_until_done(step) == "COMPLETED"

        code, lines = maintain(cluster, "gpu-[001-002]", what="--update")
        assert code == 0 and "gpu-001: nothing newer to install: left in service" in lines, lines
    finally:
        for node in NODES:
            cluster.on(node, "apt-mark unhold munge libmunge2", check=False)
        slurm_standin.withdraw(cluster, hosts)
