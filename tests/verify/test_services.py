"""Each host runs the daemons the playbook gives it, and only those.

What runs where comes from ansible/site.yml itself (each play's hosts and its roles'
conditions, evaluated on this inventory by infra/playbook.py), not from a copy here.
"""

import pytest

from infra.playbook import all_services


@pytest.mark.parametrize("service", all_services())
def test_service_runs_exactly_where_the_playbook_puts_it(host, host_name, cluster, service):
    expected = cluster.services_of(host_name)
    svc = host.service(service)
    if service in expected:
        assert svc.is_running, f"{service} is not running on {host_name} " \
                               f"({sorted(cluster.groups_of(host_name))})"
        assert svc.is_enabled, f"{service} is not enabled on {host_name}"
    else:
        assert not svc.is_running, f"{service} runs on {host_name}, where the playbook puts " \
                                   f"only {sorted(expected)}"
