"""The NFS roles' exports, nfsd settings and mount units, rendered by Ansible itself from
the roles' own templates, defaults and vars (no NFS needed: these machines' kernel has none,
so the roles run for real only where the kernel has NFS; see docs/testing.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"


def render(tmp_path: Path, host_vars: dict, templates: list[tuple[str, str]],
           extra_tasks: list | None = None) -> subprocess.CompletedProcess[str]:
    """Run a one-host play (connection local) that renders role templates into tmp_path."""
    inventory = {"all": {
        "vars": {"metalslurm_cluster_name": "lab", "metalslurm_private_cidr": "10.77.0.0/24",
                 "metalslurm_shared_paths": ["/home", "/shared", "/data/ckpt-1"],
                 "ansible_connection": "local",
                 "ansible_python_interpreter": sys.executable},
        "hosts": {"nfs": {"metalslurm_address": "10.77.0.254"},
                  "gpu-001": {"metalslurm_address": "10.77.0.11", **host_vars}},
        "children": {"nfs_server": {"hosts": {"nfs": None}},
                     "slurm_compute": {"hosts": {"gpu-001": None}}}}}
    tasks = list(extra_tasks or [])
    for src, dest in templates:
        tasks.append({"name": f"render {src}", "ansible.builtin.template": {
            "src": str(ROLES / src), "dest": str(tmp_path / dest), "mode": "0644"}})
    play = [{"hosts": "gpu-001", "gather_facts": False,
             "vars_files": [str(ROLES / f) for f in (
                 "nfs_server/defaults/main.yml", "nfs_client/defaults/main.yml",
                 "nfs_client/vars/main.yml")],
             "tasks": tasks}]
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible/ansible.cfg"),
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", ANSIBLE_NOCOLOR="1")
    return subprocess.run(["ansible-playbook", "-i", str(tmp_path / "inventory.yml"),
                           str(tmp_path / "play.yml")], capture_output=True, text=True,
                          env=env, check=False, timeout=120)


def body(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line and not line.startswith("#")]


def test_exports_are_for_the_private_network_only(tmp_path):
    proc = render(tmp_path, {"ansible_processor_vcpus": 2},
                  [("nfs_server/templates/etc/exports.d/metalslurm.exports.j2", "exports")])
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert body(tmp_path / "exports") == [
        f"{path} 10.77.0.0/24(rw,sync,no_subtree_check,root_squash,sec=sys)"
        for path in ("/home", "/shared", "/data/ckpt-1")]


@pytest.mark.parametrize(("vcpus", "threads"), [(2, 16), (16, 64), (96, 128)])
def test_nfsd_threads_scale_with_the_server_and_v3_is_off(tmp_path, vcpus, threads):
    proc = render(tmp_path, {"ansible_processor_vcpus": vcpus},
                  [("nfs_server/templates/etc/nfs.conf.d/metalslurm.conf.j2", "nfs.conf")])
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert body(tmp_path / "nfs.conf") == [
        "[nfsd]", f"threads={threads}", "vers3=n", "vers4=y", "vers4.1=y", "vers4.2=y"]


@pytest.mark.parametrize(("kernel", "nconnect"), [("6.1.0-40-amd64", ",nconnect=8"),
                                                  ("4.19.0-27-amd64", "")])
def test_mount_unit_waits_for_the_network_and_mounts_hard(tmp_path, kernel, nconnect):
    proc = render(tmp_path, {"ansible_kernel": kernel, "item": "/data/ckpt-1"},
                  [("nfs_client/templates/etc/systemd/system/nfs.mount.j2", "unit")],
                  extra_tasks=[{"name": "unit name", "ansible.builtin.copy": {
                      "content": "{{ '/data/ckpt-1' | metalslurm.cluster.mount_unit }}",
                      "dest": str(tmp_path / "unit-name"), "mode": "0644"}}])
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert (tmp_path / "unit-name").read_text() == "data-ckpt\\x2d1.mount"
    assert body(tmp_path / "unit") == [
        "[Unit]", "Description=Shared /data/ckpt-1 of cluster lab from nfs",
        "Documentation=man:nfs(5)", "Wants=network-online.target", "After=network-online.target",
        "[Mount]", "What=10.77.0.254:/data/ckpt-1", "Where=/data/ckpt-1", "Type=nfs4",
        f"Options=hard,proto=tcp,vers=4.2,noatime,timeo=600,retrans=2,_netdev{nconnect}",
        "TimeoutSec=900", "[Install]", "WantedBy=remote-fs.target"]
