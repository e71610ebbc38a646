"""Each group runs its daemons, and only those."""

import pytest

EXPECTED = {
    "munge": {"slurm_controller", "slurm_compute"},
    "slurmctld": {"slurm_controller"},
    "slurmd": {"slurm_compute"},
}


@pytest.mark.parametrize("service", sorted(EXPECTED))
def test_service_runs_exactly_where_its_group_says(host, host_name, cluster, service):
    groups = set(cluster.groups_of(host_name))
    svc = host.service(service)
    if groups & EXPECTED[service]:
        assert svc.is_running, f"{service} is not running on {host_name} ({sorted(groups)})"
        assert svc.is_enabled, f"{service} is not enabled on {host_name}"
    else:
        assert not svc.is_running, f"{service} runs on {host_name}, which is not in " \
                                   f"{sorted(EXPECTED[service])}"
