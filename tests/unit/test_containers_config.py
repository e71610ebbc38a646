"""metalslurm:containers in the stack config (infra/containers_config.py): the settings
reach the inventory, bad ones are refused naming the key, the registry credentials file."""

from __future__ import annotations

import pytest
import yaml

from infra import containers_config as containers
from infra.config import ConfigError, parse_config

SHA = "a" * 64


def problems(**containers_config) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_config({"metalslurm:containers": containers_config})
    return exc.value.problems


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


