#!/usr/bin/python
"""Ansible module: write (or create) a binary munge key, byte-exact, with owner and mode."""

from __future__ import annotations

DOCUMENTATION = r"""
module: munge_key
short_description: Install a binary munge key from base64, or create one if missing
description:
  - Writes the decoded bytes of C(content_b64) to C(path) atomically when they differ,
    then sets owner, group and mode. The key never appears in the module's output.
  - With C(generate=true) and no C(content_b64), creates a key of C(size) random bytes
    only when C(path) does not exist yet.
options:
  path: {type: path, required: true, description: Key file.}
  content_b64: {type: str, description: The key, base64-encoded.}
  generate: {type: bool, default: false, description: Create a random key if missing.}
  size: {type: int, default: 1024, description: Bytes of a generated key.}
extends_documentation_fragment: [files]
"""

EXAMPLES = r"""
- name: Install the cluster key
  munge_key:
    path: /etc/munge/munge.key
    content_b64: "{{ key_b64 }}"
    owner: munge
    group: munge
    mode: "0400"
  no_log: true
"""

RETURN = r"""
size: {description: Length of the key in bytes., returned: always, type: int}
"""

import base64
import binascii
import hashlib
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule

MIN_KEY_BYTES = 32  # munged refuses shorter keys


def decode_key(content_b64: str) -> bytes:
    """Decode and sanity-check a base64 key; raise ValueError with a usable message."""
    try:
        key = base64.b64decode("".join(content_b64.split()), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"content_b64 is not valid base64: {exc}") from None
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"the munge key is {len(key)} bytes; munged needs at least "
                         f"{MIN_KEY_BYTES}")
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
            "content_b64": {"type": "str", "no_log": True},
            "generate": {"type": "bool", "default": False},
            "size": {"type": "int", "default": 1024},
        },
        add_file_common_args=True,
        supports_check_mode=True,
        required_one_of=[("content_b64", "generate")],
    )
    path = module.params["path"]
    existing = read_existing(path)
    if module.params["content_b64"] is not None:
        try:
            wanted = decode_key(module.params["content_b64"])
        except ValueError as exc:
            module.fail_json(msg=str(exc))
    elif existing is not None:
        wanted = existing
    else:
        if module.params["size"] < MIN_KEY_BYTES:
            module.fail_json(msg=f"size must be at least {MIN_KEY_BYTES}")
        wanted = os.urandom(module.params["size"])

    changed = existing != wanted
    if changed and not module.check_mode:
        directory = os.path.dirname(path) or "."
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".munge_key.")
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
                     sha256_prefix=hashlib.sha256(wanted).hexdigest()[:8])


if __name__ == "__main__":
    main()
