"""One owner per setting (docs/settings.md): every default is written once, and every other
reader takes it from there. Where a reader cannot (a program on a node that runs without
this repository, a role default that must be a literal), these tests fail the moment its
copy drifts from the owner; where a reader does take it from the owner, they check it still
does, and that no copy has crept back in."""

from __future__ import annotations

import importlib.machinery
import re
import sys
import types
from pathlib import Path

import yaml
from ansible_collections.metalslurm.cluster.plugins.module_utils import health

from infra.config import DEFAULT_JOB_TIME
from infra.health import HealthSettings
from tests.paths import REPO, ROLES

HEALTH_PROGRAM = ROLES / "slurm_health/files/metalslurm-health"


def role_defaults(role: str) -> dict:
    return yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text())


def ansible_files() -> list[Path]:
    """Every file the playbook reads settings from: group_vars and the roles' defaults, vars,
    tasks and templates."""
    files = sorted((REPO / "ansible/group_vars").rglob("*.yml"))
    for part in ("defaults", "vars", "tasks", "templates"):
        files += sorted(p for p in ROLES.glob(f"*/{part}/**/*") if p.is_file())
    return files


def test_the_roles_default_time_is_the_stack_configs():
    """A hand-written inventory's partitions get the same DefaultTime as a parsed stack's."""
    assert role_defaults("slurm_controller")["slurm_controller_default_time"] == DEFAULT_JOB_TIME


# ---- the node health checker: module_utils/health.py --------------------------------------

def test_the_stack_parser_takes_the_health_defaults_from_their_owner():
    assert HealthSettings().inventory_vars() == health.DEFAULTS


def test_the_checker_programs_own_defaults_are_the_owners():
    """The checker runs on nodes without the repository, so it keeps copies (used when it is
    run by hand without a config file); its config-file names differ from the inventory's."""
    loader = importlib.machinery.SourceFileLoader("metalslurm_health_owners", str(HEALTH_PROGRAM))
    program = types.ModuleType(loader.name)
    sys.modules[loader.name] = program  # its dataclasses look their module up there
    loader.exec_module(program)
    copies = program.DEFAULTS
    assert {"check_timeout": copies["check_timeout"],
            "xid_window": copies["xid_window_seconds"],
            "max_ecc_uncorrected": copies["max_ecc_uncorrected"],
            "ib_rate_gbps": copies["ib"]["rate_gbps"]} == {
        k: health.DEFAULTS[k] for k in ("check_timeout", "xid_window", "max_ecc_uncorrected",
                                        "ib_rate_gbps")}


# ---- no copy has crept back into the playbook ----------------------------------------------

# A `| default(...)` on one of these settings would be a second owner of its default.
OWNED_ELSEWHERE = re.compile(
    r"(metalslurm_health|slurm_health_settings)\.\w+\s*\|\s*default\(")


def test_the_playbook_keeps_no_copy_of_an_owned_default():
    copies = [f"{path.relative_to(REPO)}:{n}: {line.strip()}"
              for path in ansible_files()
              for n, line in enumerate(path.read_text().splitlines(), start=1)
              if OWNED_ELSEWHERE.search(line)]
    assert copies == []

