"""The enroot_pyxis role's files and its AppArmor choice, run by Ansible itself in seconds.

enroot.conf's drop-in and plugstack.conf are rendered from the role's own defaults, vars
and templates (probe results recorded as a node with RDMA devices and without the NVIDIA
container toolkit would print them); tasks/apparmor.yml runs in check mode for Ubuntu
22.04 and 24.04 (AppArmor cannot be loaded here: no Ubuntu kernel).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.paths import REPO

ROLE = REPO / "roles" / "enroot_pyxis"
# What tasks/probe.yml prints on a node with two HCAs and no NVIDIA container toolkit.
PROBE = {"stdout_lines": ["artifact:enroot_4.1.2-1_amd64.deb=", "slurm_client=",
                          "slurm_release=", "libslurm_dev=", "headers=", "pyxis_record=",
                          "rdma=2", "toolkit=no", "run_bytes=0", "fstab_run=", "apparmor=no"]}


def run_play(tmp_path: Path, host_vars: dict[str, dict], tasks: list[dict],
             extra_vars: dict, check: bool = False) -> dict[str, dict[str, dict]]:
    """One Ansible run over one host per case (connection local), each with its inventory
    vars; returns {host: {task name: result}}. A run costs seconds, a host little."""
    inventory = {"all": {"hosts": host_vars, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}
    play = [{"hosts": "all", "gather_facts": False,
             "vars_files": [str(ROLE / "defaults" / "main.yml"),
                            str(ROLE / "vars" / "main.yml")],
             "vars": {"_enroot_pyxis_node": PROBE},
             "tasks": tasks}]
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    (tmp_path / "vars.json").write_text(json.dumps(extra_vars))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"),
           "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
           "ANSIBLE_ROLES_PATH": str(REPO / "roles")}
    cmd = [str(Path(sys.executable).with_name("ansible-playbook")), "-i",
           str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml"),
           "-e", f"@{tmp_path / 'vars.json'}"]
    proc = subprocess.run(cmd + (["--check"] if check else []), capture_output=True, text=True,
                          env=env, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    results = json.loads(proc.stdout)["plays"][0]["tasks"]
    return {host: {t["task"]["name"]: t["hosts"][host] for t in results if host in t["hosts"]}
            for host in host_vars}


# The rendering cases: host -> (template, the host's metalslurm_containers).
ENROOT_CONF = "etc/enroot/enroot.conf.d/metalslurm.conf.j2"
PLUGSTACK = "etc/slurm/plugstack.conf.j2"
RENDERS = {
    "enroot-defaults": (ENROOT_CONF, {}),
    "enroot-moved": (ENROOT_CONF, {"cache_dir": "/nvme/enroot-cache",
                                   "enroot_config": {"ENROOT_ROOTFS_WRITABLE": None}}),
    "pyxis-defaults": (PLUGSTACK, {}),
    "pyxis-job-scope": (PLUGSTACK, {"pyxis": {"container_scope": "job",
                                              "sbatch_support": False}}),
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rendered")
    tasks = []
    for template in (ENROOT_CONF, PLUGSTACK):
        hosts = [host for host, (t, _containers) in RENDERS.items() if t == template]
        tasks.append({"name": f"render {template}", "ansible.builtin.template": {
            "src": str(ROLE / "templates" / template),
            "dest": f"{out}/{{{{ inventory_hostname }}}}"},
            "when": f"inventory_hostname in {hosts}"})
    run_play(out, {host: {"metalslurm_containers": containers} if containers else {}
                   for host, (_template, containers) in RENDERS.items()}, tasks, {})
    return out


def lines(rendered: Path, host: str) -> list[str]:
    return [line for line in (rendered / host).read_text().splitlines()
            if not line.startswith("#")]


def test_enroot_conf_keeps_per_user_paths_on_local_disk_and_exposes_rdma(rendered):
    assert lines(rendered, "enroot-defaults") == [
        "ENROOT_CACHE_PATH /var/lib/enroot/cache/user-$(id -u)",
        "ENROOT_CONFIG_PATH ${HOME}/.config/enroot",
        "ENROOT_DATA_PATH /var/lib/enroot/data/user-$(id -u)",
        "ENROOT_RESTRICT_DEV yes",
        "ENROOT_ROOTFS_WRITABLE yes",
        "ENROOT_RUNTIME_PATH /run/enroot/user-$(id -u)",
        "ENROOT_SQUASH_OPTIONS -noI -noD -noF -noX -no-duplicates",
        "ENROOT_TEMP_PATH /var/lib/enroot/tmp",
        "MELLANOX_VISIBLE_DEVICES all",
    ]


def test_the_stack_config_moves_the_cache_and_overrides_a_setting(rendered):
    moved = lines(rendered, "enroot-moved")
    assert "ENROOT_CACHE_PATH /nvme/enroot-cache/user-$(id -u)" in moved
    assert not [line for line in moved if line.startswith("ENROOT_ROOTFS_WRITABLE")]


def test_plugstack_conf_loads_pyxis_with_the_anchors_options(rendered):
    assert lines(rendered, "pyxis-defaults") == [
        "required /usr/local/lib/slurm/spank_pyxis.so container_scope=global "
        "execute_entrypoint=0 runtime_path=/run/pyxis sbatch_support=1"]
    assert lines(rendered, "pyxis-job-scope") == [
        "required /usr/local/lib/slurm/spank_pyxis.so container_scope=job "
        "execute_entrypoint=0 runtime_path=/run/pyxis sbatch_support=0"]


@pytest.fixture(scope="module")
def apparmor(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, dict]]:
    """tasks/apparmor.yml in check mode on an Ubuntu 24.04 and an Ubuntu 22.04 node (the
    role's enroot_pyxis_os, a play variable here, taken from each host's test_os)."""
    out = tmp_path_factory.mktemp("apparmor")
    return run_play(out, {f"ubuntu-{v}": {"test_os": {"distribution": "Ubuntu", "version": v}}
                          for v in ("24.04", "22.04")},
                    [{"name": "AppArmor", "ansible.builtin.include_tasks":
                      str(ROLE / "tasks" / "apparmor.yml")}],
                    {"enroot_pyxis_os": "{{ test_os }}"}, check=True)


DISABLE = "Disable Enroot's AppArmor profile (Ubuntu before 24.04, whose parser rejects it)"


def test_ubuntu_24_04_loads_enroots_apparmor_profile(apparmor):
    tasks = apparmor["ubuntu-24.04"]
    assert tasks["Check whether the profile is loaded"]["rc"] != 0  # not loaded here
    assert tasks["Load the profile"]["msg"] == "Command would have run if not in check mode"
    assert tasks[DISABLE].get("skipped") is True


def test_ubuntu_22_04_disables_the_profile_its_parser_rejects(apparmor):
    tasks = apparmor["ubuntu-22.04"]
    disable = tasks[DISABLE]
    assert disable.get("changed") is True and disable.get("skipped") is not True
    assert tasks["Check whether the profile is loaded"].get("skipped") is True
    assert tasks["Load the profile"].get("skipped") is True
