"""Each host runs the daemons the playbook gives it, and only those, and starts them at boot.

What runs where comes from ansible/site.yml itself (each play's hosts and its roles'
conditions, evaluated on this inventory by infra/ops/playbook.py), not from a copy here. One
systemctl call per host reads every daemon the playbook can put anywhere.
"""

import pytest

from infra.ops.playbook import all_services


@pytest.fixture
def unit_states(host) -> dict[str, dict[str, str]]:
    """``{service: {ActiveState}}`` for every daemon the playbook knows."""
    units = " ".join(f"{s}.service" for s in all_services())
    out = host.check_output(f"systemctl show --property=Id,ActiveState {units}")
    states = {}
    for block in out.strip().split("\n\n"):
        fields = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        states[fields["Id"].removesuffix(".service")] = fields
    return states


def test_the_daemons_running_are_exactly_the_playbooks(host_name, cluster, unit_states):
    running = sorted(s for s, f in unit_states.items() if f["ActiveState"] == "active")
    assert running == cluster.services_of(host_name), \
        f"{host_name} ({sorted(cluster.groups_of(host_name))})"


def test_the_playbooks_daemons_start_at_boot(host, host_name, cluster):
    """What the next boot starts: the unit files' links on disk, as ``systemctl is-enabled``
    reads them. (systemd's own UnitFileState is what it read at its last reload: a package
    whose maintainer script enables its unit by making the link, as Debian 12's slurmctld
    does, leaves it at 'disabled' until the next daemon-reload, although the unit starts at
    boot.)"""
    services = cluster.services_of(host_name)
    out = host.check_output(" ; ".join(
        f"echo {s}=$(systemctl is-enabled {s}.service 2>/dev/null)" for s in services))
    states = dict(line.split("=", 1) for line in out.splitlines())
    not_enabled = {s: states.get(s) or "not found" for s in services if states.get(s) != "enabled"}
    assert not_enabled == {}, f"{host_name}: not enabled: {not_enabled}"
