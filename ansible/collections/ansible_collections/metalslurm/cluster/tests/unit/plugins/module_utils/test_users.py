"""The SSH public key check (module_utils/users.py) the stack parser and the inventory
contract share: a real key of each type passes; a private key, a fingerprint, another type, a
truncated paste, an edited type, bad base64 are refused with a sentence saying which."""

from __future__ import annotations

import base64
import struct

import pytest
from ansible_collections.metalslurm.cluster.plugins.module_utils.users import ssh_key_problem


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
