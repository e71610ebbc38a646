"""The join kit (infra/stack/join_kit.py): what the controller configures a machine made
anew with. Its inventory reaches the nodes as root with the join key, the controller
locally; only a compute node's secrets are named, at their place on the controller; the
tarball is the same bytes for the same inputs and holds no secret."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import yaml

from infra.stack.join_kit import JOIN_DIR, build_kit, join_inventory, join_vars

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
    assert {k: v for k, v in cluster.items() if k.startswith("ansible_")} == {
        "ansible_user": "root", "ansible_python_interpreter": "/usr/bin/python3",
        "ansible_ssh_private_key_file": f"{JOIN_DIR}/id_ed25519",
        "ansible_ssh_common_args": f"-o UserKnownHostsFile={JOIN_DIR}/known_hosts "
                                   "-o StrictHostKeyChecking=accept-new"}
    assert cluster["munge_key_b64_file"] == f"{JOIN_DIR}/secrets/munge.key.b64"
    assert "slurmdbd_password_file" not in cluster and "slurm_jwt_key_b64_file" not in cluster
    assert "metalslurm_join" not in cluster
    assert cluster["metalslurm_containers"]["mirror"] == f"{JOIN_DIR}/kit/mirror"
    assert doc["all"]["hosts"]["ctl"] == {"metalslurm_address": "10.0.0.10",
                                         "ansible_connection": "local"}
    assert INVENTORY["all"]["vars"]["ansible_user"] == "debian"  # the original is untouched


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
