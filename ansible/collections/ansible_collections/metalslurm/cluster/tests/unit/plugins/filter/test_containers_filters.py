"""The enroot_pyxis role's filter plugin: each filter name is the module_utils function, and
the errors a user can act on reach Ansible as its filter error, the sentence kept."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.metalslurm.cluster.plugins.filter.containers import FilterModule

FILTERS = FilterModule().filters()


def test_the_plugstack_line_takes_booleans_as_slurm_reads_them():
    line = FILTERS["plugstack_line"]("/usr/lib/pyxis/spank_pyxis.so",
                                     {"container_scope": "job", "sbatch_support": True})
    assert "container_scope=job" in line and "sbatch_support=1" in line


def test_a_bad_pyxis_option_is_a_filter_error_naming_it():
    with pytest.raises(AnsibleFilterError, match="pyxis option container_scope"):
        FILTERS["plugstack_line"]("/usr/lib/pyxis/spank_pyxis.so", {"container_scope": "a b"})


def test_credentials_without_a_password_are_a_filter_error_not_a_netrc_line():
    with pytest.raises(AnsibleFilterError, match="registry credentials"):
        FILTERS["netrc_block"]([{"host": "registry.example", "login": "robot"}])


def test_the_settings_default_the_cache_under_the_storage_directory():
    assert FILTERS["container_settings"]({"storage_dir": "/scratch/enroot"})["cache_dir"] == \
        "/scratch/enroot/cache"
