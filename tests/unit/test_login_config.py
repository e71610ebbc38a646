"""metalslurm:login from the stack to every provider's inventory: login nodes named from a
prefix (local, oci) or given as byo hosts with role login, in group login only, with
addresses after the compute nodes; the submit host is the first of them, else the
controller; bad input refused naming the key."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from infra.providers.local import node_specs as local_specs
from infra.pulumi import byo, oci
from infra.stack.config import ConfigError, parse_config
from infra.stack.inventory import InventoryError, NodeSpec, build_inventory, cluster_vars

REPO = Path(__file__).resolve().parents[2]
POOL = [{"name": "gpu", "count": 2, "gpuType": "h100", "gpuCount": 8}]
NO_STORAGE = {"backend": "none"}


def ms(**kwargs):
    return {f"metalslurm:{k}": v for k, v in kwargs.items()}


def example(provider: str) -> dict:
    return yaml.safe_load((REPO / f"Pulumi.example-{provider}.yaml").read_text())["config"]


def problems(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_config(raw, check_artifacts=False)
    return err.value.problems


def test_no_login_nodes_by_default_and_the_controller_submits():
    cfg = parse_config(ms(computePools=POOL), check_artifacts=False)
    assert cfg.login.names() == []
    assert cfg.submit_host == "ctl"
    assert [s.name for s in local_specs(cfg, "none") if "login" in s.groups] == []


def test_login_nodes_sit_below_the_top_of_the_subnet():
    """From the top down, below the last address (the NFS server's): a change in the
    compute pools moves no login node."""
    cfg = parse_config(ms(computePools=POOL, login={"count": 2}, privateCidr="10.9.0.0/24",
                          storage=NO_STORAGE),
                       check_artifacts=False)
    specs = local_specs(cfg, "none")
    assert [(s.name, s.address, s.groups) for s in specs] == [
        ("ctl", "10.9.0.10", ("slurm_controller", "slurmdbd")),
        ("gpu-001", "10.9.0.11", ("slurm_compute",)),
        ("gpu-002", "10.9.0.12", ("slurm_compute",)),
        ("login-001", "10.9.0.253", ("login",)),
        ("login-002", "10.9.0.252", ("login",)),
    ]
    assert cfg.submit_host == "login-001"
    inventory = build_inventory(specs, cluster_vars(cfg, specs))
    assert list(inventory["all"]["children"]["login"]["hosts"]) == ["login-001", "login-002"]
    # A login node carries no compute variables: it is no Slurm node.
    assert inventory["all"]["hosts"]["login-001"] == {"ansible_host": "10.9.0.253",
                                                      "metalslurm_address": "10.9.0.253"}
    more = parse_config(ms(computePools=[{**POOL[0], "count": 5}], login={"count": 2},
                           privateCidr="10.9.0.0/24", storage=NO_STORAGE),
                        check_artifacts=False)
    assert [s.address for s in local_specs(more, "none") if "login" in s.groups] == [
        "10.9.0.253", "10.9.0.252"]
    assert all("login-001" not in p["nodes"]
               for p in inventory["all"]["vars"]["metalslurm_partitions"])


def test_a_name_prefix_names_them():
    cfg = parse_config(ms(computePools=POOL, login={"count": 1, "name": "submit"}),
                       check_artifacts=False)
    assert cfg.login.names() == ["submit-001"]


def test_oci_login_nodes_take_the_shape_and_the_top_addresses():
    raw = example("oci")
    cfg = parse_config(raw, check_artifacts=False)
    assert cfg.login.shape == "VM.Standard.E5.Flex"
    logins = [s for s in oci.node_specs(cfg) if s.groups == ("login",)]
    # metalslurm:privateCidr 10.40.0.0/22: the last host address is 10.40.3.254.
    assert [(s.name, s.address) for s in logins] == [("login-001", "10.40.3.253"),
                                                     ("login-002", "10.40.3.252")]


def test_a_full_subnet_counts_the_address_login_nodes_leave_free():
    """/27: 30 host addresses, 9 reserved below the controller: room for 21 nodes. 18
    compute nodes, the controller and a login node fill them with the last address free;
    a second login node would take a compute node's."""
    pools = [{"name": "gpu", "count": 18, "gpuType": "h100", "gpuCount": 8}]
    fits = ms(computePools=pools, privateCidr="10.9.0.0/27", storage=NO_STORAGE,
              login={"count": 1})
    assert parse_config(fits, check_artifacts=False).login.names() == ["login-001"]
    found = problems({**fits, "metalslurm:login": {"count": 2}})
    assert ("metalslurm:privateCidr: 10.9.0.0/27 has room for 21 nodes, the config asks for 22 "
            "(login nodes leave the last address free); use a larger network") in found, found


def test_byo_login_hosts_are_its_hosts_with_role_login():
    cfg = parse_config(example("byo"), check_artifacts=False)
    assert cfg.login.names() == ["login-001"]
    spec = next(s for s in byo.node_specs(cfg) if s.name == "login-001")
    assert spec.groups == ("login",) and spec.address == "10.20.0.12"
    # Reached directly at its public address, as users reach it.
    assert spec.ansible_host == "198.51.100.21"
    assert spec.extra_vars == {"ansible_ssh_common_args": ""}


def test_byo_count_must_agree_with_its_login_hosts():
    raw = copy.deepcopy(example("byo"))
    raw["metalslurm:login"] = {"count": 2}
    assert any(p.startswith("metalslurm:login.count: is 2 but metalslurm:byo.hosts has 1 "
                            "host(s) with role login") for p in problems(raw)), problems(raw)


def test_byo_login_hosts_have_no_pool():
    raw = copy.deepcopy(example("byo"))
    login = next(h for h in raw["metalslurm:byo"]["hosts"] if h.get("role") == "login")
    login["pool"] = "gpu"
    assert "metalslurm:byo.hosts[6].pool: only compute hosts have pool" in problems(raw)


@pytest.mark.parametrize("login, key, fragment", [
    ({"count": -1}, "metalslurm:login.count", "must be at least 0, got -1"),
    ({"count": 17}, "metalslurm:login.count", "must be at most 16, got 17"),
    ({"count": "two"}, "metalslurm:login.count", "whole number"),
    ({"count": 1, "name": "Login"}, "metalslurm:login.name", "host name prefix"),
    ({"count": 1, "shape": "VM.Standard.E5.Flex"}, "metalslurm:login.shape",
     "only the oci provider reads a shape"),
    ({"count": 1, "size": 2}, "metalslurm:login", "size"),
    ("one", "metalslurm:login", "mapping"),
])
def test_bad_login_settings_name_the_key(login, key, fragment):
    found = problems(ms(computePools=POOL, login=login))
    assert any(p.startswith(key) and fragment in p for p in found), found


def test_an_oci_login_shape_must_be_a_cpu_shape():
    raw = copy.deepcopy(example("oci"))
    raw["metalslurm:login"]["shape"] = "BM.GPU.H100.8"
    assert any(p.startswith("metalslurm:login.shape") and "CPU shape" in p
               for p in problems(raw))


def test_a_login_name_that_clashes_with_a_pool_node_is_refused():
    found = problems(ms(computePools=[{"name": "login", "count": 1}], login={"count": 1}))
    assert any("node name 'login-001' would be used by two nodes" in p for p in found), found


def test_a_login_host_that_is_also_a_slurm_node_breaks_the_contract():
    cfg = parse_config(ms(computePools=POOL, storage=NO_STORAGE), check_artifacts=False)
    specs = local_specs(cfg, "none")
    both = [NodeSpec(name=s.name, address=s.address, groups=(*s.groups, "login"))
            if s.name in ("ctl", "gpu-002") else s for s in specs]
    with pytest.raises(InventoryError) as err:
        build_inventory(both, cluster_vars(cfg, both))
    assert [p for p in err.value.problems if "group login" in p] == [
        "host 'ctl' is in group login and in slurm_controller, slurmdbd: a login node runs no "
        "Slurm daemon and takes no jobs; give it its own host, or leave group login empty "
        "(the controller is then the submit host)",
        "host 'gpu-002' is in group login and in slurm_compute: a login node runs no Slurm "
        "daemon and takes no jobs; give it its own host, or leave group login empty (the "
        "controller is then the submit host)"]
