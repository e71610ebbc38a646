"""Each role's meta/argument_specs.yml, checked against the role and the inventories the stack
config makes (make lint).

Ansible validates a role's variables against its spec before the role runs, so a settings
tree described key by key is refused with the key's path (``nvidia_gpu_settings.mode``). These
tests keep the specs whole and true: every public variable has an entry; every dict is
described key by key unless it is a free-form map (listed here with the reason); the
inventory each shipped stack config gives passes every role's spec; a settings tree whose
defaults a table owns holds no second default.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.metalslurm.cluster.plugins.module_utils import elastic, gpu, health

from infra.stack.config import load_stack_file
from infra.stack.inventory import cluster_vars
from tests.paths import REPO, ROLES

ROLE_NAMES = sorted(p.name for p in ROLES.iterdir()
                    if (p / "meta" / "argument_specs.yml").is_file())
# Dicts whose keys are not fixed, and why.
FREE_FORM = {
    "enroot_pyxis_enroot_config": "enroot.conf settings: any ENROOT_* variable",
    "enroot_pyxis_os": "the node's distribution facts",
    "nccl_ib_settings": "NCCL variables, checked by module_utils/nccl.py's one rule",
    "nfs_server_export_modes": "exported path -> mode",
    "slurm_controller_config": "slurm.conf settings: any Slurm option",
    "slurm_controller_cgroup_config": "cgroup.conf settings: any Slurm option",
    "slurm_controller_partition_defaults": "PartitionName settings: any Slurm option",
    "slurm_elastic_driver_packages": "power driver -> packages",
    "slurm_topology_leaf_spines": "leaf switch -> spine switch",
    "slurmdbd_config": "slurmdbd.conf settings: any Slurm option",
}
# The shipped stack configs whose inventories every role must take.
STACKS = ["Pulumi.local.yaml", "Pulumi.example-local.yaml", "Pulumi.example-byo.yaml",
          "Pulumi.example-oci.yaml", "tests/e2e/stacks/Pulumi.e2e-debian13.yaml",
          "tests/e2e/stacks/Pulumi.e2e-debian12.yaml"]
# role default "{{ metalslurm_X | default(...) }}" or "{{ metalslurm_X.key | default(...) }}",
# or a key of the inventory's value over its table's defaults,
# "{{ (metalslurm_X | default(none) | metalslurm.cluster.F).key }}"
DIRECT = re.compile(r"^\{\{\s*(metalslurm_\w+)(?:\.(\w+))?\s*\|\s*default\([^)]*\)\s*\}\}$"
                    r"|^\{\{\s*\((metalslurm_\w+)\s*\|\s*default\(none\)\s*\|\s*"
                    r"metalslurm\.cluster\.\w+\)\.(\w+)\s*\}\}$")


def spec(role: str) -> dict[str, Any]:
    doc = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())
    return doc["argument_specs"]["main"]["options"]


def defaults(role: str) -> dict[str, Any]:
    path = ROLES / role / "defaults" / "main.yml"
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_every_public_variable_has_a_spec_entry_and_every_entry_a_default(role):
    assert set(spec(role)) == set(defaults(role)), role


def dicts_without_keys(options: dict[str, Any], path: str = "") -> list[str]:
    found = []
    for name, option in options.items():
        where = f"{path}{name}"
        if option.get("type") == "dict" or option.get("elements") == "dict":
            if "options" in option:
                found += dicts_without_keys(option["options"], f"{where}.")
            elif not path and name not in FREE_FORM:
                found.append(where)
    return found


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_settings_trees_are_described_key_by_key(role):
    assert dicts_without_keys(spec(role)) == [], (
        f"role {role}: describe these dicts key by key in meta/argument_specs.yml (options:), "
        "or list them in FREE_FORM with the reason")


@cache
def inventory_vars(stack: str) -> dict[str, Any]:
    return cluster_vars(load_stack_file(REPO / stack, check_artifacts=False), [])


def role_params(role: str, inventory: dict[str, Any]) -> dict[str, Any]:
    """The role variables that take an inventory variable as it is, with the inventory's
    value."""
    params = {}
    for name, value in defaults(role).items():
        found = DIRECT.match(" ".join(value.split())) if isinstance(value, str) else None
        setting, key = (found.group(1) or found.group(3), found.group(2) or found.group(4)) \
            if found else (None, None)
        if setting not in inventory:
            continue
        value = inventory[setting]
        if key:
            if not isinstance(value, dict) or key not in value:
                continue
            value = value[key]
        params[name] = value
    return params


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("role", ROLE_NAMES)
def test_the_inventory_a_shipped_stack_gives_passes_the_roles_spec(role, stack):
    params = role_params(role, inventory_vars(stack))
    result = ArgumentSpecValidator(spec(role)).validate(params)
    assert [str(e) for e in result.errors] == []


def test_the_checks_reach_the_settings_trees():
    checked = {name for role in ROLE_NAMES
               for name in role_params(role, inventory_vars(STACKS[-2]))}
    assert {"nvidia_gpu_settings", "slurm_accounting_settings", "slurmdbd_accounting",
            "common_users", "slurm_controller_partitions"} <= checked, checked


@pytest.mark.parametrize(("params", "error"), [
    ({"nvidia_gpu_settings": {"mode": "auto"}},
     "value of mode must be one of: install, preinstalled, off, got: auto found in "
     "nvidia_gpu_settings"),
    ({"nvidia_gpu_settings": {"repository": {"url": "", "keyUrl": ""}}},
     "nvidia_gpu_settings.repository.keyUrl. Supported parameters include: key_fingerprint, "
     "key_url, url."),
])
def test_a_bad_value_is_refused_with_the_keys_path(params, error):
    result = ArgumentSpecValidator(spec("nvidia_gpu")).validate(params)
    assert [str(e) for e in result.errors] == [error]


def spec_defaults(options: dict[str, Any], path: str = "") -> list[str]:
    """The options under ``options`` that hold a default, by their path."""
    return [found for name, o in options.items()
            for found in ([f"{path}{name}"] if "default" in o else [])
            + spec_defaults(o.get("options") or {}, f"{path}{name}.")]


@pytest.mark.parametrize(("role", "option", "keys"), [
    ("slurm_controller", "slurm_controller_power_saving", elastic.KEYS),
    ("slurm_elastic", "slurm_elastic_settings", elastic.KEYS),
    ("slurm_health", "slurm_health_settings", tuple(health.DEFAULTS)),
    ("nvidia_gpu", "nvidia_gpu_settings", tuple(gpu.DEFAULTS)),
])
def test_a_tree_whose_defaults_a_filter_owns_has_the_owners_keys(role, option, keys):
    """module_utils/elastic.py and health.py fill what an inventory leaves out; the spec
    takes exactly their keys (their defaults stay theirs)."""
    assert sorted(spec(role)[option]["options"]) == sorted(keys)


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_a_spec_describes_and_holds_no_second_default(role):
    """A variable's default is its role's defaults/main.yml, or the table a filter merges a
    settings tree over (module_utils/gpu.py, health.py, elastic.py): never the spec too."""
    assert spec_defaults(spec(role)) == [], role

