"""The common role's group filters (plugins/filter/users.py): a user's configured
supplementary groups (the admin group for an admin) and the ones getent's group database
gives them."""

from __future__ import annotations

from ansible_collections.metalslurm.cluster.plugins.filter.users import member_of, user_groups


def test_the_common_roles_group_filters():
    assert user_groups({"name": "dave", "admin": True, "groups": ["ml"]}, "hpcadmin") == [
        "hpcadmin", "ml"]
    assert user_groups({"name": "alice"}, "hpcadmin") == []
    getent = {"ml": ["x", "3001", "alice,bob"], "hpcadmin": ["x", "2999", "dave"],
              "alice": ["x", "2001", ""], "users": ["x", "100", None]}
    assert member_of("alice", getent) == ["ml"]
    assert member_of("dave", getent) == ["hpcadmin"]
    assert member_of("carol", getent) == []
