"""The tables that own defaults several readers share (module_utils/cluster_defaults.py, and
the settings merges of gpu.py, nccl.py, topology.py and users.py): what an inventory leaves
out gets the table's default, what it gives stays its own, and no caller can change the
table through what it was handed."""

from __future__ import annotations

import ansible_collections.metalslurm.cluster.plugins.module_utils.cluster_defaults as shared
import ansible_collections.metalslurm.cluster.plugins.module_utils.gpu as gpu_table
import ansible_collections.metalslurm.cluster.plugins.module_utils.nccl as nccl_table
import ansible_collections.metalslurm.cluster.plugins.module_utils.topology as topology_table
import ansible_collections.metalslurm.cluster.plugins.module_utils.users as users_table
import pytest


def test_the_shared_defaults_name_the_programs_in_their_directory():
    table = shared.cluster_defaults()
    for name in ("health_program", "job_prolog", "job_epilog"):
        assert table[name].rsplit("/", 1)[0] == table["programs_dir"], name
    assert (table["slurmdbd_port"], table["default_job_time"]) == (6819, "1-00:00:00")


def test_the_shared_defaults_are_a_copy():
    shared.cluster_defaults()["slurmdbd_port"] = 1
    assert shared.DEFAULTS["slurmdbd_port"] == 6819


@pytest.mark.parametrize(("merge", "table", "given", "key"), [
    (gpu_table.gpu_settings, gpu_table.DEFAULTS, {"branch": "570"}, "branch"),
    (nccl_table.nccl_config, nccl_table.DEFAULTS, {"enabled": False}, "enabled"),
    (shared.accept_settings, shared.ACCEPT_DEFAULTS, {"gate": True}, "gate"),
    (shared.accounting_settings, shared.ACCOUNTING_DEFAULTS, {"database_port": 3307},
     "database_port"),
    (topology_table.topology_settings, topology_table.INVENTORY_DEFAULTS, {"plugin": "block"},
     "plugin"),
    (users_table.access_settings, users_table.ACCESS_DEFAULTS, {"pam_slurm_adopt": False},
     "pam_slurm_adopt"),
])
def test_a_settings_merge_keeps_what_is_given_and_fills_the_rest(merge, table, given, key):
    assert merge(None) == table
    merged = merge(given)
    assert merged[key] == given[key] and merged[key] != table[key]
    assert {k: v for k, v in merged.items() if k != key} == {
        k: v for k, v in table.items() if k != key}


@pytest.mark.parametrize(("merge", "table", "key"), [
    (gpu_table.gpu_settings, gpu_table.DEFAULTS, "repository"),
    (nccl_table.nccl_config, nccl_table.DEFAULTS, "settings"),
    (shared.accounting_settings, shared.ACCOUNTING_DEFAULTS, "qos"),
    (topology_table.topology_settings, topology_table.INVENTORY_DEFAULTS, "spines"),
])
def test_a_merged_tree_shares_nothing_with_the_table(merge, table, key):
    before = repr(table[key])
    merged = merge({})
    if isinstance(merged[key], dict):
        merged[key]["x"] = "y"
    else:
        merged[key].append("x")
    assert repr(table[key]) == before


def test_an_empty_admin_group_or_gid_is_the_default():
    """As the stack parser writes a stack without metalslurm:access (empty values)."""
    merged = users_table.access_settings({"admin_group": "", "admin_gid": 0})
    assert (merged["admin_group"], merged["admin_gid"]) == (
        users_table.DEFAULT_ADMIN_GROUP, users_table.DEFAULT_ADMIN_GID)


def test_the_gates_prefix_is_what_the_roles_drain_with():
    assert shared.accept_gate(None) == {"reason_prefix": shared.ACCEPT_REASON_PREFIX}
    assert shared.ACCEPT_REASON_PREFIX.endswith(":")


def test_the_munge_keys_floor_is_munges():
    """munged refuses keys shorter than 32 bytes."""
    assert shared.MUNGE_MIN_KEY_BYTES == 32
