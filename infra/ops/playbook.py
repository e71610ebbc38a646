"""What ``ansible/site.yml`` puts on each host of an inventory, read from the playbook itself.

The verify suite asks "which daemons must run on this host?"; the answer comes from the
same group-to-role map the playbook applies (each play's host pattern and its roles'
``when``), evaluated by Ansible's own inventory and templating on the inventory at hand,
and from :data:`ROLE_SERVICES`, the daemons each role keeps running. A host in a group the
playbook configures is expected to run exactly what the playbook gives it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.metalslurm.cluster.plugins.module_utils import (
    health,
    inventory_contract,
    monitoring,
    rest,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.operating_systems import (
    OPERATING_SYSTEMS,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.slurm_versions import (
    SlurmVersion,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
SITE = REPO_ROOT / "ansible" / "site.yml"


def _without_sackd() -> list[str]:
    """The supported operating systems whose Slurm is older than the slurm_login role's
    ``slurm_login_sackd_since`` (the OS table's releases, the role's own default)."""
    defaults = REPO_ROOT / "roles" / "slurm_login" / "defaults" / "main.yml"
    since = SlurmVersion.parse(yaml.safe_load(defaults.read_text())["slurm_login_sackd_since"])
    return [o.id for o in OPERATING_SYSTEMS if SlurmVersion.parse(o.slurm_package) < since]


# The daemons each role keeps running (its "Keep ... running" tasks), with the condition,
# in inventory terms, under which it does. tests/unit/test_playbook_map.py checks every
# service named here is one its role starts.
ROLE_SERVICES: dict[str, tuple[tuple[str, str | None], ...]] = {
    "munge": (("munge", None),),
    "slurm_controller": (("slurmctld", None),),
    # In backup mode while the controller answers (group slurm_controller_backup).
    "slurm_backup_controller": (("slurmctld", None),),
    # Elastic nodes too, whenever they are up (the verify suite skips powered-down ones).
    "slurm_compute": (("slurmd", None),),
    "slurmdbd": (("slurmdbd", None),
                 ("mariadb", "(metalslurm_accounting | default({})).database_host "
                             "| default('', true) | length == 0")),
    "nfs_server": (("nfs-server", None),),
    "monitoring_node": (("prometheus-node-exporter", "__metalslurm_monitoring_enabled | bool"),),
    "slurm_exporter": (("metalslurm-slurm-exporter", None),),
    # On the REST host only: the first login node, else the controller.
    "slurm_rest": (("slurmrestd", "__metalslurm_rest_enabled | bool and "
                                  "inventory_hostname == __metalslurm_submit_host"),),
    # sackd where the OS's Slurm has it (slurm_login_sackd_since, 23.11, and later).
    "slurm_login": (("sackd", f"metalslurm_os | default('debian13') not in "
                              f"{_without_sackd()!r}"),),
    "monitoring": (("prometheus", None), ("prometheus-alertmanager", None)),
    # The simulated InfiniBand fabric, on clusters without InfiniBand hardware only.
    "slurm_topology": (("metalslurm-ibsim",
                        "(metalslurm_topology | default({})).simulator_fabric | default('', true) "
                        "| length > 0"),),
}
# The playbook's switches (group_vars/all/metalslurm.yml) and the setting each reads over
# its table's defaults. The playbook reads them through the collection's filters, which
# Ansible's templating finds only through its collection loader; this map gives the
# templating the same values, taken from the same tables.
SWITCHES: dict[str, tuple[str, Mapping[str, Any]]] = {
    "__metalslurm_health_enabled": ("metalslurm_health", health.DEFAULTS),
    "__metalslurm_monitoring_enabled": ("metalslurm_monitoring", monitoring.DEFAULTS),
    "__metalslurm_rest_enabled": ("metalslurm_rest", rest.DEFAULTS),
}
# Groups a play may leave out at run time (hosts set aside by the playbook itself).
RUNTIME_GROUPS = ("metalslurm_powered_down", "metalslurm_up")
# Groups the playbook fills at run time, with the condition (in inventory terms) a host
# meets to be in one (site.yml's add_host).
RUNTIME_MADE_GROUPS = {
    "metalslurm_monitoring": ("__metalslurm_monitoring_enabled | bool",
                              "inventory_hostname == __metalslurm_monitoring_host"),
}


@dataclass(frozen=True)
class PlayRole:
    """One role of one play: the play's host pattern and the role's own condition."""

    play: str
    hosts: str
    role: str
    when: tuple[str, ...] = ()


_ROLE_TASKS = ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role",
               "import_role")


def _conditions(when: Any) -> tuple[str, ...]:
    return tuple([when] if isinstance(when, str) else when or ())


def play_roles(site: Path = SITE) -> list[PlayRole]:
    """Every (play, role) pair of the playbook, in order: a play's ``roles:`` and the roles
    its tasks include."""
    found = []
    for play in yaml.safe_load(site.read_text()):
        for role in play.get("roles") or []:
            name = role if isinstance(role, str) else role["role"]
            when = role.get("when") if isinstance(role, Mapping) else None
            found.append(PlayRole(play["name"], play["hosts"], name, _conditions(when)))
        for task in play.get("tasks") or []:
            action = next((task[k] for k in _ROLE_TASKS if k in task), None)
            if action is not None:
                found.append(PlayRole(play["name"], play["hosts"], action["name"],
                                      _conditions(task.get("when"))))
    return found


class PlaybookMap:
    """Which roles and services the playbook gives each host of one inventory."""

    def __init__(self, inventory: str | Path, site: Path = SITE) -> None:
        from ansible.inventory.manager import InventoryManager
        from ansible.parsing.dataloader import DataLoader
        from ansible.vars.hostvars import HostVars
        from ansible.vars.manager import VariableManager

        self._loader = DataLoader()
        self._loader.set_basedir(str(site.parent))  # the playbook's own group_vars
        self._inventory = InventoryManager(loader=self._loader, sources=[str(inventory)])
        self._vars = VariableManager(loader=self._loader, inventory=self._inventory)
        HostVars(inventory=self._inventory, variable_manager=self._vars, loader=self._loader)
        self._plays = play_roles(site)

    def _hosts(self, pattern: str) -> set[str]:
        # Groups the playbook makes at run time are empty here: leave them out of the
        # pattern rather than have Ansible warn that they match nothing; a group it fills
        # by a condition is the hosts that meet it.
        parts = pattern.split(":")
        made = [p for p in parts if p in RUNTIME_MADE_GROUPS]
        if made:
            rest = ":".join(["all"] + [p for p in parts if p.startswith(("!", "&"))])
            return {h for h in self._hosts(rest)
                    if all(self._holds(h, RUNTIME_MADE_GROUPS[g]) for g in made)}
        parts = [p for p in parts if p.lstrip("!&") not in RUNTIME_GROUPS]
        known = set(self._inventory.groups) | set(self._inventory.hosts)
        parts = [p for p in parts if p.lstrip("!&") in known]
        if not [p for p in parts if not p.startswith(("!", "&"))]:
            return set()
        return {h.name for h in self._inventory.get_hosts(":".join(parts))}

    def _holds(self, host: str, conditions: tuple[str, ...]) -> bool:
        from ansible.template import Templar, trust_as_template

        variables = dict(self._vars.get_vars(host=self._inventory.get_host(host)))
        for switch, (setting, defaults) in SWITCHES.items():
            given = variables.get(setting)
            variables[switch] = (given if isinstance(given, Mapping) else {}).get(
                "enabled", defaults["enabled"])
        # The submit host likewise (group_vars reads it through the collection's filter).
        variables["__metalslurm_submit_host"] = inventory_contract.submit_host(
            variables.get("groups") or {})
        templar = Templar(loader=self._loader, variables=variables)
        return all(templar.evaluate_conditional(trust_as_template(c)) for c in conditions)

    def roles(self, host: str) -> set[str]:
        return {pr.role for pr in self._plays
                if host in self._hosts(pr.hosts) and self._holds(host, pr.when)}

    def services(self, host: str) -> set[str]:
        return {service for role in self.roles(host)
                for service, condition in ROLE_SERVICES.get(role, ())
                if condition is None or self._holds(host, (condition,))}

    def all_hosts(self) -> list[str]:
        return sorted(h.name for h in self._inventory.get_hosts("all"))

    def services_by_host(self) -> dict[str, set[str]]:
        return {h: self.services(h) for h in self.all_hosts()}


def all_services() -> list[str]:
    return sorted({s for services in ROLE_SERVICES.values() for s, _c in services})


def expected_services(inventory: str | Path) -> dict[str, Any]:
    """``{host: sorted services}`` for an inventory (what the verify suite asserts)."""
    return {h: sorted(s) for h, s in PlaybookMap(inventory).services_by_host().items()}
