"""Cluster users' SSH public keys and the admin group: the rules the stack parser
(infra/users_config.py) and the inventory contract share, so a hand-written inventory is held
to the same ones.

A key is one OpenSSH public key line (``authorized_keys`` format without options): a key
type, the base64 key blob and an optional comment. The blob is decoded and must start with
the same key type (the wire format: a length-prefixed type name), which catches a private
key, a fingerprint, a truncated paste or a key with its type edited.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from typing import Any

KEY_TYPES = ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
             "ecdsa-sha2-nistp521", "sk-ssh-ed25519@openssh.com",
             "sk-ecdsa-sha2-nistp256@openssh.com")
_LINE_RE = re.compile(r"^(\S+) ([A-Za-z0-9+/]+={0,2})(?: ([^\r\n]*))?$")
# The admin group when the stack names none: its members may SSH to compute nodes without a
# job there (pam_access before pam_slurm_adopt).
DEFAULT_ADMIN_GROUP = "hpcadmin"
DEFAULT_ADMIN_GID = 2999


def ssh_key_problem(line: Any) -> str | None:
    """Why ``line`` is not an OpenSSH public key line, or None."""
    if not isinstance(line, str):
        return f"{line!r} is not a string (an OpenSSH public key line)"
    text = line.strip()
    shown = text if len(text) <= 40 else text[:37] + "..."
    if text.startswith("-----BEGIN"):
        return "is a private key: give the public one (the .pub file, one line)"
    match = _LINE_RE.match(text)
    if match is None:
        return (f"{shown!r} is not an OpenSSH public key line: '<type> <base64 key> "
                "[comment]', as in ~/.ssh/id_ed25519.pub")
    key_type, blob = match[1], match[2]
    if key_type not in KEY_TYPES:
        return f"{shown!r}: key type {key_type!r} is not one of {', '.join(KEY_TYPES)}"
    try:
        raw = base64.b64decode(blob, validate=True)
        (length,) = struct.unpack(">I", raw[:4])
        inner = raw[4:4 + length].decode("ascii")
    except (binascii.Error, struct.error, UnicodeDecodeError, ValueError):
        return f"{shown!r}: the key is not valid base64 of an SSH key (a truncated paste?)"
    if inner != key_type or len(raw) < 4 + length + 16:
        return (f"{shown!r}: the key data is not a {key_type} key (a truncated paste, or the "
                "type edited?)")
    return None


def admin_lockout_problem(users: Any, access: Any) -> str | None:
    """With pam_slurm_adopt on, compute nodes let in only a user with a job there, and the
    admin group's members: cluster users of whom none is an admin would leave nobody but
    root to look at a node without a job (the reason admins lock themselves out)."""
    if not isinstance(access, dict) or not access.get("pam_slurm_adopt", True):
        return None
    users = users if isinstance(users, list) else []
    if not users or any(isinstance(u, dict) and u.get("admin") for u in users):
        return None
    group = access.get("admin_group") or DEFAULT_ADMIN_GROUP
    return (f"is on (the default) but no user is in the admin group {group}: compute nodes "
            "would let in only users with a job there, and no admin; give one user "
            "'admin: true', or set pamSlurmAdopt: false")
