"""The controller's Slurm files rendered by Ansible itself: slurm_controller's tasks/render.yml
run as the role runs it, from the roles' own defaults, vars and templates and an inventory
built from the default local stack (Pulumi.local.yaml) with recorded node facts; the
configuration directory pointed at a temporary directory and the release given instead of
read from dpkg (slurm_controller_slurm_release).

Shared by the controller role's render tests (roles/slurm_controller/tests/unit/), the
monitoring role's (tests/unit/test_monitoring_render.py, for the inventory) and the scale
lab (bench/scale/lab.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import yaml

from infra.providers.local import node_specs
from infra.stack.config import load_stack_file
from infra.stack.inventory import build_inventory, cluster_vars
from tests.facts import set_facts_task
from tests.paths import REPO

RELEASES = ("21.08", "22.05", "23.11", "24.11")
# A DGX H100-like node as Ansible's setup module reports it (2 x 56-core Xeon Platinum
# 8480C with hyper-threading, 2 TiB): the facts slurm.conf's NodeName lines come from.
NODE_FACTS = {"processor_count": 2, "processor_cores": 56, "processor_threads_per_core": 2,
              "memtotal_mb": 2063937}
# The same hardware as the local provider writes it for elastic (powered-down) nodes.
NODE_OPTIONS = {"Sockets": 2, "CoresPerSocket": 56, "ThreadsPerCore": 2, "CPUs": 224,
                "RealMemory": 2063937 * 97 // 100}


def fixture_inventory() -> dict:
    """The default local stack's inventory, as 'local up' writes it, plus node facts."""
    # The Slurm files do not depend on where the container artifacts come from: a clone
    # without the offline mirror beside it renders them too.
    cfg = load_stack_file(REPO / "Pulumi.local.yaml", check_artifacts=False)
    specs = [replace(s, extra_vars={"metalslurm_node_options": NODE_OPTIONS})
             if s.node_state == "cloud" else s for s in node_specs(cfg, "host-bind")]
    all_vars = {**cluster_vars(cfg, specs), "metalslurm_shared_storage": "host-bind",
                "ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = build_inventory(specs, all_vars)
    for name, host in inventory["all"]["hosts"].items():
        if name.startswith("gpu-") and host["metalslurm_node_state"] == "static":
            host["test_node_facts"] = NODE_FACTS
    return inventory


def inventory_with_nodes(names: list[str], static: int | None = None) -> dict:
    """The fixture inventory with ``names`` as its compute nodes, in every partition: the
    first ``static`` static (all of them when None), the rest elastic; all described by
    metalslurm_node_options (no facts to set on a thousand hosts)."""
    inventory = fixture_inventory()
    top = inventory["all"]
    template = {k: v for k, v in top["hosts"]["gpu-001"].items()
                if k not in ("test_node_facts", "metalslurm_power")}
    for name in [h for h in top["hosts"] if h.startswith("gpu-")]:
        del top["hosts"][name]
    static = len(names) if static is None else static
    for i, name in enumerate(names):
        address = f"10.77.{4 + i // 250}.{10 + i % 250}"
        top["hosts"][name] = {**template, "ansible_host": address, "metalslurm_address": address,
                              "metalslurm_node_state": "static" if i < static else "cloud",
                              "metalslurm_power": {"driver": "local",
                                                   "container": f"metalslurm-{name}"},
                              "metalslurm_node_options": NODE_OPTIONS}
    top["children"]["slurm_compute"]["hosts"] = dict.fromkeys(names)
    top["vars"]["metalslurm_private_cidr"] = "10.77.0.0/16"
    for partition in top["vars"]["metalslurm_partitions"]:
        partition["nodes"] = list(names)
    return inventory


def run_render(tmp_path: Path, releases: tuple[str, ...], extra_vars: dict | None = None,
               static_prolog: bool = False, inventory: dict | None = None,
               node_facts: bool = True) -> subprocess.CompletedProcess[str]:
    """ansible-playbook running tasks/render.yml for each release into tmp_path/<release>,
    with the fixture inventory (or ``inventory``, one of the same shape); ``node_facts``
    False: no play that sets the compute nodes' facts (an inventory whose nodes all have
    metalslurm_node_options needs none)."""
    handlers = [{"name": topic, "listen": topic, "ansible.builtin.debug": {"msg": topic}}
                for topic in ("metalslurm:slurm-reconfigure", "metalslurm:slurmctld-restart",
                              "metalslurm:systemd-reload")]
    facts_play = {"name": "Give the static compute nodes their facts", "hosts": "slurm_compute",
                  "gather_facts": False, "tasks": [set_facts_task(NODE_FACTS)]}
    if static_prolog:  # as monitoring_node publishes it on the nodes that are up (the static ones)
        facts_play["tasks"].append({"ansible.builtin.set_fact": {
            "metalslurm_node": {"job_prolog": "/usr/local/sbin/metalslurm-prolog"}},
            "when": "metalslurm_node_state == 'static'"})
    play = [*([facts_play] if node_facts else []), {
        "name": "Render the controller's Slurm files for each release",
        "hosts": "slurm_controller", "gather_facts": False,
        "vars_files": [str(REPO / f) for f in (
            "ansible/group_vars/all/metalslurm.yml", "roles/slurm_common/defaults/main.yml",
            "roles/slurm_controller/defaults/main.yml", "roles/slurm_controller/vars/main.yml")],
        "vars": {"ansible_managed": "rendered by tests/slurm_render.py"},
        "tasks": [{"name": "Render for one release",
                   "ansible.builtin.include_tasks": str(
                       REPO / "roles/slurm_controller/tasks/render.yml"),
                   "vars": {"slurm_controller_slurm_release": "{{ item }}",
                            "slurm_common_conf_dir": f"{tmp_path}/{{{{ item }}}}",
                            "slurm_common_state_dir": f"{tmp_path}/{{{{ item }}}}",
                            "__slurm_controller_dropin_dir": f"{tmp_path}/{{{{ item }}}}"},
                   "loop": list(releases)}],
        "handlers": handlers}]
    for release in releases:
        (tmp_path / release).mkdir(exist_ok=True)
    # Tasks included from a play find templates next to the playbook: the role's own.
    if not (tmp_path / "templates").exists():
        (tmp_path / "templates").symlink_to(REPO / "roles/slurm_controller/templates")
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory or fixture_inventory()))
    (tmp_path / "render.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible/ansible.cfg"),
               ANSIBLE_NOCOLOR="1")  # ansible-playbook: the venv's (conftest.py)
    (tmp_path / "extra-vars.yml").write_text(yaml.safe_dump(extra_vars or {}))
    return subprocess.run(["ansible-playbook", "-i", str(tmp_path / "inventory.yml"),
                           "-e", f"@{tmp_path / 'extra-vars.yml'}", str(tmp_path / "render.yml")],
                          capture_output=True, text=True, env=env, check=False, timeout=300)


def settings(path: Path) -> dict[str, str]:
    """The Key=Value settings of a rendered file (node and partition lines left out)."""
    return dict(line.split("=", 1) for line in lines(path)
                if not line.startswith(("NodeName=", "PartitionName=")))


def lines(path: Path) -> list[str]:
    """A rendered file's lines, without blank lines and comments."""
    return [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
