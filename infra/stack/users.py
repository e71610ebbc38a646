"""``metalslurm:users``, ``metalslurm:groups`` and ``metalslurm:access``: the cluster's people.

A user is a login with one UID on every node (and a private group with the same ID), SSH
public keys (written into a managed block of their ``authorized_keys``; their own lines are
kept), Unix groups from ``metalslurm:groups`` (one GID everywhere) and an admin flag, which
makes them a member of the admin group ``metalslurm:access`` names. A user removed from the
config is locked (the account expires: no login, by key or otherwise) and loses the managed
keys; the home directory stays.

No user, group or admin group may take a name the nodes already have (root, sudo, users,
slurm, ubuntu, ...: module_utils/users.py's ``RESERVED_NAMES``), nor may a user be the
provider's SSH login: Ansible would change that account instead of making a new one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.users import (
    ACCESS_DEFAULTS,
    DEFAULT_ADMIN_GID,
    DEFAULT_ADMIN_GROUP,
    RESERVED_NAMES,
    admin_lockout_problem,
    reserved_name_problem,
    ssh_key_problem,
)

from infra.stack.schema import USER_NAME_RE, Collector, key

_USER_KEYS = ("name", "uid", "sshKeys", "admin", "groups")
_ACCESS_KEYS = ("adminGroup", "adminGid", "pamSlurmAdopt")
MIN_ID, MAX_ID = 1000, 59999


@dataclass(frozen=True)
class UnixUser:
    """A login created on every node, with the same UID everywhere."""

    name: str
    uid: int
    ssh_keys: tuple[str, ...] = ()
    admin: bool = False
    groups: tuple[str, ...] = ()

    def inventory_vars(self) -> dict[str, Any]:
        return {"name": self.name, "uid": self.uid, "ssh_keys": list(self.ssh_keys),
                "admin": self.admin, "groups": list(self.groups)}


@dataclass(frozen=True)
class UnixGroup:
    """A group with the same GID on every node."""

    name: str
    gid: int


@dataclass(frozen=True)
class AccessSettings:
    """``metalslurm:access``: the group the admin flag puts users in."""

    admin_group: str = DEFAULT_ADMIN_GROUP
    admin_gid: int = DEFAULT_ADMIN_GID
    # SSH to a compute node only with a job there (pam_slurm_adopt); admins always.
    pam_slurm_adopt: bool = ACCESS_DEFAULTS["pam_slurm_adopt"]

    def inventory_vars(self) -> dict[str, Any]:
        return {"admin_group": self.admin_group, "admin_gid": self.admin_gid,
                "pam_slurm_adopt": self.pam_slurm_adopt}


def _ssh_keys(c: Collector, item: Mapping[str, Any], where: str) -> tuple[str, ...]:
    value = item.get("sshKeys", [])
    if not isinstance(value, list):
        c.problem(where, "must be a list of OpenSSH public key lines")
        return ()
    keys = []
    for i, line in enumerate(value):
        problem = ssh_key_problem(line)
        if problem:
            c.problem(f"{where}[{i}]", problem)
        else:
            keys.append(line.strip())
    return tuple(keys)


def _reserved(c: Collector, name: str | None, where: str, admin_group: bool = False) -> None:
    """A name a node already has (module_utils/users.py's list) is refused."""
    problem = reserved_name_problem(name, admin_group)
    if problem:
        c.problem(where, problem)


def _parse_groups(c: Collector, raw: Mapping[str, Any]) -> list[UnixGroup]:
    where = key("groups")
    groups: list[UnixGroup] = []
    if raw.get("groups") in (None, []):
        return groups
    for gkey, item in c.mappings(raw.get("groups"), where, ("name", "gid"),
                                 "groups, each with name and gid"):
        name = c.string(item, "name", f"{gkey}.name", pattern=USER_NAME_RE,
                        what="a group name: lower-case letters, digits, '_' and '-'")
        gid = c.integer(item, "gid", f"{gkey}.gid", default=None, minimum=MIN_ID,
                        maximum=MAX_ID)
        _reserved(c, name, f"{gkey}.name")
        if name is not None and gid is not None:
            groups.append(UnixGroup(name, gid))
    c.duplicates(where, [g.name for g in groups], "group name")
    c.duplicates(where, [str(g.gid) for g in groups], "gid")
    return groups


def _parse_access(c: Collector, raw: Mapping[str, Any]) -> AccessSettings:
    where = key("access")
    item = c.mapping(raw, "access", where)
    c.unknown_keys(item, _ACCESS_KEYS, where)
    d = AccessSettings()
    group = c.string(item, "adminGroup", f"{where}.adminGroup", default=d.admin_group,
                     pattern=USER_NAME_RE, what="a group name")
    gid = c.integer(item, "adminGid", f"{where}.adminGid", d.admin_gid, MIN_ID, MAX_ID)
    adopt = c.boolean(item, "pamSlurmAdopt", f"{where}.pamSlurmAdopt", d.pam_slurm_adopt)
    _reserved(c, group, f"{where}.adminGroup", admin_group=True)
    return AccessSettings(group or d.admin_group, d.admin_gid if gid is None else gid, adopt)


def parse_users(c: Collector, raw: Mapping[str, Any]
                ) -> tuple[list[UnixUser], list[UnixGroup], AccessSettings]:
    """The three sections, checked against each other: a user's groups are declared ones,
    and no user, private group, group or the admin group shares a name or an ID."""
    groups = _parse_groups(c, raw)
    access = _parse_access(c, raw)
    declared = {g.name for g in groups}
    where = key("users")
    users = []
    for ukey, item in ([] if raw.get("users") in (None, []) else
                       c.mappings(raw.get("users"), where, _USER_KEYS,
                                  "users, each with name and uid")):
        name = c.string(item, "name", f"{ukey}.name", pattern=USER_NAME_RE,
                        what="a login name: lower-case letters, digits, '_' and '-'")
        uid = c.integer(item, "uid", f"{ukey}.uid", default=None, minimum=MIN_ID,
                        maximum=MAX_ID)
        _reserved(c, name, f"{ukey}.name")
        keys = _ssh_keys(c, item, f"{ukey}.sshKeys")
        admin = c.boolean(item, "admin", f"{ukey}.admin", False)
        member_of = c.string_list(item, "groups", f"{ukey}.groups", USER_NAME_RE,
                                  "group name")
        for g in member_of:
            if g not in declared:
                c.problem(f"{ukey}.groups", f"{g!r} is not a group in {key('groups')} "
                          f"({', '.join(sorted(declared)) or 'none'}): declare it there with "
                          "its gid")
        if name is not None and uid is not None:
            users.append(UnixUser(name, uid, keys, admin, tuple(member_of)))
    c.duplicates(where, [u.name for u in users], "user name")
    c.duplicates(where, [str(u.uid) for u in users], "uid")
    # Each user has a private group with their UID as GID: the groups and the admin group
    # must not take one of those names or IDs.
    ids = {u.uid: f"user {u.name}'s private group" for u in users}
    names = {u.name: f"user {u.name}'s private group" for u in users}
    for where_, name, gid in ([(f"{key('groups')}", g.name, g.gid) for g in groups]
                              + [(f"{key('access')}.adminGroup", access.admin_group,
                                  access.admin_gid)]):
        clash = names.get(name) or ids.get(gid)
        if clash:
            c.problem(where_, f"{name} (gid {gid}) collides with {clash} (the same name or "
                      "ID); choose another")
        names.setdefault(name, f"group {name}")
        ids.setdefault(gid, f"group {name}")
    problem = admin_lockout_problem([u.inventory_vars() for u in users],
                                    access.inventory_vars())
    if problem:
        c.problem(f"{key('access')}.pamSlurmAdopt", problem)
    return users, groups, access


def check_login_user(c: Collector, users: list[UnixUser], ssh_user: str | None,
                     where: str) -> None:
    """The account Ansible logs in with (a provider's sshUser, at ``where``) must not be a
    cluster user too: roles/common would set its groups to the user's (taking sudo away from
    it, and the next run's become with it), its shell and its home."""
    if ssh_user in RESERVED_NAMES:
        return  # refused by its name already
    if ssh_user and any(u.name == ssh_user for u in users):
        c.problem(key("users"), f"{ssh_user!r} is also {where}, the login Ansible uses on the "
                  "machines: making it a cluster user would replace its groups (sudo "
                  "among them); rename the cluster user, or log in as another account")
