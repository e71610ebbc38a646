"""Enroot and Pyxis on every host that runs or submits jobs (roles/enroot_pyxis)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROLE_DEFAULTS = Path(__file__).resolve().parents[2] / "roles/enroot_pyxis/defaults/main.yml"
SUBMIT_GROUPS = ("slurm_controller", "slurm_compute", "login")
CONF = "/etc/enroot/enroot.conf.d/metalslurm.conf"
NETWORK_FILESYSTEMS = ("nfs", "nfs4", "cifs", "smb3", "lustre", "gpfs", "fuse.sshfs", "beegfs")


@pytest.fixture(autouse=True)
def _only_where_containers_run(request: pytest.FixtureRequest, cluster) -> None:
    if not (cluster.var("metalslurm_containers") or {}).get("enabled"):
        pytest.skip("containers are not enabled in this inventory")
    if "host" in request.fixturenames:
        name = str(request.getfixturevalue("host").backend.host)
        if not set(cluster.groups_of(name)) & set(SUBMIT_GROUPS):
            pytest.skip(f"{name} neither runs nor submits jobs")


def _enroot_package_version() -> str:
    file = yaml.safe_load(ROLE_DEFAULTS.read_text())["enroot_pyxis_artifacts"]["enroot"]["file"]
    match = re.fullmatch(r"enroot_([^_]+)_[^_]+\.deb", file)
    assert match, file
    return match.group(1)


def test_srun_offers_the_container_options(host):
    assert "--container-image" in host.check_output("srun --help")


def test_enroot_is_the_version_the_role_installs(host):
    wanted = _enroot_package_version()
    for package in ("enroot", "enroot+caps"):
        assert host.package(package).version == wanted, package


def test_pyxis_was_built_against_this_hosts_slurm_headers(host):
    release = host.check_output("dpkg-query --show --showformat='${source:Upstream-Version}' "
                                "slurm-client")
    record = host.file("/usr/local/lib/slurm/.spank_pyxis.build").content_string
    assert f" slurm {release} libslurm-dev " in record


def test_enroot_keeps_data_cache_and_temporary_files_on_local_disk(host, cluster):
    settings = dict(line.split(None, 1) for line in host.file(CONF).content_string.splitlines()
                    if line.startswith("ENROOT_"))
    for name in ("ENROOT_DATA_PATH", "ENROOT_CACHE_PATH", "ENROOT_TEMP_PATH",
                 "ENROOT_RUNTIME_PATH"):
        parent = settings[name].split("$(")[0].rstrip("/")
        parent = parent.rsplit("/", 1)[0] if parent.endswith(("user-", "group-")) else parent
        assert not any(parent == p or parent.startswith(p + "/") for p in cluster.shared_paths), \
            (name, parent)
        fstype = host.check_output(f"findmnt --noheadings --output FSTYPE --target {parent}")
        assert fstype not in NETWORK_FILESYSTEMS, (name, parent, fstype)


def test_cluster_users_registry_credentials_are_theirs_and_0600(controller, cluster):
    if not cluster.var("registry_credentials_file"):
        pytest.skip("no registry credentials in this inventory")
    for user in cluster.var("metalslurm_users", []):
        creds = controller.file(f"/home/{user['name']}/.config/enroot/.credentials")
        assert (creds.user, creds.group, creds.mode) == (user["name"], user["name"], 0o600)
