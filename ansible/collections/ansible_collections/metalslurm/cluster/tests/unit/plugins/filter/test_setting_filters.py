"""The filters the roles read shared defaults and settings tables through
(plugins/filter/cluster_defaults.py, and the settings filters of gpu.py, nccl.py,
topology.py and users.py): each is the table's own function."""

from __future__ import annotations

import pytest
from ansible_collections.metalslurm.cluster.plugins.filter.cluster_defaults import (
    FilterModule as ClusterDefaultsFilters,
)
from ansible_collections.metalslurm.cluster.plugins.filter.gpu import FilterModule as GpuFilters
from ansible_collections.metalslurm.cluster.plugins.filter.nccl import FilterModule as NcclFilters
from ansible_collections.metalslurm.cluster.plugins.filter.topology import (
    FilterModule as TopologyFilters,
)
from ansible_collections.metalslurm.cluster.plugins.filter.users import FilterModule as UsersFilters
from ansible_collections.metalslurm.cluster.plugins.module_utils.cluster_defaults import (
    DEFAULTS as SHARED_DEFAULTS,
)


@pytest.mark.parametrize(("filters", "name"), [
    (ClusterDefaultsFilters, "cluster_defaults"), (ClusterDefaultsFilters, "accept_settings"),
    (ClusterDefaultsFilters, "accept_gate"), (ClusterDefaultsFilters, "accounting_settings"),
    (GpuFilters, "gpu_settings"), (NcclFilters, "nccl_config"),
    (TopologyFilters, "topology_settings"), (UsersFilters, "access_settings")])
def test_each_filter_is_offered(filters, name):
    assert callable(filters().filters()[name])


def test_none_through_the_shared_defaults_filter_is_the_table():
    """As the roles call it: ``none | metalslurm.cluster.cluster_defaults``."""
    shared = ClusterDefaultsFilters().filters()["cluster_defaults"](None)
    assert shared == SHARED_DEFAULTS


def test_the_accounting_filter_fills_what_a_hand_written_inventory_leaves_out():
    merged = ClusterDefaultsFilters().filters()["accounting_settings"]({"database_host": "db"})
    assert (merged["database_host"], merged["database_port"], merged["prune"]) == (
        "db", 3306, True)
