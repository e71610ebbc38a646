"""The cluster_validate role's filter (plugins/filter/inventory.py): Ansible's groups and
hostvars held to the inventory contract."""

from ansible_collections.metalslurm.cluster.plugins.filter import inventory as filters


def test_inventory_problems_from_groups_and_hostvars():
    groups = {"slurm_controller": ["c1", "c2"], "slurm_compute": ["n1"]}
    hostvars = {h: {"metalslurm_address": f"10.0.0.{i}", "metalslurm_private_cidr": "10.0.0.0/24"}
                for i, h in enumerate(["c1", "c2", "n1"], start=10)}
    problems = filters.inventory_problems(groups, hostvars)
    assert problems == ["group slurm_controller has 2 hosts (c1, c2): put exactly one host in it"]
