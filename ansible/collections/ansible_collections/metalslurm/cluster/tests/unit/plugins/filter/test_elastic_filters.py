"""The slurm_elastic role's filter (plugins/filter/elastic.py): the power programs' wheel."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.metalslurm.cluster.plugins.filter import elastic as filters
from ansible_collections.metalslurm.cluster.plugins.module_utils.wheel import build_wheel

from tests.paths import ROLES

PROJECT = ROLES / "slurm_elastic/files/metalslurm-power"


def test_the_filter_gives_the_wheel_path(tmp_path: Path) -> None:
    path = Path(filters.wheel(str(PROJECT), str(tmp_path)))
    assert path.parent == tmp_path and path.is_file()
    assert path.read_bytes() == build_wheel(PROJECT, tmp_path / "again").read_bytes()



def test_the_filter_names_the_project_it_cannot_build(tmp_path: Path) -> None:
    with pytest.raises(AnsibleFilterError, match=f"cannot build a wheel of {tmp_path}"):
        filters.wheel(str(tmp_path), str(tmp_path / "build"))
