"""Stack config parsing: good configs give typed values, bad ones name the key to fix."""

import ipaddress
import textwrap

import pytest

from infra.stack.config import ConfigError, load_stack_file, parse_config


def node_names(cfg):
    return [n for pool in cfg.compute_pools for n in pool.node_names()]


def ms(**kwargs):
    return {f"metalslurm:{k}": v for k, v in kwargs.items()}


def test_defaults_are_one_controller_and_two_gpu_nodes():
    cfg = parse_config({})
    assert cfg.cluster_name == "metalslurm"
    assert cfg.private_cidr == ipaddress.ip_network("10.77.0.0/24")
    assert cfg.os == "debian13"
    assert cfg.controller_name == "ctl"
    assert node_names(cfg) == ["gpu-001", "gpu-002"]
    assert [(p.gpu_type, p.gpu_count) for p in cfg.compute_pools] == [("h100", 8)]
    # The seed guide's research cluster: debug, train (default), priority (preempts).
    assert [(p.name, p.default, p.max_time) for p in cfg.partitions] == [
        ("debug", False, "2:00:00"), ("train", True, "7-00:00:00"),
        ("priority", False, "30-00:00:00")]
    assert cfg.partitions[2].options["PriorityTier"] > cfg.partitions[1].options["PriorityTier"]
    assert (cfg.storage.backend, cfg.storage.paths) == ("nfs", ("/home", "/shared"))


def test_pools_and_partitions_are_read():
    cfg = parse_config(ms(
        os="debian12",
        computePools=[{"name": "h100", "count": 3, "gpuType": "h100", "gpuCount": 8},
                      {"name": "cpu", "count": 1}],
        partitions=[{"name": "debug", "pools": ["cpu"], "maxTime": "2:00:00"},
                    {"name": "train", "default": True, "maxTime": "7-00:00:00",
                     "options": {"PriorityJobFactor": 2}}]))
    assert node_names(cfg) == ["h100-001", "h100-002", "h100-003", "cpu-001"]
    assert cfg.partitions[0].pools == ("cpu",)
    assert cfg.partitions[1].options == {"PriorityJobFactor": 2}
    assert cfg.os == "debian12"


def test_elastic_nodes_follow_the_static_ones():
    cfg = parse_config(ms(computePools=[{"name": "gpu", "count": 2, "elasticCount": 3,
                                         "gpuType": "h100", "gpuCount": 8}]))
    pool = cfg.compute_pools[0]
    assert pool.static_names() == ["gpu-001", "gpu-002"]
    assert pool.elastic_names() == ["gpu-003", "gpu-004", "gpu-005"]
    assert cfg.elastic_node_names() == ["gpu-003", "gpu-004", "gpu-005"]
    assert node_names(cfg)[-1] == "gpu-005"


def test_power_saving_defaults_follow_the_provider():
    cfg = parse_config(ms(computePools=[{"name": "gpu", "count": 0, "elasticCount": 1}]))
    assert (cfg.elastic.boot_time, cfg.elastic.resume_timeout) == (15, 120)
    assert cfg.elastic.resume_timeout > cfg.elastic.boot_time
    assert cfg.elastic.suspend_time >= cfg.elastic.boot_time
    # A machine started by hand gets as long as a resume to register before the reconciler
    # stops it.
    assert cfg.elastic.orphan_after == cfg.elastic.resume_timeout


def test_accounting_storage_and_users_are_read():
    cfg = parse_config(ms(
        storage={"paths": ["/home", "/shared", "/data"]},
        accounting={"qos": [{"name": "team-a-gpu", "priority": 10,
                             "limits": {"GrpTRESMins": "gres/gpu=43200"}}],
                    "accounts": [{"name": "team-a", "users": ["alice"], "fairshare": 100,
                                  "qos": ["normal", "team-a-gpu"], "defaultQos": "normal"}]},
        users=[{"name": "alice", "uid": 2001}, {"name": "ops", "uid": 2099, "admin": True}]))
    assert cfg.storage.paths == ("/home", "/shared", "/data")
    assert cfg.storage.server == "nfs"
    acc = cfg.accounting.accounts[0]
    assert (acc.name, acc.users, acc.fairshare, acc.qos) == (
        "team-a", ("alice",), 100, ("normal", "team-a-gpu"))
    assert cfg.accounting.qos[0].limits == {"GrpTRESMins": "gres/gpu=43200"}
    assert cfg.accounting.database_host is None
    assert cfg.users[0].uid == 2001


def test_other_namespaces_are_ignored():
    assert parse_config({"oci:region": "x", "metalslurm:clusterName": "abc"}).cluster_name == "abc"


BAD = [
    (ms(computePools=[{"name": "gpu", "count": -1}]), "metalslurm:computePools[0].count",
     "at least 0"),
    (ms(privateCidr="10.77.0.0/33"), "metalslurm:privateCidr", "CIDR"),
    (ms(privateCidr="10.77.0.1/24"), "metalslurm:privateCidr", "host bits"),
    (ms(privateCidr="8.8.8.0/24"), "metalslurm:privateCidr", "not a private range"),
    (ms(privateCidr="10.77.0.0/30"), "metalslurm:privateCidr", "too small"),
    (ms(os="centos7"), "metalslurm:os", "debian12, debian13, ubuntu22.04, ubuntu24.04"),
    (ms(os="ubuntu22.04"), "metalslurm:os", "the local provider builds Debian node images only"),
    (ms(provider="aws"), "metalslurm:provider", "allowed values: local"),
    (ms(clusterName="My_Cluster"), "metalslurm:clusterName", "lower-case"),
    (ms(controller={"name": "ctl_1"}), "metalslurm:controller.name", "host name"),
    (ms(controller={"name": "gpu-001"}), "metalslurm:computePools", "two nodes"),
    (ms(computePools=[{"name": "gpu", "count": 1, "gpuCount": 8}]),
     "metalslurm:computePools[0].gpuType", "no gpuType"),
    (ms(computePools=[{"name": "gpu", "count": 1, "gpuType": "h100"}]),
     "metalslurm:computePools[0].gpuCount", "gpuCount 0"),
    (ms(computePools=[{"name": "gpu", "count": 1, "gpuType": "h900", "gpuCount": 8}]),
     "metalslurm:computePools[0].gpuType",
     "is not a GPU type metalslurm serves; it supports NVIDIA GPUs: a100,"),
    # AMD GPUs: gres.conf, the driver role and the health checker are NVIDIA's.
    (ms(computePools=[{"name": "gpu", "count": 1, "gpuType": "mi300x", "gpuCount": 8}]),
     "metalslurm:computePools[0].gpuType",
     "'mi300x' is not a GPU type metalslurm serves; it supports NVIDIA GPUs: a100, a10, a30, "
     "b200, gh200, h100, h200, l4, l40s"),
    (ms(computePools=[{"name": "gpu", "count": 1, "gpuType": "h100", "gpuCount": 17}]),
     "metalslurm:computePools[0].gpuCount", "at most 16"),
    (ms(computePools=[{"name": "gpu", "count": "two"}]), "metalslurm:computePools[0].count",
     "whole number"),
    (ms(computePools=[{"name": "gpu", "count": 1}, {"name": "gpu", "count": 1}]),
     "metalslurm:computePools", "more than once"),
    (ms(computePools=[{"name": "gpu", "count": 0}]), "metalslurm:computePools",
     "at least one compute node"),
    (ms(computePools=[{"name": "GPU", "count": 1}]), "metalslurm:computePools[0].name",
     "lower-case"),
    (ms(computePools=[{"name": "gpu", "count": 1, "gpus": 8}]),
     "metalslurm:computePools[0].gpus", "unknown key"),
    (ms(partitions=[{"name": "a", "default": True}, {"name": "b", "default": True}]),
     "metalslurm:partitions", "only one partition"),
    (ms(partitions=[{"name": "a", "pools": ["nope"]}]), "metalslurm:partitions[0].pools",
     "not a pool"),
    (ms(partitions=[{"name": "a", "maxTime": "two hours"}]),
     "metalslurm:partitions[0].maxTime", "Slurm time"),
    (ms(privateCidr="10.77.0.0/28", computePools=[{"name": "gpu", "count": 5}]),
     "metalslurm:privateCidr", "room for"),
    (ms(local={"imageSource": "floppy"}), "metalslurm:local.imageSource", "allowed values"),
    (ms(gpus=3), "metalslurm.gpus", "unknown key"),
    (ms(computePools=[{"name": "gpu", "count": 1, "elasticCount": -2}]),
     "metalslurm:computePools[0].elasticCount", "at least 0"),
    (ms(computePools=[{"name": "gpu", "count": 600, "elasticCount": 600}],
        privateCidr="10.0.0.0/16"),
     "metalslurm:computePools[0].elasticCount", "at most 1000"),
    (ms(computePools=[{"name": "gpu", "count": 0, "elasticCount": 2}],
        elastic={"resumeTimeout": 10, "bootTime": 60, "suspendTime": 600}),
     "metalslurm:elastic.resumeTimeout", "does not exceed the node boot time"),
    (ms(computePools=[{"name": "gpu", "count": 0, "elasticCount": 2}],
        elastic={"suspendTime": 30, "bootTime": 60}),
     "metalslurm:elastic.suspendTime", "below the node boot time"),
    (ms(computePools=[{"name": "gpu", "count": 0, "elasticCount": 2}],
        elastic={"orphanAfter": 30, "bootTime": 60}),
     "metalslurm:elastic.orphanAfter", "before its slurmd can register"),
    (ms(elastic={"suspendtime": 30}), "metalslurm:elastic.suspendtime", "unknown key"),
    (ms(storage={"backend": "lustre"}), "metalslurm:storage.backend", "allowed values"),
    (ms(storage={"paths": ["/etc/shared"]}), "metalslurm:storage.paths", "system directory"),
    (ms(storage={"paths": ["home"]}), "metalslurm:storage.paths", "plain absolute path"),
    (ms(storage={"paths": ["/home", "/home/ckpt"]}), "metalslurm:storage.paths", "inside"),
    (ms(storage={"server": "ctl"}), "metalslurm:computePools", "two nodes"),
    (ms(accounting={"accounts": [{"name": "team-a", "qos": ["gold"]}]}),
     "metalslurm:accounting.accounts[0].qos", "not defined"),
    (ms(accounting={"accounts": [{"name": "root"}]}),
     "metalslurm:accounting.accounts[0].name", "Slurm's own top account"),
    (ms(accounting={"accounts": [{"name": "a", "users": ["Alice Smith"]}]}),
     "metalslurm:accounting.accounts[0].users", "not a valid user name"),
    (ms(accounting={"accounts": [{"name": "a", "qos": ["normal"], "defaultQos": "gpu"}]}),
     "metalslurm:accounting.accounts[0].defaultQos", "must be one of"),
    (ms(accounting={"qos": [{"name": "gpu", "limits": {"GrpGPUHours": 720}}]}),
     "metalslurm:accounting.qos[0].limits.GrpGPUHours", "not a QOS field"),
    (ms(accounting={"qos": [{"name": "gpu", "limits": {"GrpTRESMins": "gres/gpu = 1"}}]}),
     "metalslurm:accounting.qos[0].limits.GrpTRESMins", "without spaces"),
    (ms(accounting={"qos": [{"name": "gpu"}, {"name": "gpu"}]}),
     "metalslurm:accounting.qos", "more than once"),
    # Every QOS limit is checked as sacctmgr would take it, before anything exists.
    (ms(accounting={"qos": [{"name": "gpu", "limits": {"GrpTRESMins": "gres/gpu=-43200"}}]}),
     "metalslurm:accounting.qos[0].limits.GrpTRESMins", "'gres/gpu=-43200' is negative"),
    (ms(accounting={"qos": [{"name": "gpu", "limits": {"MaxTRESPerUser": "gpus:8"}}]}),
     "metalslurm:accounting.qos[0].limits.MaxTRESPerUser", "not a TRES limit"),
    (ms(accounting={"qos": [{"name": "gpu", "limits": {"MaxTRESPerUser": "gpu=8"}}]}),
     "metalslurm:accounting.qos[0].limits.MaxTRESPerUser", "'gpu' is not a TRES name"),
    (ms(accounting={"qos": [{"name": "gpu", "limits": {"MaxTRESPerUser": "gres/gpu=8G"}}]}),
     "metalslurm:accounting.qos[0].limits.MaxTRESPerUser", "only mem takes a unit"),
    (ms(accounting={"qos": [{"name": "gpu", "limits": {"MaxJobsPerUser": -1}}]}),
     "metalslurm:accounting.qos[0].limits.MaxJobsPerUser", "whole number of 0 or more"),
    (ms(accounting={"qos": [{"name": "gpu", "limits": {"MaxWall": "a week"}}]}),
     "metalslurm:accounting.qos[0].limits.MaxWall", "without spaces"),
    (ms(accounting={"qos": [{"name": "gpu", "limits": {"MaxWall": "7days"}}]}),
     "metalslurm:accounting.qos[0].limits.MaxWall", "not a Slurm time"),
    (ms(accounting={"qos": [{"name": "gpu", "limits": {"UsageFactor": -2}}]}),
     "metalslurm:accounting.qos[0].limits.UsageFactor", "0 or more"),
    (ms(accounting={"qos": [{"name": "gpu", "limits": {"Flags": "DenyOnLimit,Nodecay"}}]}),
     "metalslurm:accounting.qos[0].limits.Flags", "'Nodecay' is not a QOS flag"),
    (ms(accounting={"qos": [{"name": "gpu", "limits": {"Preempt": "scavenger"}}]}),
     "metalslurm:accounting.qos[0].limits.Preempt", "'scavenger' is not a QOS"),
    (ms(accounting={"qos": [{"name": "gpu", "limits": {"PreemptMode": "kill"}}]}),
     "metalslurm:accounting.qos[0].limits.PreemptMode", "not one of cluster"),
    # What slurm.conf cannot hold is refused here, not when Ansible renders it.
    (ms(slurmConf={"SchedulerParameters": "bf_interval=30\nbf_window=60"}),
     "metalslurm:slurmConf.SchedulerParameters", "cannot be written unquoted"),
    (ms(slurmConf={"SchedulerParameters": "bf_interval=30 bf_window=60"}),
     "metalslurm:slurmConf.SchedulerParameters", "no spaces"),
    (ms(slurmConf={"JobSubmitPlugins": "lua#x"}),
     "metalslurm:slurmConf.JobSubmitPlugins", "cannot be written unquoted"),
    (ms(slurmConf={"Prolog": "/etc/slurm/prolog.sh\\"}),
     "metalslurm:slurmConf.Prolog", "trailing backslash"),
    (ms(slurmConf={"Sched Params": "x"}), "metalslurm:slurmConf", "not a Slurm setting name"),
    (ms(slurmConf=["SchedulerParameters=x"]), "metalslurm:slurmConf", "must be a mapping"),
    (ms(partitions=[{"name": "a", "options": {"AllowAccounts": "team-a team-b"}}]),
     "metalslurm:partitions[0].options.AllowAccounts", "no spaces"),
    (ms(partitions=[{"name": "a", "options": {"MaxTime": "2:00:00"}}]),
     "metalslurm:partitions[0].options.MaxTime", "set that instead"),
    (ms(partitions=[{"name": "a", "options": {"defaulttime": "9-00:00:00"}}]),
     "metalslurm:partitions[0].options.defaulttime", "own 'defaultTime'; set that instead"),
    # The key names the partition that is wrong, even after one that failed to parse.
    (ms(partitions=[{"name": "A"}, {"name": "b", "defaultTime": "UNLIMITED"}],
        accounting={"qos": [{"name": "gpu", "limits": {"GrpTRESRunMins": "gres/gpu=600"}}]}),
     "metalslurm:partitions[1].defaultTime", "would be held forever"),
    (ms(partitions=[{"name": "a", "maxTime": "2:00:00", "defaultTime": "3:00:00"}]),
     "metalslurm:partitions[0].defaultTime", "longer than maxTime 2:00:00"),
    (ms(partitions=[{"name": "a", "maxTime": "2:00:00", "defaultTime": "UNLIMITED"}]),
     "metalslurm:partitions[0].defaultTime", "longer than maxTime"),
    (ms(partitions=[{"name": "a", "defaultTime": "UNLIMITED"}],
        accounting={"qos": [{"name": "gpu", "limits": {"GrpTRESMins": "gres/gpu=600"}}]}),
     "metalslurm:partitions[0].defaultTime", "would be held forever"),
    (ms(partitions=[{"name": "a", "defaultTime": "one day"}]),
     "metalslurm:partitions[0].defaultTime", "Slurm time"),
    (ms(users=[{"name": "alice", "uid": 2001}, {"name": "bob", "uid": 2001}]),
     "metalslurm:users", "uid '2001' is used more than once"),
    (ms(users=[{"name": "alice", "uid": 0}]), "metalslurm:users[0].uid", "at least 1000"),
    (ms(configure="yes"), "metalslurm:configure", "true or false"),
    (ms(local={"elasticMode": "launch-terminate", "preparedImages": False}),
     "metalslurm:local.elasticMode", "set metalslurm:local.preparedImages to true"),
    (ms(local={"elasticMode": "terminate"}), "metalslurm:local.elasticMode", "start-stop"),
    (ms(controller={"name": "ctl", "backup": "ctl"}), "metalslurm:controller.backup",
     "the controller's own name"),
    (ms(controller={"backup": "Ctl 2"}), "metalslurm:controller.backup", "a host name"),
    (ms(controller={"backup": "gpu-001"}), "metalslurm:computePools",
     "'gpu-001' would be used by two nodes"),
    (ms(controller={"spare": "ctl2"}), "metalslurm:controller.spare", "allowed keys: name, backup"),
]


@pytest.mark.parametrize(("raw", "key", "fragment"), BAD, ids=[b[1] + ":" + b[2] for b in BAD])
def test_bad_config_names_the_key(raw, key, fragment):
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    matching = [p for p in err.value.problems if p.startswith(key + ":")]
    assert matching, err.value.problems
    assert any(fragment in p for p in matching), matching


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as err:
        parse_config(ms(os="centos7", privateCidr="nonsense", clusterName="A B"))
    keys = sorted(p.split(":")[1] for p in err.value.problems)
    assert keys == ["clusterName", "os", "privateCidr"]


def test_load_stack_file(tmp_path):
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text(textwrap.dedent("""
        config:
          metalslurm:clusterName: lab
          metalslurm:computePools:
            - {name: a100, count: 1, gpuType: a100, gpuCount: 4}
    """))
    cfg = load_stack_file(path)
    assert (cfg.cluster_name, node_names(cfg)) == ("lab", ["a100-001"])


@pytest.mark.parametrize(("text", "fragment"), [
    ("config: [1, 2", "not valid YAML"),
    ("- just a list", "mapping"),
    ("config: 3", "mapping"),
])
def test_unreadable_stack_files(tmp_path, text, fragment):
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_stack_file(path)
    assert fragment in str(err.value)


@pytest.mark.parametrize("text", ["", "config:\n", "config: {}\n",
                                  "config:\n  oci:region: eu-frankfurt-1\n"])
def test_a_stack_file_without_metalslurm_config_is_refused(tmp_path, text):
    """It would describe the default cluster without saying so."""
    path = tmp_path / "Pulumi.empty.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_stack_file(path)
    assert err.value.problems == [
        "the file has no metalslurm: config, so it would describe the default cluster without "
        "saying so; add 'config:' with at least 'metalslurm:provider' (see "
        "Pulumi.example-local.yaml)"]


def test_every_partition_gets_a_default_time():
    """A job without --time gets a bounded limit, so GPU-minute budgets can be checked."""
    cfg = parse_config(ms(partitions=[
        {"name": "short", "maxTime": "4:00:00"},
        {"name": "long", "maxTime": "14-00:00:00"},
        {"name": "open"},
        {"name": "given", "maxTime": "7-00:00:00", "defaultTime": "2-00:00:00"}]))
    assert [(p.name, p.max_time, p.default_time) for p in cfg.partitions] == [
        ("short", "4:00:00", "4:00:00"), ("long", "14-00:00:00", "1-00:00:00"),
        ("open", "UNLIMITED", "1-00:00:00"), ("given", "7-00:00:00", "2-00:00:00")]


def test_default_partitions_have_default_times_within_their_max_times():
    assert [(p.name, p.default_time) for p in parse_config({}).partitions] == [
        ("debug", "30:00"), ("train", "1-00:00:00"), ("priority", "1-00:00:00")]


def test_qos_limits_in_every_form_sacctmgr_takes_are_accepted():
    cfg = parse_config(ms(accounting={"qos": [{"name": "gpu", "limits": {
        "GrpTRESMins": "gres/gpu=43200,gres/gpu:h100=43200", "MaxTRESPerUser": "cpu=64,mem=512G",
        "MaxJobsPerUser": 10, "MaxWall": "7-00:00:00", "UsageFactor": 0.5,
        "Flags": "DenyOnLimit,NoDecay", "Preempt": "normal", "PreemptMode": "requeue"}}]}))
    assert cfg.accounting.qos[0].limits["MaxTRESPerUser"] == "cpu=64,mem=512G"


def test_ubuntu_nodes_are_accepted_where_the_provider_does_not_build_the_image():
    with pytest.raises(ConfigError) as err:
        parse_config(ms(provider="byo", os="ubuntu22.04"))
    assert not [p for p in err.value.problems if p.startswith("metalslurm:os")]


def test_missing_stack_file(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_stack_file(tmp_path / "nope.yaml")


def test_a_backup_controller_is_a_node_of_its_own_below_the_controller():
    from infra.providers.local import node_specs
    cfg = parse_config(ms(controller={"backup": "ctl2"}))
    assert cfg.controller_backup == "ctl2"
    [backup] = [s for s in node_specs(cfg, "host-bind") if s.name == "ctl2"]
    assert (backup.address, backup.groups) == ("10.77.0.9", ("slurm_controller_backup",))
    assert parse_config({}).controller_backup is None


def test_a_backup_controller_on_real_machines_needs_the_nfs_server():
    raw = ms(provider="oci", controller={"backup": "ctl2"}, storage={"backend": "none"})
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    assert any(p.startswith("metalslurm:controller.backup: needs the NFS server")
               for p in err.value.problems), err.value.problems


def test_a_byo_backup_controller_is_the_host_with_role_controller_backup():
    import yaml

    from infra.stack.byo_hosts import node_specs
    from tests.paths import REPO
    raw = yaml.safe_load((REPO / "Pulumi.example-byo.yaml").read_text())["config"]
    raw = {k: v for k, v in raw.items() if k != "metalslurm:sshPrivateKey"}
    hosts = raw["metalslurm:byo"]["hosts"]
    given = {"sshPrivateKey", "bmcCredentials"}
    with pytest.raises(ConfigError) as err:  # a host with the role, but no controller.backup
        parse_config({**raw, "metalslurm:byo": {**raw["metalslurm:byo"], "hosts": [
            *hosts, {"name": "ctl2", "role": "controller-backup", "address": "10.20.0.9"}]}},
            secrets_given=given, check_artifacts=False)
    assert any("role controller-backup (ctl2) but metalslurm:controller.backup is not set" in p
               for p in err.value.problems), err.value.problems
    with pytest.raises(ConfigError) as err:  # controller.backup, and no such host
        parse_config({**raw, "metalslurm:controller": {"name": "ctl", "backup": "ctl2"}},
                     secrets_given=given, check_artifacts=False)
    assert any("give exactly one host with role controller-backup named so (got none)" in p
               for p in err.value.problems), err.value.problems
    cfg = parse_config({**raw, "metalslurm:controller": {"name": "ctl", "backup": "ctl2"},
                        "metalslurm:byo": {**raw["metalslurm:byo"], "hosts": [
                            *hosts, {"name": "ctl2", "role": "controller-backup",
                                     "address": "10.20.0.9"}]}},
                       secrets_given=given, check_artifacts=False)
    [backup] = [s for s in node_specs(cfg) if s.name == "ctl2"]
    assert (backup.address, backup.groups) == ("10.20.0.9", ("slurm_controller_backup",))
