"""Bad stack configs stop the Pulumi program before any resource is registered.

Each case runs the real program under mocks and checks that the config error names the
key to change and that the mock engine saw no resource at all.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from infra.stack.config import ConfigError
from tests.pulumi.mocks import RecordingMocks, example, run_program

Config = dict[str, Any]


def byo_host(cfg: Config, name: str) -> dict[str, Any]:
    return next(h for h in cfg["metalslurm:byo"]["hosts"] if h["name"] == name)


def _set(key: str, value: Any) -> Callable[[Config], None]:
    def change(cfg: Config) -> None:
        cfg[key] = value
    return change


def _oci(name: str, value: Any) -> Callable[[Config], None]:
    def change(cfg: Config) -> None:
        cfg["metalslurm:oci"][name] = value
    return change


def _pool(name: str, value: Any) -> Callable[[Config], None]:
    def change(cfg: Config) -> None:
        cfg["metalslurm:computePools"][0][name] = value
    return change


def _host(host: str, name: str, value: Any) -> Callable[[Config], None]:
    def change(cfg: Config) -> None:
        if value is None:
            byo_host(cfg, host).pop(name, None)
        else:
            byo_host(cfg, host)[name] = value
    return change


def _second_controller(cfg: Config) -> None:
    byo_host(cfg, "nfs")["role"] = "controller"


def _no_controller(cfg: Config) -> None:
    byo_host(cfg, "ctl")["role"] = "compute"
    byo_host(cfg, "ctl")["pool"] = "gpu"


def _duplicate_name(cfg: Config) -> None:
    byo_host(cfg, "gpu-003")["name"] = "gpu-002"


def _no_credentials(cfg: Config) -> None:
    cfg.pop("metalslurm:bmcCredentials")


def _no_ssh_key(cfg: Config) -> None:
    cfg.pop("metalslurm:sshPrivateKey")


def _plain_secret(cfg: Config) -> None:
    cfg["metalslurm:sshPrivateKey"] = "-----BEGIN OPENSSH PRIVATE KEY-----"


def _extra_host(cfg: Config) -> None:
    cfg["metalslurm:byo"]["hosts"].append({"name": "gpu-009", "pool": "gpu",
                                           "address": "10.20.0.29"})


CASES: list[tuple[str, str, Callable[[Config], None], str]] = [
    ("oci", "VCN does not contain the private subnet", _oci("vcnCidr", "10.50.0.0/16"),
     "metalslurm:oci.vcnCidr"),
    ("oci", "invalid VCN CIDR", _oci("vcnCidr", "10.40.0.1/16"), "metalslurm:oci.vcnCidr"),
    ("oci", "bastion subnet overlaps the private subnet",
     _oci("bastionSubnetCidr", "10.40.1.0/28"), "metalslurm:oci.bastionSubnetCidr"),
    ("oci", "bastion subnet outside the VCN", _oci("bastionSubnetCidr", "10.41.0.0/28"),
     "metalslurm:oci.bastionSubnetCidr"),
    ("oci", "admin CIDR is the whole internet", _oci("adminCidr", "0.0.0.0/0"),
     "metalslurm:oci.adminCidr"),
    ("oci", "admin CIDR not a network", _oci("adminCidr", "my office"),
     "metalslurm:oci.adminCidr"),
    ("oci", "GPU count the shape does not have", _pool("gpuCount", 4),
     "metalslurm:computePools[0].gpuCount"),
    ("oci", "unknown shape", _pool("shape", "BM.GPU.X1.8"), "metalslurm:computePools[0].shape"),
    ("oci", "bad compartment OCID", _oci("compartmentId", "my-compartment"),
     "metalslurm:oci.compartmentId"),
    ("oci", "oci without the SSH private key", _no_ssh_key, "metalslurm:sshPrivateKey"),
    ("oci", "SuspendTime below the boot time", _set("metalslurm:elastic", {"suspendTime": 300}),
     "metalslurm:elastic.suspendTime"),
    ("oci", "unknown elastic mode", _oci("elasticMode", "hibernate"),
     "metalslurm:oci.elasticMode"),
    ("byo", "two controllers", _second_controller, "metalslurm:byo.hosts"),
    ("byo", "no controller", _no_controller, "metalslurm:byo.hosts"),
    ("byo", "duplicate host names", _duplicate_name, "metalslurm:byo.hosts"),
    ("byo", "duplicate addresses", _host("gpu-002", "address", "10.20.0.21"),
     "metalslurm:byo.hosts"),
    ("byo", "host outside the private network", _host("gpu-001", "address", "10.30.0.5"),
     "metalslurm:byo.hosts[2].address"),
    ("byo", "elastic host without a power driver", _host("gpu-004", "bmc", None),
     "metalslurm:byo.hosts[5].bmc"),
    ("byo", "BMCs without credentials", _no_credentials, "metalslurm:bmcCredentials"),
    ("byo", "secret in plain text", _plain_secret, "metalslurm:sshPrivateKey"),
    ("byo", "unknown GPU type on a host", _host("gpu-001", "gpuType", "v100"),
     "metalslurm:byo.hosts[2].gpuType"),
    ("byo", "host GPU count differs from its pool", _host("gpu-001", "gpuCount", 4),
     "metalslurm:byo.hosts[2].gpuCount"),
    ("byo", "count does not match the hosts", _extra_host,
     "metalslurm:computePools[0].count"),
    ("byo", "compute host with a public address", _host("gpu-001", "publicAddress", "1.2.3.4"),
     "metalslurm:byo.hosts[2].publicAddress"),
    ("byo", "bad redfish endpoint", _host("gpu-001", "bmc", {"driver": "redfish",
                                                             "endpoint": "10.20.1.21"}),
     "metalslurm:byo.hosts[2].bmc.endpoint"),
    ("byo", "negative elastic count", _pool("elasticCount", -1),
     "metalslurm:computePools[0].elasticCount"),
    ("local", "unknown GPU type", _pool("gpuType", "v100"), "metalslurm:computePools[0].gpuType"),
    ("local", "unknown provider", _set("metalslurm:provider", "aws"), "metalslurm:provider"),
    ("local", "byo settings on a local stack", _set("metalslurm:byo", {"hosts": []}),
     "metalslurm:byo"),
]


@pytest.mark.parametrize(("provider", "what", "change", "key"), CASES,
                         ids=[c[1] for c in CASES])
def test_bad_config_fails_before_any_resource(provider, what, change, key, monkeypatch):
    plain, secrets = example(provider)
    cfg = copy.deepcopy({**plain, **{k: {"secure": "v1:x"} for k in secrets}})
    change(cfg)
    plain = {k: v for k, v in cfg.items() if not (isinstance(v, dict) and "secure" in v)}
    secrets = {k: "opaque" for k in cfg if k not in plain}
    seen: list[RecordingMocks] = []
    original = RecordingMocks.__init__

    def record(self):
        original(self)
        seen.append(self)

    monkeypatch.setattr(RecordingMocks, "__init__", record)
    with pytest.raises(ConfigError) as err:
        run_program(plain, secrets)
    assert any(p.startswith(key) for p in err.value.problems), (
        f"{what}: no problem names {key}: {err.value.problems}")
    assert seen and seen[0].resources == [], f"{what}: resources were registered"


def test_there_are_at_least_twenty_distinct_cases():
    assert len({c[1] for c in CASES}) >= 20
