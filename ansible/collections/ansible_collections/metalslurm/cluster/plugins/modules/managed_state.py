#!/usr/bin/python
"""Ansible module: the state of the files, directories, links and services a role manages,
and the node's users and groups, read in one call (read only).

A role's converged run is mostly tasks that each ask the node about one file and find it
as wanted: a copy or template costs a round trip even when it changes nothing. With this
module a role reads everything it manages at once; the collection's ``managed_drift``
filter compares that with what the role would write (rendered on the controller), and the
role runs its write tasks only when something differs. Whatever differs (content, owner,
group, mode, a link's target, a unit stopped, disabled or masked) sends the run through
the write tasks, which repair it as on a first run.
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import stat
import subprocess
from typing import Any

DOCUMENTATION = r"""
module: managed_state
short_description: Files, directories, links and systemd units of a role, read in one call
description:
  - Read only. For each path, whether it exists, its type, owner, group and mode, a regular
    file's SHA-1 and a link's target; the text of the files in O(read); each unit's
    ActiveState and UnitFileState.
options:
  paths:
    description: The paths to look at (not followed when links).
    type: list
    elements: str
    default: []
  read:
    description:
      - "Files whose text is returned too, up to 1 MiB each; a longer one fails the module
        (its text is never cut short: a role reads such a file another way)."
    type: list
    elements: str
    default: []
  units:
    description: systemd units to look at.
    type: list
    elements: str
    default: []
  databases:
    description:
      - getent databases to read whole (as M(ansible.builtin.getent) does, one call for all),
        returned as the facts C(getent_<database>).
    type: list
    elements: str
    choices: [passwd, group, shadow]
    default: []
"""

RETURN = r"""
paths:
  description: "path -> {exists, type (file, directory, link, other), owner, group, mode
    ('0644'), sha1 (files), target (links)}"
  type: dict
contents:
  description: path -> text, for the paths in read that are files
  type: dict
units:
  description: "unit -> {active (ActiveState), enabled (UnitFileState: enabled, disabled,
    masked...)}"
  type: dict
ansible_facts:
  description: "getent_<database> for each of databases: name -> the entry's other fields
    (strings), as ansible.builtin.getent sets them; a name listed twice keeps its first entry
    (the one NSS resolves); shadow's password field is empty (hashes are never returned)"
  type: dict
"""

READ_LIMIT = 1 << 20


def _name(table: Any, ident: int) -> str:
    try:
        return table(ident)[0]
    except KeyError:
        return str(ident)


def path_state(path: str) -> dict[str, Any]:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return {"exists": False}
    kind = ("link" if stat.S_ISLNK(st.st_mode) else "directory" if stat.S_ISDIR(st.st_mode)
            else "file" if stat.S_ISREG(st.st_mode) else "other")
    state: dict[str, Any] = {"exists": True, "type": kind,
                             "owner": _name(pwd.getpwuid, st.st_uid),
                             "group": _name(grp.getgrgid, st.st_gid),
                             "mode": f"{stat.S_IMODE(st.st_mode):04o}"}
    if kind == "file":
        digest = hashlib.sha1()  # noqa: S324 (Ansible's own checksum, not a signature)
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 16), b""):
                digest.update(block)
        state["sha1"] = digest.hexdigest()
    elif kind == "link":
        state["target"] = os.readlink(path)
    return state


def unit_states(units: list[str], run: Any = subprocess.run) -> dict[str, dict[str, str]]:
    """ActiveState and UnitFileState of each unit from one ``systemctl show``."""
    if not units:
        return {}
    names = [u if "." in u else f"{u}.service" for u in units]
    proc = run(["systemctl", "show", "--property=Id,ActiveState,UnitFileState", "--", *names],
               capture_output=True, text=True, check=False)
    blocks = [dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
              for block in proc.stdout.strip().split("\n\n")] if proc.stdout.strip() else []
    if len(blocks) != len(names):  # systemctl failed: every unit unknown (a drift)
        blocks = [{}] * len(names)
    return {unit: {"active": block.get("ActiveState", "unknown"),
                   "enabled": block.get("UnitFileState", "") or "unknown"}
            for unit, block in zip(units, blocks, strict=True)}


def getent_table(database: str, run: Any = subprocess.run) -> dict[str, list[str]]:
    """``getent DATABASE`` as name -> the entry's other fields; an error is a failure (a node
    whose accounts cannot be read must not be taken for one without them). Bytes that are
    not UTF-8 (a Latin-1 comment) are replaced, not fatal; shadow's password hashes are left
    out (returned empty: the result is no place for them)."""
    proc = run(["getent", "--", database], capture_output=True, check=False)
    out = bytes(proc.stdout or b"").decode("utf-8", "replace")
    err = bytes(proc.stderr or b"").decode("utf-8", "replace")
    if proc.returncode != 0:
        raise OSError(f"getent {database} failed (exit {proc.returncode}): {err.strip()}")
    table: dict[str, list[str]] = {}
    for line in out.splitlines():
        name, _, rest = line.partition(":")
        if name and name not in table:
            fields = rest.split(":")
            if database == "shadow" and fields:
                fields[0] = ""
            table[name] = fields
    return table


class TooLongError(ValueError):
    """A file in ``read`` longer than READ_LIMIT."""


def read_text(path: str) -> str | None:
    """The file's text (None: it cannot be read, as a missing file); longer than READ_LIMIT
    raises TooLongError, never a text cut short (a JSON record would no longer parse, or
    parse as something else)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(READ_LIMIT + 1)
    except OSError:
        return None
    if len(data) > READ_LIMIT:
        raise TooLongError(f"{path} is longer than the {READ_LIMIT} bytes managed_state reads: "
                           "read it another way (ansible.builtin.slurp)")
    return data.decode("utf-8", errors="replace")


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={"paths": {"type": "list", "elements": "str", "default": []},
                       "read": {"type": "list", "elements": "str", "default": []},
                       "units": {"type": "list", "elements": "str", "default": []},
                       "databases": {"type": "list", "elements": "str", "default": [],
                                     "choices": ["passwd", "group", "shadow"]}},
        supports_check_mode=True)
    contents = {}
    for path in module.params["read"]:
        try:
            text = read_text(path)
        except TooLongError as err:
            module.fail_json(msg=str(err))
        if text is not None:
            contents[path] = text
    facts = {}
    for database in module.params["databases"]:
        try:
            facts[f"getent_{database}"] = getent_table(database)
        except OSError as err:
            module.fail_json(msg=str(err))
    module.exit_json(changed=False, ansible_facts=facts,
                     paths={p: path_state(p) for p in module.params["paths"]},
                     contents=contents,
                     units=unit_states(module.params["units"]))


if __name__ == "__main__":
    main()
