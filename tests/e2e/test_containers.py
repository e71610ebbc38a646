"""Containers in jobs on the shared Debian 13 cluster (Slurm 24.11): Enroot and Pyxis
installed by the enroot_pyxis role, run by an unprivileged user through srun and sbatch.

The image is built here, on shared storage, without a registry: a small root file system
copied from a node's own programs (bash and a few coreutils with their libraries), with
no device nodes under /dev (as 'enroot import' makes images), a marker file, and
PYTORCH_VERSION in its environment (which turns Enroot's PyTorch hook on).
"""

from __future__ import annotations

import pytest

from tests.e2e.conftest import E2E_REGISTRY, LocalStack, vendor_dir, wait_for

pytestmark = pytest.mark.skipif(vendor_dir() is None, reason=(
    "no mirror of the Enroot/Pyxis artifacts on this machine (../shared/vendor next to the "
    "checkout, or METALSLURM_VENDOR_DIR): the cluster was brought up without containers"))

IMAGE = "/shared/images/e2e.sqsh"
MARKER = "metalslurm e2e image"
NODES = "gpu-[001-002]"
BUILD_IMAGE = r"""set -e
r=$(mktemp -d)
mkdir -p $r/etc $r/usr/bin $r/tmp $r/dev $r/proc $r/sys $r/run $r/var/run
ln -s usr/bin $r/bin
for b in bash sh cat printenv hostname touch ls; do
    p=$(command -v $b); cp -L $p $r/usr/bin/
    for lib in $(ldd $p | grep -o '/[^ ]*'); do mkdir -p $r$(dirname $lib); cp -L $lib $r$lib; done
done
echo '""" + MARKER + r"""' > $r/etc/metalslurm-e2e-image
echo PYTORCH_VERSION=2.5.0 > $r/etc/environment
mkdir -p /shared/images
mksquashfs $r """ + IMAGE + r""" -noappend -all-root -quiet >/dev/null
rm -rf $r
find $(dirname """ + IMAGE + r""") -name e2e.sqsh -size +100k
"""
# Opens each fake GPU: "No such device or address" is the device cgroup letting the open
# through to a driver that is not there; "Operation not permitted" is the cgroup refusing.
PROBE = r"""#!/bin/bash
for i in 0 1 2 3 4 5 6 7; do
    err=$( (exec 3</dev/nvidia$i) 2>&1 ); echo "nvidia$i ${err##*: }"
done
echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
cat /etc/metalslurm-e2e-image
"""


@pytest.fixture(scope="module")
def image(debian13: LocalStack) -> str:
    assert debian13.up.returncode == 0, debian13.up.stdout[-3000:]
    out = debian13.on("gpu-001", BUILD_IMAGE).stdout
    assert IMAGE in out
    debian13.on("ctl", "printf '%s' " + _quote(PROBE) + " > /shared/probe.sh"
                " && chmod 755 /shared/probe.sh")
    return IMAGE


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def srun(cluster: LocalStack, args: str) -> list[str]:
    proc = cluster.ctl(f"srun {args}", user="alice")
    return proc.stdout.splitlines()


def test_a_container_step_runs_in_the_image_with_exactly_its_two_gpus(debian13, image):
    lines = srun(debian13, f"-w gpu-001 --gres=gpu:h100:2 --container-image={image} "
                           "--container-mounts=/shared:/shared /shared/probe.sh")
    assert lines == ["nvidia0 No such device or address", "nvidia1 No such device or address",
                     *[f"nvidia{i} Operation not permitted" for i in range(2, 8)],
                     "CUDA_VISIBLE_DEVICES=0,1", MARKER]


def test_sbatch_container_image_runs_the_steps_in_the_image(debian13, image):
    script = ("#!/bin/bash\n#SBATCH --container-image=" + image + "\n"
              "#SBATCH --container-mounts=/shared:/shared\n#SBATCH -w gpu-002\n"
              "cat /etc/metalslurm-e2e-image > /shared/sbatch-$SLURM_JOB_ID.out\n")
    debian13.ctl("printf '%s' " + _quote(script) + " > /home/alice/container.sbatch")
    job = debian13.submit("alice", "--parsable /home/alice/container.sbatch")
    assert debian13.wait_until_done(job) == "COMPLETED"
    assert debian13.ctl(f"cat /shared/sbatch-{job}.out").stdout.strip() == MARKER


def test_a_two_node_step_writes_through_its_shared_mount_from_each_node(debian13, image):
    debian13.ctl("rm -rf /shared/two-node && mkdir -m 1777 /shared/two-node")
    srun(debian13, f"-w {NODES} -N2 --ntasks-per-node=1 --container-image={image} "
                   "--container-mounts=/shared/two-node:/out "
                   "bash -c 'hostname > /out/$SLURM_PROCID'")
    out = debian13.ctl("cat /shared/two-node/0 /shared/two-node/1").stdout.split()
    assert out == ["gpu-001", "gpu-002"]


def test_a_named_container_keeps_what_an_earlier_step_wrote(debian13, image):
    debian13.ctl("rm -f /shared/named.out")
    wrap = (f"srun --container-image={image} --container-name=keep touch /etc/step-one && "
            "srun --container-name=keep --container-mounts=/shared:/shared "
            "bash -c 'ls /etc/step-one > /shared/named.out'")
    job = debian13.submit("alice", f"--parsable -w gpu-001 --wrap \"{wrap}\"")
    assert debian13.wait_until_done(job) == "COMPLETED"
    assert debian13.ctl("cat /shared/named.out").stdout.strip() == "/etc/step-one"


def test_the_pytorch_hook_gives_every_task_master_addr_rank_and_world_size(debian13, image):
    lines = srun(debian13, f"-w {NODES} -N2 --ntasks-per-node=1 --container-image={image} "
                           "bash -c 'echo $(hostname) $MASTER_ADDR $RANK $WORLD_SIZE'")
    assert sorted(lines) == ["gpu-001 gpu-001 0 2", "gpu-002 gpu-001 1 2"]


def test_a_job_without_a_container_sees_no_container_environment(debian13, image):
    env = srun(debian13, "-w gpu-001 --gres=gpu:h100:2 printenv")
    names = {line.split("=", 1)[0] for line in env}
    assert "CUDA_VISIBLE_DEVICES=0,1" in env
    assert "SLURM_JOB_ID" in names
    assert not {n for n in names if n.startswith(("ENROOT", "PYXIS", "MASTER_ADDR"))}


def test_srun_on_every_submit_host_offers_the_container_options(debian13, image):
    for node in ("ctl", "gpu-001"):
        assert "--container-image" in debian13.on(node, "srun --help").stdout


def test_cluster_users_get_the_registry_credentials_mode_0600(debian13, image):
    out = debian13.ctl("stat -c '%U %a' /home/alice/.config/enroot/.credentials && "
                       "grep -c '^machine " + E2E_REGISTRY + " login e2e-robot ' "
                       "/home/alice/.config/enroot/.credentials").stdout.split()
    assert out == ["alice", "600", "1"]


def test_an_import_from_an_unreachable_registry_names_the_registry_and_image(debian13, image):
    # The controller's own address, where no registry listens: nothing leaves the cluster.
    registry = "10.78.13.10:5000"
    proc = debian13.ctl(f"srun -w gpu-001 --container-image={registry}#team/model:1 true",
                        user="alice", check=False)
    assert proc.returncode != 0
    assert registry in proc.stderr and "team/model" in proc.stderr, proc.stderr[-2000:]


def test_pyxis_was_built_against_this_nodes_slurm(debian13, image):
    record = debian13.on("gpu-001", "cat /usr/local/lib/slurm/.spank_pyxis.build").stdout
    release = debian13.on("gpu-001", "srun --version").stdout.split()[-1]
    assert record.splitlines()[1].startswith(f"slurm {release} libslurm-dev ")
    wait_for("the container jobs' nodes to be idle", lambda: "idle" in debian13.ctl(
        f"sinfo --noheader --nodes={NODES} --format=%T").stdout)
