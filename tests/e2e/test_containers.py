"""Containers in jobs on the shared Debian 13 cluster (Slurm 24.11): Enroot and Pyxis
installed by the enroot_pyxis role, run by an unprivileged user through srun and sbatch.

The image is built here, on shared storage, without a registry: a small root file system
copied from a node's own programs (bash and a few coreutils with their libraries), with
no device nodes under /dev (as 'enroot import' makes images), a marker file, and
PYTORCH_VERSION in its environment (which turns Enroot's PyTorch hook on).
"""

from __future__ import annotations

import pytest
import yaml
from ansible_collections.metalslurm.cluster.plugins.module_utils.containers import ARTIFACT_NAMES

from infra.ops.configure import ConfigureResult, run_playbook
from tests.e2e.cluster import (
    APT_GET,
    BUILD_IMAGE,
    E2E_REGISTRY,
    IMAGE,
    MARKER,
    PROBE,
    STACKS,
    LocalStack,
    quoted,
    vendor_dir,
    wait_for,
)

pytestmark = pytest.mark.skipif(vendor_dir() is None, reason=(
    "no mirror of the Enroot/Pyxis artifacts on this machine (../shared/vendor next to the "
    "checkout, or METALSLURM_VENDOR_DIR): the cluster was brought up without containers"))

NODES = "gpu-[001-002]"


@pytest.fixture(scope="module")
def image(debian13: LocalStack) -> str:
    debian13.ready_for_configures()
    out = debian13.on("gpu-001", BUILD_IMAGE).stdout
    assert IMAGE in out
    debian13.on("ctl", f"printf '%s' {quoted(PROBE)} > /shared/probe.sh "
                       "&& chmod 755 /shared/probe.sh")
    return IMAGE


def srun(cluster: LocalStack, args: str) -> list[str]:
    """As alice on the login node (Pyxis loads in srun there)."""
    proc = cluster.login(f"srun {args}", user="alice")
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
    debian13.ctl("printf '%s' " + quoted(script) + " > /home/alice/container.sbatch")
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
    assert f" slurm {release} libslurm-dev " in record
    wait_for("the container jobs' nodes to be idle", lambda: "idle" in debian13.ctl(
        f"sinfo --noheader --nodes={NODES} --format=%T").stdout)


# ---- bad input: each stops with a message naming what to change, nothing installed -----

# The e2e stack's pins, as the role takes them (what extra vars replace must keep them).
PINS = {ARTIFACT_NAMES[name]: pin for name, pin in yaml.safe_load(
    (STACKS / "Pulumi.e2e-debian13.yaml").read_text())["config"]["metalslurm:containers"]
    ["artifacts"].items()}
PLUGIN = "/usr/local/lib/slurm/spank_pyxis.so"


def configure(cluster: LocalStack, limit: str | None = None, **extra_vars) -> ConfigureResult:
    """configure --tags install,configure; ``limit`` keeps a run whose subject is one node
    (a broken or downgraded node) off the others, which makes it about half as long."""
    return run_playbook(cluster.inventory, tags="install,configure", limit=limit,
                        extra_vars=extra_vars, out=lambda _line: None)


def plugin_sums(cluster: LocalStack) -> str:
    return cluster.on("gpu-001", f"sha256sum {PLUGIN}").stdout + \
        cluster.on("gpu-002", f"sha256sum {PLUGIN}").stdout


@pytest.mark.parametrize(("extra_vars", "message"), [
    ({"enroot_pyxis_artifact_overrides": {**PINS, "pyxis": {"sha256": "0" * 64}}},
     "artifact pyxis: {mirror}/pyxis-0.24.0.tar.gz has sha256 063653ba39125ac29796cc6079701d1e"
     "c34dd4c5baf698efacc0f36bf3619681, not the pinned " + "0" * 64),
    ({"enroot_pyxis_mirror": "/nonexistent/mirror"},
     "artifact enroot: /nonexistent/mirror/enroot_4.1.2-1_amd64.deb does not exist on this "
     "machine"),
    ({"enroot_pyxis_artifact_overrides": {**PINS, "enroot": {}},
      "enroot_pyxis_require_pinned": True},
     "artifact enroot ({mirror}/enroot_4.1.2-1_amd64.deb) has no sha256, and pinned artifacts "
     "only are allowed"),
], ids=["sha256-differs", "missing", "unpinned-refused"])
def test_a_bad_artifact_stops_the_run_before_anything_is_installed(debian13, image, extra_vars,
                                                                   message):
    before = plugin_sums(debian13)
    result = configure(debian13, limit="gpu-001", **extra_vars)
    assert not result.ok
    assert any(message.format(mirror=vendor_dir()) in f for f in result.failures), result.failures
    assert result.changed_tasks == []
    assert plugin_sums(debian13) == before


def test_an_unpinned_artifact_is_installed_with_a_warning_naming_it(debian13, image):
    result = configure(debian13, limit="gpu-001",
                       enroot_pyxis_artifact_overrides={**PINS, "enroot_caps": {}},
                       enroot_pyxis_require_pinned=False)
    assert result.ok, result.failures
    assert result.changed_tasks == []
    assert [w for w in result.warnings if "unpinned" in w] == [
        f"unpinned artifact(s), installed without checking their sha256: enroot_caps "
        f"({vendor_dir()}/enroot+caps_4.1.2-1_amd64.deb). Give each one's sha256 "
        "(metalslurm:containers.artifacts.<name>.sha256), or set pinnedOnly to refuse them."]


def test_a_credentials_entry_without_a_host_is_refused(debian13, image, tmp_path):
    bad = tmp_path / "creds.json"
    bad.write_text('[{"login": "robot", "password": "secret-value"}]')
    result = configure(debian13, limit="gpu-001", registry_credentials_file=str(bad))
    assert not result.ok
    assert any("entry 1 has no host" in f for f in result.failures), result.failures
    assert not any("secret-value" in f for f in result.failures)
    assert result.changed_tasks == []


def test_slurm_headers_that_do_not_match_the_installed_slurm_are_refused(debian13, image):
    header = "/usr/include/slurm/slurm_version.h"
    before = plugin_sums(debian13)
    debian13.on("gpu-002", f"cp {header} /root/slurm_version.h && sed -i 's/^#define "
                f"SLURM_VERSION_NUMBER .*/#define SLURM_VERSION_NUMBER 0x180b04/' {header}")
    try:
        result = configure(debian13, limit="gpu-002")
    finally:
        debian13.on("gpu-002", f"cp /root/slurm_version.h {header}")
    assert not result.ok
    refusal = "gpu-002: Refuse Slurm headers that do not match the installed Slurm"
    assert any(f.startswith(refusal) and "release '24.11.4', but the "
               "installed Slurm (slurm-client, whose srun and slurmstepd load Pyxis) is "
               "'24.11.5'" in f for f in result.failures), result.failures
    assert plugin_sums(debian13) == before


# ---- a converged node reads once; what was changed by hand is repaired ------------------

def test_what_was_changed_by_hand_is_repaired_and_nothing_else_runs(debian13, image):
    """A converged node costs the role one read (tasks/probe.yml) and skips its install and
    configure tasks; each change below sends the run through them on that node only."""
    dropin = "/etc/enroot/enroot.conf.d/metalslurm.conf"
    hook = "/etc/enroot/hooks.d/50-slurm-pmi.sh"
    debian13.on("gpu-001", f"rm {dropin} && chmod 0644 {hook}")
    debian13.on("gpu-002", f"rm {PLUGIN}")  # its build record stays: the plugin is what counts
    result = configure(debian13)
    assert result.ok, result.failures
    assert [t for h, t in result.changed_tasks if h == "gpu-001"] == [
        "Write Enroot's settings (a drop-in; the package's enroot.conf stays as shipped)",
        "Enable Enroot's Slurm hooks (PMI, and PyTorch's MASTER_ADDR, RANK and WORLD_SIZE)"]
    assert ("gpu-002", "Compile spank_pyxis.so against the installed Slurm headers") \
        in result.changed_tasks
    assert {h for h, _t in result.changed_tasks} == {"gpu-001", "gpu-002"}
    assert debian13.on("gpu-001", f"stat -c %a {hook}").stdout.strip() == "755"
    again = configure(debian13)
    assert again.ok and again.changed_tasks == [], again.changed_tasks
    assert srun(debian13, f"-w gpu-002 --container-image={image} cat /etc/metalslurm-e2e-image") \
        == [MARKER]


# ---- a Slurm package upgrade rebuilds Pyxis on that node, and nothing else does ---------

def _slurm_packages(cluster: LocalStack, node: str) -> list[str]:
    out = cluster.on(node, "dpkg-query --show --showformat='${db:Status-Abbrev} ${Package} "
                           "${source:Package}\\n'").stdout
    return sorted(f.split()[1] for f in out.splitlines()
                  if f.startswith("ii") and f.split()[2] == "slurm-wlm")


def _install_slurm(cluster: LocalStack, node: str, version: str) -> None:
    pins = " ".join(f"{p}={version}" for p in _slurm_packages(cluster, node))
    cluster.on(node, f"{APT_GET} install -y -q --allow-downgrades "
                     f"-o Dpkg::Options::=--force-confold {pins} >/dev/null")


def test_a_slurm_package_upgrade_rebuilds_pyxis_on_that_node_only(debian13, image):
    policy = debian13.on("gpu-002", "apt-cache madison slurm-client").stdout
    versions = sorted({line.split("|")[1].strip() for line in policy.splitlines()})
    installed = debian13.on("gpu-002", "dpkg-query --show --showformat='${Version}' "
                                       "slurm-client").stdout.strip()
    older = [v for v in versions if v != installed]
    if not older:
        pytest.skip(f"the mirror has one slurm-client version only ({installed})")
    _install_slurm(debian13, "gpu-002", older[0])
    try:
        downgraded = configure(debian13, limit="gpu-002")  # the setup: Pyxis for the older Slurm
        assert downgraded.ok, downgraded.failures
    finally:
        _install_slurm(debian13, "gpu-002", installed)  # the upgrade under test
    upgraded = configure(debian13)
    assert upgraded.ok, upgraded.failures
    builds = [(h, t) for h, t in upgraded.changed_tasks if t.startswith("Compile spank_pyxis")]
    assert builds == [("gpu-002", "Compile spank_pyxis.so against the installed Slurm headers")]
    assert {h for h, _t in upgraded.changed_tasks} == {"gpu-002"}
    record = debian13.on("gpu-002", "cat /usr/local/lib/slurm/.spank_pyxis.build").stdout
    assert record.rstrip().endswith(f"libslurm-dev {installed}")
    again = configure(debian13)
    assert again.ok and again.changed_tasks == [], again.changed_tasks
    assert srun(debian13, f"-w gpu-002 --container-image={image} cat /etc/metalslurm-e2e-image") \
        == [MARKER]
