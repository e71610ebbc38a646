"""Training workflows on the shared Debian 13 cluster: the job scripts of examples/,
copied to shared storage and submitted by a user as docs/how-to/training.md says.

What runs for real: sbatch --test-only of every script; the MPI example (OpenMPI through
Slurm's PMIx plugin, 2 nodes); the 100-task embedding array; the 2-stage pipeline, with
and without a failing first stage; the spot-safe example, a JAX training run on the CPUs
of 2 nodes that is requeued twice and resumes from its checkpoints, and its afternotok
follow-up. The GPU training scripts (torchrun, DeepSpeed) need
H100s and PyTorch: here their launcher is replaced by a probe, a stand-in program that
prints what the real launcher would be given (labelled "probe" in every name), which
shows the rendezvous, ranks and world size a 2-node allocation hands them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from tests.e2e.cluster import REPO, TRAIN_ENV, WHEELHOUSE, quoted, train_wheels, wait_for

EX = "/shared/examples"
WORK = "/shared/training-e2e"
PROBES = f"{WORK}/probe-bin"
STATIC = "gpu-[001-002]"
ELASTIC = "gpu-[003-004]"
# Stand-ins for the launchers (not the launchers): each prints one line of what it got.
PROBE_TORCHRUN = r"""#!/bin/bash
# metalslurm e2e PROBE standing in for torchrun: prints its arguments and environment.
echo "probe-torchrun host=$(hostname -s) node_rank=$SLURM_NODEID" \
     "master=$MASTER_ADDR:$MASTER_PORT gpus=$CUDA_VISIBLE_DEVICES" \
     "nccl_ifname=${NCCL_SOCKET_IFNAME:-unset} args=$*"
"""
PROBE_PYTHON = r"""#!/bin/bash
# metalslurm e2e PROBE standing in for a training script's python: prints what it got.
echo "probe-python host=$(hostname -s) rank=$RANK local_rank=$LOCAL_RANK" \
     "world_size=$WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT args=$*"
"""
PROBE_DEEPSPEED = r"""#!/bin/bash
# metalslurm e2e PROBE standing in for the deepspeed launcher: prints its hostfile and args.
for a in "$@"; do [[ $a == --hostfile=* ]] && hostfile=${a#*=}; done
echo "probe-deepspeed host=$(hostname -s) args=$*"
sed 's/^/probe-deepspeed-hostfile /' "$hostfile"
"""


@pytest.fixture(scope="module")
def cluster(debian13):
    """examples/ on shared storage, and a working directory alice owns."""
    debian13.ctl(f"rm -rf {EX} {WORK}")
    tar = subprocess.run(["tar", "-C", str(REPO), "-c", "examples"], capture_output=True,
                         check=True).stdout
    subprocess.run(["podman", "exec", "-i", f"{debian13.name}-ctl", "tar", "-C", "/shared",
                    "--no-same-owner", "-x"], input=tar, check=True)
    debian13.ctl(f"chmod -R a+rX {EX} && mkdir -p {PROBES} && chown alice {WORK}")
    for name, text in (("torchrun", PROBE_TORCHRUN), ("python-probe", PROBE_PYTHON),
                       ("deepspeed", PROBE_DEEPSPEED)):
        debian13.ctl(f"printf '%s' {quoted(text)} > {PROBES}/{name} && chmod 755 {PROBES}/{name}")
    yield debian13
    debian13.ctl(f"rm -rf {EX} {WORK}")


def sbatch(cluster, args: str) -> str:
    """Submit as alice from the working directory on the login node; the job id."""
    out = cluster.login(f"cd {WORK} && runuser -u alice -- sbatch --parsable {args}").stdout
    return out.strip().split(";")[0]


def output(cluster, path: str) -> str:
    return cluster.ctl(f"cat {path}").stdout


def wait_array_done(cluster, job: str, timeout: float = 600) -> list[list[str]]:
    """Every task of array job ``job`` finished: its sacct rows (JobID, State, ExitCode)."""
    wait_for(f"array job {job} to leave the queue",
             lambda: cluster.ctl(f"squeue --noheader --array --jobs={job}", check=False)
             .stdout.strip() == "", timeout=timeout)
    return cluster.sacct_rows(job, "JobID,State,ExitCode,Start,End")


# ---- every script is a valid Slurm job --------------------------------------------------

# deepspeed-srun asks for a task per GPU, 8 per node; these nodes have 2 CPUs (an H100
# node has 100 or more), and Slurm does not overcommit --ntasks-per-node: 2 per node here.
LOCAL_ONLY = {"deepspeed-srun.sbatch": "--ntasks-per-node=2 "}
NODES = {"torchrun-fsdp.sbatch": 2, "deepspeed-srun.sbatch": 2, "deepspeed-launcher.sbatch": 2,
         "container-train.sbatch": 2, "mpi-allreduce.sbatch": 2, "array-embed.sbatch": 1,
         "prepare.sbatch": 1, "spot-safe.sbatch": 2, "spot-followup.sbatch": 1,
         "ray-sweep.sbatch": 2}


def test_every_example_job_script_is_covered_here():
    assert sorted(NODES) == sorted(p.name for p in (REPO / "examples").glob("*.sbatch"))


@pytest.mark.parametrize("script", sorted(NODES))
def test_sbatch_test_only_accepts_the_example(cluster, script):
    """Slurm parses the script's #SBATCH lines and finds a place for the job (as alice,
    with her account and QOS) without running it; 8 fake GPUs per node stand in for H100s."""
    proc = cluster.ctl(f"cd {WORK} && runuser -u alice -- sbatch --test-only "
                       f"{LOCAL_ONLY.get(script, '')}{EX}/{script}",
                       check=False)
    match = re.search(r"sbatch: Job \d+ to start at \S+ using \d+ processors on nodes (\S+) "
                      r"in partition train", proc.stderr)
    assert match, (proc.returncode, proc.stdout, proc.stderr)
    hosts = cluster.ctl(f"scontrol show hostnames {match.group(1)}").stdout.split()
    assert len(hosts) == NODES[script], hosts


# ---- the GPU training scripts, with their launcher replaced by a probe -------------------

def probe_lines(text: str, prefix: str) -> list[dict[str, str]]:
    rows = []
    for line in text.splitlines():
        if line.startswith(prefix + " "):
            head, _, args = line.partition(" args=")
            row = dict(field.split("=", 1) for field in head.split()[1:])
            rows.append({**row, "args": args})
    return rows


def test_torchrun_example_with_a_torchrun_probe_sees_the_2_node_rendezvous(cluster):
    job = sbatch(cluster, f"-w {STATIC} --output={WORK}/fsdp-%j.out "
                          f"--export=ALL,PATH={PROBES}:/usr/local/bin:/usr/bin:/bin "
                          f"{EX}/torchrun-fsdp.sbatch --steps 5")
    assert cluster.wait_until_done(job) == "COMPLETED", output(cluster, f"{WORK}/fsdp-{job}.out")
    rows = sorted(probe_lines(output(cluster, f"{WORK}/fsdp-{job}.out"), "probe-torchrun"),
                  key=lambda r: r["node_rank"])
    port = 20000 + int(job) % 20000
    args = (f"--nnodes=2 --nproc_per_node=8 --rdzv_id={job} --rdzv_backend=c10d "
            f"--rdzv_endpoint=gpu-001:{port} {EX}/python/train_fsdp.py --steps 5")
    assert [(r["host"], r["node_rank"], r["master"], r["gpus"], r["args"]) for r in rows] == [
        ("gpu-001", "0", f"gpu-001:{port}", "0,1,2,3,4,5,6,7", args),
        ("gpu-002", "1", f"gpu-001:{port}", "0,1,2,3,4,5,6,7", args)]
    # The node's NCCL settings (roles/nccl_ib) reached the launcher's environment.
    assert all(r["nccl_ifname"].startswith("=") for r in rows), rows


def test_deepspeed_srun_example_with_a_python_probe_numbers_the_ranks_from_slurm(cluster):
    """srun starts one process per task on every node (2 per node here: see LOCAL_ONLY),
    and each gets RANK, LOCAL_RANK and WORLD_SIZE from Slurm's numbering."""
    job = sbatch(cluster, f"-w {STATIC} {LOCAL_ONLY['deepspeed-srun.sbatch']}"
                          f"--output={WORK}/ds-%j.out "
                          f"--export=ALL,PYTHON={PROBES}/python-probe {EX}/deepspeed-srun.sbatch")
    assert cluster.wait_until_done(job) == "COMPLETED", output(cluster, f"{WORK}/ds-{job}.out")
    rows = probe_lines(output(cluster, f"{WORK}/ds-{job}.out"), "probe-python")
    port = 20000 + int(job) % 20000
    got = sorted((int(r["rank"]), r["local_rank"], r["host"], r["world_size"], r["master"],
                  r["args"]) for r in rows)
    args = f"{EX}/python/train_deepspeed.py --deepspeed_config {EX}/python/ds_config.json"
    assert got == [(rank, str(rank % 2), f"gpu-00{rank // 2 + 1}", "4", f"gpu-001:{port}", args)
                   for rank in range(4)]


def test_deepspeed_launcher_example_with_a_deepspeed_probe_gets_the_allocation_hostfile(cluster):
    job = sbatch(cluster, f"-N1 -w gpu-001 --output={WORK}/dsl-%j.out "
                          f"--export=ALL,PATH={PROBES}:/usr/local/bin:/usr/bin:/bin "
                          f"{EX}/deepspeed-launcher.sbatch")
    assert cluster.wait_until_done(job) == "COMPLETED", output(cluster, f"{WORK}/dsl-{job}.out")
    port = 20000 + int(job) % 20000
    text = output(cluster, f"{WORK}/dsl-{job}.out")
    assert re.findall(r"^probe-deepspeed-hostfile (.*)$", text, re.M) == ["gpu-001 slots=8"]
    assert probe_lines(text, "probe-deepspeed") == [
        {"host": "gpu-001",
         "args": f"--hostfile={WORK}/hostfile-{job} --master_addr=gpu-001 --master_port={port} "
                 f"{EX}/python/train_deepspeed.py --deepspeed_config {EX}/python/ds_config.json"}]


def test_deepspeed_launcher_on_2_nodes_without_pdsh_stops_before_launching(cluster):
    job = sbatch(cluster, f"-w {STATIC} --output={WORK}/dsl-%j.out "
                          f"--export=ALL,PATH={PROBES}:/usr/local/bin:/usr/bin:/bin "
                          f"{EX}/deepspeed-launcher.sbatch")
    assert cluster.wait_until_done(job) == "FAILED"
    text = output(cluster, f"{WORK}/dsl-{job}.out")
    assert text.strip().splitlines()[-1] == (
        "metalslurm-example: pdsh is not on PATH on gpu-001: install pdsh on the nodes, or use "
        "deepspeed-srun.sbatch"), text
    assert "probe-deepspeed" not in text
    assert cluster.sacct_rows(job, "ExitCode") == [["2:0"]]


# ---- MPI through PMIx, for real ----------------------------------------------------------

def test_mpi_example_reduces_across_2_nodes_through_pmix(cluster):
    """OpenMPI 5 ranks started by srun --mpi=pmix (Slurm 24.11's PMIx plugin, with the
    libpmix the mpi role installs): the example checks the reduced sum on every rank."""
    job = sbatch(cluster, f"-w {STATIC} --ntasks-per-node=2 --output={WORK}/mpi-%j.out "
                          f"{EX}/mpi-allreduce.sbatch")
    text = output(cluster, f"{WORK}/mpi-{job}.out") if cluster.wait_until_done(job) else ""
    assert cluster.final_state(job) == "COMPLETED", text
    ranks = sorted(line for line in text.splitlines() if line.startswith("rank "))
    assert ranks == [f"rank {r}/4 on gpu-00{r // 2 + 1}: sum 10 (want 10), count 4"
                     for r in range(4)]
    assert re.search(r"^allreduce ok: 4 ranks on 2 nodes \(gpu-001,gpu-002\), MPI 3\.1, "
                     r"Open MPI v5\.", text, re.M), text


# ---- the array example, 100 tasks ---------------------------------------------------------

@pytest.fixture(scope="module")
def embedded(cluster):
    """The array example over a 1000-line corpus, as 100 tasks on the static nodes."""
    cluster.ctl(f"seq 0 999 | sed 's/^/document number /' > {WORK}/corpus.txt")
    start = time.monotonic()
    job = sbatch(cluster, f"--array=0-99 --exclude={ELASTIC} --output={WORK}/embed-%A_%a.out "
                          f"--export=ALL,INPUT={WORK}/corpus.txt,OUT_DIR={WORK}/emb "
                          f"{EX}/array-embed.sbatch")
    rows = wait_array_done(cluster, job)
    return job, rows, time.monotonic() - start


def test_array_example_runs_100_tasks_all_completed(embedded):
    job, rows, _ = embedded
    assert sorted(r[0] for r in rows) == sorted(f"{job}_{i}" for i in range(100))
    assert {(r[1], r[2]) for r in rows} == {("COMPLETED", "0:0")}


def test_array_example_writes_every_shard_and_embeds_every_line_once(cluster, embedded):
    files = cluster.ctl(f"ls {WORK}/emb").stdout.split()
    assert files == [f"shard-{i:05d}-of-00100.jsonl" for i in range(100)]
    lines = cluster.ctl(f"cat {WORK}/emb/*.jsonl").stdout.splitlines()
    rows = [json.loads(line) for line in lines]
    assert sorted(r["line"] for r in rows) == list(range(1000))
    assert {len(r["embedding"]) for r in rows} == {64}


def test_array_example_resubmitted_skips_a_finished_shard(cluster, embedded):
    job = sbatch(cluster, f"--array=7 --exclude={ELASTIC} --output={WORK}/again-%A_%a.out "
                          f"--export=ALL,INPUT={WORK}/corpus.txt,OUT_DIR={WORK}/emb,NUM_SHARDS=100 "
                          f"{EX}/array-embed.sbatch")
    assert [r[1] for r in wait_array_done(cluster, job)] == ["COMPLETED"]
    assert output(cluster, f"{WORK}/again-{job}_7.out").strip() == (
        f"shard 7: {WORK}/emb/shard-00007-of-00100.jsonl exists, nothing to do")


def test_array_task_without_its_input_fails_with_the_setting_named(cluster):
    job = sbatch(cluster, f"--array=0 --exclude={ELASTIC} --output={WORK}/noinput-%A_%a.out "
                          f"{EX}/array-embed.sbatch")
    assert [r[1:3] for r in wait_array_done(cluster, job)] == [["FAILED", "2:0"]]
    assert output(cluster, f"{WORK}/noinput-{job}_0.out").startswith(
        "metalslurm-example: INPUT is not set: give the text file to embed")


# ---- the pipeline: stage 2 after stage 1, and never after a failed stage 1 ---------------

def run_pipeline(cluster, workdir: str, env: str = "") -> tuple[str, str]:
    out = cluster.ctl(f"cd {WORK} && runuser -u alice -- env {env} bash {EX}/pipeline.sh "
                      f"{WORK}/raw.txt {workdir} 4").stdout
    ids = re.findall(r"job (\d+)", out)
    assert len(ids) == 2, out
    assert f"job {ids[1]}, after {ids[0]} succeeds" in out, out
    return ids[0], ids[1]


def test_pipeline_runs_stage_2_after_stage_1_succeeded(cluster):
    cluster.ctl(f"(seq 1 60; seq 1 60; echo; echo '   ') | sed 's/^[0-9]/text &/' > {WORK}/raw.txt"
                f" && chown alice {WORK}/raw.txt")
    first, second = run_pipeline(cluster, f"{WORK}/pipe-ok")
    assert cluster.wait_until_done(first) == "COMPLETED"
    rows = wait_array_done(cluster, second)
    assert sorted((r[0], r[1]) for r in rows) == [(f"{second}_{i}", "COMPLETED") for i in range(4)]
    end_first = cluster.sacct_rows(first, "End")[0][0]
    assert all(r[3] >= end_first for r in rows), (end_first, rows)
    assert cluster.ctl(f"wc -l < {WORK}/pipe-ok/corpus.txt").stdout.strip() == "60"
    embedded = cluster.ctl(f"cat {WORK}/pipe-ok/embeddings/*.jsonl | wc -l").stdout.strip()
    assert embedded == "60"


def test_pipeline_cancels_stage_2_when_stage_1_fails(cluster):
    """PYTHON=false makes stage 1 fail (the job's environment is the submitter's): Slurm
    cancels stage 2 (--kill-on-invalid-dep) instead of leaving it pending forever."""
    first, second = run_pipeline(cluster, f"{WORK}/pipe-fail", env="PYTHON=false")
    assert cluster.wait_until_done(first) == "FAILED"
    wait_for(f"stage 2 ({second}) to be cancelled",
             lambda: cluster.final_state(second) == "CANCELLED", timeout=120)
    assert cluster.ctl(f"ls {WORK}/pipe-fail").stdout.split() == ["prepare-" + first + ".out"]


# ---- spot-safe: a real 2-node training run (JAX on CPUs), requeued, resumed --------------

SPOT = f"{WORK}/spot"
SPOT_STEPS = 900


def events(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def newest_checkpoint(cluster, directory: str) -> int:
    names = cluster.ctl(f"ls {directory} 2>/dev/null", check=False).stdout.split()
    steps = [int(m.group(1)) for n in names if (m := re.fullmatch(r"step-(\d{8})\.npz", n))]
    return max(steps, default=0)


@pytest.fixture(scope="module")
def train_env(cluster):
    """The example's environment, built once for the cluster on shared storage by
    setup-train-env.sh on a compute node, from wheels this host downloaded (the nodes
    install offline, as from a site mirror)."""
    python = cluster.on("gpu-001", "python3 -c 'import sys; print(sys.version_info[1])'")
    python = f"3.{python.stdout.strip()}"
    tar = subprocess.run(["tar", "-C", str(train_wheels(python)), "-c", "."], capture_output=True,
                         check=True).stdout
    cluster.ctl(f"rm -rf {TRAIN_ENV} {TRAIN_ENV}.lock {WHEELHOUSE} && mkdir -p {WHEELHOUSE}")
    subprocess.run(["podman", "exec", "-i", f"{cluster.name}-ctl", "tar", "-C", WHEELHOUSE,
                    "--no-same-owner", "-x"], input=tar, check=True)
    setup = (f"srun --nodes=1 --ntasks=1 --nodelist=gpu-001 --time=10 env PIP_NO_INDEX=1 "
             f"PIP_FIND_LINKS={WHEELHOUSE} {EX}/setup-train-env.sh")
    first = cluster.ctl(setup).stdout
    again = cluster.ctl(setup).stdout
    yield first, again
    cluster.ctl(f"rm -rf {TRAIN_ENV} {TRAIN_ENV}.lock {WHEELHOUSE}")


def test_the_training_environment_is_built_once_on_shared_storage(train_env):
    first, again = train_env
    assert "metalslurm-example: building /shared/envs/train-cpu with Python 3.13" in first, first
    assert "jax 0.12.0.1 devices [CpuDevice(id=0)] ray 2.60.0" in first, first
    assert again.strip() == ("metalslurm-example: /shared/envs/train-cpu is up to date "
                             "(jax 0.12.0.1 ray 2.60.0)"), again


# ---- online: jobs reach the package index through the host's TLS-inspecting proxy -------

INDEX = "https://pypi.org/simple/"
# One small wheel of the environment's own pins (a pure-Python wheel of about 70 kB).
SMALL_PIN = next(line.strip() for line in
                 (REPO / "examples/python/requirements-train-cpu.txt").read_text().splitlines()
                 if line.startswith("idna=="))
ONLINE_ENV = f"{WORK}/train-cpu-online"
FULL_ONLINE = "METALSLURM_E2E_ONLINE_TRAIN_ENV"


def index_unreachable() -> str | None:
    """Why this host cannot reach the package index (None when it can), asked with a short
    timeout so an offline host skips at once."""
    try:
        with urllib.request.urlopen(f"{INDEX}idna/", timeout=5) as reply:
            reply.read(1)
    except (OSError, urllib.error.URLError) as exc:
        return f"this host cannot reach {INDEX} ({exc}): the online checks need the index"
    return None


@pytest.fixture(scope="module")
def online():
    reason = index_unreachable()
    if reason:
        pytest.skip(reason)


def test_a_job_downloads_a_wheel_from_the_index_with_the_nodes_trust(cluster, online):
    """pip in a fresh virtual environment (as setup-train-env.sh makes it) and Python's own
    TLS (the OpenSSL default bundle, which curl reads too) in alice's job reach the real
    index: through a TLS-inspecting proxy only because the node trusts the host's CAs.
    One small pinned wheel instead of the environment's 220 MB."""
    script = ("set -e; d=$(mktemp -d); python3 -m venv $d/venv; "
              "$d/venv/bin/pip download --quiet --disable-pip-version-check --no-deps "
              f"--only-binary=:all: --dest $d/wheels {SMALL_PIN}; ls $d/wheels; "
              "python3 -c 'import urllib.request as u; "
              f"print(\"index\", u.urlopen(\"{INDEX}idna/\", timeout=30).status)'; "
              "rm -rf $d")
    proc = cluster.ctl(f"cd {WORK} && runuser -u alice -- srun --nodes=1 -w gpu-001 "
                       f"--time=5 bash -c {quoted(script)}", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    version = SMALL_PIN.split("==")[1]
    assert proc.stdout.split() == [f"idna-{version}-py3-none-any.whl", "index", "200"], (
        proc.stdout, proc.stderr[-3000:])


@pytest.mark.skipif(not os.environ.get(FULL_ONLINE), reason=(
    f"the full online build downloads about 220 MB; set {FULL_ONLINE}=1 to run it (the "
    "one-wheel download above shows the same trust path)"))
def test_setup_train_env_builds_the_environment_online(cluster, online):
    """setup-train-env.sh as docs/how-to/training.md's online path runs it: no wheelhouse, the real
    index, in a job of alice's, into its own directory (the offline one stays as it is)."""
    proc = cluster.ctl(f"cd {WORK} && runuser -u alice -- srun --nodes=1 -w gpu-001 --time=20 "
                       f"env TRAIN_ENV={ONLINE_ENV} {EX}/setup-train-env.sh", check=False)
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
        assert "jax 0.12.0.1 devices [CpuDevice(id=0)] ray 2.60.0" in proc.stdout, proc.stdout
        imported = cluster.on("gpu-001", f"{ONLINE_ENV}/bin/python -c 'import jax; "
                                         "print(jax.__version__)'").stdout.strip()
        assert imported == "0.12.0.1"
    finally:
        cluster.ctl(f"rm -rf {ONLINE_ENV} {ONLINE_ENV}.lock")


def requeued(cluster, job: str, directory: str, restarts: int) -> bool:
    """Whether ``job`` is back in the queue after its ``restarts``-th run. A job that ended
    instead fails the wait at once, with its output (a run that was not requeued)."""
    fields = cluster.ctl(f"scontrol show job {job} | grep -o -E '(JobState|Restarts)=\\S+'",
                         check=False).stdout.split()
    info = dict(f.split("=", 1) for f in fields)
    if info.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                                "OUT_OF_MEMORY", "PREEMPTED"):
        text = cluster.ctl(f"tail -n 40 {directory}/train-{job}.out", check=False).stdout
        raise AssertionError(f"job {job} ended {info['JobState']} after run {restarts} "
                             f"instead of being requeued:\n{text}")
    return info.get("JobState") == "PENDING" and info.get("Restarts") == str(restarts)


def ended_otherwise(cluster, job: str, state: str, text: str) -> str:
    """Why a job did not complete, the facts first (a log's tail shows a message's first
    lines): every run's and step's row in sacct, then the last lines of its output."""
    steps = cluster.ctl(f"sacct --duplicates --noheader --parsable2 --jobs={job} "
                        "--format=JobID,State,ExitCode,Start,End,NodeList", check=False).stdout
    tail = text.splitlines()[-15:]
    return "\n".join([f"job {job} ended {state}; sacct (JobID|State|ExitCode|Start|End|Nodes):",
                      *steps.splitlines(), "the output's last lines:", *tail])


@pytest.fixture(scope="module")
def spot_run(cluster, train_env):
    """The spot-safe example on gpu-001/002, with its afternotok follow-up: requeued by
    scontrol in the middle (as preemption does), then sent the time-limit warning
    (SIGUSR1, what --signal=USR1@120 sends), so it runs three times and completes."""
    cluster.ctl(f"mkdir -p {SPOT} && cp /usr/share/common-licenses/GPL-3 {SPOT}/corpus.txt "
                f"&& chown -R alice {SPOT}")
    ckpt = f"{SPOT}/ckpt"
    job = sbatch(cluster, f"-w {STATIC} --output={SPOT}/train-%j.out --export=ALL,"
                          f"DATA={SPOT}/corpus.txt,CHECKPOINT_DIR={ckpt},STEPS={SPOT_STEPS},"
                          f"CHECKPOINT_EVERY=50 {EX}/spot-safe.sbatch")
    follow = sbatch(cluster, f"--dependency=afternotok:{job} --kill-on-invalid-dep=yes "
                             f"--output={SPOT}/followup-%j.out --export=ALL,TRAIN_JOB={job} "
                             f"{EX}/spot-followup.sbatch")
    seen = {}  # run number: the newest checkpoint when the run was told to stop
    for number, stop in ((1, f"scontrol requeue {job}"), (2, f"scancel --signal=USR1 {job}")):
        # Stop each run once it has written a periodic checkpoint of its own.
        after = newest_checkpoint(cluster, ckpt)
        wait_for(f"run {number} to checkpoint past step {after}",
                 lambda a=after: newest_checkpoint(cluster, ckpt) > a, timeout=180, every=0.3)
        seen[number] = newest_checkpoint(cluster, ckpt)
        cluster.ctl(stop)
        wait_for(f"job {job} to be pending again",
                 lambda n=number: requeued(cluster, job, SPOT, restarts=n), timeout=60,
                 every=0.5)
        cluster.release_requeued(job)
    state = cluster.wait_until_done(job, timeout=300)
    text = output(cluster, f"{SPOT}/train-{job}.out")
    return job, follow, state, text, seen


def test_spot_safe_training_completes_after_two_stops(cluster, spot_run):
    job, _, state, text, _ = spot_run
    assert state == "COMPLETED", ended_otherwise(cluster, job, state, text)
    rows = cluster.sacct_rows(job, "State,NodeList", duplicates=True)
    assert rows == [["REQUEUED", STATIC], ["REQUEUED", STATIC], ["COMPLETED", STATIC]], rows
    assert re.findall(r"^run (\d) of job \d+ on (\S+)$", text, re.M) == [
        ("1", STATIC), ("2", STATIC), ("3", STATIC)]
    # Run 2's time-limit stop reached the batch script through its record, since removed.
    left = cluster.ctl(f"ls -a {SPOT}/ckpt").stdout.split()
    assert [n for n in left if n.startswith(".time-limit-stop.")] == [], left


def test_spot_safe_runs_resume_at_the_step_after_their_checkpoint(spot_run):
    """Each run starts from the newest checkpoint, the one written when it was told to stop
    (SIGTERM from the requeue, SIGUSR1 from the warning), and its first step is the next
    one: the step number continues, it never restarts."""
    *_, text, seen = spot_run
    log = events(text)
    starts = [e for e in log if e["event"] == "start"]
    assert [(e["restart_count"], e["world"]) for e in starts] == [(0, 2), (1, 2), (2, 2)]
    assert starts[0]["resumed_from"] == 0
    assert [e["checkpoint"] for e in starts[1:]] == ["SIGTERM", "SIGUSR1"], starts
    for run in (1, 2):
        resumed = starts[run]["resumed_from"]
        assert resumed >= seen[run], (run, resumed, seen)
        first_step = next(e["step"] for e in log[log.index(starts[run]):]
                          if e["event"] == "step")
        assert first_step == resumed + 1, (run, resumed, first_step)
    steps = [e["step"] for e in log if e["event"] == "step"]
    assert steps[-1] == SPOT_STEPS
    assert "checkpointed before the time limit: requeueing job" in text


def test_spot_safe_training_loss_falls(spot_run):
    *_, text, _ = spot_run
    losses = [e["loss"] for e in events(text) if e["event"] == "step"]
    # From about ln(76 characters) = 4.3 at step 1 to under 2.5: it learned the text.
    assert losses[0] > 4.0 and max(losses[-5:]) < 2.5, losses


def test_spot_safe_ranks_hold_the_same_parameters(spot_run):
    """Each rank's digest of its own copy of the parameters, after the first step of every
    run and at the end: the data-parallel update keeps the two nodes' replicas equal."""
    *_, text, _ = spot_run
    digests: dict[int, dict[int, str]] = {}
    for e in events(text):
        if e["event"] == "params":
            digests.setdefault(e["step"], {})[e["rank"]] = e["sha256"]
    assert SPOT_STEPS in digests and len(digests) >= 4, digests
    for step, by_rank in digests.items():
        assert sorted(by_rank) == [0, 1] and by_rank[0] == by_rank[1], (step, by_rank)


def test_afternotok_follow_up_is_cancelled_when_the_training_completes(cluster, spot_run):
    """Two requeues are not failures: the follow-up never ran, and Slurm cancelled it once
    the training completed (--kill-on-invalid-dep)."""
    job, follow, *_ = spot_run
    wait_for(f"follow-up {follow} to be cancelled",
             lambda: cluster.final_state(follow) == "CANCELLED", timeout=120)
    assert cluster.sacct_rows(follow, "Start") == [["None"]]
    left = cluster.ctl(f"ls {SPOT} {WORK}").stdout.split()
    assert f"followup-{follow}.out" not in left and f"spot-train-{job}.failed" not in left


def test_afternotok_follow_up_runs_when_the_training_fails(cluster, train_env):
    """A training job that fails (its DATA is missing: the preflight stops it, exit 2):
    the follow-up runs and reports it."""
    job = sbatch(cluster, f"-w {STATIC} --output={SPOT}/bad-%j.out --export=ALL,"
                          f"DATA={SPOT}/missing.txt,CHECKPOINT_DIR={SPOT}/ckpt-bad "
                          f"{EX}/spot-safe.sbatch")
    follow = sbatch(cluster, f"--dependency=afternotok:{job} --kill-on-invalid-dep=yes "
                             f"--exclude={ELASTIC} --output={SPOT}/followup-%j.out "
                             f"--export=ALL,TRAIN_JOB={job},CHECKPOINT_DIR={SPOT}/ckpt-bad "
                             f"{EX}/spot-followup.sbatch")
    assert cluster.wait_until_done(job) == "FAILED"
    assert cluster.wait_until_done(follow) == "COMPLETED"
    report = output(cluster, f"{WORK}/spot-train-{job}.failed").splitlines()
    assert re.fullmatch(rf"training job {job} failed; follow-up {follow} on gpu-00[12]",
                        report[0]), report
    assert re.fullmatch(rf"{job}\|FAILED\|2:0\|gpu-\[001-002\]\|00:00:\d\d", report[1]), report
    assert report[-1] == "newest checkpoint: none", report
    assert output(cluster, f"{SPOT}/bad-{job}.out").startswith(
        f"metalslurm-example: DATA {SPOT}/missing.txt is not a readable file on gpu-001")


# ---- Ray inside one allocation: a sweep over 2 nodes, and nothing left behind ------------

# (The brackets keep pgrep from finding the shell that runs it.)
RAY_PROCESSES = "pgrep -a -f '[r]aylet|[g]cs_server|[r]ay::' || true"


def ray_processes(cluster) -> dict[str, list[str]]:
    return {n: cluster.on(n, RAY_PROCESSES).stdout.splitlines() for n in ("gpu-001", "gpu-002")}


def test_ray_sweep_runs_its_trials_on_both_nodes_and_leaves_no_ray_process(cluster, train_env):
    cluster.ctl(f"mkdir -p {SPOT} && cp /usr/share/common-licenses/GPL-3 {SPOT}/ray-corpus.txt")
    job = sbatch(cluster, f"-w {STATIC} --output={WORK}/ray-%j.out "
                          f"--export=ALL,DATA={SPOT}/ray-corpus.txt {EX}/ray-sweep.sbatch")
    state = cluster.wait_until_done(job)
    text = output(cluster, f"{WORK}/ray-{job}.out")
    assert state == "COMPLETED", text[-3000:]
    log = events(text)
    assert [e for e in log if e["event"] == "cluster"] == [
        {"event": "cluster", "nodes": 2, "cpus": 4}]
    trials = [e for e in log if e["event"] == "trial"]
    assert [t["lr"] for t in trials] == [1, 3, 10, 30, 100, 300, 1000, 3000]
    assert {t["host"] for t in trials} == {"gpu-001", "gpu-002"}, trials
    [best] = [e for e in log if e["event"] == "best"]
    lowest = min(trials, key=lambda t: t["loss"])
    assert (best["lr"], best["loss"]) == (lowest["lr"], lowest["loss"])
    # The sweep found something: a middle learning rate beats both ends of the grid, and
    # the largest diverges (above the ln(76) = 4.3 of a uniform guess).
    assert best["lr"] not in (1, 3000) and trials[-1]["loss"] > 4.3, trials
    assert ray_processes(cluster) == {"gpu-001": [], "gpu-002": []}


# A Ray client dialling the sweep's head on gpu-001 (Ray's default port): the address goes in.
RAY_DIAL = ("import ray\nray.init(address='{}:6379', log_to_driver=False)\n"
            "print('connected', ray.cluster_resources())\n")
# What Ray 2.60's GCS answers a client without the head's token (the client logs it on every
# retry; the dial is cut short after it, Ray would retry for a minute).
RAY_REFUSED = re.compile(r"Unauthenticated: RPC error: InvalidAuthToken: Authentication token "
                         r"is missing or incorrect")


def test_a_cancelled_ray_sweep_refuses_other_users_and_leaves_no_ray_process(cluster, train_env):
    cluster.ctl(f"mkdir -p {SPOT} && cp /usr/share/common-licenses/GPL-3 {SPOT}/ray-corpus.txt")
    job = sbatch(cluster, f"-w {STATIC} --output={WORK}/ray-cancel-%j.out "
                          f"--export=ALL,DATA={SPOT}/ray-corpus.txt,"
                          f"SWEEP_ARGS='--steps 10000000' {EX}/ray-sweep.sbatch")
    wait_for("the Ray cluster to run the trials",
             lambda: '"event": "cluster"' in cluster.ctl(f"cat {WORK}/ray-cancel-{job}.out",
                                                         check=False).stdout,
             timeout=180)
    dial_head = quoted(RAY_DIAL.format(cluster.address("gpu-001")))
    try:
        running = ray_processes(cluster)
        assert all(any("raylet" in p for p in procs) for procs in running.values()), running
        # The job's token: alice's alone. bob, on the login node, dials her head without it,
        # and with a token of his own: refused both times.
        token = f"/home/alice/.ray/slurm-{job}.token"
        assert cluster.ctl(f"stat -c '%U %a' {token}").stdout.strip() == "alice 600"
        assert cluster.login(f"cat {token}", user="bob", check=False).returncode != 0
        for env in ("", "env RAY_AUTH_MODE=token RAY_AUTH_TOKEN=" + "0" * 64 + " "):
            dial = cluster.login(f"{env}timeout 30 {TRAIN_ENV}/bin/python -c "
                                 f"{dial_head}", user="bob", check=False)
            assert dial.returncode != 0 and "connected" not in dial.stdout, (env, dial.stdout)
            assert RAY_REFUSED.search(dial.stdout + dial.stderr), (env, dial.stderr[-2000:])
    finally:
        cluster.ctl(f"scancel {job}")
    assert cluster.wait_until_done(job) == "CANCELLED by 0"  # root's scancel
    wait_for("every Ray process to be gone",
             lambda: ray_processes(cluster) == {"gpu-001": [], "gpu-002": []}, timeout=60)
