"""testinfra suite for any metalslurm inventory.

Run as ``pytest tests/verify --hosts=ansible://all --ansible-inventory=INVENTORY`` (or
``metalslurm verify -i INVENTORY``). Tests that take the ``host`` fixture run once per
inventory host; cluster-wide tests run once, on the controller.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import testinfra
from testinfra.utils.ansible_runner import AnsibleRunner

from infra.accept.verdicts import REASON_PREFIX as ACCEPT_PREFIX
from infra.ops.playbook import expected_services


@dataclass(frozen=True)
class Cluster:
    inventory: str
    controller: str
    compute: list[str]
    hostvars: dict[str, dict] = field(default_factory=dict)
    # Elastic nodes that Slurm holds powered down: checked when they are up.
    powered_down: list[str] = field(default_factory=list)
    # host -> the daemons ansible/site.yml gives it (infra/ops/playbook.py)
    services: dict[str, list[str]] = field(default_factory=dict)
    # The login nodes in inventory order (the first serves the REST API).
    login_nodes: list[str] = field(default_factory=list)
    # Nodes waiting in the acceptance gate (drained "metalslurm-accept: ..."; with
    # metalslurm_accept.gate, every new node until 'metalslurm accept' passes it): in the
    # cluster, but no job runs there.
    gated: list[str] = field(default_factory=list)

    def services_of(self, host: str) -> list[str]:
        return self.services[host]

    @property
    def static_compute(self) -> list[str]:
        return [h for h in self.compute
                if self.hostvars[h].get("metalslurm_node_state", "static") != "cloud"]

    @property
    def job_nodes(self) -> list[str]:
        """Static compute nodes a test job can run on (not waiting in the gate)."""
        nodes = [h for h in self.static_compute if h not in self.gated]
        if not nodes:
            pytest.skip(f"every static compute node waits in the acceptance gate "
                        f"({', '.join(self.gated)}): run 'metalslurm accept' first")
        return nodes

    def gpu_nodes(self) -> list[str]:
        return [h for h in self.compute if int(self.hostvars[h].get("metalslurm_gpu_count", 0))]

    def groups_of(self, host: str) -> list[str]:
        return list(self.hostvars[host].get("group_names", []))

    def var(self, name: str, default=None):
        """An ``all`` var (the same on every host): read from the controller's view."""
        return self.hostvars[self.controller].get(name, default)

    @property
    def shared_storage(self) -> str:
        return str(self.var("metalslurm_shared_storage", "none"))

    @property
    def shared_paths(self) -> list[str]:
        return list(self.var("metalslurm_shared_paths", []) or [])

    def hosts_in(self, group: str) -> list[str]:
        return sorted(h for h, hv in self.hostvars.items() if group in hv.get("group_names", []))


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Cluster:
    inventory = request.config.getoption("ansible_inventory")
    if not inventory:
        pytest.exit("run with --ansible-inventory=INVENTORY (and --hosts=ansible://all)", 2)
    runner = AnsibleRunner(inventory)
    controllers = runner.get_hosts("slurm_controller")
    assert len(controllers) == 1, f"inventory {inventory} needs exactly one slurm_controller"
    compute = sorted(runner.get_hosts("slurm_compute"))
    hostvars = {h: runner.get_variables(h) for h in runner.get_hosts("all")}
    powered_down, gated = [], []
    if compute:
        ctl = testinfra.get_host(f"ansible://{controllers[0]}", ansible_inventory=inventory)
        out = ctl.check_output("sinfo --noheader --Node --format='%N|%T|%E' "
                               f"--nodes={','.join(compute)}")
        for line in out.splitlines():
            node, state, reason = line.split("|", 2)
            # Powered down ('~') or being powered down ('%'), as the playbook sets them aside.
            if (hostvars[node].get("metalslurm_node_state") == "cloud"
                    and state.endswith(("~", "%"))):
                powered_down.append(node)
            if state.startswith("drain") and reason.startswith(ACCEPT_PREFIX):
                gated.append(node)
    return Cluster(inventory, controllers[0], compute, hostvars, sorted(set(powered_down)),
                   expected_services(inventory), list(runner.get_hosts("login")),
                   sorted(set(gated)))


@pytest.fixture(scope="session")
def controller(cluster: Cluster):
    return testinfra.get_host(f"ansible://{cluster.controller}",
                              ansible_inventory=cluster.inventory)


@pytest.fixture
def host_name(host) -> str:
    return host.backend.get_hostname()


@pytest.fixture(autouse=True)
def _skip_powered_down_elastic_nodes(request: pytest.FixtureRequest, cluster: Cluster) -> None:
    """Per-host checks skip an elastic node Slurm holds powered down (nothing to reach)."""
    if "host" not in request.fixturenames or not cluster.powered_down:
        return
    name = str(request.getfixturevalue("host").backend.host)
    if name in cluster.powered_down:
        pytest.skip(f"{name} is an elastic node and is powered down")
