"""The Debian 13 e2e lanes (tests/schedule.sh runs two at once): lane b's cluster is lane a's
under another name and network, so it shares lane a's prepared images and none of its
containers, networks or state; lane b's modules never name lane a's cluster."""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import re
import struct
import subprocess
from pathlib import Path

import pytest
import yaml

from infra.ops.local import stack_name
from infra.providers.prepared import builder_config
from infra.stack.config import load_stack_file
from tests.e2e import cluster as e2e
from tests.paths import REPO

SCHEDULE = REPO / "tests" / "schedule.sh"
DEBIAN13_MODULES = sorted(p.relative_to(REPO).as_posix()
                          for p in (REPO / "tests" / "e2e").glob("test_*.py")
                          if p.name != "test_local_cluster_debian12.py")


def lane_b_modules() -> list[str]:
    """LANE_B as the script sets it (bash prints the array it builds)."""
    text = SCHEDULE.read_text()
    assignment = re.search(r"^LANE_B=\((.*?)\)$", text, re.M | re.S)
    assert assignment, "tests/schedule.sh sets LANE_B=(...)"
    script = f"{assignment.group(0)}\nprintf '%s\\n' \"${{LANE_B[@]}}\""
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                         check=True).stdout
    return out.split()


@pytest.fixture
def lanes(tmp_path, monkeypatch):
    """Both lanes' stack files as e2e_stack writes them, into tmp_path (not the checkout)."""
    monkeypatch.setattr(e2e, "REPO", tmp_path)
    monkeypatch.setattr(e2e, "user_key", lambda name: _key(tmp_path, name))
    return {lane: e2e.e2e_stack(e2e.DEBIAN13_STACK, lane) for lane in e2e.DEBIAN13_LANES}


def _key(root: Path, name: str) -> Path:
    """A well-formed ed25519 public key (its 32 bytes from the name), without ssh-keygen."""
    key = root / "keys" / name
    key.parent.mkdir(exist_ok=True)
    blob = b"".join(struct.pack(">I", len(part)) + part
                    for part in (b"ssh-ed25519", hashlib.sha256(name.encode()).digest()))
    key.with_suffix(".pub").write_text(
        f"ssh-ed25519 {base64.b64encode(blob).decode()} {name}@e2e\n")
    return key


def test_every_lane_b_module_is_a_debian13_module_once():
    modules = lane_b_modules()
    assert modules, "lane b runs some modules"
    assert len(set(modules)) == len(modules)
    assert set(modules) <= set(DEBIAN13_MODULES), set(modules) - set(DEBIAN13_MODULES)
    assert set(modules) != set(DEBIAN13_MODULES), "lane a keeps some modules"


def test_lane_b_modules_never_name_lane_a_s_cluster(lanes):
    config = yaml.safe_load(lanes["a"].read_text())["config"]
    name = config["metalslurm:clusterName"]
    network = ipaddress.ip_network(config["metalslurm:privateCidr"])
    prefix = str(network.network_address).rsplit(".", 1)[0] + "."
    for module in lane_b_modules():
        text = (REPO / module).read_text()
        assert prefix not in text and name + "-" not in text and f"({name})" not in text, (
            f"{module} names lane a's cluster ({name}, {network}): read the address from the "
            "cluster (LocalStack.address), or keep the module in lane a")


def test_the_lanes_share_images_and_nothing_else(lanes):
    raw = {lane: yaml.safe_load(path.read_text())["config"] for lane, path in lanes.items()}
    configs = {lane: load_stack_file(lanes[lane]) for lane in lanes}
    assert builder_config(raw["a"], lanes["a"].parent) == builder_config(raw["b"],
                                                                         lanes["b"].parent)
    assert configs["a"].cluster_name != configs["b"].cluster_name
    networks = [configs[lane].private_cidr for lane in lanes]
    assert not networks[0].overlaps(networks[1])
    assert stack_name(lanes["a"]) != stack_name(lanes["b"])
    # Apart from the name and the network the stack is the same: every module's
    # expectations hold in either lane.
    for lane in raw.values():
        lane.pop("metalslurm:clusterName")
        lane.pop("metalslurm:privateCidr")
    assert raw["a"] == raw["b"]


def test_a_lane_that_does_not_exist_is_refused(monkeypatch):
    monkeypatch.setenv("METALSLURM_E2E_LANE", "c")
    with pytest.raises(SystemExit, match="METALSLURM_E2E_LANE='c': use one of a, b"):
        e2e.debian13_lane()
