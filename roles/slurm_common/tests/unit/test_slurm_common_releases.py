"""slurm_common's Slurm release check (tasks/releases.yml), run by Ansible against stand-ins
for dpkg-query, apt-cache and apt-get, one set per host (each host's Python puts its own on
PATH, so a task delegated to the controller reads the controller's): the read each host
makes, the controller read for a run limited to other hosts, a host with no apt lists yet
reading them first, a failing dpkg-query failing the step, and the refusal's sentence."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.paths import REPO

BOOKWORM = "22.05.8-4+deb12u3"
TRIXIE = "24.11.5-1+deb13u1"


def stand_ins(tmp_path: Path, host: str, installed: str | None, offered: str | None,
              offered_after_update: str | None = None, dpkg_fails: bool = False) -> Path:
    """``host``'s Python, whose PATH leads to its stand-ins."""
    bin_dir = tmp_path / host
    bin_dir.mkdir()
    lines = "".join(f"installed|ii |{p}|slurm-wlm|{installed}\n"
                    for p in ("slurm-client", "slurmd")) if installed else ""
    lines += "installed|ii |munge|munge|0.5.15-2\n"
    (bin_dir / "dpkg.out").write_text(lines)
    (bin_dir / "offered").write_text(offered or "")
    scripts = {
        "dpkg-query": ("exit 2" if dpkg_fails else f"cat {bin_dir}/dpkg.out"),
        # 'apt-cache policy PACKAGE...': a block per package.
        "apt-cache": (f'shift; o=$(cat {bin_dir}/offered); for p in "$@"; do echo "$p:"; '
                      f'echo "  Installed: {installed or "(none)"}"; '
                      f'[ -z "$o" ] || echo "  Candidate: $o"; done'),
        "apt-get": (f"echo update >> {bin_dir}/apt-get.calls; "
                    f"printf %s {offered_after_update or ''} > {bin_dir}/offered"),
    }
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\nPATH={bin_dir}:$PATH exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return python


def run_check(tmp_path: Path, hosts: dict[str, Path], limit: str | None = None,
              upgrade: bool = False) -> subprocess.CompletedProcess[str]:
    inventory = {"all": {
        "hosts": {h: {"ansible_connection": "local", "ansible_python_interpreter": str(p)}
                  for h, p in hosts.items()},
        "children": {"slurm_controller": {"hosts": {"ctl": {}}},
                     "slurmdbd": {"hosts": {"ctl": {}}},
                     "slurm_compute": {"hosts": {h: {} for h in hosts if h != "ctl"}}}}}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    play = [{"hosts": "slurm_controller:slurm_compute", "gather_facts": False,
             "tasks": [{"name": "slurm_common's release check", "ansible.builtin.include_role": {
                 "name": "slurm_common", "tasks_from": "releases.yml"}}]},
            # What site.yml's upgrade plays would get.
            {"hosts": "metalslurm_slurm_upgrade", "gather_facts": False, "tasks": [
                {"name": "Say what would be upgraded", "ansible.builtin.debug": {
                    "msg": "UPGRADE {{ _slurm_common_release_check.upgrades[inventory_hostname]"
                           " | join(' ') }}"}}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"),
           "ANSIBLE_ROLES_PATH": str(REPO / "roles"), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i",
                           str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml"),
                           *(["--limit", limit] if limit else []),
                           *(["-e", "metalslurm_slurm_upgrade=true"] if upgrade else [])],
                          capture_output=True, text=True, env=env, check=False, timeout=300)


def said(proc: subprocess.CompletedProcess[str]) -> str:
    return " ".join(proc.stdout.replace("\\n", " ").split())


def test_a_converged_cluster_passes(tmp_path):
    proc = run_check(tmp_path, {"ctl": stand_ins(tmp_path, "ctl", BOOKWORM, BOOKWORM),
                                "gpu-001": stand_ins(tmp_path, "gpu-001", BOOKWORM, BOOKWORM)})
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "Refuse Slurm releases" in proc.stdout and "failed=0" in proc.stdout


def test_sources_offering_debian_13_are_refused_naming_the_host(tmp_path):
    proc = run_check(tmp_path, {"ctl": stand_ins(tmp_path, "ctl", BOOKWORM, BOOKWORM),
                                "gpu-001": stand_ins(tmp_path, "gpu-001", BOOKWORM, TRIXIE)})
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert ("Nothing was changed: gpu-001: the apt sources offer Slurm 24.11.5 over the "
            "installed 22.05.8, a jump Slurm cannot make") in said(proc), said(proc)[-3000:]


def test_a_newer_release_inside_the_window_is_a_note_and_the_run_goes_on(tmp_path):
    """Debian 13's 24.11 with forky's 26.05 offered: three releases, inside 26.05's window."""
    proc = run_check(tmp_path, {"ctl": stand_ins(tmp_path, "ctl", TRIXIE, TRIXIE),
                                "gpu-001": stand_ins(tmp_path, "gpu-001", TRIXIE, "26.05.5-1")})
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert ("msg: 'NOTE: gpu-001: the apt sources offer Slurm 26.05.5 over the installed "
            "24.11.5; this run keeps 24.11.5") in said(proc), said(proc)[-3000:]


def test_a_run_limited_to_a_new_node_reads_the_controller_too(tmp_path):
    """A machine joining alone (--limit, as the join kit runs it) that would install 24.11
    next to a 22.05 slurmctld: the controller is read through delegation."""
    proc = run_check(tmp_path, {"ctl": stand_ins(tmp_path, "ctl", BOOKWORM, BOOKWORM),
                                "gpu-003": stand_ins(tmp_path, "gpu-003", None, TRIXIE)},
                     limit="gpu-003")
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert ("gpu-003: slurmd would install Slurm 24.11.5, newer than slurmctld's 22.05.8 on "
            "ctl") in said(proc), said(proc)[-3000:]


def test_a_host_without_apt_lists_reads_them_before_it_is_judged(tmp_path):
    proc = run_check(tmp_path, {"ctl": stand_ins(tmp_path, "ctl", BOOKWORM, BOOKWORM),
                                "gpu-003": stand_ins(tmp_path, "gpu-003", None, None,
                                                     offered_after_update=TRIXIE)})
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert (tmp_path / "gpu-003" / "apt-get.calls").read_text() == "update\n"
    assert not (tmp_path / "ctl" / "apt-get.calls").exists()
    assert "gpu-003: slurmd would install Slurm 24.11.5" in said(proc), said(proc)[-3000:]


def test_a_failing_dpkg_query_fails_the_read_not_the_judgement(tmp_path):
    proc = run_check(tmp_path, {"ctl": stand_ins(tmp_path, "ctl", BOOKWORM, BOOKWORM),
                                "gpu-001": stand_ins(tmp_path, "gpu-001", BOOKWORM, TRIXIE,
                                                     dpkg_fails=True)})
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert "Read the Slurm release installed here" in proc.stdout
    assert "fatal: [gpu-001]" in proc.stdout
    assert "a jump Slurm cannot make" not in said(proc)


def test_upgrade_reads_fresh_lists_and_groups_the_hosts_offered_a_newer_build(tmp_path):
    """--upgrade-slurm: each host reads its lists again, names every installed package whose
    candidate is newer (dpkg --compare-versions, the real one), and lands in the group
    site.yml's upgrade plays take; a host already on the newest build is left out."""
    newer = TRIXIE + "+standin1"
    # The newer build appears once the lists are read again.
    proc = run_check(tmp_path, {"ctl": stand_ins(tmp_path, "ctl", TRIXIE, TRIXIE, newer),
                                "gpu-001": stand_ins(tmp_path, "gpu-001", TRIXIE, TRIXIE, newer),
                                "gpu-002": stand_ins(tmp_path, "gpu-002", newer, newer, newer)},
                     upgrade=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    for host in ("ctl", "gpu-001", "gpu-002"):
        assert (tmp_path / host / "apt-get.calls").read_text() == "update\n"
    planned = proc.stdout.split("Say what would be upgraded")[1]
    assert sorted(re.findall(r"ok: \[(\S+)\] =>\s+msg: UPGRADE (.*)", planned)) == [
        (host, f"slurm-client={newer} slurmd={newer}") for host in ("ctl", "gpu-001")], planned
    assert (f"NOTE: ctl, gpu-001: the apt sources offer Slurm {newer} over the installed "
            f"{TRIXIE}; this run upgrades them") in said(proc), said(proc)[-3000:]
