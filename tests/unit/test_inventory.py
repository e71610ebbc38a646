"""The inventory builder and the contract checks shared with the playbook."""

import copy

import pytest
import yaml

from infra.providers.local import node_specs
from infra.stack.config import parse_config
from infra.stack.inventory import (
    InventoryError,
    NodeSpec,
    build_inventory,
    cluster_vars,
    inventory_problems,
    inventory_view,
)


@pytest.fixture
def default_inventory():
    cfg = parse_config({})
    specs = node_specs(cfg, shared_storage="nfs")
    return build_inventory(specs, cluster_vars(cfg, specs))


def test_default_local_inventory_shape(default_inventory):
    top = default_inventory["all"]
    children = top["children"]
    assert list(children["slurm_controller"]["hosts"]) == ["ctl"]
    assert list(children["slurmdbd"]["hosts"]) == ["ctl"]
    assert list(children["slurm_compute"]["hosts"]) == ["gpu-001", "gpu-002"]
    assert children["nfs_server"]["hosts"] == {"nfs": None}
    assert top["hosts"]["nfs"]["metalslurm_address"] == "10.77.0.254"
    assert top["hosts"]["ctl"] == {"ansible_host": "10.77.0.10",
                                   "metalslurm_address": "10.77.0.10"}
    assert top["hosts"]["gpu-002"] == {
        "ansible_host": "10.77.0.12", "metalslurm_address": "10.77.0.12",
        "metalslurm_node_state": "static", "metalslurm_gpu_count": 8,
        "metalslurm_gpu_type": "h100",
        "metalslurm_power": {"driver": "local", "container": "metalslurm-gpu-002"}}
    assert top["vars"]["metalslurm_partitions"][1] == {
        "name": "train", "nodes": ["gpu-001", "gpu-002"], "default": True,
        "max_time": "7-00:00:00", "default_time": "1-00:00:00", "options": {"PriorityTier": 1}}
    assert top["vars"]["metalslurm_shared_storage"] == "nfs"
    assert top["vars"]["metalslurm_shared_paths"] == ["/home", "/shared"]
    assert top["vars"]["metalslurm_private_cidr"] == "10.77.0.0/24"


def test_inventory_round_trips_through_yaml(default_inventory):
    again = yaml.safe_load(yaml.safe_dump(default_inventory))
    assert inventory_problems(inventory_view(again)) == []


def test_partition_pools_select_nodes():
    cfg = parse_config({
        "metalslurm:computePools": [{"name": "big", "count": 2, "gpuType": "h100", "gpuCount": 8},
                                    {"name": "cpu", "count": 1}],
        "metalslurm:partitions": [{"name": "debug", "pools": ["cpu"]},
                                  {"name": "train", "default": True}]})
    parts = cluster_vars(cfg, node_specs(cfg, "host-bind"))["metalslurm_partitions"]
    assert [(p["name"], p["nodes"]) for p in parts] == [
        ("debug", ["cpu-001"]), ("train", ["big-001", "big-002", "cpu-001"])]


def problems_after(inventory, mutate):
    inv = copy.deepcopy(inventory)
    mutate(inv["all"])
    return inventory_problems(inventory_view(inv))


def _add_controller(top):
    top["children"]["slurm_controller"]["hosts"]["gpu-001"] = None


def _drop_controller(top):
    top["children"]["slurm_controller"]["hosts"] = {}


def _gpu_without_type(top):
    del top["hosts"]["gpu-001"]["metalslurm_gpu_type"]


def _type_without_count(top):
    top["hosts"]["gpu-001"]["metalslurm_gpu_count"] = 0


def _bad_name(top):
    top["hosts"]["gpu_001"] = dict(top["hosts"].pop("gpu-001"))
    top["children"]["slurm_compute"]["hosts"] = {"gpu_001": None, "gpu-002": None}


def _case_duplicate(top):
    top["hosts"]["GPU-002"] = dict(top["hosts"]["gpu-002"], metalslurm_address="10.77.0.20")
    top["children"]["slurm_compute"]["hosts"]["GPU-002"] = None


def _same_address(top):
    top["hosts"]["gpu-002"]["metalslurm_address"] = "10.77.0.11"


def _outside_cidr(top):
    top["hosts"]["gpu-002"]["metalslurm_address"] = "10.99.0.12"


def _no_compute(top):
    top["children"]["slurm_compute"]["hosts"] = {}


def _partition_unknown_node(top):
    top["vars"]["metalslurm_partitions"][0]["nodes"].append("gpu-009")


def _bad_state(top):
    top["hosts"]["gpu-001"]["metalslurm_node_state"] = "sometimes"


@pytest.mark.parametrize(("mutate", "fragment"), [
    (_add_controller, "slurm_controller has 2 hosts"),
    (_drop_controller, "slurm_controller is empty"),
    (_gpu_without_type, "has 8 GPUs but no metalslurm_gpu_type"),
    (_type_without_count, "no metalslurm_gpu_count"),
    (_bad_name, "host 'gpu_001': Slurm and DNS reject this name"),
    (_case_duplicate, "differ only in case"),
    (_same_address, "have the same address 10.77.0.11"),
    (_outside_cidr, "outside the private network"),
    (_no_compute, "slurm_compute is empty"),
    (_partition_unknown_node, "'gpu-009' is not in group slurm_compute"),
    (_bad_state, "metalslurm_node_state 'sometimes'"),
])
def test_contract_violations_are_named(default_inventory, mutate, fragment):
    problems = problems_after(default_inventory, mutate)
    assert any(fragment in p for p in problems), problems


def test_builder_refuses_duplicate_names():
    specs = [NodeSpec("ctl", "10.0.0.10", ("slurm_controller",)),
             NodeSpec("n1", "10.0.0.11", ("slurm_compute",)),
             NodeSpec("n1", "10.0.0.12", ("slurm_compute",))]
    with pytest.raises(InventoryError, match="'n1': the name is used by two nodes"):
        build_inventory(specs, {"metalslurm_private_cidr": "10.0.0.0/24"})
