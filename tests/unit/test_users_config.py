"""metalslurm:users, groups and access from the stack to the inventory: SSH keys checked by
decoding them (module_utils/users.py, tested in the collection), groups declared with one
GID, the admin flag's group; bad input refused naming the key; names the nodes already have
(root, sudo, the roles' system users) and the provider's SSH login refused; the inventory
contract holds a hand-written inventory's keys to the same rule."""

from __future__ import annotations

import base64
import struct
from pathlib import Path

import pytest
import yaml
from ansible_collections.metalslurm.cluster.plugins.module_utils.users import ROLE_ACCOUNTS

from infra.providers.local import node_specs
from infra.stack.config import ConfigError, parse_config
from infra.stack.inventory import InventoryError, build_inventory, cluster_vars

REPO = Path(__file__).resolve().parents[2]
POOL = [{"name": "gpu", "count": 1, "gpuType": "h100", "gpuCount": 8}]


def key_line(key_type: str = "ssh-ed25519", inner: str | None = None, size: int = 32,
             comment: str = "alice@laptop") -> str:
    """A public key line with the wire format OpenSSH writes (type, then key bytes)."""
    name = (inner or key_type).encode()
    blob = struct.pack(">I", len(name)) + name + struct.pack(">I", size) + b"\x01" * size
    return f"{key_type} {base64.b64encode(blob).decode()} {comment}".strip()


ALICE = key_line()


def ms(**kwargs):
    return {f"metalslurm:{k}": v for k, v in kwargs.items()}


def parsed(**kwargs):
    return parse_config(ms(computePools=POOL, **kwargs), check_artifacts=False)


def problems(**kwargs) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parsed(**kwargs)
    return err.value.problems


def test_users_groups_and_access_reach_the_inventory():
    cfg = parsed(users=[{"name": "alice", "uid": 2001, "sshKeys": [ALICE], "groups": ["ml"]},
                        {"name": "dave", "uid": 2004, "admin": True}],
                 groups=[{"name": "ml", "gid": 3001}])
    v = cluster_vars(cfg, [])
    assert v["metalslurm_users"] == [
        {"name": "alice", "uid": 2001, "ssh_keys": [ALICE], "admin": False, "groups": ["ml"]},
        {"name": "dave", "uid": 2004, "ssh_keys": [], "admin": True, "groups": []}]
    assert v["metalslurm_groups"] == [{"name": "ml", "gid": 3001}]
    assert v["metalslurm_access"] == {"admin_group": "hpcadmin", "admin_gid": 2999,
                                      "pam_slurm_adopt": True}


@pytest.mark.parametrize("raw, key, fragment", [
    ({"users": [{"name": "alice", "uid": 2001}]}, "metalslurm:access.pamSlurmAdopt",
     "is on (the default) but no user is in the admin group hpcadmin"),
    ({"users": [{"name": "alice", "uid": 2001, "sshKeys": ["ssh-ed25519 AAAA"]}]},
     "metalslurm:users[0].sshKeys[0]", "not valid base64 of an SSH key"),
    ({"users": [{"name": "alice", "uid": 2001, "sshKeys": ALICE}]},
     "metalslurm:users[0].sshKeys", "must be a list of OpenSSH public key lines"),
    ({"users": [{"name": "alice", "uid": 2001, "groups": ["ml"]}]},
     "metalslurm:users[0].groups", "'ml' is not a group in metalslurm:groups"),
    ({"users": [{"name": "alice", "uid": 2001, "admin": "yes"}]},
     "metalslurm:users[0].admin", "true or false"),
    ({"users": [{"name": "alice", "uid": 2001}], "groups": [{"name": "ml", "gid": 2001}]},
     "metalslurm:groups", "collides with user alice's private group"),
    ({"users": [{"name": "alice", "uid": 2001}], "groups": [{"name": "alice", "gid": 3001}]},
     "metalslurm:groups", "collides with user alice's private group"),
    ({"groups": [{"name": "ml", "gid": 2999}]},
     "metalslurm:access.adminGroup", "collides with group ml"),
    ({"groups": [{"name": "ml", "gid": 999}]}, "metalslurm:groups[0].gid", "at least 1000"),
    ({"access": {"adminGroup": "Admins"}}, "metalslurm:access.adminGroup", "group name"),
    ({"access": {"group": "x"}}, "metalslurm:access.group", "unknown key"),
])
def test_bad_users_groups_and_access_name_the_key(raw, key, fragment):
    found = problems(**raw)
    assert any(p.startswith(key) and fragment in p for p in found), found


def test_without_users_or_with_adopt_off_no_admin_is_needed():
    assert parsed().access.pam_slurm_adopt is True
    cfg = parsed(users=[{"name": "alice", "uid": 2001}], access={"pamSlurmAdopt": False})
    assert cfg.access.pam_slurm_adopt is False


def test_a_hand_written_inventory_is_held_to_the_same_key_rule():
    cfg = parsed(storage={"backend": "none"})
    specs = node_specs(cfg, "none")
    bad = dict(cluster_vars(cfg, specs), metalslurm_users=[
        {"name": "alice", "uid": 2001, "ssh_keys": [ALICE, "ssh-rsa AAAA alice"]}])
    with pytest.raises(InventoryError) as err:
        build_inventory(specs, bad)
    assert [p for p in err.value.problems if "metalslurm_users" in p or "access" in p] == [
        "metalslurm_access.pam_slurm_adopt is on (the default) but no user is in the admin "
        "group hpcadmin: compute nodes would let in only users with a job there, and no admin; "
        "give one user 'admin: true', or set pamSlurmAdopt: false",
        "metalslurm_users[0].ssh_keys[1]: 'ssh-rsa AAAA alice': the key is not valid base64 of "
        "an SSH key (a truncated paste?)"]


SYSTEM = ("is a system user or group of Debian and Ubuntu: Ansible would modify the one every "
          "node already has instead of making a new one; choose another name")


def test_names_the_nodes_already_have_are_refused_all_at_once():
    found = problems(users=[{"name": "root", "uid": 2001, "admin": True},
                            {"name": "alice", "uid": 2002}],
                     groups=[{"name": "sudo", "gid": 3001}, {"name": "ml", "gid": 3002}],
                     access={"adminGroup": "shadow"})
    assert found == [f"metalslurm:groups[0].name: 'sudo' {SYSTEM}",
                     f"metalslurm:access.adminGroup: 'shadow' {SYSTEM} (the default is "
                     "hpcadmin)",
                     f"metalslurm:users[0].name: 'root' {SYSTEM}"]


@pytest.mark.parametrize(("variable", "role"), [
    ("slurm_rest_user", "slurm_rest"), ("slurm_exporter_user", "slurm_exporter")])
def test_the_system_users_the_roles_make_are_reserved(variable, role):
    """The roles' defaults own these names; the reserved list must hold each of them (the
    slurm user's name it takes from module_utils/cluster_defaults.py, as the roles do)."""
    defaults = yaml.safe_load((REPO / "roles" / role / "defaults/main.yml").read_text())
    assert defaults[variable] in ROLE_ACCOUNTS


def test_the_providers_ssh_login_cannot_be_a_cluster_user():
    raw = yaml.safe_load((REPO / "Pulumi.example-byo.yaml").read_text())["config"]
    raw["metalslurm:byo"]["sshUser"] = "ops"
    raw["metalslurm:users"] = [{"name": "ops", "uid": 2099, "admin": True}]
    with pytest.raises(ConfigError) as err:
        parse_config(raw, check_artifacts=False)
    assert err.value.problems == [
        "metalslurm:users: 'ops' is also metalslurm:byo.sshUser, the login Ansible uses on the "
        "machines: making it a cluster user would replace its groups (sudo among them); rename "
        "the cluster user, or log in as another account"]
