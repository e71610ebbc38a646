"""The playbook's first play stops a bad inventory before any host is contacted.

The hosts point at 127.0.0.1 port 1: had validation let the run through, the next play
would report them UNREACHABLE instead of failing with the validation message.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def host(address):
    return {"ansible_host": "127.0.0.1", "ansible_port": 1, "metalslurm_address": address}


def inventory(controllers=("ctl",), compute=None, hosts=None):
    compute = compute if compute is not None else {"gpu-001": {"metalslurm_gpu_count": 8,
                                                               "metalslurm_gpu_type": "h100"}}
    all_hosts = hosts or {}
    for i, name in enumerate(controllers):
        all_hosts.setdefault(name, host(f"10.77.0.{10 + i}"))
    for i, (name, hv) in enumerate(compute.items()):
        all_hosts.setdefault(name, dict(host(f"10.77.0.{20 + i}"), **hv))
    return {"all": {
        "vars": {"metalslurm_cluster_name": "t", "metalslurm_private_cidr": "10.77.0.0/24",
                 "metalslurm_partitions": [{"name": "gpu", "nodes": list(compute),
                                            "default": True}]},
        "hosts": all_hosts,
        "children": {"slurm_controller": {"hosts": {c: None for c in controllers}},
                     "slurm_compute": {"hosts": {c: None for c in compute}}}}}


def run_playbook(tmp_path, inv):
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inv))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible/ansible.cfg"),
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", ANSIBLE_NOCOLOR="1")
    return subprocess.run(["ansible-playbook", "-i", str(path), str(REPO / "ansible/site.yml")],
                          capture_output=True, text=True, env=env, check=False, timeout=120)


@pytest.mark.parametrize(("inv", "message"), [
    (inventory(controllers=()), "group slurm_controller is empty"),
    (inventory(controllers=("ctl", "ctl2")), "slurm_controller has 2 hosts (ctl, ctl2)"),
    (inventory(compute={"gpu-001": {"metalslurm_gpu_count": 8}}),
     "has 8 GPUs but no metalslurm_gpu_type"),
    (inventory(compute={"gpu-001": {"metalslurm_gpu_type": "h100"}}),
     "no metalslurm_gpu_count"),
    (inventory(compute={"gpu_001": {}}), "host 'gpu_001': Slurm and DNS reject this name"),
    (inventory(compute={"gpu-001": {}, "GPU-001": {}}), "differ only in case"),
], ids=["no-controller", "two-controllers", "gpu-without-type", "gpu-without-count",
        "bad-node-name", "duplicate-host-names"])
def test_bad_inventory_stops_before_any_host(tmp_path, inv, message):
    proc = run_playbook(tmp_path, inv)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert message in out, out[-2000:]
    assert "UNREACHABLE" not in out
    assert "Prepare every node" not in out
