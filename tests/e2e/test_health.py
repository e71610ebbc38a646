"""The node health checker on the Debian 13 cluster: real slurmd running it every 10 s
(HealthCheckInterval=10, HealthCheckNodeState=ANY), real drains and returns, fake GPUs.

Faults are made for real on the nodes (a fake GPU's device node removed, /shared
unmounted) except the driver's view of the GPUs: no NVIDIA driver runs here, so a stand-in
nvidia-smi (a shell script, not NVIDIA's) replays the recorded-shape fixtures of
tests/fixtures/gpu (healthy, ECC errors, a lost GPU). Leaves every node idle, undrained,
without the stand-in.
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.cluster import STAND_IN, stand_in_nvidia_smi, wait_for

# HealthCheckInterval 10 s; slurmd's timer, the check's own run and sinfo's view add a
# few seconds. Waiting this long is "within one interval", with margin for a busy machine.
WITHIN_AN_INTERVAL = 45
LAST_RUN = "/run/metalslurm-health/last.json"


@pytest.fixture(scope="module")
def cluster(debian13):
    assert debian13.up.returncode == 0, debian13.up.stdout[-3000:]
    yield debian13
    for node in ("gpu-001", "gpu-002"):
        debian13.on(node, f"rm -f {STAND_IN}; [ -e /dev/nvidia5 ] || mknod -m 666 "
                          "/dev/nvidia5 c 195 5; mountpoint -q /shared || "
                          "(mount --bind /run/e2e-shared /shared && umount /run/e2e-shared)",
                    check=False)
        if node_view(debian13, node)[0].startswith("drain"):
            debian13.ctl(f"scontrol update NodeName={node} State=RESUME")
    wait_for("gpu-001 and gpu-002 to be idle again", lambda: all(
        node_view(debian13, n) == ("idle", "none") for n in ("gpu-001", "gpu-002")),
        timeout=WITHIN_AN_INTERVAL)


def node_view(cluster, node: str) -> tuple[str, str]:
    out = cluster.ctl(f"sinfo --noheader --Node --partition=train --nodes={node} "
                      "--format='%T|%E'").stdout.strip()
    state, _, reason = out.partition("|")
    return state, reason


def wait_for_view(cluster, node: str, ok, what: str) -> tuple[str, str]:
    return wait_for(f"{node} to be {what}", lambda: (v := node_view(cluster, node)) and ok(*v)
                    and v, timeout=WITHIN_AN_INTERVAL, every=1)


def test_slurm_runs_the_checker_on_every_node(cluster):
    config = cluster.ctl("scontrol show config | grep -E '^HealthCheck'").stdout.split("\n")
    assert [" ".join(line.split()) for line in config if line] == [
        "HealthCheckInterval = 10 sec", "HealthCheckNodeState = ANY",
        "HealthCheckProgram = /usr/local/sbin/metalslurm-health"]
    out = cluster.on("gpu-001", "/usr/local/sbin/metalslurm-health --dry-run").stdout
    assert [line.split()[:2] for line in out.splitlines()[:-1]] == [
        ["ok", "gpu_devices"], ["skip", "gpu_count"], ["skip", "gpu_ecc"], ["skip", "gpu_rows"],
        ["ok", "gpu_xid"], ["skip", "ib_ports"], ["ok", "mounts"], ["ok", "munge"],
        ["ok", "free_space"]]
    assert out.splitlines()[-1] == "node gpu-001: healthy"


def test_a_lost_gpu_device_drains_the_node_and_its_running_job_completes(cluster):
    job = cluster.submit("alice", "--nodelist=gpu-002 --gres=gpu:h100:1 --time=5 "
                         "--wrap='sleep 25'")
    wait_for(f"job {job} to run", lambda: cluster.job_field(job, "%T") == "RUNNING")
    cluster.on("gpu-002", "rm /dev/nvidia5")
    state, reason = wait_for_view(cluster, "gpu-002", lambda s, r: s.startswith("drain"),
                                  "drained")
    assert reason == "metalslurm-health: gpu_devices: 7 of 8 GPU devices (missing /dev/nvidia5)"
    # Drained, not DOWN: the job on it goes on to the end.
    assert state in ("draining", "drained")
    assert cluster.wait_until_done(job) == "COMPLETED"


def test_the_restored_device_returns_the_node_to_idle(cluster):
    cluster.on("gpu-002", "mknod -m 666 /dev/nvidia5 c 195 5")
    assert wait_for_view(cluster, "gpu-002", lambda s, r: s == "idle", "idle") == ("idle", "none")


def last_run(cluster, node: str) -> dict:
    return json.loads(cluster.on(node, f"cat {LAST_RUN}").stdout)


def test_a_node_drained_by_hand_stays_drained(cluster):
    cluster.ctl("scontrol update NodeName=gpu-001 State=DRAIN Reason=maintenance")
    # Three runs of the checker later, each finding the node healthy, the drain stands.
    seen = []
    for _ in range(3):
        previous = seen[-1]["time"] if seen else 0
        seen.append(wait_for("the checker's next run", lambda p=previous: (
            r := last_run(cluster, "gpu-001"))["time"] > p and r, timeout=WITHIN_AN_INTERVAL))
        assert node_view(cluster, "gpu-001") == ("drained", "maintenance")
    assert [(r["healthy"], r["action"]) for r in seen] == [(True, None)] * 3
    cluster.ctl("scontrol update NodeName=gpu-001 State=RESUME")


def test_an_unmounted_shared_path_drains_the_node(cluster):
    cluster.on("gpu-002", "mkdir -p /run/e2e-shared && mount --bind /shared /run/e2e-shared "
                          "&& umount /shared")
    _state, reason = wait_for_view(cluster, "gpu-002", lambda s, r: s.startswith("drain"),
                                   "drained")
    assert reason == "metalslurm-health: mounts: /shared is not mounted"
    cluster.on("gpu-002", "mount --bind /run/e2e-shared /shared && umount /run/e2e-shared")
    assert wait_for_view(cluster, "gpu-002", lambda s, r: s == "idle", "idle") == ("idle", "none")


@pytest.mark.parametrize(("fixture", "reason"), [
    ("dgx-h100-ecc.xml", "metalslurm-health: gpu_ecc: 00000000:5D:00.0 has 2 uncorrected ECC "
     "errors (limit 0); gpu_rows: 00000000:5D:00.0 has a remap or retirement pending (reset "
     "the GPU)"),
    ("dgx-h100-lost-gpu.xml", "metalslurm-health: gpu_count: 7 of 8 GPUs"),
], ids=["ecc", "lost-gpu"])
def test_stand_in_nvidia_smi_faults_drain_and_healthy_output_returns_the_node(cluster, fixture,
                                                                              reason):
    stand_in_nvidia_smi(cluster, "gpu-001", fixture)
    _state, got = wait_for_view(cluster, "gpu-001", lambda s, r: s.startswith("drain"),
                                "drained")
    assert got == reason
    stand_in_nvidia_smi(cluster, "gpu-001", "dgx-h100-healthy.xml")
    assert wait_for_view(cluster, "gpu-001", lambda s, r: s == "idle", "idle") == ("idle", "none")
    out = cluster.on("gpu-001", "/usr/local/sbin/metalslurm-health --dry-run").stdout
    assert "ok    gpu_count        8 of 8 GPUs (h100)" in out.splitlines()
    cluster.on("gpu-001", f"rm {STAND_IN}")
