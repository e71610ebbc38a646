"""The slurm_elastic role's checks and files, rendered by Ansible itself from the role's own
defaults, vars and templates, for an inventory written by hand for bare metal (provider
byo, no metalslurm_elastic): the timings come from the provider's row of the collection's
table (module_utils/elastic.py), the same row the stack parser fills a byo stack from, and
the power programs read the config file the role writes (they keep no default of their own
for these times)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.metalslurm.cluster.plugins.module_utils.elastic import (
    PROVIDER_DEFAULTS,
)
from metalslurm_power.config import load_config

from tests.paths import REPO

ROLE = REPO / "roles" / "slurm_elastic"


REDFISH = {"driver": "redfish", "endpoint": "https://10.0.0.2"}


def render(tmp_path: Path, power: dict[str, object] | None = None,
           **all_vars: object) -> subprocess.CompletedProcess[str]:
    inventory = {"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 **all_vars},
        "children": {
            "slurm_controller": {"hosts": {"ctl": None}},
            "slurm_compute": {"hosts": {
                "gpu-001": {"metalslurm_node_state": "static"},
                "gpu-002": {"metalslurm_node_state": "cloud",
                            "metalslurm_power": power or REDFISH}}}}}}
    templates = ["etc/slurm/metalslurm-power.yaml.j2",
                 "etc/systemd/system/metalslurm-power-reconcile.timer.j2"]
    play = [{
        "hosts": "slurm_controller", "gather_facts": False,
        "vars_files": [str(REPO / "ansible/group_vars/all/metalslurm.yml"),
                       str(ROLE / "defaults/main.yml"), str(ROLE / "vars/main.yml")],
        "vars": {"ansible_managed": "rendered by test_slurm_elastic_role.py"},
        "tasks": [
            {"name": "The role's checks", "ansible.builtin.include_tasks":
                str(ROLE / "tasks/validate.yml")},
            *({"name": f"Render {t}", "ansible.builtin.template": {
                "src": str(ROLE / "templates" / t),
                "dest": str(tmp_path / Path(t).name.removesuffix(".j2")), "mode": "0600"}}
              for t in templates)]}]
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"),
           "ANSIBLE_NOCOLOR": "1"}
    # The redfish node's BMC credentials (only the name of the file is checked here).
    extra = json.dumps({"slurm_elastic_credentials_file": "/nonexistent/bmc.yaml"})
    return subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i",
                           str(tmp_path / "inventory.yml"), "-e", extra,
                           str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=env, check=False, timeout=300)


@pytest.fixture(scope="module")
def by_hand(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("by-hand")
    proc = render(out, metalslurm_provider="byo")
    assert proc.returncode == 0, proc.stdout[-4000:]
    return out


def test_the_power_config_has_the_providers_times(by_hand: Path) -> None:
    byo = PROVIDER_DEFAULTS["byo"]
    raw = json.loads((by_hand / "metalslurm-power.yaml").read_text())
    # orphan_after left out follows resume_timeout, as in the stack parser.
    assert (raw["stuck_after"], raw["orphan_after"]) == (byo["resume_timeout"],
                                                          byo["resume_timeout"])
    config = load_config(by_hand / "metalslurm-power.yaml")
    assert config.nodes == {"gpu-002": {"driver": "redfish", "endpoint": "https://10.0.0.2"}}


def test_the_reconciler_runs_at_the_providers_interval(by_hand: Path) -> None:
    timer = (by_hand / "metalslurm-power-reconcile.timer").read_text()
    every = PROVIDER_DEFAULTS["byo"]["reconcile_interval"]
    assert f"OnUnitActiveSec={every}\n" in timer


def test_an_inventory_without_timings_or_provider_is_refused(tmp_path: Path) -> None:
    proc = render(tmp_path)
    assert proc.returncode != 0
    assert ("metalslurm_elastic leaves out suspend_time, suspend_timeout, resume_timeout"
            in proc.stdout), proc.stdout[-3000:]
    assert "set metalslurm_provider, or give every setting" in proc.stdout


def test_launch_terminate_nodes_without_the_join_kit_are_refused(tmp_path: Path) -> None:
    """A Pulumi stack's 'inventory' output lacks metalslurm_join (its configure command adds
    it to the file it writes): run with it, the role would remove the controller's join."""
    proc = render(tmp_path, metalslurm_provider="oci", power={
        "driver": "oci", "mode": "launch-terminate", "compartment_id": "c",
        "availability_domain": "AD-1", "shape": "BM.GPU.H100.8", "image_id": "i",
        "subnet_id": "s"})
    assert proc.returncode != 0
    assert ("gpu-002 are launch-terminate nodes, and this inventory has no metalslurm_join"
            in " ".join(proc.stdout.split())), proc.stdout[-3000:]
