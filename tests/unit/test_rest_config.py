"""metalslurm:rest from the stack to the inventory: the REST API on by default where the OS's
Slurm packages the JWT plugin, off (and refused when asked for) where it does not; a listen
address off the private network, a port another daemon holds, a lifespan out of range
refused with one sentence naming the key."""

from __future__ import annotations

import ipaddress

import pytest

from infra.stack.config import ConfigError, parse_config
from infra.stack.inventory import cluster_vars
from infra.stack.rest import parse_rest
from infra.stack.schema import Collector

POOL = [{"name": "gpu", "count": 2, "gpuType": "h100", "gpuCount": 8}]


def ms(**kwargs):
    return {f"metalslurm:{k}": v for k, v in kwargs.items()}


def problems(**kwargs) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_config(ms(computePools=POOL, **kwargs), check_artifacts=False)
    return err.value.problems


def rest_vars(**kwargs) -> dict:
    cfg = parse_config(ms(computePools=POOL, **kwargs), check_artifacts=False)
    return cluster_vars(cfg, [])["metalslurm_rest"]


def test_defaults_reach_the_inventory():
    assert rest_vars() == {"enabled": True, "port": 6820, "listen_address": "",
                           "max_token_lifespan": 86400}


def test_settings_reach_the_inventory():
    assert rest_vars(rest={"port": 8443, "listenAddress": "10.77.0.10",
                           "maxTokenLifespan": 0}) == {
        "enabled": True, "port": 8443, "listen_address": "10.77.0.10", "max_token_lifespan": 0}


def parsed(os_name: str, rest: dict | None = None) -> tuple[bool, list[str]]:
    """The section alone, for an os whatever the provider (Ubuntu needs byo or oci)."""
    c = Collector()
    settings = parse_rest(c, {"rest": rest or {}}, os_name,
                          ipaddress.IPv4Network("10.77.0.0/24"))
    return settings.enabled, c.problems


@pytest.mark.parametrize("os_name", ["debian12", "debian13", "ubuntu24.04"])
def test_on_by_default_where_the_slurm_has_the_jwt_plugin(os_name):
    assert parsed(os_name) == (True, [])


def test_off_by_default_on_ubuntu_22_04_and_refused_when_asked_for():
    assert parsed("ubuntu22.04") == (False, [])
    assert parsed("ubuntu22.04", {"enabled": True})[1] == [
        "metalslurm:rest.enabled: is true, but ubuntu22.04's Slurm 21.08 has no JWT plugin "
        "package (slurm-wlm-jwt-plugin), which slurmrestd needs to authenticate users: turn "
        "the REST API off (metalslurm:rest enabled: false), or use an os whose Slurm has it "
        "(debian12, debian13, ubuntu24.04)"]


@pytest.mark.parametrize(("rest", "problem"), [
    ({"listenAddress": "192.168.1.5"},
     "metalslurm:rest.listenAddress: 192.168.1.5 is outside the cluster's private network "
     "10.77.0.0/24: the API is served on the private network only"),
    ({"listenAddress": "0.0.0.0"},
     "metalslurm:rest.listenAddress: 0.0.0.0 would listen on every interface, public ones "
     "too: leave it out (the host's private address) or give a private one"),
    ({"listenAddress": "ctl"}, "metalslurm:rest.listenAddress: 'ctl' is not an IPv4 address"),
    ({"port": 6817},
     "metalslurm:rest.port: 6817 is a port another daemon of the cluster listens on (6817, "
     "6818, 6819, 9090, 9093, 9100, 9341); use 6820"),
    ({"maxTokenLifespan": -1}, "metalslurm:rest.maxTokenLifespan"),
    ({"port": "http"}, "metalslurm:rest.port"),
    ({"enabled": "yes"}, "metalslurm:rest.enabled"),
    ({"listen": "10.77.0.10"}, "metalslurm:rest"),
])
def test_a_bad_setting_is_refused_naming_the_key(rest, problem):
    found = problems(rest=rest)
    assert len(found) == 1 and found[0].startswith(problem), found


def test_the_section_must_be_a_mapping():
    assert problems(rest=[1])[0].startswith("metalslurm:rest")
