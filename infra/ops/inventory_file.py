"""Reading an Ansible inventory file given on the command line (``-i INVENTORY``).

``metalslurm configure``, ``verify``, ``topology`` and ``report usage -i`` read the YAML
inventory every provider writes (``.metalslurm/<stack>/inventory.yml``) or one written by
hand in the same format. Its structure is checked here as Ansible's YAML inventory plugin
reads it (groups are mappings of ``hosts``, ``children`` and ``vars``; ``hosts`` maps a host
name to its variables), before ansible-playbook or pytest start, so a file that is not an
inventory gets one line naming it instead of a failure half-way. The inventory contract
itself (one controller, addresses in the private network, ...) is
:func:`infra.stack.inventory.inventory_problems`, which the playbook's first play runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from infra.stack.inputs import InputError, load_yaml_mapping, type_name

INVENTORY_FILE = ("the YAML Ansible inventory (e.g. .metalslurm/<stack>/inventory.yml, or the "
                  "one 'pulumi stack output inventory' gives)")
GROUP_KEYS = ("hosts", "children", "vars")


def _group_problem(name: str, data: Any, where: str, depth: int = 0) -> str | None:
    if depth > 50:
        return f"{where}: groups are nested more than 50 deep"
    if data is None:
        return None
    if not isinstance(data, Mapping):
        return (f"{where}: group {name!r} is {type_name(data)}; a group is a mapping of "
                f"{', '.join(GROUP_KEYS)}")
    for key, value in data.items():
        if key not in GROUP_KEYS:
            return (f"{where}.{key}: unknown key in group {name!r} (a group has "
                    f"{', '.join(GROUP_KEYS)})")
        if value is not None and not isinstance(value, Mapping):
            what = {"hosts": "host names to their variables", "children": "group names to "
                    "groups", "vars": "variable names to values"}[key]
            return f"{where}.{key} is {type_name(value)}, not a mapping of {what}"
    for host, host_vars in (data.get("hosts") or {}).items():
        if not isinstance(host, (str, int)) or not str(host).strip():
            return f"{where}.hosts: {host!r} is not a host name"
        if host_vars is not None and not isinstance(host_vars, Mapping):
            return (f"{where}.hosts.{host} is {type_name(host_vars)}, not a mapping of its "
                    "variables")
    for child, child_data in (data.get("children") or {}).items():
        if not isinstance(child, str) or not child.strip():
            return f"{where}.children: {child!r} is not a group name"
        problem = _group_problem(child, child_data, f"{where}.children.{child}", depth + 1)
        if problem:
            return problem
    return None


def inventory_structure_problem(document: Mapping[Any, Any]) -> str | None:
    """The first thing that keeps ``document`` (a parsed YAML file) from being an Ansible
    YAML inventory, in a sentence; None when it is one."""
    if "plugin" in document:
        return ("is an inventory plugin's configuration, not an inventory; give the inventory "
                "itself (ansible-inventory -i FILE --list -y > inventory.yml writes one)")
    for group, data in document.items():
        if not isinstance(group, str) or not group.strip():
            return f"{group!r} is not a group name"
        problem = _group_problem(group, data, group)
        if problem:
            return problem
    return None


def load_inventory(path: Path, argument: str) -> dict[Any, Any]:
    """The parsed inventory file an argument names; an :class:`InputError` if it cannot be
    read, is not YAML, or is not shaped like an inventory."""
    document = load_yaml_mapping(path, argument, INVENTORY_FILE)
    problem = inventory_structure_problem(document)
    if problem:
        raise InputError(argument, f"{problem}; give {INVENTORY_FILE}", path)
    return document


def group_hosts(document: Mapping[Any, Any], group: str) -> list[str]:
    """The hosts of ``group`` (and of its child groups) wherever it appears in a
    structurally valid inventory, in file order, each once."""
    found: dict[str, None] = {}

    def walk(name: str, data: Any, inside: bool, depth: int) -> None:
        if not isinstance(data, Mapping) or depth > 50:
            return
        inside = inside or name == group
        if inside:
            found.update({str(h): None for h in data.get("hosts") or {}})
        for child, child_data in (data.get("children") or {}).items():
            walk(child, child_data, inside, depth + 1)

    for name, data in document.items():
        walk(name, data, False, 0)
    return list(found)


def hosts_in_group(path: Path, group: str) -> list[str]:
    """The hosts of ``group`` in the inventory given with -i; none is an InputError (the
    command would run on no host and say nothing)."""
    hosts = group_hosts(load_inventory(path, "--inventory"), group)
    if not hosts:
        raise InputError("--inventory", f"has no host in group {group}; give "
                         f"{INVENTORY_FILE}", path)
    return hosts
