"""The host firewall's openings (module_utils/firewall.py), and the filter that reads each
host's address from hostvars."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.metalslurm.cluster.plugins.filter.firewall import host_firewall_rules
from ansible_collections.metalslurm.cluster.plugins.module_utils import firewall

GROUPS = {"slurm_controller": ["ctl"], "slurmdbd": ["ctl"], "nfs_server": ["ctl"],
          "slurm_compute": ["gpu-001", "gpu-002", "gpu-003"], "login": ["login-001"]}
ADDRESSES = {"ctl": "10.0.0.10", "gpu-001": "10.0.0.11", "gpu-002": "10.0.0.12",
             "gpu-003": "10.0.0.13", "login-001": "10.0.0.253"}


def rules(host, **kw):
    args = {"monitoring_host": "ctl", "rest_port": 6820, "submit_host": "login-001", **kw}
    return [r["rule"] for r in firewall.openings(host, GROUPS, ADDRESSES, "10.0.0.0/24", **args)]


def test_each_host_opens_its_own_daemons_ports_to_the_private_network_only():
    assert rules("ctl") == [
        "ip saddr 10.0.0.0/24 ct state established,related accept",
        "ip saddr 10.0.0.0/24 tcp dport { 22, 2049, 6817, 6819, 9090, 9093, 61001-64000 } accept",
        "ip saddr 10.0.0.10 tcp dport { 9100, 9341 } accept",
    ]
    assert rules("gpu-002") == [
        "ip saddr 10.0.0.0/24 ct state established,related accept",
        "ip saddr 10.0.0.0/24 tcp dport { 22, 6818, 61001-64000 } accept",
        "ip saddr 10.0.0.10 tcp dport { 9100, 9400 } accept",
        "ip saddr { 10.0.0.11, 10.0.0.13 } accept",
    ]
    assert rules("login-001")[1:] == [
        "ip saddr 10.0.0.0/24 tcp dport { 22, 6818, 6820, 61001-64000 } accept",
        "ip saddr 10.0.0.10 tcp dport 9100 accept",
    ]


def test_without_monitoring_rest_or_login_nodes_the_controller_is_the_submit_host():
    groups = {**GROUPS, "login": []}
    got = firewall.openings("ctl", groups, ADDRESSES, "10.0.0.0/24", "", None, "ctl")
    assert [r["rule"] for r in got] == [
        "ip saddr 10.0.0.0/24 ct state established,related accept",
        "ip saddr 10.0.0.0/24 tcp dport { 22, 2049, 6817, 6819, 61001-64000 } accept",
    ]


def test_a_rules_comment_changes_with_its_text():
    one = firewall.openings("gpu-001", GROUPS, ADDRESSES, "10.0.0.0/24")
    other = firewall.openings("gpu-001", GROUPS, {**ADDRESSES, "gpu-003": "10.0.0.99"},
                              "10.0.0.0/24")
    assert [r["comment"].split(":")[0] for r in one][:2] == \
        [r["comment"].split(":")[0] for r in other][:2]
    assert one[-1]["comment"] != other[-1]["comment"]
    assert all(r["comment"].startswith("metalslurm ") and len(r["comment"]) <= 120 for r in one)


@pytest.mark.parametrize(("cidr", "addresses", "message"), [
    ("10.0.0.0/33", ADDRESSES, "metalslurm_private_cidr '10.0.0.0/33' is not an IPv4 network"),
    ("10.0.0.0/24", {**ADDRESSES, "gpu-003": "gpu-003.example"},
     "gpu-003: metalslurm_address 'gpu-003.example' is not an IPv4 address"),
])
def test_bad_addresses_are_named(cidr, addresses, message):
    with pytest.raises(firewall.FirewallError, match=message.replace(".", r"\.")):
        firewall.openings("gpu-001", GROUPS, addresses, cidr)


def test_the_filter_reads_addresses_from_hostvars_and_names_a_bad_one():
    hostvars = {h: {"metalslurm_address": a} for h, a in ADDRESSES.items()}
    got = host_firewall_rules("gpu-001", GROUPS, hostvars, "10.0.0.0/24", "ctl", None, "ctl")
    assert got == firewall.openings("gpu-001", GROUPS, ADDRESSES, "10.0.0.0/24", "ctl", None,
                                    "ctl")
    del hostvars["gpu-002"]["metalslurm_address"]
    with pytest.raises(AnsibleFilterError, match="gpu-002: metalslurm_address None"):
        host_firewall_rules("gpu-001", GROUPS, hostvars, "10.0.0.0/24")
