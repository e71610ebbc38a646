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

import yaml

from tests.paths import REPO

ROLE = REPO / "roles" / "enroot_pyxis"
# What tasks/probe.yml prints on a node with two HCAs and no NVIDIA container toolkit.
PROBE = {"stdout_lines": ["artifact:enroot_4.1.2-1_amd64.deb=", "rdma=2", "toolkit=no",
                          "run_bytes=0"]}


def run_play(tmp_path: Path, tasks: list[dict], extra_vars: dict, check: bool = False) -> dict:
    play = [{"hosts": "localhost", "gather_facts": False,
             "vars_files": [str(ROLE / "defaults" / "main.yml"),
                            str(ROLE / "vars" / "main.yml")],
             "vars": {"_enroot_pyxis_node": PROBE, "ansible_python_interpreter": sys.executable},
             "tasks": tasks}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    (tmp_path / "vars.json").write_text(json.dumps(extra_vars))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"),
           "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
           "ANSIBLE_ROLES_PATH": str(REPO / "roles")}
    cmd = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", "-c",
           "local", str(tmp_path / "play.yml"), "-e", f"@{tmp_path / 'vars.json'}"]
    proc = subprocess.run(cmd + (["--check"] if check else []), capture_output=True, text=True,
                          env=env, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    results = json.loads(proc.stdout)["plays"][0]["tasks"]
    return {t["task"]["name"]: t["hosts"]["localhost"] for t in results}


def render(tmp_path: Path, template: str, extra_vars: dict) -> list[str]:
    out = tmp_path / "rendered"
    run_play(tmp_path, [{"name": "render", "ansible.builtin.template": {
        "src": str(ROLE / "templates" / template), "dest": str(out)}}], extra_vars)
    return [line for line in out.read_text().splitlines() if not line.startswith("#")]


def test_enroot_conf_keeps_per_user_paths_on_local_disk_and_exposes_rdma(tmp_path):
    assert render(tmp_path, "etc/enroot/enroot.conf.d/metalslurm.conf.j2", {}) == [
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


def test_the_stack_config_moves_the_cache_and_overrides_a_setting(tmp_path):
    lines = render(tmp_path, "etc/enroot/enroot.conf.d/metalslurm.conf.j2", {
        "metalslurm_containers": {"cache_dir": "/nvme/enroot-cache",
                                  "enroot_config": {"ENROOT_ROOTFS_WRITABLE": None}}})
    assert "ENROOT_CACHE_PATH /nvme/enroot-cache/user-$(id -u)" in lines
    assert not [line for line in lines if line.startswith("ENROOT_ROOTFS_WRITABLE")]


def test_plugstack_conf_loads_pyxis_with_the_anchors_options(tmp_path):
    assert render(tmp_path, "etc/slurm/plugstack.conf.j2", {}) == [
        "required /usr/local/lib/slurm/spank_pyxis.so container_scope=global "
        "execute_entrypoint=0 runtime_path=/run/pyxis sbatch_support=1"]
    assert render(tmp_path, "etc/slurm/plugstack.conf.j2", {"metalslurm_containers": {
        "pyxis": {"container_scope": "job", "sbatch_support": False}}}) == [
        "required /usr/local/lib/slurm/spank_pyxis.so container_scope=job "
        "execute_entrypoint=0 runtime_path=/run/pyxis sbatch_support=0"]


def apparmor(tmp_path: Path, version: str) -> dict:
    return run_play(tmp_path, [{"name": "AppArmor", "ansible.builtin.include_tasks":
                                str(ROLE / "tasks" / "apparmor.yml")}],
                    {"enroot_pyxis_os": {"distribution": "Ubuntu", "version": version}},
                    check=True)


def test_ubuntu_24_04_loads_enroots_apparmor_profile(tmp_path):
    tasks = apparmor(tmp_path, "24.04")
    assert tasks["Check whether the profile is loaded"]["rc"] != 0  # not loaded here
    assert tasks["Load the profile"]["msg"] == "Command would have run if not in check mode"
    assert tasks["Disable Enroot's AppArmor profile (Ubuntu before 24.04, whose parser "
                 "rejects it)"].get("skipped") is True


def test_ubuntu_22_04_disables_the_profile_its_parser_rejects(tmp_path):
    tasks = apparmor(tmp_path, "22.04")
    disable = tasks["Disable Enroot's AppArmor profile (Ubuntu before 24.04, whose parser "
                    "rejects it)"]
    assert disable.get("changed") is True and disable.get("skipped") is not True
    assert tasks["Check whether the profile is loaded"].get("skipped") is True
    assert tasks["Load the profile"].get("skipped") is True
