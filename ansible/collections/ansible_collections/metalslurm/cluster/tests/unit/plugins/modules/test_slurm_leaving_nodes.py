"""Module metalslurm.cluster.slurm_leaving_nodes run by ansible-playbook, as slurm_common's
tasks/leaving.yml and the controller role's last look call it, against stand-ins for sinfo,
scontrol and squeue on PATH: the drain, the refusal naming the job and how to wait, check
mode and the last look, no Slurm yet, slurmctld down, bad options."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.metalslurm.cluster.plugins.module_utils.slurm_leaving import (
    LEAVING_REASON,
)

from tests.paths import REPO

# One stand-in for the three commands (by the name it is called with): the nodes and their
# reasons ("none": not drained) and the jobs in state.json beside it; each call appended to
# calls.log. sinfo exits 1 when state.json says slurmctld is down.
STANDIN = """#!{python}
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
state_file = os.path.join(here, "state.json")
state = json.load(open(state_file))
name, args = os.path.basename(sys.argv[0]), sys.argv[1:]
open(os.path.join(here, "calls.log"), "a").write(" ".join([name] + args) + "\\n")
if name == "sinfo" and state.get("down"):
    sys.exit("slurm_load_node error: Unable to contact slurm controller (connect failure)")
if name == "sinfo":
    for node, reason in state["reasons"].items():
        print(f"{{node}}|{{'idle' if reason == 'none' else 'drained'}}|{{reason}}")
elif args[:2] == ["show", "hostnames"]:
    print("\\n".join(args[2].split(",")))
elif name == "scontrol":
    for node in args[1].removeprefix("nodename=").split(","):
        state["reasons"][node] = (args[3].removeprefix("reason=")
                                  if args[2] == "state=DRAIN" else "none")
    json.dump(state, open(state_file, "w"))
elif name == "squeue" and "--states=PENDING" not in args:
    print("".join(j + "\\n" for j in state["jobs"]), end="")
"""
MODULE = "metalslurm.cluster.slurm_leaving_nodes"


def run_module(tmp_path: Path, compute: list[str], state: dict | None, *options: str,
               **args) -> subprocess.CompletedProcess[str]:
    """The module on a controller whose inventory has ``compute`` hosts, as leaving.yml calls
    it (``args`` added); ``state`` None: no Slurm commands on PATH (a controller not yet
    configured)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if state is not None:
        (bin_dir / "state.json").write_text(json.dumps(state))
        for name in ("sinfo", "scontrol", "squeue"):
            (bin_dir / name).write_text(STANDIN.format(python=sys.executable))
            (bin_dir / name).chmod(0o755)
    inventory = {"all": {"hosts": {"ctl": {"ansible_connection": "local",
                                           "ansible_python_interpreter": sys.executable}},
                         "children": {"slurm_controller": {"hosts": {"ctl": None}},
                                      "slurm_compute": {"hosts": dict.fromkeys(compute)}}}}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    task = {"nodes": "{{ groups['slurm_compute'] }}",
            "wait": "{{ metalslurm_drain_wait | default(omit) }}",
            "max_share": "{{ metalslurm_leaving_max_share | default(omit) }}",
            "config": str(tmp_path / "slurm.conf"), **args}
    play = [{"hosts": "slurm_controller", "gather_facts": False,
             "environment": {"PATH": f"{bin_dir}:/usr/bin:/bin"},
             "tasks": [{"name": "leaving nodes", MODULE: task}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"),
           "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i",
                           str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml"),
                           *options], capture_output=True, text=True, env=env, check=False,
                          timeout=300)


def said(proc: subprocess.CompletedProcess[str]) -> str:
    return " ".join((proc.stdout + proc.stderr).split()).replace("\\", "")


def reasons(tmp_path: Path) -> dict[str, str]:
    return json.loads((tmp_path / "bin" / "state.json").read_text())["reasons"]


def calls(tmp_path: Path) -> list[str]:
    return [c.split()[0] for c in (tmp_path / "bin" / "calls.log").read_text().splitlines()]


def test_a_job_on_a_node_the_inventory_dropped_stops_the_run_naming_it(tmp_path):
    state = {"reasons": {"gpu-001": "none", "gpu-002": "none"},
             "jobs": ["41|carol|RUNNING|gpu-002"]}
    proc = run_module(tmp_path, ["gpu-001"], state)
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert ("gpu-002 is no longer in the inventory but a job still needs it: job 41 (carol, "
            "running on gpu-002); nothing was removed.") in said(proc), said(proc)[-3000:]
    assert ("Run the configure again once those jobs end, or with --drain-wait SECONDS "
            "(ansible-playbook: -e metalslurm_drain_wait=SECONDS) to wait for them") in said(proc)
    assert reasons(tmp_path) == {"gpu-001": "none", "gpu-002": LEAVING_REASON}


def test_an_idle_leaving_node_is_drained_and_one_back_in_the_inventory_resumed(tmp_path):
    state = {"reasons": {"gpu-001": LEAVING_REASON, "gpu-002": "none"}, "jobs": []}
    proc = run_module(tmp_path, ["gpu-001"], state, "-e", "metalslurm_drain_wait=30")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "changed=1" in proc.stdout
    assert reasons(tmp_path) == {"gpu-001": "none", "gpu-002": LEAVING_REASON}
    again = run_module(tmp_path, ["gpu-001"], None)  # the stand-ins keep their state
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout[-3000:]


@pytest.mark.parametrize(("options", "args", "changed"), [
    (["--check"], {}, "changed=1"), ([], {"recheck": True}, "changed=0")])
def test_check_mode_and_the_last_look_drain_nothing(tmp_path, options, args, changed):
    state = {"reasons": {"gpu-001": "none", "gpu-002": "none"}, "jobs": []}
    proc = run_module(tmp_path, ["gpu-001"], state, *options, **args)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert changed in proc.stdout
    assert reasons(tmp_path) == {"gpu-001": "none", "gpu-002": "none"}
    # Read only: the nodes, then the jobs on the one leaving and the pending ones.
    assert calls(tmp_path) == ["sinfo", "squeue", "squeue"]


def test_the_last_look_refuses_a_job_given_a_leaving_node_since_it_was_drained(tmp_path):
    state = {"reasons": {"gpu-001": "none", "gpu-002": "none"},
             "jobs": ["41|carol|RUNNING|gpu-002"]}
    proc = run_module(tmp_path, ["gpu-001"], state, "-e", "metalslurm_drain_wait=600",
                      recheck=True)
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert "job 41 (carol, running on gpu-002); nothing was removed" in said(proc)
    assert "scontrol" not in calls(tmp_path)


def test_most_of_the_cluster_leaving_is_refused_before_any_drain(tmp_path):
    state = {"reasons": {"gpu-001": "none", "gpu-002": "none", "gpu-003": "none"}, "jobs": []}
    proc = run_module(tmp_path, ["gpu-001"], state)
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert ("2 of the 3 nodes Slurm knows are not in the inventory (gpu-002,gpu-003): more "
            "than 50% would leave in one run, so nothing was drained or removed.") in said(proc)
    assert reasons(tmp_path) == state["reasons"]
    proc = run_module(tmp_path, ["gpu-001"], state, "-e", "metalslurm_leaving_max_share=1")
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_a_controller_without_slurm_yet_has_nothing_to_drain(tmp_path):
    proc = run_module(tmp_path, ["gpu-001"], None)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "ok=1" in proc.stdout and "changed=0" in proc.stdout
    assert "did not answer" not in said(proc)


def test_slurmctld_down_refuses_when_slurm_conf_names_a_leaving_node(tmp_path):
    (tmp_path / "slurm.conf").write_text("ClusterName=lab\nNodeName=gpu-001,gpu-002 CPUs=4\n")
    state = {"reasons": {}, "jobs": [], "down": True}
    proc = run_module(tmp_path, ["gpu-001"], state)
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert ("cannot ask Slurm whether jobs run on gpu-002, which is no longer in the "
            "inventory: slurm_load_node error: Unable to contact slurm controller (connect "
            "failure); nothing was removed.") in said(proc)
    proc = run_module(tmp_path, ["gpu-001", "gpu-002"], None)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert ("slurmctld did not answer (slurm_load_node error: Unable to contact slurm "
            "controller (connect failure)); slurm.conf names no node that leaves, so the run "
            "goes on") in said(proc)


@pytest.mark.parametrize(("option", "bounds"), [
    ("metalslurm_drain_wait=-1", "from 0 to 604800"),
    ("metalslurm_drain_wait=nan", "from 0 to 604800"),
    ("metalslurm_drain_wait=604801", "from 0 to 604800"),
    ("metalslurm_leaving_max_share=0", "above 0 and at most 1"),
    ("metalslurm_leaving_max_share=1.5", "above 0 and at most 1"),
])
def test_a_bad_value_is_refused_naming_the_bounds(tmp_path, option, bounds):
    state = {"reasons": {"gpu-001": "none"}, "jobs": []}
    proc = run_module(tmp_path, ["gpu-001"], state, "-e", option)
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert bounds in said(proc)
