"""The example job scripts' own checks (examples/lib/preflight.sh), run for real by bash
with stand-in srun and scontrol programs on PATH that record every call: a script whose
need is not met stops with a sentence naming it, before any srun step starts."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
HOST = socket.gethostname().split(".")[0]
GPU_SCRIPTS = ["torchrun-fsdp.sbatch", "deepspeed-srun.sbatch", "deepspeed-launcher.sbatch",
               "container-train.sbatch"]

# Stand-ins for Slurm's clients: each call is appended to $CALLS; srun answers --help and
# --mpi=list from $SRUN_HELP and $SRUN_MPI_LIST and a step with $SRUN_RC (writing
# $SRUN_STOP_RECORD first, as the training's rank 0 does on SIGUSR1), scontrol expands
# nothing but "gpu-[001-002]".
SRUN = """#!/bin/bash
echo "srun $*" >> "$CALLS"
case "$1" in
    --help) printf '%s\\n' "$SRUN_HELP" ;;
    --mpi=list) printf '%s\\n' "$SRUN_MPI_LIST" ;;
    *) if [[ -n "${SRUN_STOP_RECORD:-}" ]]; then
           echo '{"step": 7, "signal": "SIGUSR1"}' > "$SRUN_STOP_RECORD"
       fi
       exit "${SRUN_RC:-0}" ;;
esac
"""
SCONTROL = """#!/bin/bash
echo "scontrol $*" >> "$CALLS"
[[ "$*" == "show hostnames gpu-[001-002]" ]] && printf 'gpu-001\\ngpu-002\\n'
if [[ "$*" == "show job $SLURM_JOB_ID" ]]; then
    # A slurmctld too busy to answer the first $SCONTROL_TIMEOUTS times.
    asked=$(grep -c "^scontrol show job" "$CALLS")
    if (( asked <= ${SCONTROL_TIMEOUTS:-0} )); then
        echo "slurm_load_jobs error: Socket timed out on send/recv operation" >&2
        exit 1
    fi
    echo "JobId=$SLURM_JOB_ID JobName=x"
    echo "   Command=$SUBMITTED_SCRIPT"
    # An array's other tasks (scontrol show job <array id> prints every one): more than a
    # pipe holds, so a reader that stops early kills scontrol with SIGPIPE.
    for (( i = 0; i < ${SCONTROL_MORE_JOBS:-0}; i++ )); do
        printf 'JobId=%s ArrayTaskId=%s\\n   Command=%s\\n' "$i" "$i" "$SUBMITTED_SCRIPT"
    done
fi
exit 0
"""
# sleep: recorded, not slept.
SLEEP = """#!/bin/bash
echo "sleep $*" >> "$CALLS"
"""


@pytest.fixture
def slurm(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", SRUN), ("scontrol", SCONTROL), ("sleep", SLEEP)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    calls = tmp_path / "calls"
    calls.touch()
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "CALLS": str(calls),
           "METALSLURM_EXAMPLES": str(EXAMPLES), "SLURM_JOB_ID": "42",
           "SLURM_JOB_NODELIST": "gpu-[001-002]", "SLURM_JOB_NUM_NODES": "2",
           "SRUN_HELP": "      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH",
           "SRUN_MPI_LIST": "MPI plugin types are...\n\tnone\n\tcray_shasta\n\tpmix\n"
                            "specific pmix plugin versions available: pmix_v5"}

    def run(script: str, *args: str, **overrides: str | None) -> subprocess.CompletedProcess:
        full = {**env, **overrides}
        full = {k: v for k, v in full.items() if v is not None}
        return subprocess.run(["bash", str(EXAMPLES / script), *args], env=full,
                              capture_output=True, text=True, cwd=tmp_path, timeout=60)

    run.calls = lambda: calls.read_text().splitlines()  # type: ignore[attr-defined]
    run.env = env  # type: ignore[attr-defined]
    return run


def srun_steps(calls: list[str]) -> list[str]:
    """The srun calls that would start job steps (not --help or --mpi=list)."""
    return [c for c in calls
            if c.startswith("srun ") and c not in ("srun --help", "srun --mpi=list")]


@pytest.mark.parametrize("script", sorted(p.name for p in EXAMPLES.glob("*.sbatch")))
def test_a_job_script_run_outside_slurm_says_to_submit_it_with_sbatch(slurm, script):
    result = slurm(script, SLURM_JOB_ID=None)
    assert result.returncode == 2
    assert result.stderr.startswith(
        "metalslurm-example: not inside a Slurm job: submit this script with sbatch"), result.stderr
    assert slurm.calls() == []


def test_a_job_script_finds_its_directory_through_a_busy_slurmctld(slurm):
    """Slurm runs a copy of the script: its own directory (for lib/) comes from the job's
    Command, asked again while slurmctld times out."""
    result = slurm("spot-safe.sbatch", METALSLURM_EXAMPLES=None, SCONTROL_TIMEOUTS="2",
                   SLURM_SUBMIT_DIR="/nonexistent", SLURM_JOB_NAME="spot-train",
                   SUBMITTED_SCRIPT=str(EXAMPLES / "spot-safe.sbatch"))
    # lib/preflight.sh was found and ran: it stops at the next need, DATA.
    assert result.returncode == 2, result.stderr
    assert result.stderr == ("metalslurm-example: DATA is not set: give a text file to train on "
                             "(sbatch --export=ALL,DATA=...)\n")
    assert slurm.calls() == ["scontrol show job 42", "sleep 5", "scontrol show job 42",
                             "sleep 5", "scontrol show job 42"]


@pytest.mark.parametrize("script", sorted(p.name for p in EXAMPLES.glob("*.sbatch")))
def test_a_job_script_of_a_large_array_reads_its_directory_once(slurm, script):
    """The array's last task to start has the array's id: scontrol lists every task (here
    2,000, about 150 kB); the first Command is read, once, and the script goes on to its own
    checks."""
    result = slurm(script, METALSLURM_EXAMPLES=None, SCONTROL_MORE_JOBS="2000",
                   SUBMITTED_SCRIPT=str(EXAMPLES / script), SLURM_SUBMIT_DIR="/nonexistent",
                   SLURM_JOB_NAME="x")
    assert "lib/preflight.sh" not in result.stderr, result.stderr
    calls = slurm.calls()
    assert calls.count("scontrol show job 42") == 1 and "sleep 5" not in calls, calls


def test_a_job_script_whose_slurmctld_never_answers_says_what_to_set(slurm):
    result = slurm("spot-safe.sbatch", METALSLURM_EXAMPLES=None, SCONTROL_TIMEOUTS="99",
                   SUBMITTED_SCRIPT=str(EXAMPLES / "spot-safe.sbatch"))
    assert result.returncode == 2
    assert result.stderr == (
        "metalslurm-example: no lib/preflight.sh in '' (from scontrol show job 42): set "
        "METALSLURM_EXAMPLES to the examples' directory (sbatch --export=ALL,"
        "METALSLURM_EXAMPLES=...)\n")
    assert slurm.calls() == ["scontrol show job 42", "sleep 5"] * 6


@pytest.mark.parametrize("script", GPU_SCRIPTS)
def test_a_gpu_job_given_no_gpu_stops_before_any_step_starts(slurm, script):
    result = slurm(script, CUDA_VISIBLE_DEVICES=None)
    assert result.returncode == 2, result.stderr
    assert result.stderr == (f"metalslurm-example: this job has 0 GPU(s) on {HOST}, it needs 8: "
                             "submit it with --gres=gpu:8 to a partition with GPU nodes\n")
    assert srun_steps(slurm.calls()) == []


def test_a_job_given_two_gpus_where_it_needs_eight_says_both_numbers(slurm):
    result = slurm("torchrun-fsdp.sbatch", CUDA_VISIBLE_DEVICES="0,1")
    assert result.returncode == 2
    assert f"this job has 2 GPU(s) on {HOST}, it needs 8" in result.stderr


def test_gpus_without_device_files_mean_no_driver(slurm):
    """Slurm handed out GPUs (CUDA_VISIBLE_DEVICES) but the node has no /dev/nvidia0: this
    machine has no NVIDIA driver, so the check names the missing device file."""
    if Path("/dev/nvidia0").exists():
        pytest.skip("this machine has /dev/nvidia0")
    result = slurm("torchrun-fsdp.sbatch", CUDA_VISIBLE_DEVICES="0,1,2,3,4,5,6,7")
    assert result.returncode == 2
    assert result.stderr == (f"metalslurm-example: {HOST} has no /dev/nvidia0: the NVIDIA driver "
                             "is not loaded (metalslurm verify names the node's GPU problem)\n")
    assert srun_steps(slurm.calls()) == []


def test_container_training_without_pyxis_names_pyxis(slurm):
    result = slurm("container-train.sbatch", SRUN_HELP="      --mpi=MPI_TYPE")
    assert result.returncode == 2
    assert result.stderr == ("metalslurm-example: srun has no --container-image on this cluster: "
                             "Pyxis is not installed (metalslurm:containers) or plugstack.conf "
                             "does not load it\n")
    assert slurm.calls() == ["srun --help"]


def test_an_mpi_job_on_a_slurm_without_pmix_stops_before_starting_ranks(slurm):
    result = slurm("mpi-allreduce.sbatch", SRUN_MPI_LIST="MPI plugin types are...\n\tnone")
    assert result.returncode == 2
    assert "this Slurm has no PMIx plugin ('srun --mpi=list' does not list pmix)" in result.stderr
    assert srun_steps(slurm.calls()) == []


def test_an_array_task_without_input_names_the_setting(slurm):
    result = slurm("array-embed.sbatch", SLURM_ARRAY_TASK_ID="3", SLURM_ARRAY_TASK_MAX="9")
    assert result.returncode == 2
    assert result.stderr.startswith("metalslurm-example: INPUT is not set: give the text file")


def test_the_array_script_refuses_a_job_that_is_not_an_array(slurm):
    result = slurm("array-embed.sbatch", INPUT="/etc/hostname")
    assert result.returncode == 2
    assert "not an array job: submit with --array" in result.stderr


def spot_setup(tmp_path: Path) -> dict[str, str]:
    """A built environment (its stamp), a corpus, and tmp_path listed as shared."""
    env = tmp_path / "train-env"
    env.mkdir()
    (env / ".metalslurm-env").write_text("0123456789abcdef\n")
    (tmp_path / "corpus.txt").write_text("to be or not to be\n")
    (tmp_path / "shared-paths").write_text(f"{tmp_path}\n")
    return {"TRAIN_ENV": str(env), "DATA": str(tmp_path / "corpus.txt"),
            "CHECKPOINT_DIR": str(tmp_path / "ckpt"), "SLURM_SUBMIT_DIR": str(tmp_path),
            "SLURM_JOB_NAME": "spot-train",
            "METALSLURM_SHARED_PATHS_FILE": str(tmp_path / "shared-paths"),
            "NCCL_ENV_FILE": str(tmp_path / "absent")}


def test_a_spot_job_without_the_training_environment_says_how_to_build_it(slurm, tmp_path):
    result = slurm("spot-safe.sbatch", **{**spot_setup(tmp_path), "TRAIN_ENV": "/nonexistent"})
    assert result.returncode == 2
    assert result.stderr == (
        "metalslurm-example: no complete training environment at /nonexistent (TRAIN_ENV): build "
        f"it once with srun --nodes=1 --ntasks=1 {EXAMPLES}/setup-train-env.sh\n")
    assert srun_steps(slurm.calls()) == []


@pytest.mark.parametrize(("rc", "stopped", "requeued", "exit_code"), [
    (0, False, False, 0),      # trained to the last step
    (143, False, False, 143),  # SIGTERM: Slurm requeues (preemption, scontrol requeue) or ends it
    (0, True, True, 0),        # SIGUSR1, the time-limit warning: the script requeues the job
    (143, True, False, 143),   # a rank killed after the stop was recorded: not a clean stop
    (1, False, False, 1),
])
def test_a_spot_job_requeues_itself_only_after_the_time_limit_warning(
        slurm, tmp_path, rc, stopped, requeued, exit_code):
    record = tmp_path / "ckpt" / ".time-limit-stop.42.0"
    result = slurm("spot-safe.sbatch", **spot_setup(tmp_path), SRUN_RC=str(rc),
                   SRUN_STOP_RECORD=str(record) if stopped else None)
    assert result.returncode == exit_code, result.stderr
    [step] = srun_steps(slurm.calls())
    assert step == (f"srun --kill-on-bad-exit=1 {tmp_path}/train-env/bin/python "
                    f"{EXAMPLES}/python/train_charlm.py --data {tmp_path}/corpus.txt "
                    f"--checkpoint-dir {tmp_path}/ckpt --steps 2000 --checkpoint-every 100 "
                    f"--stop-record {record}")
    assert ("scontrol requeue 42" in slurm.calls()) is requeued
    # A record is for one run: the next run of the job never finds an old one.
    assert not record.exists()


def test_a_stale_stop_record_of_this_run_is_removed_before_the_training_starts(slurm, tmp_path):
    record = tmp_path / "ckpt" / ".time-limit-stop.42.0"
    record.parent.mkdir()
    record.write_text('{"step": 3, "signal": "SIGUSR1"}\n')
    result = slurm("spot-safe.sbatch", **spot_setup(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "scontrol requeue 42" not in slurm.calls()


def test_the_follow_up_without_the_training_job_names_the_setting(slurm):
    result = slurm("spot-followup.sbatch")
    assert result.returncode == 2
    assert result.stderr.startswith("metalslurm-example: TRAIN_JOB is not set")


def test_the_environment_setup_refuses_a_python_older_than_jax_needs(slurm, tmp_path):
    fake = tmp_path / "python-3.11"
    fake.write_text('#!/bin/bash\n[[ "$1" == -V ]] && { echo "Python 3.11.2"; exit 0; }\nexit 1\n')
    fake.chmod(0o755)
    result = subprocess.run(["bash", str(EXAMPLES / "setup-train-env.sh")],
                            env={**slurm.env, "PYTHON": str(fake),
                                 "TRAIN_ENV": str(tmp_path / "env")},
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert result.stderr.startswith(
        "metalslurm-example: Python 3.11.2 on ") and "too old for JAX 0.12" in result.stderr
    assert not (tmp_path / "env").exists()


def preflight(slurm, snippet: str, **env: str | None) -> subprocess.CompletedProcess:
    full = {**slurm.env, **env}
    return subprocess.run(["bash", "-c", f"source {EXAMPLES}/lib/preflight.sh; {snippet}"],
                          env={k: v for k, v in full.items() if v is not None},
                          capture_output=True, text=True, timeout=30)


def test_a_checkpoint_directory_on_a_local_disk_is_refused_naming_the_shared_paths(
        slurm, tmp_path):
    fstype = subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "--target", str(tmp_path)],
                            capture_output=True, text=True).stdout.split()[0]
    listing = tmp_path / "shared-paths"
    listing.write_text("# Paths every node of cluster c shares\n/home\n/shared\n")
    result = preflight(slurm, f"ms_require_shared_dir {tmp_path} CKPT_DIR",
                       METALSLURM_SHARED_PATHS_FILE=str(listing))
    assert result.returncode == 2
    assert result.stderr == (
        f"metalslurm-example: {tmp_path} (CKPT_DIR) is on {HOST}'s local {fstype} file system, "
        "not shared storage: every node of the job must see the same files; point CKPT_DIR at a "
        "shared path (/home /shared)\n")
    unlisted = preflight(slurm, f"ms_require_shared_dir {tmp_path} CKPT_DIR",
                         METALSLURM_SHARED_PATHS_FILE=str(tmp_path / "absent"))
    assert unlisted.stderr.endswith(
        "point CKPT_DIR at a shared path (ask your administrator which paths are shared)\n")


def test_a_directory_under_a_path_the_cluster_shares_is_taken_as_shared(slurm, tmp_path):
    """The local cluster's /shared is a bind mount of one host directory (ext4) in every
    node: shared, though not a network file system; the node's list says so."""
    (tmp_path / "ckpt").mkdir()
    listing = tmp_path / "shared-paths"
    listing.write_text(f"# listed\n/home\n{tmp_path}/\n")
    result = preflight(slurm, f"ms_require_shared_dir {tmp_path}/ckpt/../ckpt CKPT_DIR && echo ok",
                       METALSLURM_SHARED_PATHS_FILE=str(listing))
    assert (result.returncode, result.stdout) == (0, "ok\n"), result.stderr
    sibling = preflight(slurm, f"ms_require_shared_dir {tmp_path}/ckpt CKPT_DIR",
                        METALSLURM_SHARED_PATHS_FILE=str(tmp_path / "absent"))
    assert sibling.returncode == 2


def test_a_missing_shared_directory_is_named(slurm, tmp_path):
    result = preflight(slurm, f"ms_require_shared_dir {tmp_path}/nope OUT_DIR")
    assert result.returncode == 2
    assert result.stderr.startswith(f"metalslurm-example: {tmp_path}/nope (OUT_DIR) does not exist")


def test_a_directory_on_nfs_is_taken_as_shared(slurm, tmp_path):
    findmnt = tmp_path / "bin" / "findmnt"
    findmnt.write_text("#!/bin/sh\necho nfs4\n")
    findmnt.chmod(0o755)
    result = preflight(slurm, f"ms_require_shared_dir {tmp_path} CKPT_DIR && echo shared",
                       METALSLURM_SHARED_PATHS_FILE="/nonexistent")
    assert (result.returncode, result.stdout) == (0, "shared\n"), result.stderr


@pytest.mark.parametrize(("job", "port"), [("42", "20042"), ("123456", "23456")])
def test_the_rendezvous_is_the_first_node_on_a_port_taken_from_the_job_id(slurm, job, port):
    result = preflight(slurm, 'ms_set_master; echo "$MASTER_ADDR $MASTER_PORT"', SLURM_JOB_ID=job)
    assert result.stdout == f"gpu-001 {port}\n", result.stderr


def test_the_nccl_environment_is_sourced_when_the_node_has_one(slurm, tmp_path):
    env_file = tmp_path / "nccl.env"
    env_file.write_text("export NCCL_SOCKET_IFNAME='=eth0'\n")
    result = preflight(slurm, 'ms_source_nccl_env; echo "$NCCL_SOCKET_IFNAME"',
                       NCCL_ENV_FILE=str(env_file))
    assert result.stdout == "=eth0\n"
    missing = preflight(slurm, "ms_source_nccl_env", NCCL_ENV_FILE=str(tmp_path / "none"))
    assert missing.returncode == 0
    assert "NCCL uses its own defaults" in missing.stderr


def run_python(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(EXAMPLES / "python" / script), *args],
                          capture_output=True, text=True, timeout=60, check=True)


def test_the_shards_of_the_embedding_example_cover_every_line_once(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"document number {i}\n" for i in range(103)))
    seen: list[int] = []
    for shard in range(7):
        out = tmp_path / f"shard-{shard}.jsonl"
        run_python("embed_shard.py", "--input", str(corpus), "--shard", str(shard),
                   "--num-shards", "7", "--output", str(out), "--batch-size", "5")
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert all(r["line"] % 7 == shard for r in rows)
        assert all(len(r["embedding"]) == 64 for r in rows)
        assert all(abs(sum(v * v for v in r["embedding"]) - 1) < 1e-4 for r in rows)
        seen += [r["line"] for r in rows]
    assert sorted(seen) == list(range(103))


def test_the_stand_in_embedding_tells_texts_apart_and_repeats_itself(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat\nthe cat sat\nquantum chromodynamics\n")
    out = tmp_path / "o.jsonl"
    run_python("embed_shard.py", "--input", str(corpus), "--shard", "0", "--num-shards", "1",
               "--output", str(out))
    a, b, c = (json.loads(line)["embedding"] for line in out.read_text().splitlines())
    assert a == b
    assert sum(x * y for x, y in zip(a, c, strict=True)) < 0.5


def test_stage_one_of_the_pipeline_drops_blank_and_repeated_lines(tmp_path):
    source, corpus = tmp_path / "raw.txt", tmp_path / "corpus.txt"
    source.write_text("b  one\n\n  a two \nb one\n\t\nc three\n")
    run_python("prepare_corpus.py", "--source", str(source), "--output", str(corpus))
    assert corpus.read_text() == "b one\na two\nc three\n"
    assert not os.path.exists(f"{corpus}.partial")


# ---- examples/slurm_rest_client.py: bad input stops before any request --------------------

def run_rest_client(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("SLURM_JWT", "SLURMRESTD_URL", "SLURM_USER")}
    return subprocess.run([sys.executable, str(EXAMPLES / "slurm_rest_client.py"), *args],
                          capture_output=True, text=True, check=False,
                          env={**clean, **env}, timeout=60)


@pytest.mark.parametrize(("env", "missing"), [
    ({"SLURMRESTD_URL": "http://127.0.0.1:9", "USER": "alice"}, "$SLURM_JWT"),
    ({"SLURM_JWT": "t", "USER": "alice"}, "--url or $SLURMRESTD_URL"),
])
def test_the_rest_client_names_what_is_missing(env, missing):
    proc = run_rest_client("jobs", env=env)
    assert proc.returncode == 2
    assert proc.stderr.startswith("slurm_rest_client: set ") and missing in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("content", "problem"), [
    (b"\x89PNG\r\n\x1a\n\x00", "cannot read it as text"),
    (b"sleep 1\n", "does not start with '#!'"),
    (None, "cannot read it as text"),
])
def test_the_rest_client_refuses_a_script_that_is_not_one(tmp_path, content, problem):
    script = tmp_path / "job.sbatch"
    if content is not None:
        script.write_bytes(content)
    proc = run_rest_client("submit", str(script), env={
        "SLURM_JWT": "t", "SLURMRESTD_URL": "http://127.0.0.1:9", "USER": "alice"})
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"slurm_rest_client: script {script}: ")
    assert problem in proc.stderr and "Traceback" not in proc.stderr


def test_the_rest_client_says_when_the_server_cannot_be_reached():
    proc = run_rest_client("jobs", env={"SLURM_JWT": "t", "SLURMRESTD_URL": "http://127.0.0.1:9",
                                        "USER": "alice"})
    assert proc.returncode == 1
    assert proc.stderr.startswith("slurm_rest_client: cannot reach http://127.0.0.1:9: ")
