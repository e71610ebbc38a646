"""The nccl_ib role's configure step, run by Ansible itself against recorded-shape sysfs
trees (tests/fixtures/sysfs): the facts module, the derivation and the two files, as a node
of each shape would get them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.paths import REPO

SYSFS = REPO / "tests" / "fixtures" / "sysfs"
DGX_HCA = "=mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_9:1,mlx5_10:1,mlx5_11:1"


def configure(tmp_path: Path, tree: str, **extra: object) -> subprocess.CompletedProcess[str]:
    play = [{"hosts": "localhost", "gather_facts": False,
             "vars": {"ansible_python_interpreter": sys.executable,
                      "nccl_ib_sysfs_root": str(SYSFS / tree),
                      "nccl_ib_socket_ifname": "bond0",
                      "nccl_ib_conf_path": str(tmp_path / "nccl.conf"),
                      "nccl_ib_env_path": str(tmp_path / "nccl.env")},
             "tasks": [{"name": step, "ansible.builtin.include_role": {
                 "name": "nccl_ib", "tasks_from": f"{step}.yml"}}
                 for step in ("facts", "configure")]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    (tmp_path / "vars.json").write_text(json.dumps(extra))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"),
           "ANSIBLE_ROLES_PATH": str(REPO / "roles")}
    cmd = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", "-c",
           "local", str(tmp_path / "play.yml"), "-e", f"@{tmp_path / 'vars.json'}"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)


def settings(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if not line.startswith("#")]


def test_a_dgx_h100_gets_its_eight_compute_ports_exactly(tmp_path):
    proc = configure(tmp_path, "dgx-h100")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert settings(tmp_path / "nccl.conf") == [f"NCCL_IB_HCA={DGX_HCA}",
                                                "NCCL_SOCKET_IFNAME==bond0"]
    assert settings(tmp_path / "nccl.env") == [f"export NCCL_IB_HCA={DGX_HCA}",
                                               "export NCCL_SOCKET_IFNAME==bond0"]


def test_a_roce_node_gets_the_gid_index_and_the_gpudirect_path_its_gpu_stack_offers(tmp_path):
    # metalslurm_node.gpudirect: what the nvidia_gpu role publishes (the node facts contract)
    proc = configure(tmp_path, "roce-8x400", metalslurm_node={"gpudirect": "dmabuf"})
    assert proc.returncode == 0, proc.stdout[-3000:]
    lines = settings(tmp_path / "nccl.conf")
    assert "NCCL_IB_GID_INDEX=3" in lines
    assert {"NCCL_DMABUF_ENABLE=1", "NCCL_NET_GDR_READ=1"} <= set(lines)


def test_an_ethernet_only_node_gets_the_socket_interface_alone(tmp_path):
    proc = configure(tmp_path, "ethernet-only")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert settings(tmp_path / "nccl.conf") == ["NCCL_SOCKET_IFNAME==bond0"]


@pytest.mark.parametrize(("override", "message"), [
    ({"NCCL_IB_HCAS": "=mlx5_0:1"}, "Nothing was changed: localhost: override NCCL_IB_HCAS is "
     "not a variable NCCL reads"),
    ({"NCCL_IB_HCA": "=mlx5_12:1"}, "localhost: NCCL_IB_HCA override names mlx5_12, which this "
     "node does not have (it has mlx5_0, mlx5_1, mlx5_2, mlx5_3, mlx5_4, mlx5_5, mlx5_6, "
     "mlx5_7, mlx5_8, mlx5_9, mlx5_10, mlx5_11)"),
])
def test_a_bad_override_writes_nothing(tmp_path, override, message):
    proc = configure(tmp_path, "dgx-h100", nccl_ib_settings=override)
    assert proc.returncode != 0
    assert message in proc.stdout, proc.stdout[-3000:]
    assert not (tmp_path / "nccl.conf").exists()
