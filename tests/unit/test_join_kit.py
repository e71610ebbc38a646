"""The join kit (infra/stack/join_kit.py): what the controller configures a machine made
anew with. Its inventory reaches the nodes as the provider's login user (root, or a sudo
user with become) with the join key, the controller locally; only a compute node's secrets
are named, at their place on the controller; the tarball is the same bytes for the same
inputs and holds no secret. The join key a Pulumi stack makes from its seed is a key
OpenSSH reads and signs with, the same file for the same seed."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from infra.stack.join_kit import (
    JOIN_DIR,
    build_kit,
    ed25519_key_pair,
    join_inventory,
    join_vars,
    kit_inputs_digest,
    with_join,
)

REPO = Path(__file__).resolve().parents[2]
INVENTORY = {"all": {
    "vars": {"ansible_user": "debian", "ansible_become": True,
             "ansible_ssh_private_key_file": "/home/op/.ssh/id", "ansible_ssh_common_args": "-J x",
             "munge_key_b64_file": "/op/state/secrets/munge.key.b64",
             "slurmdbd_password_file": "/op/state/secrets/slurmdbd.password",
             "slurm_jwt_key_b64_file": "/op/state/secrets/jwt.key.b64",
             "metalslurm_containers": {"enabled": True, "mirror": "/op/vendor"},
             "metalslurm_join": {"dir": JOIN_DIR}},
    "hosts": {"ctl": {"metalslurm_address": "10.0.0.10"},
              "gpu-003": {"metalslurm_address": "10.0.0.13",
                          "metalslurm_power": {"driver": "local", "mode": "launch-terminate"}}},
    "children": {}}}


def test_the_join_inventory_reaches_the_nodes_from_the_controller():
    doc = join_inventory(INVENTORY, "ctl")
    cluster = doc["all"]["vars"]
    # The provider's login user and its become: the join key is in that user's
    # authorized_keys (oci's launch metadata), as the operator's key is.
    assert {k: v for k, v in cluster.items() if k.startswith("ansible_")} == {
        "ansible_user": "debian", "ansible_become": True,
        "ansible_python_interpreter": "/usr/bin/python3",
        "ansible_ssh_private_key_file": f"{JOIN_DIR}/id_ed25519",
        "ansible_ssh_common_args": f"-o UserKnownHostsFile={JOIN_DIR}/known_hosts "
                                   "-o StrictHostKeyChecking=accept-new"}
    assert cluster["munge_key_b64_file"] == f"{JOIN_DIR}/secrets/munge.key.b64"
    assert "slurmdbd_password_file" not in cluster and "slurm_jwt_key_b64_file" not in cluster
    assert "metalslurm_join" not in cluster
    assert cluster["metalslurm_containers"]["mirror"] == f"{JOIN_DIR}/kit/mirror"
    assert doc["all"]["hosts"]["ctl"] == {"metalslurm_address": "10.0.0.10",
                                         "ansible_connection": "local"}
    assert INVENTORY["all"]["vars"]["ansible_ssh_common_args"] == "-J x"  # untouched


def test_an_inventory_without_a_login_user_joins_as_root():
    inv = {"all": {**INVENTORY["all"], "vars": {
        k: v for k, v in INVENTORY["all"]["vars"].items() if k not in (
            "ansible_user", "ansible_become")}}}
    cluster = join_inventory(inv, "ctl")["all"]["vars"]
    assert (cluster["ansible_user"], "ansible_become" in cluster) == ("root", False)


def test_an_http_mirror_stays_as_it_is():
    inv = {"all": {**INVENTORY["all"], "vars": {
        **INVENTORY["all"]["vars"],
        "metalslurm_containers": {"mirror": "https://mirror.example/enroot"}}}}
    assert join_inventory(inv, "ctl")["all"]["vars"]["metalslurm_containers"]["mirror"] == \
        "https://mirror.example/enroot"


def test_the_kit_is_reproducible_and_holds_no_secret(tmp_path):
    mirror = tmp_path / "vendor"
    mirror.mkdir()
    (mirror / "enroot_4.1.2-1_amd64.deb").write_bytes(b"deb")
    inv = join_inventory(INVENTORY, "ctl")
    first = build_kit(REPO, inv, mirror, tmp_path / "a" / "kit.tar.gz").read_bytes()
    second = build_kit(REPO, inv, mirror, tmp_path / "b" / "kit.tar.gz").read_bytes()
    assert first == second
    with tarfile.open(fileobj=io.BytesIO(first)) as tar:
        names = tar.getnames()
        assert yaml.safe_load(tar.extractfile("inventory.yml").read()) == inv  # type: ignore[union-attr]
    assert "ansible/site.yml" in names and "roles/munge/tasks/main.yml" in names
    assert "mirror/enroot_4.1.2-1_amd64.deb" in names
    assert not [n for n in names if "/tests/" in n or "__pycache__" in n]
    # Nothing a tool leaves in the checkout (this one's lint and editable installs leave
    # .ruff_cache and egg-info folders under roles/ and ansible/).
    assert not [n for n in names if "/." in n or ".egg-info" in n]
    assert oct((tmp_path / "a" / "kit.tar.gz").stat().st_mode & 0o777) == "0o600"


def test_the_roles_var_names_the_secrets_the_controller_gets(tmp_path):
    key = tmp_path / "join_ed25519"
    got = join_vars(INVENTORY["all"]["vars"], tmp_path / "kit.tar.gz", key)
    assert got == {"dir": JOIN_DIR, "kit": str((tmp_path / "kit.tar.gz").resolve()),
                   "secrets": [{"src": str(key.resolve()), "dest": f"{JOIN_DIR}/id_ed25519"},
                               {"src": "/op/state/secrets/munge.key.b64",
                                "dest": f"{JOIN_DIR}/secrets/munge.key.b64"}]}


def _with_controller(inventory):
    return {"all": {**inventory["all"], "children": {"slurm_controller": {"hosts": {"ctl": None}}}}}


def test_with_join_adds_the_var_and_builds_the_kit_only_for_launch_terminate_nodes(tmp_path):
    inv = _with_controller(INVENTORY)
    kit, key = tmp_path / "join-kit.tar.gz", tmp_path / "join_ed25519"
    got = with_join(inv, REPO, kit, key)
    assert got["all"]["vars"]["metalslurm_join"] == join_vars(inv["all"]["vars"], kit, key)
    with tarfile.open(kit) as tar:
        assert yaml.safe_load(tar.extractfile("inventory.yml").read()) == (  # type: ignore[union-attr]
            join_inventory(inv, "ctl"))
    start_stop = {"all": {**inv["all"], "hosts": {
        "ctl": {}, "gpu-003": {"metalslurm_power": {"driver": "oci", "mode": "start-stop"}}}}}
    assert with_join(start_stop, REPO, tmp_path / "other.tar.gz", key) == start_stop
    assert not (tmp_path / "other.tar.gz").exists()


def test_the_kit_digest_follows_the_roles(tmp_path):
    repo = tmp_path / "repo"
    (repo / "roles" / "r" / "tasks").mkdir(parents=True)
    (repo / "ansible").mkdir()
    task = repo / "roles" / "r" / "tasks" / "main.yml"
    task.write_text("- ansible.builtin.debug: {msg: a}\n")
    first = kit_inputs_digest(repo)
    (repo / "roles" / "r" / "tests").mkdir()
    (repo / "roles" / "r" / "tests" / "t.py").write_text("x")  # not in the kit
    assert kit_inputs_digest(repo) == first
    task.write_text("- ansible.builtin.debug: {msg: b}\n")
    assert kit_inputs_digest(repo) != first


def test_the_join_key_from_a_seed_is_one_openssh_signs_with(tmp_path):
    seed = bytes(range(32))
    private, public = ed25519_key_pair(seed, "metalslurm-join-c1")
    assert ed25519_key_pair(seed, "metalslurm-join-c1") == (private, public)
    assert ed25519_key_pair(bytes(32), "metalslurm-join-c1")[1] != public
    key = tmp_path / "k"
    key.write_text(private)
    key.chmod(0o600)
    derived = subprocess.run(["ssh-keygen", "-y", "-f", str(key)], capture_output=True,
                             text=True, check=True).stdout.split()
    assert derived[:2] == public.split()[:2]
    # The private half is right too: a signature with it verifies against the public half.
    data = tmp_path / "data"
    data.write_text("join")
    subprocess.run(["ssh-keygen", "-q", "-Y", "sign", "-f", str(key), "-n", "file",
                    str(data)], check=True, capture_output=True)
    signers = tmp_path / "signers"
    signers.write_text(f"join@c1 {public}\n")
    verified = subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(signers), "-I",
                               "join@c1", "-n", "file", "-s", f"{data}.sig"],
                              stdin=data.open(), capture_output=True, text=True, check=False)
    assert verified.returncode == 0, verified.stderr


def test_a_seed_of_another_length_is_refused():
    with pytest.raises(ValueError, match="32 bytes, not 16"):
        ed25519_key_pair(bytes(16), "c")
