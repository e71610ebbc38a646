"""slurm.conf for a 1,024-node cluster, rendered by the controller role's own tasks/render.yml
(as test_slurm_controller_render.py does for the 4-node local stack): the size-aware settings of
module_utils/slurm_scale.py are there on each release that takes them, the operator's
settings still win, and with slurm_controller_size_tuning off the file is what the role wrote
before the tuning existed. Each rendered file is checked against module_utils/slurm_versions.py.

The inventory is the default local stack's with its four compute nodes replaced by 512 static
and 512 elastic (CLOUD) H100 nodes, gpu-0001 to gpu-1024, in every partition.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.metalslurm.cluster.plugins.module_utils.slurm_versions import (
    check_settings,
)

from tests.slurm_render import inventory_with_nodes, lines, run_render, settings

NODES = 1024
STATIC = 512
HOSTS = [f"gpu-{i:04d}" for i in range(1, NODES + 1)]
# What the tuning writes for 513 to 2,048 nodes (module_utils/slurm_scale.py), on every release.
SCHEDULER_COMMON = ["bf_continue", "bf_interval=60", "bf_max_job_test=1000",
                    "bf_max_job_user=100", "bf_window=43200", "bf_resolution=1800",
                    "partition_job_depth=500", "sched_min_interval=2000000"]
# Keys the tuning adds or changes in this cluster's slurm.conf on some release.
TUNED_KEYS = ("MaxJobCount", "MessageTimeout", "SchedulerParameters", "SlurmctldParameters",
              "TreeWidth", "UnkillableStepTimeout")


def large_inventory() -> dict:
    """The fixture inventory with 1,024 compute nodes: the first 512 static, the rest elastic."""
    return inventory_with_nodes(HOSTS, STATIC)


def render(out: Path, releases: tuple[str, ...], extra_vars: dict | None = None) -> Path:
    proc = run_render(out, releases, extra_vars, inventory=large_inventory(), node_facts=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
    return out


# Each release costs about 12 s at this size (the role's hostvars lookups, tuning on or off):
# 22.05 and 24.11 stand for the releases before and after the options that differ (23.11's
# TreeWidth and 23.02's defer_batch are the module's tests, test_slurm_scale.py).
@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Path:
    return render(tmp_path_factory.mktemp("scale"), ("22.05", "24.11"))


@pytest.fixture(scope="module")
def untuned(tmp_path_factory) -> Path:
    return render(tmp_path_factory.mktemp("scale-off"), ("24.11",),
                  {"slurm_controller_size_tuning": False})


def test_the_node_lines_cover_the_thousand_nodes(tuned):
    nodes = [line for line in lines(tuned / "24.11/slurm.conf") if line.startswith("NodeName=")]
    assert [line.split()[0] for line in nodes] == ["NodeName=gpu-[0001-0512]",
                                                   "NodeName=gpu-[0513-1024]"]


@pytest.mark.parametrize(("release", "expected"), [
    # 22.05: no defer_batch (it would be read as 'defer') and no conmgr; max_rpc_cnt below
    # its 256 server threads; TreeWidth stays 65533 (its CLOUD nodes need fanout off).
    ("22.05", {"SchedulerParameters": ",".join([*SCHEDULER_COMMON, "max_rpc_cnt=150"]),
               "SlurmctldParameters": "enable_configless,idle_on_node_suspend,cloud_reg_addrs",
               "TreeWidth": "65533"}),
    # 24.11: defer_batch; conmgr with max_rpc_cnt under its 64 threads; fanout works for
    # CLOUD nodes since 23.11: two hops to 2,048 nodes.
    ("24.11", {"SchedulerParameters": ",".join([*SCHEDULER_COMMON, "defer_batch",
                                                "max_rpc_cnt=32"]),
               "SlurmctldParameters": "enable_configless,idle_on_node_suspend,"
                                      "conmgr_max_connections=2048",
               "TreeWidth": "46"}),
])
def test_a_thousand_nodes_get_the_large_band_on_each_release(tuned, release, expected):
    conf = settings(tuned / release / "slurm.conf")
    assert {k: conf.get(k) for k in TUNED_KEYS} == {
        **expected, "MaxJobCount": "50000", "MessageTimeout": "60",
        "UnkillableStepTimeout": "300"}


def test_health_checks_cycle_through_the_nodes(tuned):
    """CYCLE (module_utils/health.py, its owner) spreads a check round over the interval."""
    assert settings(tuned / "24.11/slurm.conf")["HealthCheckNodeState"] == "ANY,CYCLE"


def test_max_job_count_restarts_slurmctld(tuned, untuned):
    """slurm.conf(5) of 22.05.8: a restart of slurmctld is required to change MaxJobCount."""
    assert "MaxJobCount=50000" in lines(tuned / "24.11/.metalslurm-restart-keys.conf")
    assert not any(line.startswith("MaxJobCount=")
                   for line in lines(untuned / "24.11/.metalslurm-restart-keys.conf"))


@pytest.mark.parametrize("release", ["22.05", "24.11"])
def test_each_rendered_file_is_what_its_release_takes(tuned, release):
    conf = {k: v.split(",") if "," in v else v
            for k, v in settings(tuned / release / "slurm.conf").items()}
    assert check_settings("slurm.conf", conf, release) == (conf, [])


def test_without_the_tuning_the_settings_are_the_roles_defaults(untuned):
    conf = settings(untuned / "24.11/slurm.conf")
    assert {k: conf.get(k) for k in TUNED_KEYS} == {
        "MaxJobCount": None, "MessageTimeout": None, "SchedulerParameters": None,
        "SlurmctldParameters": "enable_configless,idle_on_node_suspend", "TreeWidth": "65533",
        "UnkillableStepTimeout": None}


def test_the_tuning_changes_only_its_own_keys(tuned, untuned):
    on, off = settings(tuned / "24.11/slurm.conf"), settings(untuned / "24.11/slurm.conf")
    assert {k for k in on.keys() | off.keys() if on.get(k) != off.get(k)} == set(TUNED_KEYS)
    assert lines(tuned / "24.11/gres.conf") == lines(untuned / "24.11/gres.conf")
    node_lines = [line for line in lines(tuned / "24.11/slurm.conf") if "Name=" in line]
    assert node_lines == [line for line in lines(untuned / "24.11/slurm.conf") if "Name=" in line]


def test_the_operators_settings_win(tmp_path):
    """slurm_controller_config replaces a tuned value (a list setting as a whole), and a
    value derived from one it sets follows it (UnkillableStepTimeout from MessageTimeout,
    max_rpc_cnt from conmgr_threads)."""
    render(tmp_path, ("24.11",), {"slurm_controller_config": {
        "TreeWidth": 128, "MessageTimeout": 100,
        "SlurmctldParameters": ["enable_configless", "conmgr_threads=96"]}})
    conf = settings(tmp_path / "24.11/slurm.conf")
    assert {k: conf[k] for k in ("TreeWidth", "MessageTimeout", "UnkillableStepTimeout",
                                 "SlurmctldParameters")} == {
        "TreeWidth": "128", "MessageTimeout": "100", "UnkillableStepTimeout": "500",
        "SlurmctldParameters": "enable_configless,conmgr_threads=96"}
    assert "max_rpc_cnt=48" in conf["SchedulerParameters"].split(",")
