"""The acceptance gate (``metalslurm accept``, infra/accept) on the Debian 13 cluster.

What runs for real: the orchestration over SSH to the controller (the reservation, the
resume of the gate's drains, Slurm powering the elastic nodes up for the gate's jobs and
down after, the node jobs, the two-node jobs with srun --mpi=pmix in rounds, their results
read back from the nodes' own disks with srun, the history on the controller's disk (a
user's link planted at the old path on /shared left alone), the drains and returns, the
report in headless Chromium). What is a
STAND-IN: the measuring tools. No GPU, HCA or DCGM is here, so all_reduce_perf, ib_write_bw
and dcgmi are tests/fixtures/accept/standin/metalslurm-accept-standin, printing the real
tools' formats (read by the production parsers) with an H100/NDR node's figures and knobs;
so is the nvidia-smi the real health checker reads before and after the load (a DGX H100's
8 GPUs, schema-built XML from tests/fixtures/gpu). Real too: the roles' part of the gate (a
node registering for the first time is drained into it by slurm_compute).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import yaml

from infra.ops.configure import run_playbook
from infra.ops.verify import run_verify
from tests import accept_standins
from tests.e2e.cluster import POWER_DOWN_WITHIN, REPO, metalslurm, wait_for

NODES = ("gpu-001", "gpu-002", "gpu-003", "gpu-004")
LOCAL = "/var/lib/metalslurm/accept"  # infra/stack/accept.py's LOCAL_DIR, on each machine
HISTORY = f"{LOCAL}/history.jsonl"  # on the controller
OLD = "/shared/metalslurm/accept"  # where the gate kept its files before: users can write it
MARKER = "/var/lib/metalslurm/registered"  # roles/slurm_compute: the node has registered
SETTINGS = {"gate": True, "path": ["/shared/e2e-accept/bin"], "hcas": ["mlx5_0", "mlx5_1"],
            "gpudirect": False, "timeouts": {"dcgm": 60, "nccl": 60, "ib_write_bw": 20}}


@pytest.fixture(scope="module")
def gate(debian13):
    assert debian13.up.returncode == 0, debian13.up.stdout[-3000:]
    shared = debian13.state / "shared" / "shared"
    tools, knobs = shared / "e2e-accept" / "bin", shared / "metalslurm-accept-standin"
    accept_standins.install(tools, knobs)
    debian13.ctl(f"rm -rf {LOCAL} {OLD}")
    debian13.on("gpu-001", f"rm -rf {LOCAL}")
    # The gate powers them up for its jobs (asserted): they start powered down.
    debian13.wait_for_elastic_nodes_down(timeout=POWER_DOWN_WITHIN + 60)
    # The inventory as the provider wrote it, with the gate's settings for the stand-ins.
    inventory = yaml.safe_load(debian13.inventory.read_text())
    inventory["all"]["vars"]["metalslurm_accept"] = SETTINGS
    path = debian13.state / "inventory-accept.yml"
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    yield debian13, path, knobs
    debian13.ctl(f"scontrol update nodename={','.join(NODES)} state=resume 2>/dev/null; "
                 "for r in $(scontrol show reservation --oneliner | grep -o "
                 "'ReservationName=metalslurm-accept-[^ ]*' | cut -d= -f2); do "
                 "scontrol delete reservation=$r; done", check=False)
    debian13.ctl(f"rm -rf {OLD}", check=False)
    shutil.rmtree(shared / "e2e-accept", ignore_errors=True)
    shutil.rmtree(knobs, ignore_errors=True)


def reasons(cluster) -> dict[str, str]:
    out = cluster.ctl("sinfo --noheader --Node --partition=train --format='%N|%T|%E'").stdout
    return {n: f"{s}|{r}" for n, s, r in (line.split("|", 2) for line in out.splitlines())}


def test_a_degraded_port_is_named_by_the_pairing_and_the_others_return(gate, tmp_path):
    cluster, inventory, knobs = gate
    (knobs / "gpu-002").write_text(json.dumps({"ib": {"mlx5_1": 0.5}}))
    # gpu-001 is made a new machine (no mark of an earlier registration, slurmd not running
    # yet): with metalslurm_accept.gate, configure drains it into the gate before its slurmd
    # first registers. The others are put there by hand, as the roles would have.
    cluster.on("gpu-001", f"systemctl stop slurmd && rm {MARKER}")
    configured = run_playbook(inventory, limit="gpu-001", out=lambda _line: None)
    assert configured.ok, configured.failures
    assert reasons(cluster)["gpu-001"] == "drained|metalslurm-accept: new node"
    assert cluster.on("gpu-001", f"systemctl is-active slurmd && test -s {MARKER}").returncode == 0
    again = run_playbook(inventory, limit="gpu-001", out=lambda _line: None)
    assert (again.ok, again.changed) == (True, 0), again.changed_tasks
    # The verify suite takes a node waiting in the gate for what it is: drained, no job there.
    said: list[str] = []
    checked = run_verify(inventory, ["-k", "sinfo_lists_every_compute_node or "
                                     "srun_runs_one_task_on_every_static"], out=said.append)
    assert checked == 0 and sum("PASS" in line for line in said) == 2, "\n".join(said)
    cluster.ctl("scontrol update nodename=gpu-[002-004] state=drain "
                "reason='metalslurm-accept: new node'")
    # A user's job that could run anywhere, submitted before the gate starts.
    user_job = cluster.submit("alice", "--partition=train -N1 --time=2 --wrap 'hostname'")
    # What the gate once fell for: a user plants a link where root appended its history.
    cluster.login(f"sh -c 'mkdir -p {OLD} && ln -s /etc/shadow {OLD}/history.jsonl'",
                  user="alice")
    shadow = cluster.ctl("sha256sum /etc/shadow; stat -c '%U %a' /etc/shadow").stdout
    html = tmp_path / "accept.html"
    resumes = {n: len(cluster.power_events("power_on", n, ok=True))
               for n in ("gpu-003", "gpu-004")}
    run = metalslurm("accept", "-i", str(inventory), "--html", str(html), timeout=900)
    assert run.returncode == 1, run.stderr  # a node failed
    # Two rounds: gpu-001+002 failed, then each met a node proven good.
    assert "two-node tests, round 1: gpu-001+gpu-002, gpu-003+gpu-004" in run.stdout
    assert re.search(r"two-node tests, round 2: gpu-001\+gpu-00[34], gpu-002\+gpu-00[34]",
                     run.stdout), run.stdout
    assert "3 passed, 1 drained; 2 two-node rounds, 8 jobs" in run.stdout
    # The gate's last jobs may still be completing (their epilog) when it returns: gpu-002
    # shows draining until they are gone (seen in a rehearsal).
    drained = r"drained\|metalslurm-accept: ib_write_bw:mlx5_1 196 Gb/s < 380 \(with gpu-00[34]\)"
    wait_for("gpu-002 drained by the gate once its jobs are gone",
             lambda: re.fullmatch(drained, reasons(cluster)["gpu-002"]), timeout=60)
    state = reasons(cluster)
    assert not any("drain" in state[n] for n in ("gpu-001", "gpu-003", "gpu-004")), state
    # The elastic nodes were powered up for the gate (Slurm's resume, the power program).
    for node, before in resumes.items():
        assert len(cluster.power_events("power_on", node, ok=True)) > before, node
    # The user's job waited for the gate and ran on a node that passed it.
    assert cluster.wait_until_done(user_job) == "COMPLETED"
    (row,) = cluster.sacct_rows(user_job, "NodeList,Start")
    assert row[0] != "gpu-002"
    assert not cluster.ctl("scontrol show reservation --oneliner | grep metalslurm-accept",
                           check=False).stdout
    # The history: one line per node and test, with the verdicts.
    lines = [json.loads(line) for line in cluster.ctl(f"cat {HISTORY}").stdout.splitlines()]
    assert {(r["node"], r["test"]) for r in lines} >= {
        (n, t) for n in NODES for t in ("dcgm_diag", "nccl_1node", "nccl_pair", "gpu_health")}
    # The real health checker read each node's 8 (stand-in) GPUs before and after the load.
    assert sorted((r["node"], r["value"], r["passed"]) for r in lines
                  if r["test"] == "gpu_health") == [(n, 0.0, True) for n in NODES]
    # Root's files on the machines' own disks; the user's link and its target untouched.
    assert cluster.ctl(f"stat -c '%U %a %h' {HISTORY}").stdout.strip() == "root 600 1"
    assert cluster.on("gpu-001", f"stat -c '%U %a' {LOCAL}").stdout.strip() == "root 700"
    assert cluster.ctl("sha256sum /etc/shadow; stat -c '%U %a' /etc/shadow").stdout == shadow
    assert cluster.ctl(f"readlink {OLD}/history.jsonl").stdout.strip() == "/etc/shadow"
    run_dir = cluster.on("gpu-001", f"ls -d {LOCAL}/runs/*").stdout.split()[-1]
    before = json.loads(cluster.on("gpu-001", f"cat {run_dir}/gpu-001/health_before.out").stdout)
    assert {r["check"]: r["detail"] for r in before["results"]}["gpu_count"] == (
        "8 of 8 GPUs (h100)")
    assert [(r["node"], f"drained|metalslurm-accept: {r['reason']}") for r in lines
            if not r["passed"]] == [("gpu-002", state["gpu-002"])]
    # The page, in a browser: gpu-002's dot below the floor, red.
    page = html.read_text()
    assert "3 of 4 nodes passed; failed: gpu-002" in page
    shot = REPO / ".metalslurm" / "e2e-artifacts" / "accept-report.png"  # kept after the run
    shot.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                    f"--screenshot={shot}", "--window-size=900,1400", f"file://{html}"],
                   capture_output=True, timeout=120, check=True)
    assert shot.stat().st_size > 10_000
    # (They go back to sleep after SuspendTime: the next test ends by waiting for it.)


def test_a_hand_drain_is_left_alone_and_the_repaired_node_passes_with_its_history(gate):
    cluster, inventory, knobs = gate
    (knobs / "gpu-002").unlink()  # repaired
    cluster.ctl("scontrol update nodename=gpu-001 state=drain reason=maintenance")
    try:
        run = metalslurm("accept", "-i", str(inventory), "--nodes", "gpu-[001-002]",
                         timeout=900)
        assert run.returncode == 0, run.stderr
        assert "gpu-001: drained by someone else (maintenance): left alone" in run.stdout
        # gpu-002 alone: a node in service partners it, outside the test.
        assert re.search(r"\(gpu-00[34]: a known-good partner, not under test\)", run.stdout)
        state = reasons(cluster)
        assert state["gpu-001"] == "drained|maintenance"
        assert "drain" not in state["gpu-002"]
        report = metalslurm("accept", "report", "-i", str(inventory))
        assert report.returncode == 0, report.stderr
        assert re.search(r"^gpu-002  nccl_1node .* pass$", report.stdout, re.M), report.stdout
        runs = [json.loads(line) for line in cluster.ctl(f"cat {HISTORY}").stdout.splitlines()
                if '"gpu-002"' in line and '"ib_write_bw:mlx5_1"' in line]
        assert [(r["value"], r["passed"]) for r in runs] == [(196.0, False), (392.0, True)]
    finally:
        cluster.ctl("scontrol update nodename=gpu-001 state=resume")
    # The elastic nodes the gate's jobs powered up go back to sleep after SuspendTime.
    wait_for("the elastic nodes to power down again", cluster.all_powered_down,
             timeout=POWER_DOWN_WITHIN + 60)
