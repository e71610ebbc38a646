"""The filters about systemd units (plugins/filter/systemd.py)."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.metalslurm.cluster.plugins.filter import systemd

FILTERS = systemd.FilterModule().filters()


@pytest.mark.parametrize(("unit", "up"), [
    ({"state": "running", "status": "enabled"}, True),
    ({"state": "running", "status": "disabled"}, False),  # would not come back after a boot
    ({"state": "stopped", "status": "enabled"}, False),
    (None, False),                                         # not installed
])
def test_a_unit_is_up_when_it_runs_and_is_enabled(unit, up):
    services = {"slurmd.service": unit} if unit else {}
    assert FILTERS["service_up"](services, "slurmd") is up
    assert FILTERS["service_up"](services, "slurmd.service") is up


@pytest.mark.parametrize(("path", "unit"), [
    ("/home", "home.mount"),
    ("/data/ckpt-1", "data-ckpt\\x2d1.mount"),
    ("/shared/", "shared.mount"),
])
def test_mount_units_are_named_as_systemd_escape_names_them(path, unit):
    assert FILTERS["mount_unit"](path) == unit


def test_a_relative_path_has_no_mount_unit():
    with pytest.raises(AnsibleFilterError, match="absolute"):
        FILTERS["mount_unit"]("home")
