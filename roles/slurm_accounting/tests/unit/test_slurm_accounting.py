"""The slurm_accounting module, run as Ansible runs it, against a stateful fake sacctmgr/squeue
(tests/fixtures/slurm/sacctmgr-fake): the fake keeps slurmdbd's state in a JSON file and prints
sacctmgr's --parsable2 shapes, so every test checks both the commands and the state they leave."""

import json
import os
import subprocess
import sys

import pytest
import yaml

from tests.paths import FIXTURES, REPO

CLUSTER = "metalslurm"
ARGS = yaml.safe_load((FIXTURES / "slurm/accounting-args.yml")
                     .read_text())
QOS = ARGS["qos"]
ACCOUNTS = ARGS["accounts"]


@pytest.fixture
def slurm(tmp_path):
    """A PATH with fake sacctmgr/squeue, and helpers to read and seed the fake's state."""
    fake = REPO / "tests/fixtures/slurm/sacctmgr-fake/fake_slurm.py"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sacctmgr", "squeue"):
        script = bin_dir / tool
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{fake}" {tool} "$@"\n')
        script.chmod(0o755)
    state_file = tmp_path / "slurmdbd.json"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "FAKE_SLURM_STATE": str(state_file)}

    class Slurm:
        def run(self, *args, stdin=""):
            return subprocess.run([str(bin_dir / "sacctmgr"), *args], env=env, input=stdin,
                                  capture_output=True, text=True, check=False)

        def state(self):
            if not state_file.exists():  # sacctmgr never ran
                return {"log": [], "jobs": []}
            return json.loads(state_file.read_text())

        def show(self, *args):
            return self.run("--noheader", "--parsable2", "show", *args).stdout.splitlines()

        def add_job(self, job_id, user, account, qos="normal", state="RUNNING"):
            data = json.loads(state_file.read_text())
            data["jobs"].append({"id": job_id, "user": user, "account": account, "qos": qos,
                                 "state": state})
            state_file.write_text(json.dumps(data))

        def writes(self):
            return [c for c in self.state()["log"]
                    if c[0] == "sacctmgr" and "show" not in c]

    slurm = Slurm()
    slurm.env = env
    return slurm


@pytest.fixture
def run_module(tmp_path, slurm):
    module = REPO / "roles/slurm_accounting/library/slurm_accounting.py"

    def run(qos=QOS, accounts=ACCOUNTS, prune=True, check=False, **extra):
        args = {"cluster": CLUSTER, "qos": qos, "accounts": accounts, "prune": prune,
                "_ansible_check_mode": check, **extra}
        path = tmp_path / "args.json"
        path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
        env = {**slurm.env, "PYTHONPATH": str(REPO / "roles/slurm_accounting/module_utils")}
        proc = subprocess.run([sys.executable, str(module), str(path)], capture_output=True,
                              text=True, check=False, env=env)
        assert proc.stdout, proc.stderr
        return json.loads(proc.stdout)
    return run


def assoc_rows(slurm):
    return sorted(slurm.show("assoc", "format=Account,User,Share,QOS,DefaultQOS,ParentName"))


def test_creates_everything_from_an_empty_database(run_module, slurm):
    result = run_module()
    assert result["changed"] is True, result
    assert slurm.show("cluster", "format=Cluster") == [CLUSTER]
    assert sorted(slurm.show("qos", "format=Name,Priority,GrpTRESMins,MaxTRESPerUser,MaxWall,"
                             "Flags,Preempt,PreemptMode,GraceTime,MaxTRESPerJob")) == [
        "normal|0||||||cluster|00:00:00|",
        "scavenger|0||||||REQUEUE|00:00:00|",
        "team-gpu|10|gres/gpu=43200|cpu=16|2-00:00:00|DenyOnLimit,NoDecay||cluster|00:00:00|",
        "urgent|100|||||scavenger|cluster|00:05:00|mem=512G,gres/gpu=16",
    ]
    # urgent may preempt scavenger: set by a modify after every QOS exists
    assert result["commands"][-1] == ("sacctmgr --immediate modify qos where name=urgent set "
                                      "Preempt=scavenger") or any(
        c.endswith("set Preempt=scavenger") for c in result["commands"])
    assert assoc_rows(slurm) == sorted([
        "root||1|normal||", "root|root|1|normal||",
        "team-a||10|normal,team-gpu|team-gpu|root",
        "team-a|alice|1|normal,team-gpu|team-gpu|", "team-a|carol|1|normal,team-gpu|team-gpu|",
        "team-b||1|normal,scavenger,urgent||root",
        "team-b|bob|1|normal,scavenger,urgent||", "team-b|alice|1|normal,scavenger,urgent||",
    ])
    assert sorted(slurm.show("user", "format=User,DefaultAccount")) == [
        "alice|team-a", "bob|team-b", "carol|team-a", "root|root"]
    assert sorted(slurm.show("account", "format=Account,Description,Organization")) == [
        "root|default root account|root", "team-a|team a|metalslurm",
        "team-b|team-b|metalslurm"]
    assert all(c[1] == "--immediate" for c in slurm.writes())
    assert len(result["commands"]) == len(slurm.writes())


def test_second_run_changes_nothing_and_writes_nothing(run_module, slurm):
    run_module()
    writes = len(slurm.writes())
    again = run_module()
    assert again["changed"] is False, again["actions"]
    assert again["commands"] == []
    assert len(slurm.writes()) == writes


def test_check_mode_reports_the_commands_and_runs_none(run_module, slurm):
    result = run_module(check=True)
    assert result["changed"] is True
    assert "sacctmgr --immediate add cluster metalslurm" in result["commands"]
    assert any(c.startswith("sacctmgr --immediate add qos team-gpu") for c in result["commands"])
    assert slurm.writes() == []
    assert slurm.show("cluster", "format=Cluster") == []


def test_a_changed_limit_is_one_modify(run_module, slurm):
    run_module()
    qos = [dict(QOS[0], limits={**QOS[0]["limits"], "GrpTRESMins": "gres/gpu=86400"}),
           *QOS[1:]]
    result = run_module(qos=qos)
    assert result["commands"] == [
        "sacctmgr --immediate modify qos where name=team-gpu set GrpTRESMins=gres/gpu=86400"]
    assert "team-gpu|gres/gpu=86400" in slurm.show("qos", "format=Name,GrpTRESMins")
    assert run_module(qos=qos)["changed"] is False


def test_a_limit_dropped_from_config_is_reset(run_module, slurm):
    run_module()
    limits = {k: v for k, v in QOS[0]["limits"].items() if k != "MaxTRESPerUser"}
    result = run_module(qos=[dict(QOS[0], limits=limits), *QOS[1:]])
    assert result["commands"] == [
        "sacctmgr --immediate modify qos where name=team-gpu set MaxTRESPerUser=cpu=-1"]
    assert "team-gpu|" in slurm.show("qos", "format=Name,MaxTRESPerUser")


def test_equivalent_spellings_are_not_changes(run_module, slurm):
    run_module()
    spelled = [dict(QOS[0], limits={"grptresmins": "GRES/GPU=43200", "maxtresperuser": "cpu=16",
                                    "MaxWall": "2-00:00:00", "Flags": "nodecay,denyonlimit"}),
               QOS[1], dict(QOS[2], limits={"GraceTime": "00:05:00",
                                            "MaxTRESPerJob": "mem=524288M,gres/gpu=16"})]
    accounts = [dict(ACCOUNTS[0], description="TEAM A", fairshare="10"), ACCOUNTS[1]]
    assert run_module(qos=spelled, accounts=accounts)["changed"] is False


def test_prune_deletes_a_removed_account_and_leaves_a_hand_made_one(run_module, slurm):
    run_module()
    made = slurm.run("--immediate", "add", "account", "lab-x", f"Cluster={CLUSTER}",
                     "Description=made by hand")
    assert made.returncode == 0, made.stderr
    assert slurm.run("--immediate", "add", "user", "dave", "Account=lab-x",
                     f"Cluster={CLUSTER}").returncode == 0
    result = run_module(accounts=[ACCOUNTS[0]])
    assert result["changed"] is True
    assert "sacctmgr --immediate delete account where name=team-b" in result["commands"]
    assert "lab-x" in result["unmanaged"]["accounts"]
    accounts = [line.split("|")[0] for line in slurm.show("account", "format=Account")]
    assert sorted(accounts) == ["lab-x", "root", "team-a"]
    assert "lab-x|dave" in slurm.show("assoc", "format=Account,User")
    assert sorted(slurm.show("user", "format=User,DefaultAccount")) == [
        "alice|team-a", "carol|team-a", "dave|lab-x", "root|root"]  # bob had only team-b
    assert run_module(accounts=[ACCOUNTS[0]])["changed"] is False


def test_without_prune_nothing_is_deleted(run_module, slurm):
    run_module()
    result = run_module(accounts=[ACCOUNTS[0]], qos=QOS[:1], prune=False)
    assert result["changed"] is False
    assert "team-b|bob" in slurm.show("assoc", "format=Account,User")


def test_prune_removes_a_managed_qos_but_never_normal_or_a_hand_made_one(run_module, slurm):
    run_module()
    assert slurm.run("--immediate", "add", "qos", "handmade").returncode == 0
    accounts = [ACCOUNTS[0], dict(ACCOUNTS[1], qos=["normal"])]
    result = run_module(qos=QOS[:1], accounts=accounts)
    assert sorted(c for c in result["commands"] if " delete qos " in c) == [
        "sacctmgr --immediate delete qos where name=scavenger",
        "sacctmgr --immediate delete qos where name=urgent"]
    assert sorted(slurm.show("qos", "format=Name")) == ["handmade", "normal", "team-gpu"]


def test_a_user_moved_between_accounts(run_module, slurm):
    run_module()
    moved = [dict(ACCOUNTS[0], users=["carol"]), dict(ACCOUNTS[1], users=["bob", "alice"])]
    result = run_module(accounts=moved)
    assert result["commands"] == [
        "sacctmgr --immediate modify user where name=alice cluster=metalslurm set "
        "DefaultAccount=team-b",
        "sacctmgr --immediate delete user where name=alice account=team-a cluster=metalslurm",
    ]
    assert "alice|team-b" in slurm.show("user", "format=User,DefaultAccount")
    users = sorted(slurm.show("assoc", "format=Account,User"))
    assert "team-a|alice" not in users and "team-b|alice" in users
    assert run_module(accounts=moved)["changed"] is False


def test_a_new_user_first_account_is_the_default(run_module, slurm):
    run_module()
    accounts = [ACCOUNTS[0], dict(ACCOUNTS[1], users=["bob", "alice", "erin"])]
    result = run_module(accounts=accounts)
    assert result["commands"] == [
        "sacctmgr --immediate add user erin Account=team-b Cluster=metalslurm "
        "DefaultAccount=team-b"]


@pytest.mark.parametrize(("accounts", "qos", "message"), [
    ([dict(ACCOUNTS[0], qos=["normal", "gpu-big"], default_qos="normal")], QOS,
     "account team-a: QOS 'gpu-big' is neither in qos nor in the database"),
    ([dict(ACCOUNTS[0], default_qos="urgent")], QOS,
     "default_qos 'urgent' is not in its qos list"),
    (ACCOUNTS, [*QOS[:2], dict(QOS[2], preempt=["nope"])],
     "QOS urgent: Preempt names QOS 'nope'"),
    (ACCOUNTS, [dict(QOS[0], limits={"MaxGPUs": 8})], "'MaxGPUs' is not a QOS limit"),
    (ACCOUNTS, [dict(QOS[0], limits={"GrpTRES": "gpu=8"})], "'gpu' is not a TRES name"),
    ([dict(ACCOUNTS[0], name="Team-A")], QOS, "Slurm stores these names lower-case"),
])
def test_bad_input_fails_clearly_and_applies_nothing(run_module, slurm, accounts, qos,
                                                     message):
    result = run_module(accounts=accounts, qos=qos)
    assert result.get("failed") is True
    assert message in result["msg"]
    assert result["msg"].startswith("nothing applied: ")
    assert slurm.writes() == []


def test_prune_refuses_while_jobs_are_active_and_applies_nothing(run_module, slurm):
    run_module()
    slurm.add_job(41, "bob", "team-b", state="RUNNING")
    slurm.add_job(42, "bob", "team-b", state="PENDING")
    writes = len(slurm.writes())
    result = run_module(accounts=[ACCOUNTS[0], dict(ACCOUNTS[1], name="team-c")])
    assert result.get("failed") is True
    assert "account team-b: job(s) 41 (bob, running), 42 (bob, pending)" in result["msg"]
    assert "scancel --account=NAME" in result["msg"]
    assert len(slurm.writes()) == writes  # not even team-c was added


def test_root_account_user_and_normal_qos_are_never_pruned(run_module, slurm):
    run_module()
    result = run_module(qos=[], accounts=[])
    deletes = [c for c in result["commands"] if " delete " in c]
    assert not any(word in c for c in deletes for word in ("name=root", "name=normal"))
    assert sorted(slurm.show("account", "format=Account")) == ["root"]
    assert sorted(slurm.show("qos", "format=Name")) == ["normal"]
    assert slurm.show("user", "format=User") == ["root"]


def test_an_unmanaged_account_named_in_config_is_adopted(run_module, slurm):
    run_module(accounts=[], qos=[])
    slurm.run("--immediate", "add", "account", "team-a", f"Cluster={CLUSTER}",
              "Description=Team A", "Fairshare=10")
    result = run_module(qos=QOS, accounts=[dict(ACCOUNTS[0], users=[])])
    assert "sacctmgr --immediate modify account where name=team-a set " \
           "Organization=metalslurm" in result["commands"]


def test_sacctmgr_without_immediate_asks_and_discards(slurm):
    """Why the module always passes --immediate: without it sacctmgr waits for an answer."""
    out = slurm.run("add", "cluster", "other", stdin="\n")
    assert "Would you like to commit changes?" in out.stdout
    assert "Changes Discarded" in out.stdout
    assert slurm.show("cluster", "format=Cluster") == []
