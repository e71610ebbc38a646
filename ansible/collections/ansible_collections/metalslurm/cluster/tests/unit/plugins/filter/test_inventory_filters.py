"""The inventory filters (plugins/filter/inventory.py): Ansible's groups and hostvars held to
the inventory contract (cluster_validate); the shared paths of an inventory (the NFS roles,
common, slurm_health)."""

import pytest
from ansible_collections.metalslurm.cluster.plugins.filter import inventory as filters


def test_inventory_problems_from_groups_and_hostvars():
    groups = {"slurm_controller": ["c1", "c2"], "slurm_compute": ["n1"]}
    hostvars = {h: {"metalslurm_address": f"10.0.0.{i}", "metalslurm_private_cidr": "10.0.0.0/24"}
                for i, h in enumerate(["c1", "c2", "n1"], start=10)}
    problems = filters.inventory_problems(groups, hostvars)
    assert problems == ["group slurm_controller has 2 hosts (c1, c2): put exactly one host in it"]


@pytest.mark.parametrize(("paths", "storage", "expected"), [
    (["/data"], "nfs", ["/data"]),                 # the inventory's own list
    ([], "nfs", []),                               # an empty list is a list
    (None, "nfs", ["/home", "/shared"]),           # shared storage, no list: the default
    (None, "host-bind", ["/home", "/shared"]),
    (None, "none", []),                            # no shared storage: nothing shared
    (None, None, []),                              # no word on storage: the contract's none
])
def test_the_shared_paths_of_an_inventory(paths, storage, expected):
    shared_paths = filters.FilterModule().filters()["shared_paths"]
    assert shared_paths(paths, storage) == expected


@pytest.mark.parametrize(("groups", "expected"), [
    ({"login": ["login-002", "login-001"], "slurm_controller": ["ctl"]}, "login-002"),
    ({"login": [], "slurm_controller": ["ctl"]}, "ctl"),       # no login node: the controller
    ({"slurm_controller": ["ctl"], "slurm_compute": ["n1"]}, "ctl"),
    ({"slurm_compute": ["n1"]}, ""),                           # neither (a partial inventory)
])
def test_the_submit_host_is_the_first_login_node_else_the_controller(groups, expected):
    """In the inventory's order (Ansible's groups), as Slurm users meet it."""
    assert filters.FilterModule().filters()["submit_host"](groups) == expected


def test_the_filter_passes_the_groups_to_the_contract():
    groups = {"slurm_controller": ["c1"], "slurm_compute": ["n1"]}
    hostvars = {h: {"metalslurm_address": f"10.0.0.{i}", "metalslurm_private_cidr": "10.0.0.0/24",
                    "metalslurm_groups": [{"name": "shadow", "gid": 3001}]}
                for i, h in enumerate(["c1", "n1"], start=10)}
    assert filters.inventory_problems(groups, hostvars) == [
        "metalslurm_groups[0].name: 'shadow' is a system user or group of Debian and Ubuntu: "
        "Ansible would modify the one every node already has instead of making a new one; "
        "choose another name"]
