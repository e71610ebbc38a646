"""The node_facts module, on recorded dpkg-query and systemctl output and run as Ansible
runs it."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

MODULE = REPO / "roles/common/library/node_facts.py"
FIXTURES = REPO / "tests/fixtures/node"


@pytest.fixture(scope="module")
def node_facts():
    spec = importlib.util.spec_from_file_location("node_facts", MODULE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_packages_of_a_recorded_controller_node(node_facts):
    packages = node_facts.parse_dpkg((FIXTURES / "trixie-controller-dpkg.txt").read_text())
    assert len(packages) == 204
    assert packages["slurmctld"] == [{"name": "slurmctld", "version": "24.11.5-4+deb13u1",
                                      "arch": "amd64", "source": "apt"}]
    assert {"munge", "mariadb-server", "slurmdbd", "slurm-client"} <= set(packages)


def test_only_installed_packages_count_and_multiarch_names_merge(node_facts):
    packages = node_facts.parse_dpkg((FIXTURES / "dpkg-states.txt").read_text())
    assert sorted(packages) == ["libc6", "slurmd"]
    assert [p["arch"] for p in packages["libc6"]] == ["amd64", "i386"]
    assert packages["slurmd"][0]["version"] == "22.05.8-4+deb12u3"


def test_services_of_a_recorded_controller_node(node_facts):
    services = node_facts.parse_units(
        (FIXTURES / "trixie-controller-units.txt").read_text(),
        (FIXTURES / "trixie-controller-unit-files.txt").read_text())
    assert {n: (s["state"], s["status"]) for n, s in services.items() if n in (
        "munge.service", "slurmctld.service", "slurmdbd.service", "mariadb.service",
        "metalslurm-power-reconcile.service", "metalslurm-fake-gpus.service",
        "mariadb@.service")} == {
        "munge.service": ("running", "enabled"), "slurmctld.service": ("running", "enabled"),
        "slurmdbd.service": ("running", "enabled"), "mariadb.service": ("running", "enabled"),
        "metalslurm-power-reconcile.service": ("stopped", "static"),
        "metalslurm-fake-gpus.service": ("stopped", "enabled"),
        "mariadb@.service": ("stopped", "disabled")}
    # A unit systemd does not know (slurmd on the controller) is not a service here.
    assert "slurmd.service" not in services


def test_run_as_ansible_runs_it_on_this_machine(tmp_path):
    """This machine is Debian too: the module reads its real dpkg database."""
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"_ansible_check_mode": True}}))
    proc = subprocess.run([sys.executable, str(MODULE), str(args)], capture_output=True,
                          text=True, check=False)
    result = json.loads(proc.stdout)
    assert result["changed"] is False, result
    assert result["ansible_facts"]["packages"]["dpkg"][0]["name"] == "dpkg"
    # This machine's PID 1 is not systemd: no services to report, and no failure.
    assert ("services" in result["ansible_facts"]) == Path("/run/systemd/system").is_dir()
    # The apt hook's stamp, as this machine has it or not.
    assert result["ansible_facts"]["apt_update_stamp"] is Path(
        "/var/lib/apt/periodic/update-success-stamp").is_file()
