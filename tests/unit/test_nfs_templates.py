"""The NFS roles' exports, nfsd settings and mount units, rendered by Ansible itself from
the roles' own templates, defaults and vars (no NFS needed: these machines' kernel has none,
so the roles run for real only where the kernel has NFS; see docs/reference/testing.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.facts import set_facts_task

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"


# One host per case, all rendered by one Ansible run (a run costs seconds; a host, little):
# host -> its facts, and the templates it renders (role template, file name).
EXPORTS = ("nfs_server/templates/etc/exports.d/metalslurm.exports.j2", "exports")
NFS_CONF = ("nfs_server/templates/etc/nfs.conf.d/metalslurm.conf.j2", "nfs.conf")
MOUNT = ("nfs_client/templates/etc/systemd/system/nfs.mount.j2", "unit")
THREADS = [(2, 16), (16, 64), (96, 128)]
KERNELS = [("6.1.0-40-amd64", ",nconnect=8"), ("4.19.0-27-amd64", "")]
# host -> its facts (ansible_facts.processor_vcpus and .kernel), and the templates it renders.
CASES: dict[str, tuple[dict, list[tuple[str, str]]]] = {
    "exports": ({"processor_vcpus": 2, "kernel": KERNELS[0][0]}, [EXPORTS]),
    **{f"vcpus-{vcpus}": ({"processor_vcpus": vcpus, "kernel": KERNELS[0][0]}, [NFS_CONF])
       for vcpus, _threads in THREADS},
    **{f"kernel-{kernel}": ({"processor_vcpus": 2, "kernel": kernel}, [MOUNT])
       for kernel, _nconnect in KERNELS},
}


# The roles' defaults and vars the plays read, as site.yml gives them.
VARS_FILES = [str(ROLES / f) for f in ("nfs_server/defaults/main.yml",
                                       "nfs_client/defaults/main.yml", "nfs_client/vars/main.yml")]


def run_play(out: Path, inventory: dict, play: list) -> None:
    """ansible-playbook (connection local) running ``play`` over ``inventory`` in ``out``."""
    (out / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (out / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible/ansible.cfg"),
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(["ansible-playbook", "-i", str(out / "inventory.yml"),
                           str(out / "play.yml")], capture_output=True, text=True,
                          env=env, check=False, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Each case's files, under <out>/<case>/, from one play (connection local) over one
    host per case, each a compute node of the same cluster."""
    out = tmp_path_factory.mktemp("nfs")
    inventory = {"all": {
        "vars": {"metalslurm_cluster_name": "lab", "metalslurm_private_cidr": "10.77.0.0/24",
                 "metalslurm_shared_paths": ["/home", "/shared", "/data/ckpt-1"],
                 "ansible_connection": "local",
                 "ansible_python_interpreter": sys.executable},
        "hosts": {"nfs": {"metalslurm_address": "10.77.0.254"},
                  **{case: {"metalslurm_address": f"10.77.0.{11 + i}", "item": "/data/ckpt-1",
                            "test_node_facts": facts}
                     for i, (case, (facts, _t)) in enumerate(CASES.items())}},
        "children": {"nfs_server": {"hosts": {"nfs": None}},
                     "slurm_compute": {"hosts": dict.fromkeys(CASES)}}}}
    for case in CASES:
        (out / case).mkdir()
    tasks = [set_facts_task(["processor_vcpus", "kernel"])]
    for template in (EXPORTS, NFS_CONF, MOUNT):
        hosts = [case for case, (_facts, templates) in CASES.items() if template in templates]
        tasks.append({"name": f"render {template[0]}", "ansible.builtin.template": {
            "src": str(ROLES / template[0]),
            "dest": f"{out}/{{{{ inventory_hostname }}}}/{template[1]}", "mode": "0644"},
            "when": f"inventory_hostname in {hosts}"})
    tasks.append({"name": "unit name", "ansible.builtin.copy": {
        "content": "{{ '/data/ckpt-1' | metalslurm.cluster.mount_unit }}",
        "dest": f"{out}/{{{{ inventory_hostname }}}}/unit-name", "mode": "0644"},
        "when": "inventory_hostname.startswith('kernel-')"})
    play = [{"hosts": "slurm_compute", "gather_facts": False,
             "vars_files": VARS_FILES,
             "tasks": tasks}]
    run_play(out, inventory, play)
    return out


def body(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line and not line.startswith("#")]


def test_exports_are_for_the_private_network_only(rendered):
    assert body(rendered / "exports/exports") == [
        f"{path} 10.77.0.0/24(rw,sync,no_subtree_check,root_squash,sec=sys)"
        for path in ("/home", "/shared", "/data/ckpt-1")]


@pytest.mark.parametrize(("vcpus", "threads"), THREADS)
def test_nfsd_threads_scale_with_the_server_and_v3_is_off(rendered, vcpus, threads):
    assert body(rendered / f"vcpus-{vcpus}/nfs.conf") == [
        "[nfsd]", f"threads={threads}", "vers3=n", "vers4=y", "vers4.1=y", "vers4.2=y"]


@pytest.mark.parametrize(("kernel", "nconnect"), KERNELS)
def test_mount_unit_waits_for_the_network_and_mounts_hard(rendered, kernel, nconnect):
    case = rendered / f"kernel-{kernel}"
    assert (case / "unit-name").read_text() == "data-ckpt\\x2d1.mount"
    assert body(case / "unit") == [
        "[Unit]", "Description=Shared /data/ckpt-1 of cluster lab from nfs",
        "Documentation=man:nfs(5)", "Wants=network-online.target", "After=network-online.target",
        "[Mount]", "What=10.77.0.254:/data/ckpt-1", "Where=/data/ckpt-1", "Type=nfs4",
        "Options=hard,proto=tcp,vers=4.2,noatime,timeo=600,retrans=2,nosuid,nodev,"
        f"_netdev{nconnect}",
        "TimeoutSec=900", "[Install]", "WantedBy=remote-fs.target"]


def test_with_a_backup_controller_the_state_is_exported_to_the_two_controllers_only(tmp_path):
    """slurmctld's shared state (cluster_defaults' ha_state_mount): one more export, to the
    controller's and the backup's addresses only, mounted by those two and no other host."""
    inventory = {"all": {
        "vars": {"metalslurm_cluster_name": "lab", "metalslurm_private_cidr": "10.77.0.0/24",
                 "metalslurm_shared_paths": ["/home"], "ansible_connection": "local",
                 "ansible_python_interpreter": sys.executable},
        "hosts": {"nfs": {"metalslurm_address": "10.77.0.254"},
                  "ctl": {"metalslurm_address": "10.77.0.10"},
                  "ctl2": {"metalslurm_address": "10.77.0.9"},
                  "gpu-001": {"metalslurm_address": "10.77.0.11"}},
        "children": {"nfs_server": {"hosts": {"nfs": None}},
                     "slurm_controller": {"hosts": {"ctl": None}},
                     "slurm_controller_backup": {"hosts": {"ctl2": None}},
                     "slurm_compute": {"hosts": {"gpu-001": None}}}}}
    play = [{"hosts": "all", "gather_facts": False,
             "vars_files": VARS_FILES,
             "tasks": [
                 {"name": "exports", "ansible.builtin.template": {
                     "src": str(ROLES / EXPORTS[0]), "dest": f"{tmp_path}/exports",
                     "mode": "0644"}, "when": "inventory_hostname == 'nfs'"},
                 {"name": "mounts", "ansible.builtin.copy": {
                     "content": "{{ __nfs_client_all_mounts | join(' ') }}",
                     "dest": f"{tmp_path}/{{{{ inventory_hostname }}}}.mounts", "mode": "0644"},
                  "when": "inventory_hostname != 'nfs'"}]}]
    run_play(tmp_path, inventory, play)
    options = "rw,sync,no_subtree_check,no_root_squash,sec=sys"
    assert body(tmp_path / "exports") == [
        "/home 10.77.0.0/24(rw,sync,no_subtree_check,root_squash,sec=sys)",
        f"/var/lib/slurm/ha 10.77.0.10({options}) 10.77.0.9({options})"]
    assert {host: (tmp_path / f"{host}.mounts").read_text() for host in ("ctl", "ctl2", "gpu-001")
            } == {"ctl": "/home /var/lib/slurm/ha", "ctl2": "/home /var/lib/slurm/ha",
                  "gpu-001": "/home"}
