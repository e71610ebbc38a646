"""One owner per setting: where a default is read from two places (a role's defaults and the
operator's stack config), these tests fail the moment the copies drift."""

from __future__ import annotations

import yaml

from infra.config import DEFAULT_JOB_TIME
from tests.paths import ROLES


def role_defaults(role: str) -> dict:
    return yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text())


def test_the_roles_default_time_is_the_stack_configs():
    """A hand-written inventory's partitions get the same DefaultTime as a parsed stack's."""
    assert role_defaults("slurm_controller")["slurm_controller_default_time"] == DEFAULT_JOB_TIME


def test_slurm_conf_names_the_health_checker_where_its_role_installs_it():
    assert role_defaults("slurm_controller")["slurm_controller_health_program"] == \
        role_defaults("slurm_health")["slurm_health_program"]


def test_slurm_runs_as_the_user_the_common_role_creates():
    assert role_defaults("slurm_common")["slurm_common_user"] == \
        role_defaults("common")["common_slurm_user"]
