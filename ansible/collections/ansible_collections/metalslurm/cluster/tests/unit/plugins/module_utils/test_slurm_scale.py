"""The size-aware slurm.conf settings (module_utils/slurm_scale.py): bands and their edges,
values by release, values that follow the operator's, and the table's bond with
slurm_versions.py."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.metalslurm.cluster.plugins.filter.scale import (
    size_tuning as size_tuning_filter,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.slurm_scale import (
    BANDS,
    DECISIONS,
    SCALE_SETTINGS,
    Derived,
    ScaleError,
    band_of,
    size_tuning,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.slurm_versions import (
    SETTINGS,
    SlurmVersion,
    check_settings,
)

# The role's settings before the tuning, on a cluster with elastic nodes (the parts the
# tuning reads or extends).
BASE = {"SlurmctldParameters": ["enable_configless", "idle_on_node_suspend", "cloud_reg_addrs"],
        "TreeWidth": 65533, "MinJobAge": 300}
# infra.stack.config's default partitions: 2 hours, 7 days, 30 days.
PARTITIONS = [{"PartitionName": "debug", "MaxTime": "2:00:00"},
              {"PartitionName": "train", "MaxTime": "7-00:00:00"},
              {"PartitionName": "priority", "MaxTime": "30-00:00:00"}]


def tune(nodes, release="24.11", overrides=None, partitions=PARTITIONS, base=BASE):
    return size_tuning(nodes, release, base, overrides or {}, partitions)


def scheduler(tuned):
    return dict(item.partition("=")[::2] for item in tuned.get("SchedulerParameters", []))


# Bands


@pytest.mark.parametrize(("nodes", "band"), [
    (0, "small"), (1, "small"), (63, "small"), (64, "small"), (65, "medium"), (511, "medium"),
    (512, "medium"), (513, "large"), (1024, "large"), (2047, "large"), (2048, "large"),
    (2049, "xlarge"), (65536, "xlarge"),
])
def test_band_edges(nodes, band):
    assert band_of(nodes).name == band


def test_bands_cover_every_count_once():
    assert BANDS[0].first == 1
    assert all(a.last + 1 == b.first for a, b in zip(BANDS, BANDS[1:], strict=False))
    assert [band.label for band in BANDS] == ["≤ 64", "65–512", "513–2,048", "> 2,048"]


def test_more_nodes_than_slurm_holds_is_refused():
    with pytest.raises(ScaleError, match="65,537 compute nodes: a Slurm cluster holds at most "
                                         "65,536"):
        tune(65537)


@pytest.mark.parametrize("nodes", [0, 4, 63, 64])
@pytest.mark.parametrize("release", ["21.08", "24.11"])
def test_a_small_cluster_gets_nothing(nodes, release):
    assert tune(nodes, release) == {}


def test_a_small_cluster_does_not_read_the_release():
    """The role passes the release it will write for; a small cluster's files do not depend
    on it here (fit_slurm_release says what is wrong with one)."""
    assert size_tuning(64, "not a version", BASE) == {}


@pytest.mark.parametrize(("nodes", "expected"), [
    (65, {"MessageTimeout": 30, "UnkillableStepTimeout": 150, "MaxJobCount": 20000}),
    (512, {"MessageTimeout": 30, "UnkillableStepTimeout": 150, "MaxJobCount": 20000}),
    (513, {"MessageTimeout": 60, "UnkillableStepTimeout": 300, "MaxJobCount": 50000}),
    (2048, {"MessageTimeout": 60, "UnkillableStepTimeout": 300, "MaxJobCount": 50000}),
    (2049, {"MessageTimeout": 60, "UnkillableStepTimeout": 300, "MaxJobCount": 100000}),
])
def test_timeouts_and_job_count_by_band(nodes, expected):
    tuned = tune(nodes, "22.05")
    assert {k: tuned[k] for k in expected} == expected


@pytest.mark.parametrize(("nodes", "tree_width"), [
    (65, 23), (512, 23), (513, 46), (2048, 46), (2049, 41), (65536, 41)])
def test_tree_width_by_band_from_23_11(nodes, tree_width):
    assert tune(nodes, "23.11")["TreeWidth"] == tree_width
    assert tune(nodes, "24.11.5-4")["TreeWidth"] == tree_width


@pytest.mark.parametrize("release", ["21.08", "22.05.8", "23.02"])
def test_tree_width_is_left_to_the_role_before_23_11(release):
    """The default there (50) reaches 2,550 nodes in two hops; with CLOUD nodes the role's
    65533 must stay (they cannot forward before 23.11)."""
    assert "TreeWidth" not in tune(1024, release)


@pytest.mark.parametrize(("nodes", "bf_interval"), [(512, None), (513, "60"), (2049, "120")])
def test_backfill_interval_by_band(nodes, bf_interval):
    assert scheduler(tune(nodes)).get("bf_interval") == bf_interval


@pytest.mark.parametrize("nodes", [65, 1024, 4096])
def test_scheduler_limits_above_64_nodes(nodes):
    options = scheduler(tune(nodes, "22.05"))
    assert {k: options[k] for k in ("bf_continue", "bf_max_job_test", "bf_max_job_user",
                                    "partition_job_depth")} == {
        "bf_continue": "", "bf_max_job_test": "1000", "bf_max_job_user": "100",
        "partition_job_depth": "500"}


@pytest.mark.parametrize(("nodes", "throttled"), [
    (65, False), (512, False), (513, True), (1024, True), (4096, True)])
def test_scheduling_passes_are_throttled_only_above_512_nodes(nodes, throttled):
    """The scale lab measured sched_min_interval and defer_batch slowing bursts at 128 and
    512 nodes and helping a little at 1,024 (docs/lab/scale-lab.md)."""
    options = scheduler(tune(nodes, "24.11"))
    assert options.get("sched_min_interval") == ("2000000" if throttled else None)
    assert ("defer_batch" in options) is throttled


# Releases


@pytest.mark.parametrize(("release", "defer_batch"), [
    ("21.08", False), ("22.05", False), ("23.02", True), ("23.11", True), ("24.11", True)])
def test_defer_batch_only_where_slurm_knows_it(release, defer_batch):
    """22.05 would read defer_batch as 'defer' (also holding salloc and srun)."""
    assert ("defer_batch" in tune(1024, release)["SchedulerParameters"]) is defer_batch


@pytest.mark.parametrize(("release", "max_rpc_cnt"), [
    ("21.08", "150"), ("22.05", "150"), ("23.11", "150"), ("24.11", "32"), ("25.05", "32")])
def test_max_rpc_cnt_below_the_rpc_thread_ceiling(release, max_rpc_cnt):
    assert scheduler(tune(1024, release))["max_rpc_cnt"] == max_rpc_cnt


@pytest.mark.parametrize(("nodes", "release", "parameters"), [
    (1024, "22.05", None),
    (1024, "23.11", None),
    (65, "24.11", ["enable_configless", "idle_on_node_suspend", "cloud_reg_addrs",
                   "conmgr_max_connections=1024"]),
    (1024, "24.11", ["enable_configless", "idle_on_node_suspend", "cloud_reg_addrs",
                     "conmgr_max_connections=2048"]),
    (8192, "24.11", ["enable_configless", "idle_on_node_suspend", "cloud_reg_addrs",
                     "conmgr_max_connections=2048"]),
])
def test_conmgr_connections_from_24_11_keep_the_roles_options(nodes, release, parameters):
    assert tune(nodes, release).get("SlurmctldParameters") == parameters


def test_an_option_the_base_has_is_replaced_not_repeated():
    base = {"SlurmctldParameters": "enable_configless,conmgr_max_connections=10"}
    assert tune(1024, base=base)["SlurmctldParameters"] == [
        "enable_configless", "conmgr_max_connections=2048"]


@pytest.mark.parametrize("release", ["21.08", "22.05", "23.11", "24.11"])
@pytest.mark.parametrize("nodes", [65, 1024, 4096])
def test_what_is_chosen_is_what_the_release_takes(nodes, release):
    tuned = {**BASE, **tune(nodes, release)}
    adapted, notes = check_settings("slurm.conf", tuned, release)
    # Only the role's own cloud_reg_addrs is adapted (left out from 23.11).
    assert all("cloud_reg_addrs" in note for note in notes)
    assert {k: v for k, v in adapted.items() if k != "SlurmctldParameters"} == {
        k: v for k, v in tuned.items() if k != "SlurmctldParameters"}


# Values that follow the operator's settings


@pytest.mark.parametrize(("overrides", "unkillable"), [
    ({}, 300), ({"MessageTimeout": 100}, 500), ({"MessageTimeout": 5}, 60),
    ({"MessageTimeout": None}, 300)])
def test_unkillable_step_timeout_follows_the_message_timeout_slurm_will_use(overrides,
                                                                           unkillable):
    assert tune(1024, "22.05", overrides)["UnkillableStepTimeout"] == unkillable


@pytest.mark.parametrize(("parameters", "max_rpc_cnt"), [
    (["enable_configless", "conmgr_threads=96"], "48"),
    ("enable_configless,CONMGR_THREADS=128", "64"),
    ("conmgr_threads=8", "10"),  # the man page's smallest useful value
    (["enable_configless"], "32"),
])
def test_max_rpc_cnt_follows_the_operators_conmgr_threads(parameters, max_rpc_cnt):
    tuned = tune(1024, "24.11", {"SlurmctldParameters": parameters})
    assert scheduler(tuned)["max_rpc_cnt"] == max_rpc_cnt


# The backfill window follows the partitions


@pytest.mark.parametrize(("partitions", "window", "resolution"), [
    (PARTITIONS, "43200", "1800"),
    ([{"PartitionName": "train", "MaxTime": "7-00:00:00"}], "10080", "420"),
    ([{"PartitionName": "train", "MaxTime": "1-12:00:00"}], "2160", "90"),
    ([{"PartitionName": "any", "MaxTime": "UNLIMITED"}], "43200", "1800"),
    ([{"PartitionName": "any"}], "43200", "1800"),  # Slurm's default MaxTime: UNLIMITED
    ([{"PartitionName": "long", "maxtime": "60-00:00:00"}], "43200", "1800"),
    ([{"PartitionName": "debug", "MaxTime": "1-00:00:00"}], None, None),
    ([], None, None),
])
def test_backfill_window_covers_the_longest_time_limit(partitions, window, resolution):
    options = scheduler(tune(1024, partitions=partitions))
    assert (options.get("bf_window"), options.get("bf_resolution")) == (window, resolution)


# The table


def test_every_entry_has_a_value_per_band_and_none_for_small_clusters():
    for entry in SCALE_SETTINGS:
        assert len(entry.values) == len(BANDS), entry.name
        assert entry.values[0] is None, entry.name
        assert entry.source.strip() and entry.why.strip(), entry.name
        if entry.applies_from or entry.applies_until:
            assert entry.applies_reason, entry.name
        for bound in (entry.applies_from, entry.applies_until):
            if bound:
                SlurmVersion.parse(bound)


@pytest.mark.parametrize("entry", SCALE_SETTINGS, ids=lambda e: e.name)
def test_every_setting_and_option_is_in_the_release_table(entry):
    """slurm_versions.SETTINGS stays the one place that says which release takes what."""
    own = [s for s in SETTINGS if (s.kind, s.setting, s.value) == ("slurm.conf", entry.setting,
                                                                    None)]
    assert own, entry.setting
    if entry.option is not None:
        sample = next(v for v in entry.values if v is not None)
        text = entry.option if sample is True else f"{entry.option}=1"
        assert any(s.setting == entry.setting and s.value is not None
                   and (s.value == text or (s.value.endswith("*")
                                            and text.startswith(s.value[:-1])))
                   for s in SETTINGS), text


def test_derived_values_say_how():
    for entry in SCALE_SETTINGS:
        for value in entry.values:
            if isinstance(value, Derived):
                assert value.text.strip()


def test_each_decision_names_its_source():
    assert {d.setting for d in DECISIONS} >= {"HealthCheckNodeState", "MaxNodeCount",
                                              "SlurmctldParameters conmgr_threads"}
    assert all(d.reason.strip() and d.source.strip() for d in DECISIONS)


# The filter


def test_the_filter_gives_the_settings():
    assert size_tuning_filter("1024", "24.11", BASE, None, None)["TreeWidth"] == 46


@pytest.mark.parametrize(("nodes", "release", "message"), [
    (70000, "24.11", "70,000 compute nodes"),
    (1024, "", "cannot read a Slurm version from ''"),
])
def test_the_filter_says_what_it_cannot_do(nodes, release, message):
    with pytest.raises(AnsibleFilterError, match=message):
        size_tuning_filter(nodes, release, BASE)
