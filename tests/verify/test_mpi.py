"""MPI (roles/mpi): Slurm's PMIx plugin can load where jobs are submitted and run, and
OpenMPI with mpi4py, and python3-venv, is on every compute and login node."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _only_slurm_nodes(request: pytest.FixtureRequest, cluster) -> None:
    if "host" in request.fixturenames:
        name = str(request.getfixturevalue("host").backend.host)
        groups = cluster.groups_of(name)
        if not {"slurm_compute", "slurm_controller", "login"} & set(groups):
            pytest.skip(f"{name} neither submits nor runs jobs")


def test_srun_lists_the_pmix_plugin(host, host_name):
    out = host.run("srun --mpi=list")
    assert out.rc == 0 and "pmix" in out.stdout + out.stderr, (host_name, out.stdout, out.stderr)


def test_the_library_slurms_pmix_plugin_loads_is_installed(host, host_name):
    """The plugin dlopen()s the unversioned libpmix.so (Debian bug 1059711)."""
    names = {line.split()[0] for line in host.check_output("ldconfig -p").splitlines()[1:]}
    assert "libpmix.so" in names, f"{host_name}: no libpmix.so in the linker cache"


def test_compute_and_login_nodes_have_openmpi_and_mpi4py(host, host_name, cluster):
    if not {"slurm_compute", "login"} & set(cluster.groups_of(host_name)):
        pytest.skip(f"{host_name} runs no jobs")
    assert host.run("python3 -c 'import mpi4py'").rc == 0, f"{host_name}: no mpi4py"
    assert host.exists("mpicc") and host.exists("ompi_info"), f"{host_name}: no OpenMPI"
    # Users build their jobs' environments where the jobs run (examples/setup-train-env.sh)
    # and on the login nodes.
    assert host.run("python3 -c 'import ensurepip, venv'").rc == 0, f"{host_name}: no venv"
