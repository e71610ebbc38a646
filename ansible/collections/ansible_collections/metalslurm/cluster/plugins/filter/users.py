"""The cluster users' groups, for the common role: the supplementary groups the config
gives a user (its groups, and the admin group for an admin), and the ones a node gives them
(from getent's group database); the accounts a node lacks or has otherwise
(``account_changes``, the common role's converged test); the access settings over their
defaults (module_utils/users.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils import users


def user_groups(user: Mapping[str, Any], admin_group: str) -> list[str]:
    """A user's configured supplementary groups, sorted."""
    groups = set(user.get("groups") or [])
    if user.get("admin"):
        groups.add(admin_group)
    return sorted(groups)


def member_of(name: str, getent_group: Mapping[str, Any]) -> list[str]:
    """The groups that list ``name`` as a member in getent's group database (group name ->
    [password, gid, members]), sorted; a user's own private group lists nobody."""
    found = []
    for group, fields in (getent_group or {}).items():
        members = fields[2] if isinstance(fields, list | tuple) and len(fields) > 2 else ""
        if name in str(members or "").split(","):
            found.append(group)
    return sorted(found)


# A cluster user's login shell and where the homes are (the common role creates them so).
USER_SHELL = "/bin/bash"
HOME_ROOT = "/home"


def _field(table: Mapping[str, Any], name: str, index: int) -> str | None:
    fields = table.get(name)
    if not isinstance(fields, list | tuple) or len(fields) <= index:
        return None
    return str(fields[index])


def account_changes(facts: Mapping[str, Any], users: list[Mapping[str, Any]],
                    groups: list[Mapping[str, Any]], admin_group: str,
                    slurm: Mapping[str, Any], removed: list[str], makes_homes: bool,
                    paths: Mapping[str, Any]) -> dict[str, Any]:
    """What the common role's account tasks must write on a node, from its getent
    databases (``facts``: getent_passwd, getent_group, getent_shadow) and the state of the
    users' home directories (``paths``: managed_state's, ``HOME_ROOT/<name>`` each):
    ``groups`` [{name, gid, system}] whose GID differs or that are missing (the slurm
    group, each user's own group, the configured ``groups``, in that order),
    ``slurm_user`` (the slurm account {name, uid, gid, comment, home, shell} differs),
    ``users`` [{name, uid, groups, home, shell}: missing, another UID, GID, home or shell,
    an expiry date (a user added back is unlocked), other supplementary groups, or no home
    directory where this node makes homes], ``lock`` [removed users present and not
    expired]. Empty lists and false: the node is right and the tasks are skipped."""
    passwd = facts.get("getent_passwd") or {}
    group = facts.get("getent_group") or {}
    shadow = facts.get("getent_shadow") or {}
    wanted_groups = ([{"name": slurm["name"], "gid": int(slurm["gid"]), "system": True}]
                     + [{"name": u["name"], "gid": int(u["uid"]), "system": False} for u in users]
                     + [{"name": g["name"], "gid": int(g["gid"]), "system": False}
                        for g in groups])
    slurm_fields = [str(slurm[k]) for k in ("uid", "gid", "comment", "home", "shell")]
    changed_users = []
    for user in users:
        name, uid = str(user["name"]), str(user["uid"])
        home = f"{HOME_ROOT}/{name}"
        fields = passwd.get(name)
        seen = [str(f) for f in fields[1:3] + fields[4:6]] if isinstance(fields, list) else []
        home_state = paths.get(home)
        has_home = isinstance(home_state, Mapping) and home_state.get("type") == "directory"
        wanted = user_groups(user, admin_group)
        if (seen != [uid, uid, home, USER_SHELL] or (makes_homes and not has_home)
                or (_field(shadow, name, 6) or "") != ""
                or member_of(name, group) != wanted):
            changed_users.append({"name": name, "uid": int(uid), "groups": wanted,
                                  "home": home, "shell": USER_SHELL})
    return {
        "groups": [g for g in wanted_groups if _field(group, g["name"], 1) != str(g["gid"])],
        "slurm_user": (passwd.get(slurm["name"]) or [None])[1:] != slurm_fields,
        "users": changed_users,
        "lock": [name for name in removed
                 if name in passwd and _field(shadow, name, 6) != "1"],
    }


def user_homes(users: list[Mapping[str, Any]]) -> list[str]:
    """The users' home directories (``account_changes`` reads them)."""
    return [f"{HOME_ROOT}/{u['name']}" for u in users]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"user_groups": user_groups, "member_of": member_of,
                "account_changes": account_changes, "user_homes": user_homes,
                "access_settings": users.access_settings}
