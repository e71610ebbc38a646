#!/usr/bin/python
"""Ansible module: write a binary key (munge's, Slurm's JWT key), byte-exact, with owner and mode.

It never makes a key: the cluster's keys are made once on the operator's side (infra/stack/state.py,
or pulumi-random in a Pulumi stack) and kept there, so every node, including one powered
down during a run, gets the same key on every run."""

from __future__ import annotations

DOCUMENTATION = r"""
module: key_file
short_description: Install a binary key from base64
description:
  - Writes the decoded bytes of C(content_b64) to C(path) atomically when they differ,
    then sets owner, group and mode. The key never appears in the module's output.
options:
  path: {type: path, required: true, description: Key file.}
  content_b64: {type: str, required: true, description: The key, base64-encoded.}
  min_bytes: {type: int, default: 32, description: The shortest key the reader accepts.}
  held_if:
    type: path
    description: >-
      Count the key C(path) holds as one in service (so C(replaces)) only where this file
      exists; without it, any other key there counts.
extends_documentation_fragment: [files]
"""

EXAMPLES = r"""
- name: Install the cluster key
  metalslurm.cluster.key_file:
    path: /etc/munge/munge.key
    content_b64: "{{ key_b64 }}"
    owner: munge
    group: munge
    mode: "0400"
  no_log: true
"""

RETURN = r"""
size: {description: Length of the key in bytes., returned: always, type: int}
replaces:
  description: >-
    Whether C(path) held another key in service (see C(held_if)), which the module replaced
    (or, in check mode, would replace): the munge role's controller check reads it.
  returned: always
  type: bool
"""

import base64
import binascii
import hashlib
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.metalslurm.cluster.plugins.module_utils.cluster_defaults import (
    MUNGE_MIN_KEY_BYTES as MIN_KEY_BYTES,
)


def decode_key(content_b64: str, min_bytes: int = MIN_KEY_BYTES) -> bytes:
    """Decode and sanity-check a base64 key; raise ValueError with a usable message."""
    try:
        key = base64.b64decode("".join(content_b64.split()), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"content_b64 is not valid base64: {exc}") from None
    if len(key) < min_bytes:
        raise ValueError(f"the key is {len(key)} bytes; its reader needs at least {min_bytes}")
    return key


def read_existing(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "content_b64": {"type": "str", "required": True, "no_log": True},
            "min_bytes": {"type": "int", "default": MIN_KEY_BYTES},
            "held_if": {"type": "path"},
        },
        add_file_common_args=True,
        supports_check_mode=True,
    )
    path = module.params["path"]
    existing = read_existing(path)
    try:
        wanted = decode_key(module.params["content_b64"], module.params["min_bytes"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))

    changed = existing != wanted
    if changed and not module.check_mode:
        directory = os.path.dirname(path) or "."
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".key_file.")
        try:
            os.fchmod(fd, 0o400)
            with os.fdopen(fd, "wb") as f:
                f.write(wanted)
            module.atomic_move(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    file_args = module.load_file_common_arguments(module.params)
    if os.path.exists(path):
        changed = module.set_fs_attributes_if_different(file_args, changed)
    module.exit_json(changed=changed, size=len(wanted),
                     replaces=existing is not None and existing != wanted and (
                         module.params["held_if"] is None
                         or os.path.exists(module.params["held_if"])),
                     sha256_prefix=hashlib.sha256(wanted).hexdigest()[:8])


if __name__ == "__main__":
    main()
