"""The cluster users' groups, for the common role: the supplementary groups the config
gives a user (its groups, and the admin group for an admin), and the ones a node gives them
(from getent's group database); the access settings over their defaults
(module_utils/users.py)."""

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


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"user_groups": user_groups, "member_of": member_of,
                "access_settings": users.access_settings}
