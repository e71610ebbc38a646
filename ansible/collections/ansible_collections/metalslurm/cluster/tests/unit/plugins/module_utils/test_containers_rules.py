"""The enroot_pyxis role's rules (module_utils/containers.py): where each artifact comes from,
pins, registry credentials as Enroot reads them, the plugstack.conf line, enroot.conf."""

from __future__ import annotations

import pytest
import yaml
from ansible_collections.metalslurm.cluster.plugins.module_utils import containers

from tests.paths import ROLES

ROLE_DEFAULTS = yaml.safe_load((ROLES / "enroot_pyxis/defaults/main.yml").read_text())
ARTIFACTS = ROLE_DEFAULTS["enroot_pyxis_artifacts"]
SHA = "a" * 64


def test_the_config_names_every_artifact_the_role_installs():
    assert sorted(containers.ARTIFACT_NAMES.values()) == sorted(ARTIFACTS)



def test_an_artifact_comes_from_its_override_else_the_mirror_else_upstream():
    sources = containers.artifact_sources(
        ARTIFACTS, {"pyxis": {"url": "https://mirror.example/p.tgz", "sha256": SHA}},
        "/srv/mirror/")
    by_name = {s["name"]: s for s in sources}
    assert by_name["pyxis"] == {"name": "pyxis", "file": "pyxis-0.24.0.tar.gz",
                                "location": "https://mirror.example/p.tgz", "remote": True,
                                "sha256": SHA}
    assert by_name["enroot"]["location"] == "/srv/mirror/enroot_4.1.2-1_amd64.deb"
    assert by_name["enroot"]["remote"] is False
    upstream = containers.artifact_sources(ARTIFACTS, {}, "")
    assert {s["location"] for s in upstream} == {a["url"] for a in ARTIFACTS.values()}



def test_an_unknown_artifact_override_is_refused():
    with pytest.raises(containers.ContainersError, match="unknown artifact.*enroot2"):
        containers.artifact_sources(ARTIFACTS, {"enroot2": {"sha256": SHA}}, "")



def test_unpinned_artifacts_are_named_in_a_warning_or_refused_when_pins_are_required():
    sources = containers.artifact_sources(ARTIFACTS, {"enroot": {"sha256": SHA}}, "")
    loose = containers.artifact_problems(sources, require_pinned=False)
    assert loose["problems"] == []
    assert [u.split()[0] for u in loose["unpinned"]] == ["enroot_caps", "pyxis"]
    strict = containers.artifact_problems(sources, require_pinned=True)
    assert len(strict["problems"]) == 2
    assert "artifacts.enrootCaps.sha256" in strict["problems"][0]



def test_a_credentials_entry_without_a_host_is_refused():
    found = containers.credentials_problems([{"login": "u", "password": "p"},
                                             {"host": "nvcr.io/nvidia", "login": "u",
                                              "password": "p"}])
    assert found[0].startswith("entry 1 has no host")
    assert "entry 2: host 'nvcr.io/nvidia' is not a registry host name" in found[1]



def test_credentials_become_netrc_lines():
    assert containers.netrc_block([{"host": "nvcr.io", "login": "$oauthtoken",
                                    "password": "k3y"}]) == \
        "machine nvcr.io login $oauthtoken password k3y"



def test_the_plugstack_line_writes_booleans_as_pyxis_reads_them():
    line = containers.plugstack_line("/usr/local/lib/slurm/spank_pyxis.so", {
        "runtime_path": "/run/pyxis", "container_scope": "global", "sbatch_support": True,
        "execute_entrypoint": "False"})
    assert line == ("required /usr/local/lib/slurm/spank_pyxis.so container_scope=global "
                    "execute_entrypoint=0 runtime_path=/run/pyxis sbatch_support=1")



def test_enroot_settings_are_sorted_and_a_null_removes_a_default():
    lines = containers.enroot_settings({"ENROOT_RESTRICT_DEV": True, "ENROOT_DATA_PATH": "/d"},
                                       {"ENROOT_DATA_PATH": None,
                                        "MELLANOX_VISIBLE_DEVICES": "all"})
    assert lines == ["ENROOT_RESTRICT_DEV yes", "MELLANOX_VISIBLE_DEVICES all"]
    with pytest.raises(containers.ContainersError, match="not one enroot.conf reads"):
        containers.enroot_settings({}, {"PATH": "/x"})



def test_a_missing_or_altered_local_artifact_is_named():
    sources = containers.artifact_sources(ARTIFACTS, {"pyxis": {"sha256": SHA}}, "/m")
    by_name = {s["name"]: s for s in sources}
    assert containers.local_artifact_problems([
        {"item": by_name["enroot"], "stat": {"exists": False}},
        {"item": by_name["pyxis"], "stat": {"exists": True, "isreg": True, "checksum": "b" * 64}},
        {"item": by_name["enroot_caps"], "stat": {"exists": True, "isreg": True, "checksum": "c"}},
    ]) == ["artifact enroot: /m/enroot_4.1.2-1_amd64.deb does not exist on this machine",
           f"artifact pyxis: /m/pyxis-0.24.0.tar.gz has sha256 {'b' * 64}, not the pinned {SHA}"]


SOURCES = [
    {"name": "enroot", "file": "enroot_4.1.2-1_amd64.deb", "remote": False, "sha256": "a" * 64},
    {"name": "enroot_caps", "file": "enroot+caps_4.1.2-1_amd64.deb", "remote": False,
     "sha256": ""},
    {"name": "pyxis", "file": "pyxis-0.24.0.tar.gz", "remote": True, "sha256": "c" * 64}]
LOCAL = [{"item": SOURCES[0], "stat": {"checksum": "a" * 64}},
         {"item": SOURCES[1], "stat": {"checksum": "b" * 64}}]
INSTALLED = {"enroot": [{"version": "4.1.2-1"}], "enroot+caps": [{"version": "4.1.2-1"}],
             "gcc": [{}], "make": [{}], "libc6-dev": [{}]}


def converged_probe() -> dict[str, str]:
    return {"artifact:enroot_4.1.2-1_amd64.deb": "a" * 64,
            "artifact:enroot+caps_4.1.2-1_amd64.deb": "b" * 64,
            "artifact:pyxis-0.24.0.tar.gz": "c" * 64,
            "slurm_client": "24.11.5-4", "slurm_release": "24.11.5", "libslurm_dev": "24.11.5-4",
            "headers": "24.11.5", "artifact_dir": "directory root:root 755",
            "pyxis_record": f"pyxis 0.24.0 sha256 {'c' * 64} slurm 24.11.5 libslurm-dev 24.11.5-4"}


def drift(probe: dict[str, str], installed: dict = INSTALLED) -> list[str]:
    return containers.install_drift(probe, SOURCES, LOCAL, installed, ["gcc", "make", "libc6-dev"],
                                    "0.24.0")


def test_a_converged_node_has_nothing_to_install():
    assert drift(converged_probe()) == []


@pytest.mark.parametrize(("change", "expected"), [
    ({"artifact:enroot_4.1.2-1_amd64.deb": "f" * 64}, "artifact enroot: the node's copy differs"),
    # An unpinned local artifact is compared with the copy kept on the Ansible machine.
    ({"artifact:enroot+caps_4.1.2-1_amd64.deb": "a" * 64},
     "artifact enroot_caps: the node's copy differs"),
    ({"artifact:pyxis-0.24.0.tar.gz": ""}, "artifact pyxis: the node's copy differs"),
    ({"libslurm_dev": "24.11.4-1"},
     "libslurm-dev 24.11.4-1, not the installed Slurm's 24.11.5-4"),
    ({"headers": "24.11.4"}, "Pyxis was not built from this node's Slurm and Pyxis source"),
    ({"pyxis_record": ""}, "Pyxis was not built from this node's Slurm and Pyxis source"),
    ({"slurm_client": ""}, "Pyxis was not built from this node's Slurm and Pyxis source"),
    ({"artifact_dir": "directory alice:alice 777"},
     "the artifact directory: directory alice:alice 777"),
    ({"artifact_dir": ""}, "the artifact directory: missing"),
], ids=["artifact", "unpinned-local", "remote-missing", "libslurm-dev", "headers", "record",
        "no-slurm", "artifact-dir-owner", "artifact-dir-missing"])
def test_each_difference_the_install_tasks_would_repair_is_named(change, expected):
    assert expected in drift({**converged_probe(), **change})


def test_enroot_packages_and_build_tools_are_compared_with_the_artifacts_version():
    installed = {**INSTALLED, "enroot+caps": [{"version": "3.5.0-1"}]}
    installed.pop("make")
    assert drift(converged_probe(), installed) == [
        "enroot+caps 3.5.0-1, not 4.1.2-1", "build tools missing: make"]
