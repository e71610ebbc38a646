"""Nodes removed from a local stack's config: drained, their jobs waited for or the run
refused naming them, nodes put back resumed (LocalCluster.drain_leaving_nodes), against a
stand-in for the controller's Slurm commands (no podman needed)."""

from __future__ import annotations

import functools
import subprocess

import pytest
from ansible_collections.metalslurm.cluster.plugins.module_utils import slurm_leaving
from ansible_collections.metalslurm.cluster.plugins.module_utils.slurm_leaving import (
    LEAVING_REASON,
)

from infra import cli
from infra.providers import local as local_provider
from infra.providers.local import (
    LeavingNodesBusy,
    LocalCluster,
    LocalPlan,
    LocalProviderError,
    leaving_refusal,
)
from infra.stack.config import parse_config
from infra.stack.state import StateDir

NO_NFS = "nodev\tproc\n"
CLUSTER = "lab"


class FakeSlurm:
    """``podman exec lab-ctl`` answered as Slurm would: sinfo's node list with reasons,
    scontrol's drains and resumes applied, squeue's jobs until ``jobs_for`` polls ran out."""

    def __init__(self, reasons: dict[str, str], jobs: list[str], jobs_for: int,
                 sinfo_rc: int = 0) -> None:
        self.reasons = reasons
        self.jobs = jobs
        self.jobs_for = jobs_for
        self.sinfo_rc = sinfo_rc
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, *args: str, **_kw) -> subprocess.CompletedProcess[str]:
        assert args[:2] == ("exec", f"{CLUSTER}-ctl"), args
        command = args[2:]
        self.calls.append(command)
        out = ""
        if command[0] == "sinfo" and self.sinfo_rc:
            return subprocess.CompletedProcess(["podman", *args], self.sinfo_rc, "", {
                127: 'exec: "sinfo": executable file not found in $PATH',
                1: "slurm_load_node error: Unable to contact slurm controller (connect "
                   "failure)"}[self.sinfo_rc])
        if command[0] == "sinfo":
            out = "".join(f"{n}|{'idle' if r == 'none' else 'drained'}|{r}\n"
                          for n, r in self.reasons.items())
        elif command[0] == "scontrol":
            nodes = command[2].removeprefix("nodename=").split(",")
            for node in nodes:
                self.reasons[node] = (command[4].removeprefix("reason=")
                                      if command[3] == "state=DRAIN" else "none")
        elif command[0] == "squeue" and "--states=PENDING" not in command and self.jobs_for > 0:
            self.jobs_for -= 1
            out = "".join(f"{j}\n" for j in self.jobs)
        return subprocess.CompletedProcess(["podman", *args], 0, out, "")


@pytest.fixture
def cluster(tmp_path, monkeypatch) -> LocalCluster:
    """A 2-node pool shrunk to 1: gpu-002's container is still there."""
    procfs = tmp_path / "filesystems"
    procfs.write_text(NO_NFS)
    cfg = parse_config({"metalslurm:clusterName": CLUSTER,
                        "metalslurm:computePools": [{"name": "gpu", "count": 1}]})
    made = [{"Names": [f"{CLUSTER}-{n}"], "Labels": {"metalslurm.cluster": CLUSTER,
                                                    "metalslurm.node": n}}
            for n in ("ctl", "gpu-001", "gpu-002")]
    monkeypatch.setattr(local_provider, "containers", lambda _filters: made)
    monkeypatch.setattr(LocalCluster, "running", lambda _self, node: node == "ctl")
    monkeypatch.setattr(local_provider.time, "sleep", lambda _s: None)
    logged: list[str] = []
    return LocalCluster(plan=LocalPlan.from_config(cfg, procfs), state=StateDir(tmp_path / "st"),
                        log=logged.append)


def fake_slurm(monkeypatch, jobs: list[str], jobs_for: int,
               reasons: dict[str, str] | None = None, sinfo_rc: int = 0) -> FakeSlurm:
    slurm = FakeSlurm(reasons or {"gpu-001": "none", "gpu-002": "none"}, jobs, jobs_for,
                      sinfo_rc)
    monkeypatch.setattr(local_provider, "podman", slurm)
    return slurm


def test_a_leaving_node_without_jobs_is_drained_and_let_go(cluster, monkeypatch):
    slurm = fake_slurm(monkeypatch, ["12|alice|RUNNING|gpu-002"], jobs_for=0)
    assert cluster.drain_leaving_nodes(cluster.specs(), wait_s=0) == ["gpu-002"]
    assert ("scontrol", "update", "nodename=gpu-002", "state=DRAIN",
            f"reason={LEAVING_REASON}") in slurm.calls
    assert slurm.reasons == {"gpu-001": "none", "gpu-002": LEAVING_REASON}


def test_a_job_on_a_leaving_node_refuses_at_once_naming_it(cluster, monkeypatch):
    slurm = fake_slurm(monkeypatch, ["12|alice|RUNNING|gpu-[001-002]"], jobs_for=99)
    with pytest.raises(LeavingNodesBusy) as refused:
        cluster.drain_leaving_nodes(cluster.specs(), wait_s=0)
    message = str(refused.value)
    assert message.startswith("gpu-002 is no longer in the stack config but a job still needs "
                              "it: job 12 (alice, running on gpu-[001-002]); nothing was "
                              "removed.")
    assert "--drain-wait SECONDS" in message
    # Drained (no new job lands there) and asked once: no wait was given.
    assert slurm.reasons["gpu-002"] == LEAVING_REASON
    assert [c[0] for c in slurm.calls] == ["sinfo", "scontrol", "squeue", "squeue"]


def test_the_run_waits_for_the_jobs_up_to_the_bound(cluster, monkeypatch):
    # The wait's clock and sleep: a sleep moves the clock on (no real waiting).
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    monkeypatch.setattr(local_provider.slurm_leaving, "drain_leaving", functools.partial(
        slurm_leaving.drain_leaving, sleep=sleep, clock=lambda: now[0]))
    slurm = fake_slurm(monkeypatch, ["12|alice|RUNNING|gpu-002", "13|bob|COMPLETING|gpu-002"],
                       jobs_for=3)
    assert cluster.drain_leaving_nodes(cluster.specs(), wait_s=60, poll_s=5) == ["gpu-002"]
    # Three looks with jobs, one without; each asks for the jobs there and the pending ones.
    assert [c[0] for c in slurm.calls].count("squeue") == 8
    assert now == [15.0]  # three sleeps of poll_s

    slurm = fake_slurm(monkeypatch, ["12|alice|RUNNING|gpu-002"], jobs_for=99)
    with pytest.raises(LeavingNodesBusy,
                       match=r"running on gpu-002\) after a wait of 20 s; nothing "):
        cluster.drain_leaving_nodes(cluster.specs(), wait_s=20, poll_s=5)


def test_a_node_put_back_before_it_left_is_resumed(cluster, monkeypatch):
    """gpu-001 drained by an earlier refused run, then put back in the config; a drain of
    someone else's (another reason) is left alone."""
    slurm = fake_slurm(monkeypatch, [], jobs_for=0, reasons={
        "gpu-001": LEAVING_REASON, "gpu-002": "none", "gpu-003": "maintenance"})
    cluster.drain_leaving_nodes(cluster.specs(), wait_s=0)
    assert ("scontrol", "update", "nodename=gpu-001", "state=RESUME") in slurm.calls
    assert slurm.reasons["gpu-001"] == "none"
    assert slurm.reasons["gpu-003"] == "maintenance"


def test_without_a_running_controller_nothing_is_asked(cluster, monkeypatch):
    slurm = fake_slurm(monkeypatch, ["12|alice|RUNNING|gpu-002"], jobs_for=99)
    monkeypatch.setattr(LocalCluster, "running", lambda _self, _node: False)
    assert cluster.drain_leaving_nodes(cluster.specs(), wait_s=0) == ["gpu-002"]
    assert slurm.calls == []


def test_a_controller_without_slurm_yet_has_no_jobs_to_wait_for(cluster, monkeypatch):
    """A cluster whose nodes were made but never configured (up --no-configure)."""
    slurm = fake_slurm(monkeypatch, ["12|alice|RUNNING|gpu-002"], jobs_for=99, sinfo_rc=127)
    assert cluster.drain_leaving_nodes(cluster.specs(), wait_s=0) == ["gpu-002"]
    assert [c[0] for c in slurm.calls] == ["sinfo"]


def test_a_slurmctld_that_does_not_answer_refuses_the_removal(cluster, monkeypatch):
    fake_slurm(monkeypatch, [], jobs_for=0, sinfo_rc=1)
    with pytest.raises(LocalProviderError) as refused:
        cluster.drain_leaving_nodes(cluster.specs(), wait_s=0)
    assert str(refused.value).startswith(
        "cannot ask Slurm whether jobs run on gpu-002, which is no longer in the stack "
        "config: slurm_load_node error: Unable to contact slurm controller (connect "
        "failure); nothing was removed.")


def test_a_down_slurmctld_does_not_stop_an_up_that_removes_nothing(tmp_path, monkeypatch):
    """'up' is how a cluster whose slurmctld is down gets repaired."""
    procfs = tmp_path / "filesystems"
    procfs.write_text(NO_NFS)
    cfg = parse_config({"metalslurm:clusterName": CLUSTER})
    made = [{"Names": [f"{CLUSTER}-{n}"], "Labels": {"metalslurm.node": n}}
            for n in ("ctl", "gpu-001", "gpu-002")]
    monkeypatch.setattr(local_provider, "containers", lambda _filters: made)
    monkeypatch.setattr(LocalCluster, "running", lambda _self, node: node == "ctl")
    fake_slurm(monkeypatch, [], jobs_for=0, sinfo_rc=1)
    whole = LocalCluster(plan=LocalPlan.from_config(cfg, procfs), state=StateDir(tmp_path / "s"))
    assert whole.drain_leaving_nodes(whole.specs(), wait_s=0) == []


def test_a_node_slurm_does_not_know_is_not_drained(cluster, monkeypatch):
    slurm = fake_slurm(monkeypatch, [], jobs_for=0, reasons={"gpu-001": "none"})
    assert cluster.drain_leaving_nodes(cluster.specs(), wait_s=0) == ["gpu-002"]
    assert [c[0] for c in slurm.calls] == ["sinfo"]


def test_the_refusal_names_every_job_and_node():
    text = leaving_refusal(["gpu-002", "gpu-003"], ["7|carol|RUNNING|gpu-[002-003]",
                                                    "8|dave|SUSPENDED|gpu-003"], 0)
    assert text.startswith("gpu-002,gpu-003 are no longer in the stack config but jobs still "
                           "need them: job 7 (carol, running on gpu-[002-003]); job 8 (dave, "
                           "suspended on gpu-003); nothing was removed.")
    assert "put them back in the stack config" in text


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "1e9"])
@pytest.mark.parametrize("command", [["local", "up", "--stack"], ["configure", "-i"],
                                     ["up", "--ssh-key", "/absent/key", "--stack"]])
def test_a_bad_drain_wait_is_refused_before_anything(command, value, capsys, tmp_path):
    rc = cli.main([*command, str(tmp_path / "absent.yaml"), f"--drain-wait={value}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and "--drain-wait" in err[0] and "from 0" in err[0], err
    assert list(tmp_path.iterdir()) == []


def test_configure_hands_its_drain_wait_to_the_playbook(monkeypatch, tmp_path):
    """--drain-wait becomes metalslurm_drain_wait, which the controller play's step reads
    (roles/slurm_common/tasks/leaving.yml); without it the inventory's value or the
    module's default holds."""
    from infra.ops import configure as configure_mod

    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all:\n  hosts: {ctl: {}}\n  children:\n"
                         "    slurm_controller: {hosts: {ctl: null}}\n")
    seen: list[dict] = []

    class Result:
        rc = 0

    monkeypatch.setattr(configure_mod, "run_playbook",
                        lambda _inv, **kw: seen.append(kw["extra_vars"]) or Result())
    monkeypatch.setattr(configure_mod, "print_summary", lambda *_a, **_k: None)
    monkeypatch.setattr(cli, "load_inventory", lambda *_a: None)
    assert cli.main(["configure", "-i", str(inventory), "--drain-wait", "90"]) == 0
    assert cli.main(["configure", "-i", str(inventory)]) == 0
    # --upgrade-slurm likewise becomes metalslurm_slurm_upgrade (roles/slurm_common's
    # slurm_common_upgrade reads it; tasks/upgrade.yml does the upgrade).
    assert cli.main(["configure", "-i", str(inventory), "--upgrade-slurm"]) == 0
    assert seen == [{"metalslurm_drain_wait": 90.0}, {}, {"metalslurm_slurm_upgrade": True}]
