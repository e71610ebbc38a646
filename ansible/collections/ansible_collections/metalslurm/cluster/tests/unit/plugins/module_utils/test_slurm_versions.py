"""Which Slurm release takes which setting: version parsing, the table, adaptations, refusals."""

import pytest
from ansible_collections.metalslurm.cluster.plugins.module_utils.slurm_versions import (
    DISTRO_SLURM,
    DROP,
    KINDS,
    MIN_SUPPORTED,
    SETTINGS,
    SlurmVersion,
    SlurmVersionError,
    accepts,
    check_settings,
    distro_slurm,
    reconfigure_takes_nodes,
)

# What the roles write today, by hand from roles/slurm_controller/vars/main.yml for an
# example inventory: cluster "ml", controller "ctl" (10.0.0.2) also running slurmdbd, static
# GPU nodes gpu-[001-002] and elastic (cloud) nodes gpu-[003-004], each 2 sockets x 56 cores
# x 2 threads, 2063937 MB, 8 H100 GPUs; the partitions are infra.stack.config.DEFAULT_PARTITIONS.
# To be replaced by the Ansible-rendered configuration.
ROLE_SLURM_CONF_DEFAULTS = {
    "ClusterName": "ml",
    "SlurmctldHost": "ctl(10.0.0.2)",
    "SlurmctldPort": 6817,
    "SlurmdPort": 6818,
    "SlurmUser": "slurm",
    "SlurmdUser": "root",
    "AuthType": "auth/munge",
    "CredType": "cred/munge",
    "SlurmctldParameters": ["enable_configless"],
    "StateSaveLocation": "/var/lib/slurm/slurmctld",
    "SlurmdSpoolDir": "/var/lib/slurm/slurmd",
    "SlurmctldPidFile": "/run/slurmctld/slurmctld.pid",
    "SlurmdPidFile": "/run/slurmd.pid",
    "SlurmctldLogFile": "/var/log/slurm/slurmctld.log",
    "SlurmdLogFile": "/var/log/slurm/slurmd.log",
    "ProctrackType": "proctrack/cgroup",
    "TaskPlugin": ["task/cgroup", "task/affinity"],
    "SelectType": "select/cons_tres",
    "SelectTypeParameters": "CR_Core_Memory",
    "DefMemPerCPU": 8933,
    "GresTypes": "gpu",
    "SchedulerType": "sched/backfill",
    "MpiDefault": "none",
    "ReturnToService": 2,
    "SlurmctldTimeout": 120,
    "SlurmdTimeout": 300,
    "InactiveLimit": 0,
    "MinJobAge": 300,
    "KillWait": 30,
    "Waittime": 0,
    "PropagateResourceLimitsExcept": "MEMLOCK",
    "JobAcctGatherType": "jobacct_gather/cgroup",
    "JobCompType": "jobcomp/none",
}
ROLE_ACCOUNTING_DEFAULTS = {
    "AccountingStorageType": "accounting_storage/slurmdbd",
    "AccountingStorageHost": "ctl",
    "AccountingStoragePort": 6819,
    "AccountingStorageEnforce": ["associations", "limits", "qos", "safe"],
    "AccountingStorageTRES": ["gres/gpu", "gres/gpu:h100"],
    "JobAcctGatherFrequency": 30,
    "PriorityType": "priority/multifactor",
    "PriorityDecayHalfLife": "7-0",
    "PriorityMaxAge": "7-0",
    "PriorityWeightFairshare": 50000,
    "PriorityWeightAge": 1000,
    "PriorityWeightJobSize": 1000,
    "PriorityWeightPartition": 10000,
    "PriorityWeightQOS": 10000,
}
ROLE_PREEMPT_DEFAULTS = {"PreemptType": "preempt/partition_prio", "PreemptMode": "REQUEUE"}
ROLE_POWER_DEFAULTS = {
    "ResumeProgram": "/usr/local/sbin/metalslurm-resume",
    "SuspendProgram": "/usr/local/sbin/metalslurm-suspend",
    "ResumeFailProgram": "/usr/local/sbin/metalslurm-resume-fail",
    "SuspendTime": 600,
    "SuspendTimeout": 30,
    "ResumeTimeout": 600,
    "ResumeRate": 100,
    "SuspendRate": 100,
    "SuspendExcNodes": "gpu-[001-002]",
    "SlurmctldParameters": ["enable_configless", "idle_on_node_suspend", "cloud_reg_addrs"],
    "PrivateData": "cloud",
    "TreeWidth": 65533,
}
# __slurm_controller_settings: defaults | accounting | preemption | power saving.
ROLE_SLURM_CONF = {**ROLE_SLURM_CONF_DEFAULTS, **ROLE_ACCOUNTING_DEFAULTS,
                   **ROLE_PREEMPT_DEFAULTS, **ROLE_POWER_DEFAULTS}
# The same cluster without elastic nodes: no power-saving settings.
ROLE_SLURM_CONF_STATIC = {**ROLE_SLURM_CONF_DEFAULTS, **ROLE_ACCOUNTING_DEFAULTS,
                          **ROLE_PREEMPT_DEFAULTS}
ROLE_CGROUP_CONF = {"CgroupPlugin": "autodetect", "ConstrainCores": True,
                    "ConstrainRAMSpace": True, "ConstrainDevices": True}
# metalslurm_slurm_nodes, metalslurm_gres_records, metalslurm_partition_records.
ROLE_NODE_RECORDS = [
    {"NodeName": "gpu-001", "Sockets": 2, "CoresPerSocket": 56, "ThreadsPerCore": 2,
     "RealMemory": 2001018, "Gres": "gpu:h100:8", "State": "UNKNOWN"},
    {"NodeName": "gpu-003", "Sockets": 2, "CoresPerSocket": 56, "ThreadsPerCore": 2,
     "RealMemory": 2001018, "Gres": "gpu:h100:8", "State": "CLOUD", "Weight": 100},
    {"NodeName": "cpu-001", "CPUs": 64, "Sockets": 2, "RealMemory": 250000,
     "State": "UNKNOWN"},
]
ROLE_GRES_RECORDS = [
    {"NodeName": "gpu-001", "Name": "gpu", "Type": "h100", "File": "/dev/nvidia[0-7]"},
]
ROLE_PARTITION_RECORDS = [
    {"PartitionName": "debug", "Nodes": ["gpu-001", "gpu-003"], "Default": False,
     "MaxTime": "2:00:00", "State": "UP", "MaxNodes": 1, "PriorityTier": 1},
    {"PartitionName": "train", "Nodes": ["gpu-001", "gpu-003"], "Default": True,
     "MaxTime": "7-00:00:00", "State": "UP", "PriorityTier": 1},
    {"PartitionName": "priority", "Nodes": ["gpu-001", "gpu-003"], "Default": False,
     "MaxTime": "30-00:00:00", "State": "UP", "PriorityTier": 2, "PriorityJobFactor": 2,
     "QOS": "priority"},
]

NOTE_CLOUD_REG_ADDRS = (
    "slurm.conf SlurmctldParameters option cloud_reg_addrs left out for Slurm {v}: Slurm "
    "23.11 removed the option and takes a cloud node's NodeAddr and NodeHostname from its "
    "registration by default")
NOTE_PRIVATE_DATA_CLOUD = (
    "slurm.conf PrivateData option cloud left out for Slurm {v}: Slurm 23.02 and newer show "
    "powered-down cloud nodes by default")
NOTE_PRIVATE_DATA_EMPTY = (
    "slurm.conf PrivateData left out: none of its options apply to Slurm {v}")
NOTE_CGROUP_AUTODETECT_21_08 = (
    "cgroup.conf CgroupPlugin=autodetect on Slurm 21.08: Slurm 21.08 has no cgroup/v2 plugin "
    "(RELEASE_NOTES 22.05 'Added support for Cgroup Version 2'), so autodetect works only on "
    "nodes booted with the cgroup v1 hierarchy (systemd.unified_cgroup_hierarchy=0)")


# Version parsing


@pytest.mark.parametrize(("text", "release", "patch"), [
    ("21.08.5", "21.08", 5),
    ("22.05.8-4", "22.05", 8),
    ("22.05.8-4+deb12u3", "22.05", 8),
    ("24.11.5-1+b1", "24.11", 5),
    ("21.08.5-2ubuntu1", "21.08", 5),
    ("23.11.4-1.2ubuntu5", "23.11", 4),
    ("slurm-wlm 22.05.8", "22.05", 8),
    ("slurm 23.11.4", "23.11", 4),
    ("slurm 23.11.0-0rc1\n", "23.11", 0),
    ("slurmctld\t24.11.5-4", "24.11", 5),
    ("1:22.05.8-4", "22.05", 8),
    ("24.11", "24.11", None),
])
def test_parse_version(text, release, patch):
    version = SlurmVersion.parse(text)
    assert (version.release, version.patch) == (release, patch)


@pytest.mark.parametrize("text", ["", "slurm", "slurm 23", "slurm-wlm (none)", "22.13.1"])
def test_unreadable_version_is_refused(text):
    with pytest.raises(SlurmVersionError) as err:
        SlurmVersion.parse(text)
    assert str(err.value) == (
        f"cannot read a Slurm version from {text!r}: expected what dpkg or 'slurmctld -V' "
        "prints, such as '22.05.8-4' or 'slurm 23.11.4'")


@pytest.mark.parametrize(("version", "takes"), [
    ("21.08.5", False), ("22.05.8-4", False), ("24.05.2", False), ("24.11.5", True),
    (SlurmVersion(25, 5), True)])
def test_a_node_list_change_needs_a_restart_before_24_11(version, takes):
    assert reconfigure_takes_nodes(version) is takes


def test_versions_compare_by_release():
    assert SlurmVersion.parse("22.05.8") == SlurmVersion.parse("22.05.2-1")
    assert SlurmVersion.parse("21.08.8") < SlurmVersion.parse("22.05.2")
    assert SlurmVersion.parse("23.11.4") < SlurmVersion.parse("24.05.1") < SlurmVersion(24, 11)
    assert str(SlurmVersion.parse("slurm 23.11.4")) == "23.11.4"


def test_a_version_error_is_a_value_error_with_its_problems():
    err = SlurmVersionError(["first.", "second."])
    assert isinstance(err, ValueError)
    assert err.problems == ("first.", "second.")
    assert str(err) == "first.\nsecond."


# The table


def _sort_key(entry):
    return (entry.kind, entry.setting.lower(), "" if entry.value is None else entry.value.lower())


def test_table_is_sorted_and_unique():
    keys = [_sort_key(entry) for entry in SETTINGS]
    assert keys == sorted(keys)
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("entry", SETTINGS, ids=lambda e: f"{e.kind}:{e.setting}={e.value}")
def test_table_entry_is_complete(entry):
    assert entry.kind in KINDS
    assert entry.source.strip()
    since = SlurmVersion.parse(entry.since.removeprefix("≤"))
    if entry.since.startswith("≤"):
        assert since == MIN_SUPPORTED, "an unconfirmed first release is only bounded by 21.08"
    if entry.until is not None:
        assert SlurmVersion.parse(entry.until) > since
    if entry.adapt is not None:
        assert entry.reason
        # An adaptation applies on one side of the range only: before ``since`` when there is
        # no ``until``, from ``until`` on when ``since`` is older than every supported release.
        assert entry.until is None or since <= MIN_SUPPORTED
    if entry.value is not None:
        own = [e for e in SETTINGS if (e.kind, e.setting, e.value) == (entry.kind, entry.setting,
                                                                        None)]
        assert own, f"{entry.setting} has option entries but no entry of its own"


# Adaptations


@pytest.mark.parametrize("version", ["23.11", "24.11.5-4", "25.05"])
def test_cloud_reg_addrs_is_left_out_from_23_11(version):
    release = SlurmVersion.parse(version).release
    settings = {"SlurmctldParameters": ["enable_configless", "cloud_reg_addrs"]}
    assert check_settings("slurm.conf", settings, version) == (
        {"SlurmctldParameters": ["enable_configless"]},
        [NOTE_CLOUD_REG_ADDRS.format(v=release)])


def test_comma_joined_options_stay_comma_joined():
    settings = {"SlurmctldParameters": "enable_configless, cloud_reg_addrs,idle_on_node_suspend"}
    adapted, _ = check_settings("slurm.conf", settings, "23.11.4")
    assert adapted == {"SlurmctldParameters": "enable_configless,idle_on_node_suspend"}


@pytest.mark.parametrize("version", ["21.08.5", "22.05.8"])
def test_cloud_reg_addrs_is_kept_before_23_11(version):
    settings = {"SlurmctldParameters": ["enable_configless", "idle_on_node_suspend",
                                        "cloud_reg_addrs"]}
    assert check_settings("slurm.conf", settings, version) == (settings, [])


def test_private_data_cloud_is_left_out_from_23_02_with_the_setting_when_nothing_remains():
    assert check_settings("slurm.conf", {"PrivateData": "cloud"}, "23.02.7") == (
        {}, [NOTE_PRIVATE_DATA_CLOUD.format(v="23.02"), NOTE_PRIVATE_DATA_EMPTY.format(v="23.02")])


def test_private_data_keeps_its_other_options():
    assert check_settings("slurm.conf", {"PrivateData": ["jobs", "cloud"]}, "24.11") == (
        {"PrivateData": ["jobs"]}, [NOTE_PRIVATE_DATA_CLOUD.format(v="24.11")])


def test_private_data_cloud_is_kept_on_22_05():
    assert check_settings("slurm.conf", {"PrivateData": "cloud"}, "22.05.8") == (
        {"PrivateData": "cloud"}, [])


def test_cgroup_autodetect_is_accepted_by_21_08_with_a_caveat():
    assert check_settings("cgroup.conf", {"CgroupPlugin": "autodetect"}, "21.08.5") == (
        {"CgroupPlugin": "autodetect"}, [NOTE_CGROUP_AUTODETECT_21_08])


@pytest.mark.parametrize("value", ["autodetect", "cgroup/v1", "cgroup/v2"])
def test_cgroup_plugins_from_22_05(value):
    assert check_settings("cgroup.conf", {"CgroupPlugin": value}, "22.05.8") == (
        {"CgroupPlugin": value}, [])


# Refusals


@pytest.mark.parametrize(("kind", "settings", "version", "problem"), [
    ("cgroup.conf", {"CgroupPlugin": "cgroup/v2"}, "21.08.5",
     "cgroup.conf CgroupPlugin=cgroup/v2 needs Slurm 22.05 or newer; this controller runs "
     "Slurm 21.08: upgrade Slurm, or write CgroupPlugin=autodetect and boot the nodes with the "
     "cgroup v1 hierarchy"),
    ("slurm.conf", {"TopologyPlugin": "topology/block"}, "23.02.7",
     "slurm.conf TopologyPlugin=topology/block needs Slurm 23.11 or newer; this controller runs "
     "Slurm 23.02: upgrade Slurm or write TopologyPlugin=topology/tree"),
    ("gres.conf", {"NodeName": "gpu-001", "AutoDetect": "nvidia"}, "23.11.4",
     "gres.conf NodeName=gpu-001 AutoDetect=nvidia needs Slurm 24.11 or newer; this controller "
     "runs Slurm 23.11: upgrade Slurm, or write AutoDetect=nvml (needs Slurm built with NVML) "
     "or list the GPUs' File= in gres.conf"),
    ("topology.conf", {"BlockName": "b1", "Nodes": "gpu-[001-032]"}, "22.05.8",
     "topology.conf BlockName=b1 BlockName needs Slurm 23.11 or newer; this controller runs "
     "Slurm 22.05: upgrade Slurm or describe the fabric with SwitchName records "
     "(TopologyPlugin=topology/tree)"),
    ("topology.conf", {"BlockSizes": "4,16"}, "23.11.4",
     "topology.conf BlockSizes needs Slurm 24.05 or newer; this controller runs Slurm 23.11: "
     "upgrade Slurm to 24.05 or newer, or leave BlockSizes out (23.11 reads BlockLevels)"),
    ("topology.conf", {"BlockLevels": "0-1"}, "24.11.5",
     "topology.conf BlockLevels was removed in Slurm 24.05; this controller runs Slurm 24.11: "
     "write BlockSizes instead (Slurm 24.05 and newer)"),
    ("slurm.conf", {"SchedulerParameters": "bf_continue,defer_batch"}, "22.05.8",
     "slurm.conf SchedulerParameters option defer_batch needs Slurm 23.02 or newer; this "
     "controller runs Slurm 22.05: upgrade Slurm to 23.02 or newer, or write 'defer' if "
     "salloc and srun may wait for the scheduler too"),
    ("slurm.conf", {"SlurmctldParameters": ["enable_configless", "conmgr_threads=32"]}, "23.11",
     "slurm.conf SlurmctldParameters option conmgr_threads=32 needs Slurm 24.11 or newer; this "
     "controller runs Slurm 23.11: upgrade Slurm to 24.11 or newer (older releases handle RPCs "
     "without conmgr's thread pool), or leave the option out"),
    ("slurm.conf", {"TreeWidth": 70000}, "24.11",
     "slurm.conf TreeWidth=70000 is above 65533, the most Slurm accepts: write 65533 or less"),
    ("partition", {"PartitionName": "urgent", "PriorityTier": "65534"}, "22.05",
     "slurm.conf PartitionName=urgent PriorityTier=65534 is above 65533, the most Slurm "
     "accepts: write 65533 or less"),
])
def test_refusal(kind, settings, version, problem):
    with pytest.raises(SlurmVersionError) as err:
        check_settings(kind, settings, version)
    assert err.value.problems == (problem,)


def test_every_problem_is_reported_at_once():
    settings = {"TopologyPlugin": "topology/block", "TreeWidth": 65534,
                "SlurmctldParameters": ["cloud_reg_addrs"]}
    with pytest.raises(SlurmVersionError) as err:
        check_settings("slurm.conf", settings, "22.05.8")
    assert [p.split(":")[0] for p in err.value.problems] == [
        "slurm.conf TopologyPlugin=topology/block needs Slurm 23.11 or newer; this controller "
        "runs Slurm 22.05",
        "slurm.conf TreeWidth=65534 is above 65533, the most Slurm accepts"]


@pytest.mark.parametrize("version", ["20.11.9", "slurm 20.02.7", "2.6.5", "17.11"])
def test_versions_before_21_08_are_refused_as_a_whole(version):
    release = SlurmVersion.parse(version).release
    with pytest.raises(SlurmVersionError) as err:
        check_settings("slurm.conf", {"ClusterName": "ml"}, version)
    assert err.value.problems == (
        f"Slurm {release} is older than 21.08, the oldest release metalslurm supports "
        "(Ubuntu 22.04's): upgrade Slurm to 21.08 or newer",)


def test_unknown_kind_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown kind of Slurm settings 'slurmdbd.conf'"):
        check_settings("slurmdbd.conf", {}, "22.05")


# Pass-through


def test_settings_not_in_the_table_pass_through_without_a_note():
    settings = {"EpilogMsgTime": 2000, "HealthCheckProgram": "/usr/sbin/nhc",
                "SelectType": "select/linear", "TaskPlugin": ["task/cgroup", "task/foo"],
                "MaxArraySize": 100001}
    assert check_settings("slurm.conf", settings, "21.08.5") == (settings, [])


def test_keys_match_case_insensitively_and_keep_their_spelling():
    adapted, notes = check_settings("slurm.conf", {"slurmctldparameters": "CLOUD_REG_ADDRS"},
                                    "24.11")
    assert adapted == {}
    assert notes[0].startswith("slurm.conf slurmctldparameters option CLOUD_REG_ADDRS left out")


def test_none_values_pass_through():
    settings = {"GresTypes": None, "AccountingStorageTRES": None, "PrivateData": None}
    assert check_settings("slurm.conf", settings, "24.11") == (settings, [])


def test_the_input_is_not_changed():
    settings = {"SlurmctldParameters": ["enable_configless", "cloud_reg_addrs"]}
    check_settings("slurm.conf", settings, "24.11")
    assert settings == {"SlurmctldParameters": ["enable_configless", "cloud_reg_addrs"]}


def test_slurmd_configless_option_is_accepted_on_every_supported_release():
    for version in ("21.08", "22.05", "23.11", "24.11"):
        assert check_settings("slurmd", {"--conf-server": "ctl:6817"}, version) == (
            {"--conf-server": "ctl:6817"}, [])


# What the roles write today, per release the supported operating systems ship


def _slurm_conf_without_cloud_leftovers():
    adapted = dict(ROLE_SLURM_CONF)
    adapted["SlurmctldParameters"] = ["enable_configless", "idle_on_node_suspend"]
    del adapted["PrivateData"]
    return adapted


@pytest.mark.parametrize(("version", "expected", "notes"), [
    ("21.08.5-2ubuntu1", ROLE_SLURM_CONF, []),
    ("22.05.8-4+deb12u3", ROLE_SLURM_CONF, []),
    ("23.11.4-1.2ubuntu5", _slurm_conf_without_cloud_leftovers(),
     [NOTE_CLOUD_REG_ADDRS.format(v="23.11"), NOTE_PRIVATE_DATA_CLOUD.format(v="23.11"),
      NOTE_PRIVATE_DATA_EMPTY.format(v="23.11")]),
    ("24.11.5-4", _slurm_conf_without_cloud_leftovers(),
     [NOTE_CLOUD_REG_ADDRS.format(v="24.11"), NOTE_PRIVATE_DATA_CLOUD.format(v="24.11"),
      NOTE_PRIVATE_DATA_EMPTY.format(v="24.11")]),
])
def test_role_slurm_conf_with_elastic_nodes(version, expected, notes):
    assert check_settings("slurm.conf", ROLE_SLURM_CONF, version) == (expected, notes)


@pytest.mark.parametrize("version", ["21.08.5", "22.05.8", "23.11.4", "24.11.5"])
def test_role_slurm_conf_without_elastic_nodes_is_taken_as_written(version):
    assert check_settings("slurm.conf", ROLE_SLURM_CONF_STATIC, version) == (
        ROLE_SLURM_CONF_STATIC, [])


@pytest.mark.parametrize(("version", "notes"), [
    ("21.08.5", [NOTE_CGROUP_AUTODETECT_21_08]),
    ("22.05.8", []),
    ("23.11.4", []),
    ("24.11.5", []),
])
def test_role_cgroup_conf(version, notes):
    assert check_settings("cgroup.conf", ROLE_CGROUP_CONF, version) == (ROLE_CGROUP_CONF, notes)


@pytest.mark.parametrize("version", ["21.08.5", "22.05.8", "23.11.4", "24.11.5"])
@pytest.mark.parametrize(("kind", "records"), [
    ("node", ROLE_NODE_RECORDS),
    ("gres.conf", ROLE_GRES_RECORDS),
    ("partition", ROLE_PARTITION_RECORDS),
])
def test_role_records_are_taken_as_written(version, kind, records):
    for record in records:
        assert check_settings(kind, record, version) == (record, [])


@pytest.mark.parametrize("version", ["21.08.5", "22.05.8", "23.11.4", "24.11.5"])
def test_settings_about_to_be_added_are_taken_by_every_supported_release(version):
    assert check_settings("partition", {"PartitionName": "train", "DefaultTime": "1:00:00"},
                          version)[1] == []
    assert check_settings("gres.conf", {"NodeName": "gpu-001", "AutoDetect": "nvml",
                                        "Cores": "0-55"}, version)[1] == []
    assert check_settings("slurm.conf", {"TopologyPlugin": "topology/tree"}, version)[1] == []
    assert check_settings("topology.conf", {"SwitchName": "leaf1", "Nodes": "gpu-[001-004]"},
                          version)[1] == []


# The Slurm each supported operating system ships


@pytest.mark.parametrize(("key", "release"), [
    ("debian12", "22.05"), ("debian13", "24.11"), ("ubuntu22.04", "21.08"),
    ("ubuntu24.04", "23.11"),
])
def test_distro_slurm_release(key, release):
    entry = next(e for e in DISTRO_SLURM if e.key == key)
    assert entry.slurm.release == release
    assert entry.source


@pytest.mark.parametrize(("distribution", "version", "key"), [
    ("Debian", "12", "debian12"), ("Debian", "12.11", "debian12"), ("Debian", "13", "debian13"),
    ("Ubuntu", "22.04", "ubuntu22.04"), ("Ubuntu", "24.04", "ubuntu24.04"),
])
def test_distro_slurm_lookup(distribution, version, key):
    assert distro_slurm(distribution, version).key == key


def test_distro_slurm_unknown_release():
    with pytest.raises(ValueError, match="no Slurm release recorded for Ubuntu 20.04"):
        distro_slurm("Ubuntu", "20.04")


def test_the_oldest_supported_release_is_the_oldest_shipped():
    assert min(entry.slurm for entry in DISTRO_SLURM) == MIN_SUPPORTED


def test_drop_marks_only_removed_options():
    dropped = {(e.setting, e.value) for e in SETTINGS if e.adapt == DROP}
    assert dropped == {("PrivateData", "cloud"), ("SlurmctldParameters", "cloud_reg_addrs")}


# What a caller choosing settings asks (module_utils/slurm_scale.py)


@pytest.mark.parametrize(("setting", "value", "version", "accepted"), [
    ("SchedulerParameters", "defer_batch", "22.05", False),
    ("SchedulerParameters", "defer_batch", "23.02", True),
    ("SchedulerParameters", "bf_window=43200", "21.08", True),
    ("SlurmctldParameters", "conmgr_max_connections=2048", "23.11.4", False),
    ("SlurmctldParameters", "conmgr_max_connections=2048", "24.11", True),
    ("SlurmctldParameters", "cloud_reg_addrs", "23.11", False),
    ("TreeWidth", None, "21.08", True),
    ("SchedulerParameters", "bf_busy_nodes", "21.08", True),  # not in the table
    ("MaxArraySize", None, "21.08", True),  # not in the table
])
def test_accepts(setting, value, version, accepted):
    assert accepts("slurm.conf", setting, value, version) is accepted


def test_scheduler_parameters_as_a_string_are_read_option_by_option():
    adapted, notes = check_settings("slurm.conf",
                                    {"SchedulerParameters": "bf_continue,max_rpc_cnt=150"},
                                    "21.08")
    assert adapted == {"SchedulerParameters": "bf_continue,max_rpc_cnt=150"} and notes == []
