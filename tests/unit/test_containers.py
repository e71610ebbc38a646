"""metalslurm:containers and the rules the enroot_pyxis role applies (infra/containers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from infra import containers
from infra.config import ConfigError, parse_config

REPO = Path(__file__).resolve().parents[2]
ROLE_DEFAULTS = yaml.safe_load((REPO / "roles/enroot_pyxis/defaults/main.yml").read_text())
ARTIFACTS = ROLE_DEFAULTS["enroot_pyxis_artifacts"]
SHA = "a" * 64


def problems(**containers_config) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_config({"metalslurm:containers": containers_config})
    return exc.value.problems


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


def test_the_stack_config_reaches_the_inventory(tmp_path):
    cfg = parse_config({"metalslurm:containers": {
        "mirror": "vendor", "pinnedOnly": True,
        "artifacts": {n: {"sha256": SHA} for n in containers.ARTIFACT_NAMES},
        "pyxis": {"containerScope": "job"}}}, base_dir=tmp_path)
    inv = cfg.containers.inventory_vars()
    assert inv["mirror"] == str(tmp_path / "vendor")
    assert inv["require_pinned"] is True
    assert inv["artifacts"]["enroot_caps"] == {"sha256": SHA}
    assert inv["pyxis"] == {"container_scope": "job"}


@pytest.mark.parametrize(("config", "expected"), [
    ({"pinnedOnly": True}, "containers.artifacts.enroot.sha256: is not given, and pinnedOnly"),
    ({"artifacts": {"pyxis": {"sha256": "abc"}}}, "containers.artifacts.pyxis.sha256: 'abc' is "
     "not a sha256"),
    ({"storageDir": "/shared/enroot"}, "containers.storageDir: /shared/enroot is on shared "
     "storage (/shared)"),
    ({"cacheDir": "/home/cache"}, "containers.cacheDir: /home/cache is on shared storage"),
    ({"pyxis": {"containerScope": "step"}}, "containers.pyxis.containerScope: 'step' is not one"),
    ({"runSize": "lots"}, "containers.runSize: 'lots' is not valid"),
    ({"mirror": "ftp://x"}, "containers.mirror: 'ftp://x' is neither an http(s) URL nor a path"),
    ({"artifacts": {"enroot2": {}}}, "containers.artifacts.enroot2: unknown key"),
])
def test_bad_container_settings_are_refused_naming_the_key(config, expected):
    assert any(expected in p for p in problems(**config)), problems(**config)


def test_a_credentials_file_others_can_read_or_without_hosts_is_refused(tmp_path):
    creds = tmp_path / "creds.yaml"
    creds.write_text(yaml.safe_dump([{"login": "u", "password": "p"}]))
    creds.chmod(0o644)
    found = problems(credentialsFile=str(creds))
    assert any("is readable by other users (mode 644); run 'chmod 600" in p for p in found)
    assert any("entry 1 has no host" in p for p in found)


def test_the_secret_and_the_file_are_not_both_given(tmp_path):
    creds = tmp_path / "creds.yaml"
    creds.write_text(yaml.safe_dump([{"host": "nvcr.io", "login": "u", "password": "p"}]))
    creds.chmod(0o600)
    with pytest.raises(ConfigError, match="registryCredentials: and .*credentialsFile are both"):
        parse_config({"metalslurm:containers": {"credentialsFile": str(creds)},
                      "metalslurm:registryCredentials": {"secure": "v1:abc"}})


def test_the_secret_file_refuses_an_entry_without_a_host():
    with pytest.raises(containers.ContainersError, match="entry 1 has no host"):
        containers.checked_credentials('[{"login": "u", "password": "p"}]')


def test_a_missing_or_altered_local_artifact_is_named():
    sources = containers.artifact_sources(ARTIFACTS, {"pyxis": {"sha256": SHA}}, "/m")
    by_name = {s["name"]: s for s in sources}
    assert containers.local_artifact_problems([
        {"item": by_name["enroot"], "stat": {"exists": False}},
        {"item": by_name["pyxis"], "stat": {"exists": True, "isreg": True, "checksum": "b" * 64}},
        {"item": by_name["enroot_caps"], "stat": {"exists": True, "isreg": True, "checksum": "c"}},
    ]) == ["artifact enroot: /m/enroot_4.1.2-1_amd64.deb does not exist on this machine",
           f"artifact pyxis: /m/pyxis-0.24.0.tar.gz has sha256 {'b' * 64}, not the pinned {SHA}"]
