"""What the collection's filter files share (plugins/plugin_utils/filters.py)."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.metalslurm.cluster.plugins.plugin_utils.filters import (
    filter_errors,
    hostvar,
)


class AnsibleUndefined:
    """Stands in for Ansible's lazy hostvars' undefined value (matched by its class name)."""


def test_hostvar_gives_the_default_for_a_missing_host_variable_or_an_undefined_one():
    hostvars = {"n1": {"a": 1, "u": AnsibleUndefined()}}
    assert hostvar(hostvars, "n1", "a") == 1
    assert hostvar(hostvars, "n1", "b", 7) == 7
    assert hostvar(hostvars, "n2", "a", 7) == 7
    assert hostvar(hostvars, "n1", "u", 7) == 7
    assert hostvar(None, "n1", "a", 7) == 7


def test_the_named_errors_reach_the_play_as_filter_errors_with_their_sentence():
    @filter_errors(ValueError)
    def refuse(value):
        if value == "bad":
            raise ValueError("bad is bad: use good")
        if value == "bug":
            raise KeyError("a bug stays a bug")
        return value

    assert refuse("good") == "good"
    with pytest.raises(AnsibleFilterError, match="bad is bad: use good"):
        refuse("bad")
    with pytest.raises(KeyError):
        refuse("bug")
