"""The SSH public key check (module_utils/users.py) the stack parser and the inventory
contract share: a real key of each type passes; a private key, a fingerprint, another type, a
truncated paste, an edited type, bad base64 are refused with a sentence saying which. The
names no cluster user or group may take (system accounts and groups) are refused saying
what each is."""

from __future__ import annotations

import base64
import struct
from pathlib import Path

import pytest
from ansible_collections.metalslurm.cluster.plugins.module_utils.users import (
    DEFAULT_ADMIN_GROUP,
    RESERVED_NAMES,
    reserved_name_problem,
    ssh_key_problem,
)


def key_line(key_type: str = "ssh-ed25519", inner: str | None = None, size: int = 32,
             comment: str = "alice@laptop") -> str:
    """A public key line with the wire format OpenSSH writes (type, then key bytes)."""
    name = (inner or key_type).encode()
    blob = struct.pack(">I", len(name)) + name + struct.pack(">I", size) + b"\x01" * size
    return f"{key_type} {base64.b64encode(blob).decode()} {comment}".strip()



def test_a_real_openssh_key_of_each_type_is_accepted():
    for key_type in ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256",
                     "sk-ssh-ed25519@openssh.com"):
        assert ssh_key_problem(key_line(key_type)) is None, key_type
    assert ssh_key_problem(key_line(comment="")) is None


@pytest.mark.parametrize("line, fragment", [
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=\n", "is a private key"),
    ("SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU", "not an OpenSSH public key line"),
    ("ssh-dss AAAAB3NzaC1kc3MAAACBAP alice", "key type 'ssh-dss' is not one of"),
    ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5", "not a ssh-ed25519 key"),  # truncated paste
    (key_line("ssh-ed25519", inner="ssh-rsa"), "not a ssh-ed25519 key"),  # type edited
    ("ssh-ed25519 not*base64 alice", "not an OpenSSH public key line"),
    ("ssh-ed25519 QUJD alice", "not valid base64 of an SSH key"),
    (42, "is not a string"),
])
def test_what_is_not_a_public_key_is_refused(line, fragment):
    problem = ssh_key_problem(line)
    assert problem is not None and fragment in problem, problem


# ---- names the nodes already have ------------------------------------------------------------
BASE_PASSWD = Path("/usr/share/base-passwd")


@pytest.mark.parametrize(("name", "admin_group", "problem"), [
    ("root", False, "'root' is a system user or group of Debian and Ubuntu: Ansible would "
                    "modify the one every node already has instead of making a new one; "
                    "choose another name"),
    ("users", False, "'users' is a system user or group of Debian and Ubuntu: Ansible would "
                     "modify the one every node already has instead of making a new one; "
                     "choose another name"),
    ("slurm", False, "'slurm' is a system user or group metalslurm's roles or their packages "
                     "make: Ansible would modify the one every node already has instead of "
                     "making a new one; choose another name"),
    ("ubuntu", False, "'ubuntu' is the login user of a cloud image: Ansible would modify the "
                      "one every node already has instead of making a new one; choose another "
                      "name"),
    ("sudo", True, "'sudo' is a system user or group of Debian and Ubuntu: Ansible would "
                   "modify the one every node already has instead of making a new one; choose "
                   "another name (the default is hpcadmin)"),
])
def test_a_name_the_nodes_already_have_is_refused_saying_what_it_is(name, admin_group,
                                                                      problem):
    assert reserved_name_problem(name, admin_group) == problem


@pytest.mark.parametrize("name", ["alice", "ops", DEFAULT_ADMIN_GROUP, None, 42])
def test_an_ordinary_name_and_the_default_admin_group_are_free(name):
    assert reserved_name_problem(name) is None


@pytest.mark.skipif(not BASE_PASSWD.is_dir(), reason="not a Debian machine (no base-passwd)")
@pytest.mark.parametrize("table", ["passwd.master", "group.master"])
def test_every_name_of_this_machines_base_passwd_is_reserved(table):
    """The list is written out (the nodes may run Ubuntu, the operator anything); a newer
    base-passwd with a name it lacks fails here."""
    names = [line.split(":")[0] for line in (BASE_PASSWD / table).read_text().splitlines()
             if line.strip()]
    assert [n for n in names if n not in RESERVED_NAMES] == []
