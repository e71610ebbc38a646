"""The power-saving timings by provider (module_utils/elastic.py): what a partial or empty
metalslurm_elastic becomes, and what cannot be completed."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.metalslurm.cluster.plugins.filter.elastic import FilterModule
from ansible_collections.metalslurm.cluster.plugins.module_utils.elastic import (
    KEYS,
    PROVIDER_DEFAULTS,
    ElasticSettingsError,
    elastic_settings,
)

elastic_filter = FilterModule().filters()["elastic_settings"]


def test_every_provider_has_every_timing_but_the_derived_one():
    assert {p: sorted(row) for p, row in PROVIDER_DEFAULTS.items()} == {
        p: sorted(k for k in KEYS if k != "orphan_after") for p in PROVIDER_DEFAULTS}


@pytest.mark.parametrize("provider", sorted(PROVIDER_DEFAULTS))
def test_each_providers_resume_timeout_exceeds_its_boot(provider):
    """The stack parser's rules hold for the defaults themselves."""
    row = PROVIDER_DEFAULTS[provider]
    assert row["resume_timeout"] > row["boot_time"] <= row["suspend_time"]


def test_an_empty_inventory_setting_gets_the_providers_row_and_orphan_after_follows():
    byo = PROVIDER_DEFAULTS["byo"]
    assert elastic_settings({}, "byo") == {**byo, "orphan_after": byo["resume_timeout"]}
    assert elastic_settings({"resume_timeout": 2400}, "oci")["orphan_after"] == 2400
    assert elastic_settings({"orphan_after": 900}, "oci")["orphan_after"] == 900


def test_a_complete_setting_needs_no_provider():
    given = {k: 700 for k in KEYS}
    assert elastic_settings(given, None) == given


def test_a_partial_setting_without_a_provider_is_refused_naming_what_is_missing():
    with pytest.raises(ElasticSettingsError, match="leaves out suspend_time, suspend_timeout, "
                       "resume_timeout, resume_rate, suspend_rate, boot_time, reconcile_interval, "
                       "and metalslurm_provider .'gcp'. is not one of local, byo, oci"):
        elastic_settings({"orphan_after": 5}, "gcp")


def test_an_unknown_setting_reaches_the_play_as_a_filter_error():
    with pytest.raises(AnsibleFilterError, match="unknown setting.s. resumeTimeout"):
        elastic_filter({"resumeTimeout": 60}, "local")
