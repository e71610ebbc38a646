"""metalslurm:containers in the stack config (infra/stack/containers.py): the settings
reach the inventory, bad ones are refused naming the key, the registry credentials file."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest
import yaml

from infra.stack import containers
from infra.stack.config import ConfigError, parse_config

SHA = "a" * 64


def problems(**containers_config) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_config({"metalslurm:containers": containers_config})
    return exc.value.problems


def test_the_stack_config_reaches_the_inventory(tmp_path):
    cfg = parse_config({"metalslurm:containers": {
        "mirror": "vendor", "pinnedOnly": True,
        "artifacts": {n: {"sha256": SHA} for n in containers.ARTIFACT_NAMES},
        "pyxis": {"containerScope": "job"}}}, base_dir=tmp_path, check_artifacts=False)
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




# ---- the artifacts kept on this machine: checked before anything is built ----------------

FILES = {"enroot": "enroot_4.1.2-1_amd64.deb", "enrootCaps": "enroot+caps_4.1.2-1_amd64.deb",
         "pyxis": "pyxis-0.24.0.tar.gz"}
WITHOUT_MIRROR = ("or remove mirror to download from upstream, pinned by upstream's own sha256 "
                  "(docs/how-to/containers.md has the stanza)")


def make_mirror(root: Path, skip: tuple[str, ...] = ()) -> dict[str, dict[str, str]]:
    """A mirror directory holding stand-in artifacts (a few bytes each) under the role's
    file names; their pins as the stack config writes them."""
    root.mkdir(parents=True, exist_ok=True)
    pins = {}
    for name, file in FILES.items():
        content = f"stand-in for {file}\n".encode()
        if name not in skip:
            (root / file).write_bytes(content)
        pins[name] = {"sha256": hashlib.sha256(content).hexdigest()}
    return pins


def mirror_problems(tmp_path: Path, **containers_config) -> list[str]:
    try:
        parse_config({"metalslurm:containers": containers_config}, base_dir=tmp_path)
    except ConfigError as exc:
        return exc.problems
    return []


def test_the_role_defaults_name_the_artifact_files_checked_here():
    assert {containers.ARTIFACT_NAMES[n]: f for n, f in FILES.items()} == {
        name: spec["file"] for name, spec in containers.role_artifacts().items()}


def test_a_complete_pinned_mirror_is_accepted(tmp_path):
    pins = make_mirror(tmp_path / "vendor")
    assert mirror_problems(tmp_path, mirror="vendor", pinnedOnly=True, artifacts=pins) == []


def test_a_mirror_directory_that_does_not_exist_is_refused_naming_its_files(tmp_path):
    assert mirror_problems(tmp_path, mirror="../shared/vendor") == [
        f"metalslurm:containers.mirror: {tmp_path.parent / 'shared/vendor'} does not exist on "
        "this machine; it should hold enroot_4.1.2-1_amd64.deb, enroot+caps_4.1.2-1_amd64.deb "
        "and pyxis-0.24.0.tar.gz: put them there, point mirror at a directory that has them, "
        + WITHOUT_MIRROR]


def test_a_mirror_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "vendor").write_text("")
    assert any(f"{tmp_path / 'vendor'} is not a directory;" in p
               for p in mirror_problems(tmp_path, mirror="vendor"))


def test_a_mirror_without_one_artifact_names_the_file_and_the_fix(tmp_path):
    pins = make_mirror(tmp_path / "vendor", skip=("enroot",))
    assert mirror_problems(tmp_path, mirror="vendor", artifacts=pins) == [
        f"metalslurm:containers.mirror: {tmp_path / 'vendor'} has no enroot_4.1.2-1_amd64.deb "
        "(the enroot artifact): put enroot_4.1.2-1_amd64.deb there, point mirror at a "
        "directory that has it, " + WITHOUT_MIRROR]


def test_a_mirror_file_whose_sha256_differs_from_its_pin_is_refused(tmp_path):
    pins = make_mirror(tmp_path / "vendor")
    (tmp_path / "vendor" / FILES["pyxis"]).write_bytes(b"altered")
    altered = hashlib.sha256(b"altered").hexdigest()
    assert mirror_problems(tmp_path, mirror="vendor", artifacts=pins) == [
        f"metalslurm:containers.artifacts.pyxis.sha256: {tmp_path / 'vendor'}/"
        f"pyxis-0.24.0.tar.gz has sha256 {altered}, not the pinned {pins['pyxis']['sha256']}: "
        "put the pinned file there, or correct the pin"]


def test_an_unpinned_mirror_file_only_has_to_exist(tmp_path):
    make_mirror(tmp_path / "vendor")
    assert mirror_problems(tmp_path, mirror="vendor") == []


def test_an_artifact_with_its_own_url_is_not_looked_for_in_the_mirror(tmp_path):
    pins = make_mirror(tmp_path / "vendor", skip=("pyxis",))
    pins["pyxis"] = {"url": "https://mirror.example/pyxis.tgz", "sha256": "b" * 64}
    assert mirror_problems(tmp_path, mirror="vendor", artifacts=pins) == []


def test_an_artifact_path_that_does_not_exist_is_refused_naming_its_key(tmp_path):
    problems = mirror_problems(tmp_path, artifacts={"pyxis": {"url": "pyxis.tgz"}})
    assert problems == [f"metalslurm:containers.artifacts.pyxis.url: {tmp_path}/pyxis.tgz does "
                        "not exist on this machine: put the file there, or give its path or "
                        "http(s) URL"]


@pytest.mark.parametrize("config", [
    {"mirror": "https://mirror.example/vendor"},  # a URL mirror cannot be checked offline
    {"mirror": "missing", "enabled": False},  # no containers: no artifacts
    {},  # upstream URLs
])
def test_what_cannot_or_need_not_be_checked_here_is_left_alone(tmp_path, config):
    assert mirror_problems(tmp_path, **config) == []


def test_commands_that_need_no_artifacts_can_leave_the_check_off(tmp_path):
    cfg = parse_config({"metalslurm:containers": {"mirror": "missing"}}, base_dir=tmp_path,
                       check_artifacts=False)
    assert cfg.containers.mirror == str(tmp_path / "missing")


def test_hashing_a_mirror_of_a_few_megabytes_is_cheap(tmp_path):
    """The pins are checked on every parse: 3 x 4 MB (more than the real artifacts) hash
    in well under a second."""
    (tmp_path / "vendor").mkdir()
    pins = {}
    for name, file in FILES.items():
        data = name.encode() * (4 * 2**20 // len(name))
        (tmp_path / "vendor" / file).write_bytes(data)
        pins[name] = {"sha256": hashlib.sha256(data).hexdigest()}
    start = time.perf_counter()
    assert mirror_problems(tmp_path, mirror="vendor", artifacts=pins) == []
    assert time.perf_counter() - start < 1.0
