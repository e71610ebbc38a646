"""The common role's group filters (plugins/filter/users.py): a user's configured
supplementary groups (the admin group for an admin) and the ones getent's group database
gives them; what a node's accounts lack (account_changes, the role's converged test)."""

from __future__ import annotations

import pytest
from ansible_collections.metalslurm.cluster.plugins.filter.users import (
    account_changes,
    member_of,
    user_groups,
    user_homes,
)


def test_the_common_roles_group_filters():
    assert user_groups({"name": "dave", "admin": True, "groups": ["ml"]}, "hpcadmin") == [
        "hpcadmin", "ml"]
    assert user_groups({"name": "alice"}, "hpcadmin") == []
    getent = {"ml": ["x", "3001", "alice,bob"], "hpcadmin": ["x", "2999", "dave"],
              "alice": ["x", "2001", ""], "users": ["x", "100", None]}
    assert member_of("alice", getent) == ["ml"]
    assert member_of("dave", getent) == ["hpcadmin"]
    assert member_of("carol", getent) == []


SLURM = {"name": "slurm", "uid": 64030, "gid": 64030, "comment": "Slurm workload manager",
         "home": "/nonexistent", "shell": "/usr/sbin/nologin"}
USERS = [{"name": "alice", "uid": 2001, "groups": ["ml"]},
         {"name": "dave", "uid": 2004, "admin": True}]
GROUPS = [{"name": "ml", "gid": 3001}, {"name": "hpcadmin", "gid": 2999}]
HOME = {"exists": True, "type": "directory", "owner": "alice", "group": "alice", "mode": "0700"}


def right_node() -> tuple[dict, dict]:
    facts = {
        "getent_passwd": {
            "slurm": ["x", "64030", "64030", "Slurm workload manager", "/nonexistent",
                      "/usr/sbin/nologin"],
            "alice": ["x", "2001", "2001", "", "/home/alice", "/bin/bash"],
            "dave": ["x", "2004", "2004", "", "/home/dave", "/bin/bash"],
            "bob": ["x", "2002", "2002", "", "/home/bob", "/bin/bash"]},
        "getent_group": {"slurm": ["x", "64030", ""], "alice": ["x", "2001", ""],
                         "dave": ["x", "2004", ""], "ml": ["x", "3001", "alice"],
                         "hpcadmin": ["x", "2999", "dave"]},
        "getent_shadow": {"alice": ["!", "20000", "0", "99999", "7", "", "", ""],
                          "dave": ["!", "20000", "0", "99999", "7", "", "", ""],
                          "bob": ["!", "20000", "0", "99999", "7", "", "1", ""]}}
    paths = {"/home/alice": HOME, "/home/dave": {**HOME, "owner": "dave"}}
    return facts, paths


def changes(facts, paths, removed=("bob",), makes_homes=True):
    return account_changes(facts, USERS, GROUPS, "hpcadmin", SLURM, list(removed),
                           makes_homes, paths)


NOTHING = {"groups": [], "slurm_user": False, "users": [], "lock": []}


def test_a_node_with_every_account_right_needs_nothing():
    assert changes(*right_node()) == NOTHING
    assert user_homes(USERS) == ["/home/alice", "/home/dave"]


def test_a_fresh_node_needs_every_group_and_user_in_order():
    result = changes({"getent_passwd": {}, "getent_group": {}, "getent_shadow": {}}, {},
                     removed=())
    assert result["groups"] == [
        {"name": "slurm", "gid": 64030, "system": True},
        {"name": "alice", "gid": 2001, "system": False},
        {"name": "dave", "gid": 2004, "system": False},
        {"name": "ml", "gid": 3001, "system": False},
        {"name": "hpcadmin", "gid": 2999, "system": False}]
    assert result["slurm_user"] is True
    assert result["users"] == [
        {"name": "alice", "uid": 2001, "groups": ["ml"], "home": "/home/alice",
         "shell": "/bin/bash"},
        {"name": "dave", "uid": 2004, "groups": ["hpcadmin"], "home": "/home/dave",
         "shell": "/bin/bash"}]
    assert result["lock"] == []


def alter(change):
    facts, paths = right_node()
    change(facts, paths)
    return changes(facts, paths)


@pytest.mark.parametrize("change", [
    lambda f, p: f["getent_passwd"]["alice"].__setitem__(1, "2009"),   # another UID
    lambda f, p: f["getent_passwd"]["alice"].__setitem__(2, "100"),    # another GID
    lambda f, p: f["getent_passwd"]["alice"].__setitem__(4, "/srv/alice"),
    lambda f, p: f["getent_passwd"]["alice"].__setitem__(5, "/bin/sh"),
    lambda f, p: f["getent_shadow"]["alice"].__setitem__(6, "1"),     # locked earlier
    lambda f, p: f["getent_group"]["ml"].__setitem__(2, ""),          # left a group
    lambda f, p: f["getent_group"].__setitem__("sudo", ["x", "27", "alice"]),  # one more
    lambda f, p: p.pop("/home/alice"),                                # no home yet
    lambda f, p: p.__setitem__("/home/alice", {"exists": True, "type": "link"}),
    lambda f, p: f["getent_passwd"].pop("alice"),
], ids=["uid", "gid", "home", "shell", "expired", "group-left", "group-extra", "no-home",
        "home-is-a-link", "missing"])
def test_a_user_that_differs_in_any_way_is_written_again(change):
    result = alter(change)
    assert [u["name"] for u in result["users"]] == ["alice"]
    assert result["lock"] == []


def test_a_home_is_looked_for_only_where_this_node_makes_homes():
    facts, paths = right_node()
    assert changes(facts, {}, makes_homes=False) == NOTHING
    assert [u["name"] for u in changes(facts, {}, makes_homes=True)["users"]] == [
        "alice", "dave"]


def test_groups_and_the_slurm_account_with_other_ids_are_written_again():
    facts, paths = right_node()
    facts["getent_group"]["ml"][1] = "3999"
    facts["getent_group"]["slurm"][1] = "999"
    facts["getent_passwd"]["slurm"][4] = "/var/lib/slurm"
    result = changes(facts, paths)
    assert result["groups"] == [{"name": "slurm", "gid": 64030, "system": True},
                                {"name": "ml", "gid": 3001, "system": False}]
    assert result["slurm_user"] is True


def test_a_removed_user_is_locked_once_and_one_never_made_here_is_left_alone():
    facts, paths = right_node()
    facts["getent_shadow"]["bob"][6] = ""  # unlocked by hand: locked again
    assert changes(facts, paths)["lock"] == ["bob"]
    assert changes(*right_node())["lock"] == []  # already expired
    assert changes(*right_node(), removed=("carol",))["lock"] == []  # no such account
