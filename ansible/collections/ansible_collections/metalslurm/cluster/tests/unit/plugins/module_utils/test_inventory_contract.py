"""The inventory contract's rules (module_utils/inventory_contract.py), on hand-made views of
an inventory (groups and host variables) as the cluster_validate role's filter passes them."""

from ansible_collections.metalslurm.cluster.plugins.module_utils import inventory_contract

HOSTVARS = {"ctl": {"metalslurm_address": "10.0.0.10", "metalslurm_private_cidr": "10.0.0.0/24",
                    "metalslurm_shared_storage": "none"},
            "gpu-001": {"metalslurm_address": "10.0.0.11", "metalslurm_gpu_count": 8,
                        "metalslurm_gpu_type": "h100", "metalslurm_node_state": "static"}}
GROUPS = {"slurm_controller": ["ctl"], "slurmdbd": ["ctl"], "slurm_compute": ["gpu-001"]}


def problems(groups=None, **host_changes) -> list[str]:
    hostvars = {h: dict(v) for h, v in HOSTVARS.items()}
    for host, changes in host_changes.items():
        hostvars[host.replace("_", "-")].update(changes)
    return inventory_contract.inventory_problems(
        {"groups": groups or GROUPS, "hostvars": hostvars})


def test_a_valid_inventory_has_no_problem():
    assert problems() == []


def test_a_gpu_type_the_roles_cannot_serve_is_named_with_the_ones_they_can():
    assert problems(gpu_001={"metalslurm_gpu_type": "mi300x"}) == [
        "host 'gpu-001': metalslurm_gpu_type 'mi300x' is not a GPU type metalslurm serves; it "
        "supports NVIDIA GPUs: a100, a10, a30, b200, gh200, h100, h200, l4, l40s"]
    assert inventory_contract.gpu_type_problem("h100") is None


def test_an_address_outside_the_private_network_and_a_second_controller_are_named():
    found = problems(groups={**GROUPS, "slurm_controller": ["ctl", "gpu-001"]},
                     gpu_001={"metalslurm_address": "10.9.0.11"})
    assert "group slurm_controller has 2 hosts (ctl, gpu-001): put exactly one host in it" in found
    assert "host 'gpu-001': address 10.9.0.11 is outside the private network 10.0.0.0/24" in found


def test_a_backup_controller_is_one_host_of_its_own():
    ctl2 = {"metalslurm_address": "10.0.0.9"}
    HOSTVARS["ctl2"] = ctl2
    try:
        assert problems(groups={**GROUPS, "slurm_controller_backup": ["ctl2"]}) == []
        found = problems(groups={**GROUPS, "slurm_controller_backup": ["ctl2", "gpu-001"]})
        assert "group slurm_controller_backup has 2 hosts (ctl2, gpu-001): use zero or one" \
            in found
        assert ("host 'gpu-001' is in group slurm_controller_backup and in slurm_compute: the "
                "backup controller must be a machine of its own (it takes over when the "
                "controller's machine is lost)") in found
    finally:
        del HOSTVARS["ctl2"]


def test_the_contract_lists_each_variable_once():
    names = [*inventory_contract.CLUSTER_VARS, *inventory_contract.HOST_VARS,
             *inventory_contract.SECRET_FILE_VARS]
    assert len(names) == len(set(names))


def test_the_gate_switch_the_roles_read_must_be_a_boolean():
    for value, said in [("yes", ["metalslurm_accept.gate is 'yes'; give true (new nodes and "
                                 "nodes rebooted onto a new driver wait in the acceptance "
                                 "gate) or false"]),
                        (True, []), (False, [])]:
        accept = {"metalslurm_accept": {"gate": value}}
        assert problems(ctl=accept, gpu_001=accept) == said
    assert problems(ctl={"metalslurm_accept": ["gate"]}, gpu_001={"metalslurm_accept": [
        "gate"]}) == ["metalslurm_accept: ['gate'] is not a mapping of acceptance gate settings"]


def test_users_groups_and_an_admin_group_named_like_system_accounts_are_all_named():
    said = ("is a system user or group of Debian and Ubuntu: Ansible would modify the one "
            "every node already has instead of making a new one; choose another name")
    people = {"metalslurm_users": [{"name": "alice", "uid": 2001, "admin": True},
                                   {"name": "root", "uid": 2002}],
              "metalslurm_groups": [{"name": "ml", "gid": 3001}, {"name": "users", "gid": 3002}],
              "metalslurm_access": {"admin_group": "sudo", "admin_gid": 2999}}
    assert problems(ctl=people, gpu_001=people) == [
        f"metalslurm_users[1].name: 'root' {said}",
        f"metalslurm_groups[1].name: 'users' {said}",
        f"metalslurm_access.admin_group: 'sudo' {said} (the default is hpcadmin)"]
