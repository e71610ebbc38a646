"""The supported operating systems (module_utils/operating_systems.py): each row's facts and
the lookups every reader uses."""

from __future__ import annotations

import pytest
from ansible_collections.metalslurm.cluster.plugins.module_utils import operating_systems as oses


def test_the_ids_are_what_a_stacks_os_names():
    assert oses.OS_IDS == ("debian12", "debian13", "ubuntu22.04", "ubuntu24.04")


def test_the_local_provider_builds_the_debian_ones():
    assert oses.LOCAL_OS_IDS == ("debian12", "debian13")


@pytest.mark.parametrize(("os_id", "facts"), [
    ("debian12", ("debian", "12", "bookworm", "3.11", "22.05", "debian12", 535)),
    ("debian13", ("debian", "13", "trixie", "3.13", "24.11", "debian13", 580)),
    ("ubuntu22.04", ("ubuntu", "22.04", "jammy", "3.10", "21.08", "ubuntu2204", 535)),
    ("ubuntu24.04", ("ubuntu", "24.04", "noble", "3.12", "23.11", "ubuntu2404", 550)),
])
def test_each_rows_facts(os_id, facts):
    row = oses.by_id(os_id)
    assert (row.distribution, row.version, row.codename, row.python, row.slurm_release,
            row.cuda_repository, row.first_nvidia_branch) == facts
    assert row.slurm_source


def test_an_unknown_id_names_the_known_ones():
    with pytest.raises(KeyError, match="unknown os 'centos7'; supported: debian12, debian13, "
                                       "ubuntu22.04, ubuntu24.04"):
        oses.by_id("centos7")


@pytest.mark.parametrize(("distribution", "version", "os_id"), [
    ("Debian", "12", "debian12"), ("Debian", "12.11", "debian12"), ("debian", "13", "debian13"),
    ("Ubuntu", "22.04", "ubuntu22.04"), ("ubuntu", "24.04", "ubuntu24.04"),
])
def test_a_release_as_ansible_or_os_release_reports_it(distribution, version, os_id):
    row = oses.by_release(distribution, version)
    assert row is not None and row.id == os_id


@pytest.mark.parametrize(("distribution", "version"), [
    ("Ubuntu", "20.04"), ("Ubuntu", "22.10"), ("Debian", "11"), ("Rocky", "9.4")])
def test_an_unsupported_release_has_no_row(distribution, version):
    assert oses.by_release(distribution, version) is None


@pytest.mark.parametrize(("distribution", "version", "repository"), [
    ("Debian", "13.1", "debian13"), ("Ubuntu", "24.04", "ubuntu2404"),
    # Outside the table: the name NVIDIA's scheme gives, for a message to name.
    ("Ubuntu", "20.04", "ubuntu2004"), ("Debian", "11.9", "debian11"), ("Rocky", "9.4", "rocky94"),
])
def test_the_cuda_repository_name(distribution, version, repository):
    assert oses.cuda_repository(distribution, version) == repository
