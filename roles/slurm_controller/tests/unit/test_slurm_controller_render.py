"""slurm.conf, cgroup.conf and gres.conf rendered in seconds by Ansible itself, from the
roles' own defaults, vars and templates and an inventory built from the default local stack
(Pulumi.local.yaml) with recorded node facts, once per Slurm release the supported
operating systems ship; each rendered file is checked against module_utils/slurm_versions.py.

The controller role's tasks/render.yml runs as the role runs it (tests/slurm_render.py), with
the configuration directory pointed at a temporary directory and the release given instead
of read from dpkg (slurm_controller_slurm_release).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.metalslurm.cluster.plugins.module_utils.elastic import (
    PROVIDER_DEFAULTS as ELASTIC_DEFAULTS,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.health import (
    DEFAULTS as HEALTH_DEFAULTS,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.slurm_versions import (
    check_settings,
)

from infra.stack.config import load_stack_file
from tests.paths import REPO
from tests.slurm_render import RELEASES, inventory_with_nodes, lines, run_render, settings

# slurm.conf's settings that come from metalslurm_elastic and metalslurm_health.
POWER_AND_HEALTH = ("SuspendTime", "SuspendTimeout", "ResumeTimeout", "ResumeRate",
                    "SuspendRate", "HealthCheckInterval", "HealthCheckNodeState")
REST_OFF = {"metalslurm_rest": {"enabled": False}}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("render")
    proc = run_render(out, RELEASES[1:])
    assert proc.returncode == 0, proc.stdout[-4000:]
    (out / "ansible.log").write_text(proc.stdout)
    # Ubuntu 22.04's Slurm 21.08 has no packaged JWT plugin: the REST API is off there (a
    # stack config that turns it on is refused, infra/stack/rest.py).
    proc = run_render(out, RELEASES[:1], REST_OFF)
    assert proc.returncode == 0, proc.stdout[-4000:]
    return out


def test_node_lines_are_compressed_and_come_from_facts_or_the_inventory(rendered):
    nodes = [line for line in lines(rendered / "24.11/slurm.conf") if line.startswith("Node")]
    hardware = "CoresPerSocket=56 Gres=gpu:h100:8 RealMemory=2002018 Sockets=2"
    assert nodes == [
        f"NodeName=gpu-[001-002] {hardware} State=UNKNOWN ThreadsPerCore=2",
        f"NodeName=gpu-[003-004] CPUs=224 {hardware} State=CLOUD ThreadsPerCore=2 Weight=100"]


def test_every_partition_has_a_default_time(rendered):
    parts = [line for line in lines(rendered / "24.11/slurm.conf")
             if line.startswith("PartitionName=")]
    assert parts == [
        "PartitionName=debug Default=NO DefaultTime=30:00 MaxNodes=1 MaxTime=2:00:00 "
        "Nodes=gpu-[001-004] PriorityTier=1 State=UP",
        "PartitionName=train Default=YES DefaultTime=1-00:00:00 MaxTime=7-00:00:00 "
        "Nodes=gpu-[001-004] PriorityTier=1 State=UP",
        "PartitionName=priority Default=NO DefaultTime=1-00:00:00 MaxTime=30-00:00:00 "
        "Nodes=gpu-[001-004] PriorityJobFactor=2 PriorityTier=2 State=UP"]


def test_gres_and_cgroup_files(rendered):
    assert lines(rendered / "24.11/gres.conf") == [
        "NodeName=gpu-[001-004] File=/dev/nvidia[0-7] Name=gpu Type=h100"]
    assert settings(rendered / "24.11/cgroup.conf") == {
        "CgroupPlugin": "autodetect", "ConstrainCores": "YES", "ConstrainDevices": "YES",
        "ConstrainRAMSpace": "YES"}


@pytest.mark.parametrize("release", RELEASES)
def test_every_job_gets_a_private_tmp_and_pmix_clients_read_over_the_socket(rendered, release):
    """job_container/tmpfs by default (its default directories are /tmp and /dev/shm on
    22.05 and 24.11 alike); its base in the restart record, since slurmd reads
    job_container.conf at start; PMIx's clients told to use gds/hash (mpi.conf), since the
    server's shared-memory store is under the node's /tmp, which a job no longer sees."""
    conf = settings(rendered / release / "slurm.conf")
    assert conf["JobContainerType"] == "job_container/tmpfs"
    assert "Contain" in conf["PrologFlags"].split(",")
    assert lines(rendered / release / "job_container.conf") == [
        "AutoBasePath=YES", "BasePath=/var/lib/slurm/jobtmp"]
    assert lines(rendered / release / "mpi.conf") == ["PMIxEnv=PMIX_MCA_gds=hash"]
    record = lines(rendered / release / ".metalslurm-restart-keys.conf")
    assert {"JobContainerType=job_container/tmpfs",
            "job_container=AutoBasePath=YES BasePath=/var/lib/slurm/jobtmp"} <= set(record)


@pytest.mark.parametrize(("release", "restarts"), [("22.05", True), ("24.11", False)])
def test_the_node_list_restarts_the_daemons_only_where_reconfigure_cannot_take_it(
        rendered, release, restarts):
    """22.05 reads the node list at start only: it is in the restart record, so adding a
    node restarts slurmctld and every slurmd. 24.11's reconfigure takes it (each daemon
    hands over to a new process): not in the record, a node joins with a reconfigure."""
    record = lines(rendered / release / ".metalslurm-restart-keys.conf")
    nodes = [line for line in record if line.startswith("nodes=")]
    node_lines = [line for line in lines(rendered / release / "slurm.conf")
                  if line.startswith("NodeName=")]
    assert len(node_lines) == 2  # the static nodes' line and the elastic ones'
    assert nodes == (["nodes=" + " ".join(node_lines)] if restarts else [])


def test_with_the_job_container_off_jobs_share_the_nodes_tmp_and_pmix_is_left_alone(tmp_path):
    """slurm_common_job_container false: no JobContainerType, no PMIx environment; the
    extern step stays for pam_slurm_adopt."""
    proc = run_render(tmp_path, ("24.11",), {"slurm_common_job_container": False})
    assert proc.returncode == 0, proc.stdout[-4000:]
    conf = settings(tmp_path / "24.11" / "slurm.conf")
    assert ("JobContainerType" in conf, "Contain" in conf["PrologFlags"].split(",")) == (
        False, True)
    assert lines(tmp_path / "24.11" / "mpi.conf") == []


GPU_FACTS = [{"minor": m, "cores": "0-55" if m < 4 else "56-111"} for m in range(8)]


@pytest.fixture(scope="module")
def by_hand(tmp_path_factory) -> Path:
    """Rendered for 24.11 with GPU facts kept on the controller (for gpu-001, gpu-003 and a
    node no longer in the inventory), and as an inventory written by hand for bare metal
    would have it: provider byo, no metalslurm_elastic, no metalslurm_health (the defaults
    tables of the collection fill them)."""
    out = tmp_path_factory.mktemp("by-hand")
    (out / "24.11").mkdir()
    # Nodes that left the inventory make the record larger than managed_state reads (a
    # large cluster's record): it is read whole all the same.
    gone = 1 + (1 << 20) // len(json.dumps(GPU_FACTS))
    record = {"gpu-001": GPU_FACTS, "gpu-003": GPU_FACTS, "gpu-099": GPU_FACTS,
              **{f"gone-{i:04d}": GPU_FACTS for i in range(gone)}}
    (out / "24.11/compute-gpus.json").write_text(json.dumps(record))
    assert (out / "24.11/compute-gpus.json").stat().st_size > 1 << 20
    proc = run_render(out, ("24.11",), {"metalslurm_provider": "byo", "metalslurm_elastic": {},
                                        "metalslurm_health": {}})
    assert proc.returncode == 0, proc.stdout[-4000:]
    return out


def test_gres_conf_takes_the_gpu_facts_kept_on_the_controller(by_hand):
    """The controller keeps each GPU node's metalslurm_node.gpus (the e2e driver test shows
    the nvidia_gpu role publishing them); gres.conf takes per-GPU files and cores from them,
    also for a powered-down elastic node (gpu-003), and the count's line for the nodes
    without; what is kept afterwards leaves out nodes no longer in the inventory."""
    assert lines(by_hand / "24.11/gres.conf") == [
        "NodeName=gpu-[001,003] Cores=0-55 File=/dev/nvidia[0-3] Name=gpu Type=h100",
        "NodeName=gpu-[001,003] Cores=56-111 File=/dev/nvidia[4-7] Name=gpu Type=h100",
        "NodeName=gpu-[002,004] File=/dev/nvidia[0-7] Name=gpu Type=h100"]
    assert json.loads((by_hand / "24.11/compute-gpus.json").read_text()) == {
        "gpu-001": GPU_FACTS, "gpu-003": GPU_FACTS}


@pytest.mark.parametrize(("kept", "prolog", "now_kept"), [
    (["gpu-003", "gpu-004", "gpu-099"], True, ["gpu-001", "gpu-002", "gpu-003", "gpu-004"]),
    (None, False, ["gpu-001", "gpu-002"]),
], ids=["elastic-nodes-kept", "elastic-nodes-never-had-it"])
def test_the_prolog_is_named_only_once_every_compute_node_has_it(tmp_path, kept, prolog,
                                                                 now_kept):
    """The static nodes publish metalslurm_node.job_prolog in this run; the powered-down
    elastic ones (gpu-003, gpu-004) count only where the controller kept them from a run
    in which they were up. Without them, no Prolog (it would drain them when they resume)
    and a NOTE says what to do."""
    (tmp_path / "24.11").mkdir()
    if kept is not None:
        (tmp_path / "24.11/compute-prolog.json").write_text(json.dumps(kept))
    proc = run_render(tmp_path, ("24.11",), static_prolog=True)
    assert proc.returncode == 0, proc.stdout[-4000:]
    conf = settings(tmp_path / "24.11/slurm.conf")
    named = {k: conf.get(k) for k in ("Prolog", "Epilog", "PrologFlags")}
    # Contain in either case: pam_slurm_adopt is on by default (its extern step).
    assert named == ({"Prolog": "/usr/local/sbin/metalslurm-prolog",
                      "Epilog": "/usr/local/sbin/metalslurm-epilog",
                      "PrologFlags": "Alloc,Contain"}
                     if prolog else {"Prolog": None, "Epilog": None, "PrologFlags": "Contain"})
    assert conf.get("LaunchParameters") == "use_interactive_step,ulimit_pam_adopt"
    assert ("Prolog) waits for gpu-[003-004]" in proc.stdout) is not prolog
    assert ("(scontrol update NodeName=gpu-[003-004]" in proc.stdout) is not prolog
    assert json.loads((tmp_path / "24.11/compute-prolog.json").read_text()) == now_kept


def test_an_inventory_without_timings_gets_the_providers_defaults(by_hand):
    """The controller role fills what a hand-written inventory leaves out from the same
    tables the stack parser uses (module_utils/elastic.py, module_utils/health.py)."""
    conf = settings(by_hand / "24.11/slurm.conf")
    byo = ELASTIC_DEFAULTS["byo"]
    assert {k: conf[k] for k in POWER_AND_HEALTH} == {
        "SuspendTime": str(byo["suspend_time"]), "SuspendTimeout": str(byo["suspend_timeout"]),
        "ResumeTimeout": str(byo["resume_timeout"]), "ResumeRate": str(byo["resume_rate"]),
        "SuspendRate": str(byo["suspend_rate"]),
        "HealthCheckInterval": str(HEALTH_DEFAULTS["interval"]),
        "HealthCheckNodeState": HEALTH_DEFAULTS["node_state"]}


def test_a_cluster_without_elastic_nodes_bounds_a_reboot_by_the_providers_boot(tmp_path):
    """ResumeTimeout bounds 'scontrol reboot' (metalslurm maintain) of static nodes too, so it
    is written without elastic nodes as well: the provider's, not Slurm's 60 s."""
    inventory = inventory_with_nodes(["gpu-001", "gpu-002"])
    inventory["all"]["vars"].update({"metalslurm_provider": "byo", "metalslurm_elastic": {}})
    proc = run_render(tmp_path, ("24.11",), inventory=inventory, node_facts=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
    conf = settings(tmp_path / "24.11/slurm.conf")
    assert (conf["ResumeTimeout"], conf["RebootProgram"]) == (
        str(ELASTIC_DEFAULTS["byo"]["resume_timeout"]), "/usr/sbin/reboot")
    assert "SuspendTime" not in conf and "ResumeProgram" not in conf


def test_slurm_conf_has_the_stack_configs_timings(rendered):
    """What the stack parser read (the default local stack) is what slurm.conf says."""
    cfg = load_stack_file(REPO / "Pulumi.local.yaml")
    el, health = cfg.elastic, cfg.health
    conf = settings(rendered / "24.11/slurm.conf")
    assert {k: conf[k] for k in POWER_AND_HEALTH} == {
        "SuspendTime": str(el.suspend_time), "SuspendTimeout": str(el.suspend_timeout),
        "ResumeTimeout": str(el.resume_timeout), "ResumeRate": str(el.resume_rate),
        "SuspendRate": str(el.suspend_rate), "HealthCheckInterval": str(health.interval),
        "HealthCheckNodeState": health.node_state}


def test_accounting_power_saving_and_scheduling_settings(rendered):
    conf = settings(rendered / "24.11/slurm.conf")
    assert {k: conf[k] for k in (
        "ClusterName", "SlurmctldHost", "AccountingStorageEnforce", "AccountingStorageTRES",
        "GresTypes", "SuspendExcNodes", "ResumeProgram", "SuspendTime", "ResumeTimeout",
        "TreeWidth", "PreemptType", "PreemptMode", "DefMemPerCPU")} == {
        "ClusterName": "metalslurm", "SlurmctldHost": "ctl(10.77.0.10)",
        "AccountingStorageEnforce": "associations,limits,qos,safe",
        "AccountingStorageTRES": "gres/gpu,gres/gpu:h100", "GresTypes": "gpu",
        "SuspendExcNodes": "gpu-[001-002]",
        "ResumeProgram": conf["ResumeProgram"], "SuspendTime": "120", "ResumeTimeout": "120",
        "TreeWidth": "65533", "PreemptType": "preempt/partition_prio", "PreemptMode": "REQUEUE",
        "DefMemPerCPU": str(2002018 // 224)}
    assert conf["ResumeProgram"].endswith("/metalslurm-resume")


@pytest.mark.parametrize(("release", "ctld_parameters", "private_data"), [
    ("21.08", "enable_configless,idle_on_node_suspend,cloud_reg_addrs", "cloud"),
    ("22.05", "enable_configless,idle_on_node_suspend,cloud_reg_addrs", "cloud"),
    # 23.11 made cloud_reg_addrs the default and removed the option; cloud nodes show in
    # sinfo without PrivateData=cloud since 23.02.
    ("23.11", "enable_configless,idle_on_node_suspend", None),
    ("24.11", "enable_configless,idle_on_node_suspend", None),
])
def test_settings_are_fitted_to_each_release(rendered, release, ctld_parameters, private_data):
    conf = settings(rendered / release / "slurm.conf")
    assert conf["SlurmctldParameters"] == ctld_parameters
    assert conf.get("PrivateData") == private_data


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("name", ["slurm.conf", "cgroup.conf"])
def test_each_rendered_file_is_what_its_release_takes(rendered, release, name):
    """The table has nothing more to adapt in what was written for a release."""
    conf = {k: v.split(",") if "," in v else v
            for k, v in settings(rendered / release / name).items()}
    adapted, notes = check_settings(name, conf, release)
    assert adapted == conf
    caveats = [n for n in notes if "cgroup v1 hierarchy" in n]
    assert notes == caveats and bool(caveats) == (release == "21.08" and name == "cgroup.conf")


@pytest.mark.parametrize("release", RELEASES)
def test_each_rendered_record_is_what_its_release_takes(rendered, release):
    text = lines(rendered / release / "slurm.conf")
    for kind, prefix in (("node", "NodeName="), ("partition", "PartitionName=")):
        for line in (line for line in text if line.startswith(prefix)):
            record = dict(item.split("=", 1) for item in line.split())
            assert check_settings(kind, record, release) == (record, []), line


def test_a_setting_the_release_cannot_take_is_refused_before_any_file_is_written(tmp_path):
    proc = run_render(tmp_path, ("22.05",),
                      {"slurm_controller_config": {"TopologyPlugin": "topology/block"}})
    assert proc.returncode != 0
    assert "Slurm 22.05 on the controller cannot take 1 setting(s): " in proc.stdout
    assert "TopologyPlugin" in proc.stdout and "topology/block" in proc.stdout
    assert list((tmp_path / "22.05").iterdir()) == []


@pytest.mark.parametrize("release", RELEASES[1:])
def test_slurmctld_takes_jwt_tokens_with_the_key_and_the_lifespan_bound(rendered, release):
    conf = settings(rendered / release / "slurm.conf")
    assert conf["AuthAltTypes"] == "auth/jwt"
    assert conf["AuthAltParameters"] == "jwt_key=/etc/slurm/jwt_hs256.key,max_token_lifespan=86400"
    assert conf["AuthType"] == "auth/munge"


def test_with_the_rest_api_off_slurm_conf_has_no_jwt(rendered):
    conf = settings(rendered / "21.08" / "slurm.conf")
    assert "AuthAltTypes" not in conf and "AuthAltParameters" not in conf


def test_a_token_lifespan_bound_is_refused_on_a_release_without_it(tmp_path):
    proc = run_render(tmp_path, ("21.08",))
    assert proc.returncode != 0
    assert "AuthAltParameters" in proc.stdout and "max_token_lifespan" in proc.stdout
    assert "set metalslurm:rest maxTokenLifespan to 0 (no bound)" in proc.stdout
    assert list((tmp_path / "21.08").iterdir()) == []


def test_a_backup_controller_is_a_second_slurmctld_host_with_the_state_on_shared_storage(
        tmp_path):
    """With a host in group slurm_controller_backup: SlurmctldHost once per controller, the
    controller first; StateSaveLocation in the storage both mount; the switch programs that
    restart a backup which gave control back (22.05 reads them as 24.11 does)."""
    inventory = inventory_with_nodes(["gpu-001"])
    top = inventory["all"]
    top["hosts"]["ctl2"] = {"ansible_host": "10.77.0.9", "metalslurm_address": "10.77.0.9"}
    top["children"]["slurm_controller_backup"] = {"hosts": {"ctl2": None}}
    proc = run_render(tmp_path, ("22.05", "24.11"), inventory=inventory, node_facts=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
    for release in ("22.05", "24.11"):
        conf = lines(tmp_path / release / "slurm.conf")
        assert [line for line in conf if line.startswith("SlurmctldHost=")] == [
            "SlurmctldHost=ctl(10.77.0.10)", "SlurmctldHost=ctl2(10.77.0.9)"]
        found = settings(tmp_path / release / "slurm.conf")
        assert (found["StateSaveLocation"], found["SlurmctldPrimaryOnProg"],
                found["SlurmctldPrimaryOffProg"]) == (
            "/var/lib/slurm/ha/slurmctld", "/usr/local/sbin/metalslurm-slurmctld-primary-on",
            "/usr/local/sbin/metalslurm-slurmctld-primary-off")
    del top["children"]["slurm_controller_backup"]
    (tmp_path / "one").mkdir()
    proc = run_render(tmp_path / "one", ("24.11",), inventory=inventory, node_facts=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
    found = settings(tmp_path / "one/24.11/slurm.conf")
    assert found["StateSaveLocation"] == "/var/lib/slurm/slurmctld"
    assert "SlurmctldPrimaryOnProg" not in found and "SlurmctldPrimaryOffProg" not in found
