"""Each role played alone (make lint): a playbook that applies just that role to a fake
inventory, run by ansible-playbook in check mode with a strategy that has no host behind it
(tests/role_alone/role_alone_linear.py): the role's whole task graph runs as Ansible runs it
(its meta dependencies, includes, conditions, loops, variables, registered results,
notifications and handlers), every module call is answered by a stand-in result and
recorded, and every path to a host is refused. So a role that reads a variable, a fact or a
handler only another role in site.yml provides fails here, and nothing on this machine
changes (test_nothing_reaches_this_machine shows the refusals).

The fake inventory is the default local stack's, as 'local up' writes it (the inventory
contract), with secret files written for the run, every host's facts a Debian 13 node's,
and each role on the hosts site.yml gives it.
The stand-in answers what a fresh node would for the reads later tasks look at (no file
kept yet, nothing installed); a few probes get the output a real node gives (STAND_IN).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import pytest
import yaml

from tests.paths import REPO, ROLES
from tests.slurm_render import fixture_inventory

ROLE_NAMES = sorted(p.name for p in ROLES.iterdir() if (p / "tasks").is_dir())
VALIDATING = [r for r in ROLE_NAMES if (ROLES / r / "tasks" / "validate.yml").is_file()]
STRATEGY_DIR = REPO / "tests" / "role_alone"
# The facts of a Debian 13 node as the setup module reports them (the keys the roles read).
FACTS = {
    "distribution": "Debian", "distribution_major_version": "13", "distribution_version": "13.1",
    "distribution_release": "trixie", "os_family": "Debian", "architecture": "x86_64",
    "system": "Linux", "kernel": "6.12.38+deb13-amd64", "service_mgr": "systemd",
    "pkg_mgr": "apt", "virtualization_type": "kvm", "virtualization_role": "guest",
    "processor_count": 2, "processor_cores": 56, "processor_threads_per_core": 2,
    "processor_vcpus": 224, "memtotal_mb": 2063937, "hostname": "node", "fqdn": "node",
    "python": {"version": {"major": 3, "minor": 13}}, "user_id": "root",
    "env": {"HOME": "/root"}, "date_time": {"epoch": "1764390000"}, "mounts": [],
    "default_ipv4": {"address": "10.77.0.10", "interface": "eth0"},
    "interfaces": ["lo", "eth0"], "lo": {"device": "lo", "ipv4": {"address": "127.0.0.1"}},
    "eth0": {"device": "eth0", "ipv4": {"address": "10.77.0.10"}},
}
# What the stand-in answers (by module short name, or "task:<name>" for one task), beyond
# "changed, rc 0, empty output": a fresh node (no file kept, no package or service yet).
STAND_IN = {
    "setup": {"ansible_facts": FACTS}, "gather_facts": {"ansible_facts": FACTS},
    "package_facts": {"ansible_facts": {"packages": {}}},
    "service_facts": {"ansible_facts": {"services": {}}},
    "stat": {"stat": {"exists": False}},
    "slurp": {"failed": True, "msg": "file not found"},
    "find": {"files": [], "matched": 0, "examined": 0},
    "getent": {"ansible_facts": {}},
    "uri": {"status": 200, "json": {}, "content": ""},
    # the collection's modules and the roles' own (their RETURN)
    "key_file": {"size": 32, "sha256_prefix": "0123abcd"},
    "managed_state": {"paths": {}, "contents": {}, "units": {}},
    "home_block": {"path": "", "refused": ""},
    "hca_facts": {"ansible_facts": {"metalslurm_hcas": [], "metalslurm_gpu_pci": [],
                                    "metalslurm_hca_present": False}},
    "nvidia_gpu_facts": {"ansible_facts": {"metalslurm_gpus": []}},
    "nvidia_pci": {"ansible_facts": {"metalslurm_nvidia_pci": {"gpus": [], "nvswitches": []}}},
    # probes whose output a later task checks, as Debian 13's Slurm 24.11 prints it
    "task:Ask srun which MPI plugins it has": {
        "changed": False, "stdout": "MPI plugin types are...\n\tnone\n\tcray_shasta\n\tpmi2\n"
                                    "\tpmix\nspecific pmix plugin versions available: pmix_v5"},
    "task:Read the Slurm release apt would install (check mode before the first install)": {
        "changed": False, "stdout": "slurmctld:\n  Installed: (none)\n  Candidate: 24.11.5-4\n"
                                    "  Version table:\n     24.11.5-4 500\n"},
    "task:Read the node's artifacts, packages, Pyxis build, RDMA devices, NVIDIA container "
    "toolkit and /run": {
        "changed": False, "stdout_lines": [
            *(f"artifact:{file_name}=" for file_name in (
                "enroot_4.1.2-1_amd64.deb", "enroot+caps_4.1.2-1_amd64.deb",
                "pyxis-0.24.0.tar.gz")),
            "slurm_client=", "slurm_release=", "libslurm_dev=", "headers=", "pyxis_record=",
            "rdma=0", "toolkit=no", "run_bytes=13510798336", "fstab_run=", "apparmor=no"]},
    # a host without a firewall, as metalslurm-firewall --status prints it (read under
    # --tags service, where the program is not written first)
    "task:Read the host's firewall (nftables' input chains, ufw, firewalld, iptables)": {
        "changed": False, "stdout": '{"nft": false, "chains": [], "stale": [], "refused": [], '
                                    '"ufw": false, "firewalld": false, "iptables_drop": false}'},
    "task:Wait until slurmctld sees this node registered and responding": {
        "changed": False, "stdout": "idle|slurm"},
}
# Artifacts of the containers role: stand-in files in a mirror, pinned by their sha256.
ARTIFACTS = {"enroot": "enroot_4.1.2-1_amd64.deb", "enroot_caps": "enroot+caps_4.1.2-1_amd64.deb",
             "pyxis": "pyxis-0.24.0.tar.gz"}
SECRETS = {
    "munge_key_b64_file": base64.b64encode(bytes(range(256)) * 4).decode(),
    "slurm_jwt_key_b64_file": base64.b64encode(bytes(range(32))).decode(),
    "slurmdbd_password_file": "a-test-password-of-32-characters",
    "monitoring_password_file": "a-test-password-of-32-characters",
    "slurm_elastic_credentials_file": "{}",
    "registry_credentials_file": json.dumps([{"host": "registry.example", "login": "robot",
                                              "password": "robot-password"}]),
    "monitoring_alert_secrets_file": "{}",
}
TIMEOUT = 240


@cache
def site_hosts(role: str) -> str:
    """The host pattern of the first site.yml play that applies ``role``."""
    for play in yaml.safe_load((REPO / "ansible" / "site.yml").read_text()):
        names = [r["role"] if isinstance(r, dict) else r for r in play.get("roles") or []]
        names += [t["ansible.builtin.include_role"]["name"] for t in play.get("tasks") or []
                  if "ansible.builtin.include_role" in t]
        if role in names:
            return str(play["hosts"])
    raise AssertionError(f"ansible/site.yml does not apply role {role}")


def fake_inventory(work: Path) -> dict:
    inventory = fixture_inventory()
    top = inventory["all"]
    for name, text in SECRETS.items():
        path = work / "secrets" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(text + "\n")
        path.chmod(0o600)
        top["vars"][name] = str(path)
    mirror = work / "mirror"
    mirror.mkdir(exist_ok=True)
    pins = {}
    for name, file_name in ARTIFACTS.items():
        (mirror / file_name).write_bytes(f"stand-in for {file_name}\n".encode())
        pins[name] = {"sha256": hashlib.sha256((mirror / file_name).read_bytes()).hexdigest()}
    top["vars"]["metalslurm_containers"].update(mirror=str(mirror), artifacts=pins)
    leaves = sorted(top["vars"]["metalslurm_topology"]["leaf_spines"])
    compute = list(top["children"]["slurm_compute"]["hosts"])
    for i, host in enumerate(compute):
        top["hosts"][host]["metalslurm_switch"] = leaves[i % len(leaves)]
    # A backup controller, as metalslurm:controller.backup gives one: every role site.yml
    # plays on it plays alone there too (slurm_backup_controller has no other host).
    top["hosts"]["ctl2"] = {"ansible_host": "10.77.0.9", "metalslurm_address": "10.77.0.9"}
    top["children"]["slurm_controller_backup"] = {"hosts": {"ctl2": None}}
    return inventory


def run_alone(work: Path, name: str, play: list[dict] | None, inventory: dict,
              args: tuple[str, ...] = ()) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    """``play`` (None: ansible/site.yml itself) in check mode against the stand-in."""
    playbook = REPO / "ansible" / "site.yml"
    if play is not None:
        playbook = work / f"{name}.yml"
        playbook.write_text(yaml.safe_dump(play, sort_keys=False))
    (work / f"{name}-inventory.yml").write_text(yaml.safe_dump(inventory))
    record = work / f"{name}.jsonl"
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible/ansible.cfg"),
               ANSIBLE_STRATEGY="role_alone_linear", ANSIBLE_STRATEGY_PLUGINS=str(STRATEGY_DIR),
               ANSIBLE_NOCOLOR="1", ANSIBLE_FORKS="4", ROLE_ALONE_RECORD=str(record),
               ROLE_ALONE_ANSWERS=json.dumps(STAND_IN))  # the venv's ansible-playbook
    proc = subprocess.run(["ansible-playbook", "--check", "-i",
                           str(work / f"{name}-inventory.yml"), str(playbook), *args],
                          capture_output=True, text=True, env=env, check=False,
                          timeout=TIMEOUT)
    records = [json.loads(line) for line in record.read_text().splitlines()] \
        if record.exists() else []
    return proc, records


def role_play(role: str, inventory: dict, validate_only: bool = False) -> tuple[list, dict]:
    """The playbook that applies ``role`` alone to the hosts site.yml gives it, and its
    inventory (a group site.yml makes in the run, such as the monitoring host's, holds the
    controller here)."""
    inventory = json.loads(json.dumps(inventory))
    hosts = site_hosts(role)
    children = inventory["all"]["children"]
    for group in hosts.split(":"):
        if group.startswith("metalslurm_") and group != "metalslurm_powered_down":
            children[group] = {"hosts": {"ctl": None}}
    if role in ("nfs_client", "nfs_server"):  # as site.yml runs them: with NFS storage
        children["nfs_server"] = {"hosts": {"ctl": None}}
        inventory["all"]["vars"]["metalslurm_shared_storage"] = "nfs"
    # The facts of every host (a role on the controller reads the compute nodes'), as the
    # plays before it in site.yml leave them; then the role alone.
    play: list[dict] = [{"name": "Facts of every host", "hosts": "all:!localhost",
                         "gather_facts": True, "tasks": []}]
    if validate_only:
        play.append({"name": f"{role}'s validate.yml alone", "hosts": hosts,
                     "gather_facts": False, "tasks": [{
                         "name": "Validate", "ansible.builtin.include_role": {
                             "name": role, "tasks_from": "validate.yml"}}]})
    else:
        play.append({"name": f"{role} alone", "hosts": hosts, "gather_facts": False,
                     "roles": [role]})
    return play, inventory


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess[str], list[dict]]]:
    """Every role alone, and every validate.yml alone: two at a time (the machine's cores)."""
    work = tmp_path_factory.mktemp("alone")
    inventory = fake_inventory(work)
    jobs = [(role, *role_play(role, inventory)) for role in ROLE_NAMES]
    jobs += [(f"{role}-validate", *role_play(role, inventory, validate_only=True))
             for role in VALIDATING]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = pool.map(lambda job: (job[0], run_alone(work, job[0], job[1], job[2])), jobs)
        return dict(results)


def failure(proc: subprocess.CompletedProcess[str]) -> str:
    out = proc.stdout + proc.stderr
    lines = out.splitlines()
    fatal = next((i for i, line in enumerate(lines) if line.startswith(("fatal:", "ERROR!",
                                                                        "[ERROR]"))), None)
    if fatal is None:
        return out[-3000:]
    tasks = [line for line in lines[:fatal] if line.startswith(("TASK [", "RUNNING HANDLER ["))]
    return "\n".join([*(tasks[-1:]), *lines[fatal:fatal + 12]])


def recap_failed(proc: subprocess.CompletedProcess[str]) -> int:
    return sum(int(n) for n in re.findall(r"\bfailed=(\d+)", proc.stdout))


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_a_role_plays_alone_in_check_mode(runs, role):
    proc, records = runs[role]
    assert proc.returncode == 0 and recap_failed(proc) == 0, failure(proc)
    assert re.search(rf"^TASK \[{role} : ", proc.stdout, re.MULTILINE), proc.stdout[-2000:]


def dependencies(role: str) -> set[str]:
    meta = yaml.safe_load((ROLES / role / "meta" / "main.yml").read_text()) or {}
    direct = {d["role"] if isinstance(d, dict) else d for d in meta.get("dependencies") or []}
    return direct.union(*(dependencies(d) for d in direct)) if direct else set()


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_a_role_alone_plays_itself_and_its_declared_dependencies_only(runs, role):
    """What the role needs from another role comes through meta/main.yml: each declared
    dependency plays with it, and no other role does."""
    proc, _ = runs[role]
    played = set(re.findall(r"^(?:TASK|RUNNING HANDLER) \[(\w+) : ", proc.stdout, re.MULTILINE))
    assert played - {role} <= dependencies(role), played
    assert {d for d in dependencies(role)
            if (ROLES / d / "tasks" / "main.yml").is_file()} <= played, played


def notified(role: str) -> bool:
    """Whether the role or a dependency has a task that notifies."""
    return any("notify:" in p.read_text()
               for r in {role, *dependencies(role)} for p in (ROLES / r / "tasks").glob("*.yml"))


@pytest.mark.parametrize("role", [r for r in ROLE_NAMES if notified(r)])
def test_the_handlers_a_role_notifies_resolve_when_it_plays_alone(runs, role):
    """Every module reports a change, so every notification of a task that runs in check
    mode fires: an unknown handler or topic would stop the run
    (test_an_unknown_handler_fails_the_run); the handlers that run are the role's or its
    dependencies'. (A role whose notifying tasks all skip in check mode runs none.)"""
    proc, _ = runs[role]
    assert proc.returncode == 0, failure(proc)
    handlers = set(re.findall(r"^RUNNING HANDLER \[(\w+) : ", proc.stdout, re.MULTILINE))
    assert handlers <= {role, *dependencies(role)}, (handlers, failure(proc))


@pytest.mark.parametrize("role", VALIDATING)
def test_a_roles_validate_yml_runs_alone(runs, role):
    """tasks/validate.yml on its own (include_role tasks_from): it needs nothing the rest
    of the role's tasks set, and it passes on the contract's inventory."""
    proc, _ = runs[f"{role}-validate"]
    assert proc.returncode == 0 and recap_failed(proc) == 0, failure(proc)
    assert re.search(rf"^TASK \[{role} : ", proc.stdout, re.MULTILINE), proc.stdout[-2000:]


# A run limited by tags, as an operator runs one: every read a kept task needs is made
# (tagged always), and the configure tasks still run when the install ones are skipped.
TAG_RUNS = {"skip-install": ("--skip-tags", "install"),
            "skip-configure": ("--skip-tags", "configure"),
            "service": ("--tags", "service")}


# A configure task of each role that includes its writes only where the node differs (as
# the play prints it: a copy in check mode calls no module the stand-in could record).
READ_ONCE_WRITES = (
    "monitoring : Write Prometheus' configuration",
    "monitoring_node : Have node_exporter answer on the private address, with the systemd and "
    "textfile collectors",
    "slurm_exporter : Write the exporter's service",
    "slurm_rest : Write slurmrestd's drop-in (own user, JWT only, private address)",
    "slurm_controller : Write slurm.conf",
    "slurm_compute : Point slurmd at the controller for its configuration",
    "slurm_pam_adopt : Put pam_access and pam_slurm_adopt in sshd's account stack",
    "slurm_login : Point sackd at slurmctld (before the package starts it)",
)


@pytest.mark.parametrize("run", list(TAG_RUNS))
def test_the_whole_playbook_plays_under_a_tag_filter(tmp_path, run):
    proc, records = run_alone(tmp_path, run, None, fake_inventory(tmp_path), TAG_RUNS[run])
    assert proc.returncode == 0 and recap_failed(proc) == 0, failure(proc)
    ran = {(r["host"], r["task"]) for r in records}
    if run == "skip-install":  # slurm_common's directories and JWT key: configure tasks
        assert ("ctl", "Create the Slurm configuration and log directories") in ran
        assert not any(r["task"] == "Install the Slurm client commands (and the JWT plugin "
                                    "while the REST API is on)" for r in records)
        # The roles that read a node once: their reads and the include of their write tasks
        # run under any filter (an include tagged install would be skipped whole, its
        # configure tasks with it); on the stand-in's fresh node everything differs.
        headers = set(re.findall(r"^TASK \[(.*?)\]", proc.stdout, re.MULTILINE))
        assert [t for t in READ_ONCE_WRITES if t not in headers] == []
    if run == "skip-configure":
        assert ("gpu-001", "Read the HCAs, their ports and their GPU neighbours from sysfs") in ran


def test_an_unknown_handler_fails_the_run(tmp_path):
    """The harness can fail: a role that notifies a topic nobody listens to."""
    role = tmp_path / "roles" / "lonely"
    (role / "tasks").mkdir(parents=True)
    (role / "tasks" / "main.yml").write_text(yaml.safe_dump([{
        "name": "Change something", "ansible.builtin.file": {"path": "/nonexistent/x"},
        "notify": "metalslurm:nobody-listens"}]))
    play = [{"name": "Alone", "hosts": "ctl", "gather_facts": False, "roles": [str(role)]}]
    inventory = {"all": {"hosts": {"ctl": {"ansible_connection": "local"}}}}
    proc, records = run_alone(tmp_path, "lonely", play, inventory)
    assert proc.returncode != 0
    assert "metalslurm:nobody-listens" in proc.stdout + proc.stderr, failure(proc)
    assert [r["module"] for r in records] == ["ansible.builtin.file"]


def test_nothing_reaches_this_machine(tmp_path):
    """A command that check mode would run (check_mode: false) is answered, not run; a raw
    command and a file copy to the host are refused."""
    marker = tmp_path / "ran"
    play = [{"name": "Try", "hosts": "ctl", "gather_facts": False, "tasks": [
        {"name": "Run despite check mode", "ansible.builtin.command": f"touch {marker}",
         "check_mode": False},
        {"name": "Copy", "ansible.builtin.copy": {"content": "x", "dest": str(marker)},
         "check_mode": False, "ignore_errors": True},
        {"name": "Raw", "ansible.builtin.raw": f"touch {marker}", "check_mode": False,
         "ignore_errors": True}]}]
    inventory = {"all": {"hosts": {"ctl": {"ansible_connection": "local"}}}}
    proc, records = run_alone(tmp_path, "try", play, inventory)
    assert proc.returncode == 0, failure(proc)
    assert not marker.exists()
    assert [r["task"] for r in records] == ["Run despite check mode"]
    for refusal in ("refused to copy a file to the host", "refused to run a command on the host"):
        assert f"role_alone_linear: {refusal}" in proc.stdout, proc.stdout[-3000:]
