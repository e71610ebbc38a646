"""The nccl_ib role's filter plugin: the interface that carries an address, read from
Ansible's gathered facts (dashes in interface names become underscores in the fact names)."""

from __future__ import annotations

from ansible_collections.metalslurm.cluster.plugins.filter.nccl import FilterModule

FILTERS = FilterModule().filters()
FACTS = {
    "interfaces": ["lo", "eth0", "ens1-p0"],
    "lo": {"device": "lo", "ipv4": {"address": "127.0.0.1"}},
    "eth0": {"device": "eth0", "ipv4": {"address": "203.0.113.5"}},
    "ens1_p0": {"device": "ens1-p0", "ipv4": {"address": "192.168.7.2"},
                "ipv4_secondaries": [{"address": "10.77.0.21"}]},
}


def test_the_interface_carrying_the_private_address_even_as_a_secondary_one():
    assert FILTERS["interface_of"](FACTS, "10.77.0.21") == "ens1-p0"
    assert FILTERS["interface_of"](FACTS, "203.0.113.5") == "eth0"


def test_no_interface_carries_an_unknown_address():
    assert FILTERS["interface_of"](FACTS, "10.77.9.9") == ""
