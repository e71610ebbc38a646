"""The REST API's table (module_utils/rest.py): what each Slurm release offers slurmrestd,
the settings over their defaults as the roles take them from a hand-written inventory, and
the inventory contract's refusals."""

from __future__ import annotations

import pytest
from ansible_collections.metalslurm.cluster.plugins.module_utils import (
    inventory_contract,
    rest,
    slurm_versions,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.rest import RELEASES


@pytest.mark.parametrize(("version", "release", "plugins", "api"), [
    ("22.05.8-4+deb12u3", "22.05", ("openapi/v0.0.38", "openapi/dbv0.0.38"), "v0.0.38"),
    ("23.11.4-1.2ubuntu5", "23.11", ("openapi/slurmctld", "openapi/slurmdbd"), "v0.0.40"),
    ("24.11.5-4+deb13u1", "24.11", ("openapi/slurmctld", "openapi/slurmdbd"), "v0.0.42"),
    # A newer Slurm than the table knows is served by the newest entry's plugins.
    ("25.05.1-1", "24.11", ("openapi/slurmctld", "openapi/slurmdbd"), "v0.0.42"),
])
def test_each_release_has_its_plugins_and_api(version, release, plugins, api):
    entry = rest.rest_release(version)
    assert (entry.release, entry.jwt_plugin, entry.openapi_plugins, entry.api_version) == (
        release, True, plugins, api)


def test_21_08_has_no_packaged_jwt_plugin_and_older_is_unknown():
    assert rest.rest_release("21.08.5-2ubuntu1").jwt_plugin is False
    with pytest.raises(rest.RestSettingsError, match="older than every release recorded"):
        rest.rest_release("20.11.9")
    with pytest.raises(rest.RestSettingsError, match="cannot read a Slurm release"):
        rest.rest_release("slurm")


def test_the_table_is_in_release_order():
    assert [r.release for r in RELEASES] == sorted(r.release for r in RELEASES)


def test_every_supported_os_has_an_entry():
    for distro in slurm_versions.DISTRO_SLURM:
        assert rest.os_release(distro.key) is not None, distro.key
    assert rest.jwt_os_problem("ubuntu22.04").startswith(
        "ubuntu22.04's Slurm 21.08 has no JWT plugin package")
    assert [rest.jwt_os_problem(o) for o in ("debian12", "debian13", "ubuntu24.04")] == [None] * 3


def test_settings_over_the_defaults():
    assert rest.rest_settings(None) == rest.DEFAULTS
    assert rest.rest_settings({"port": 8443}, "10.0.0.0/24")["port"] == 8443


@pytest.mark.parametrize(("given", "message"), [
    ({"host": "login-1"}, "metalslurm_rest has no host: it takes enabled, port, "
                          "listen_address, max_token_lifespan"),
    ({"enabled": "yes"}, "metalslurm_rest.enabled must be true or false"),
    ({"port": 80}, "metalslurm_rest.port 80 must be a port from 1024 to 65535"),
    ({"port": True}, "metalslurm_rest.port True must be a port from 1024 to 65535"),
    ({"port": 9090}, "metalslurm_rest.port 9090 is a port another daemon of the cluster"),
    ({"max_token_lifespan": -5}, "metalslurm_rest.max_token_lifespan must be a number"),
    ({"listen_address": "10.1.0.5"}, "metalslurm_rest.listen_address 10.1.0.5 is outside "
                                     "the cluster's private network 10.0.0.0/24"),
    ({"listen_address": "0.0.0.0"}, "metalslurm_rest.listen_address 0.0.0.0 would listen on "
                                    "every interface"),
])
def test_a_bad_setting_names_the_key(given, message):
    with pytest.raises(rest.RestSettingsError) as err:
        rest.rest_settings(given, "10.0.0.0/24")
    assert str(err.value).startswith(message)


HOSTVARS = {"ctl": {"metalslurm_address": "10.0.0.10", "metalslurm_private_cidr": "10.0.0.0/24",
                    "metalslurm_shared_storage": "none"},
            "gpu-001": {"metalslurm_address": "10.0.0.11", "metalslurm_gpu_count": 0,
                        "metalslurm_node_state": "static"}}
GROUPS = {"slurm_controller": ["ctl"], "slurmdbd": ["ctl"], "slurm_compute": ["gpu-001"]}


def contract_problems(**all_vars) -> list[str]:
    hostvars = {h: {**v, **all_vars} for h, v in HOSTVARS.items()}
    return inventory_contract.inventory_problems({"groups": GROUPS, "hostvars": hostvars})


def test_a_hand_written_inventory_on_ubuntu_22_04_must_turn_rest_off():
    assert contract_problems(metalslurm_os="ubuntu22.04") == [
        "metalslurm_rest.enabled is true (the default), but ubuntu22.04's Slurm 21.08 has no "
        "JWT plugin package (slurm-wlm-jwt-plugin), which slurmrestd needs to authenticate "
        "users: turn the REST API off (metalslurm:rest enabled: false), or use an os whose "
        "Slurm has it (debian12, debian13, ubuntu24.04)"]
    assert contract_problems(metalslurm_os="ubuntu22.04",
                             metalslurm_rest={"enabled": False}) == []
    assert contract_problems(metalslurm_os="debian12") == []


def test_the_contract_refuses_bad_rest_settings():
    assert contract_problems(metalslurm_rest={"listen_address": "8.8.8.8"}) == [
        "metalslurm_rest.listen_address 8.8.8.8 is outside the cluster's private network "
        "10.0.0.0/24: the API is served on the private network only"]
    assert contract_problems(metalslurm_rest="on") == [
        "metalslurm_rest: 'on' is not a mapping of REST API settings"]
