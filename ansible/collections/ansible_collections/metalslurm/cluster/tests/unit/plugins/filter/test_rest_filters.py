"""The REST API's filters (plugins/filter/rest.py), as the roles call them: the settings over
their defaults and a release's facts as a dict; a bad value reaches the play as Ansible's
filter error with the module's sentence."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.metalslurm.cluster.plugins.filter.rest import FilterModule

FILTERS = FilterModule().filters()


def test_the_release_filter_gives_the_tables_row_as_a_dict():
    row = FILTERS["rest_release"]("24.11.5-4+deb13u1")
    assert (row["release"], row["jwt_plugin"], row["api_version"]) == ("24.11", True, "v0.0.42")
    assert row["openapi_plugins"] == ("openapi/slurmctld", "openapi/slurmdbd")


def test_the_settings_filter_fills_the_defaults_and_refuses_with_the_sentence():
    assert FILTERS["rest_settings"]({}, "10.0.0.0/24")["port"] == 6820
    with pytest.raises(AnsibleFilterError, match="metalslurm_rest.port 22 must be a port"):
        FILTERS["rest_settings"]({"port": 22})
    with pytest.raises(AnsibleFilterError, match="cannot read a Slurm release"):
        FILTERS["rest_release"]("unknown")
