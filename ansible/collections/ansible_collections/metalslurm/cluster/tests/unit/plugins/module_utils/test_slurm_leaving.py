"""Nodes leaving the cluster (module_utils/slurm_leaving.py), the one implementation behind
the configure's steps on the controller and 'local up': which nodes are leaving, the drain
and the resume, the jobs that still need them, the wait, the refusals, against a stand-in
for Slurm's client commands."""

from __future__ import annotations

import hostlist
import pytest
from ansible_collections.metalslurm.cluster.plugins.module_utils.slurm_leaving import (
    LEAVING_REASON,
    NOT_INSTALLED,
    LeavingError,
    LeavingNodesBusy,
    Words,
    conf_node_names,
    drain_leaving,
    refusal,
)

JOB = "41|carol|RUNNING|gpu-002"
LOCAL = Words(source="stack config", rerun="'local up'", wait_hint="--drain-wait SECONDS")


class Slurm:
    """sinfo, scontrol and squeue as slurmctld answers them: nodes with their state and
    reason, drains and resumes applied, ``jobs`` on the nodes listed for the first
    ``jobs_for`` looks, ``pending`` jobs with the nodes they asked for."""

    def __init__(self, nodes: dict[str, str], jobs: tuple[str, ...] = (), jobs_for: int = 0,
                 pending: tuple[str, ...] = (), sinfo: tuple[int, str] = (0, ""),
                 fails: str = "") -> None:
        # {node: reason}; a reason other than "none" means drained.
        self.reasons = dict(nodes)
        self.jobs, self.jobs_for, self.pending = list(jobs), jobs_for, list(pending)
        self.sinfo, self.fails = sinfo, fails
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str]) -> tuple[int, str, str]:
        self.calls.append(argv)
        if argv[0] == self.fails:
            return 1, "", f"{argv[0]}: error: Invalid node name specified"
        if argv[0] == "sinfo":
            rc, err = self.sinfo
            out = "".join(f"{n}|{'idle' if r == 'none' else 'drained'}|{r}\n"
                          for n, r in self.reasons.items())
            return rc, "" if rc else out, err
        if argv[:3] == ["scontrol", "show", "hostnames"]:
            return 0, "".join(f"{n}\n" for n in hostlist.expand_hostlist(argv[3])), ""
        if argv[0] == "scontrol":
            for node in argv[2].removeprefix("nodename=").split(","):
                self.reasons[node] = (argv[4].removeprefix("reason=")
                                      if argv[3] == "state=DRAIN" else "none")
            return 0, "", ""
        assert argv[0] == "squeue", argv
        if "--states=PENDING" in argv:
            return 0, "".join(f"{j}\n" for j in self.pending), ""
        if self.jobs_for > 0:
            self.jobs_for -= 1
            return 0, "".join(f"{j}\n" for j in self.jobs), ""
        return 0, "", ""

    def changes(self) -> list[list[str]]:
        return [c for c in self.calls if c[0] == "scontrol" and c[1] == "update"]


class Clock:
    """time.monotonic and time.sleep: sleeping moves the clock on."""

    def __init__(self) -> None:
        self.now, self.slept = 100.0, []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_nodes_slurm_knows_that_the_inventory_lacks_are_drained():
    slurm = Slurm({"gpu-001": "none", "gpu-002": "none", "gpu-003": "none"})
    found = drain_leaving(slurm, ["gpu-001"], 0)
    assert (found.nodes, found.drained, found.resumed, found.changed) == (
        ["gpu-002", "gpu-003"], ["gpu-002", "gpu-003"], [], True)
    assert slurm.changes() == [["scontrol", "update", "nodename=gpu-002,gpu-003",
                                "state=DRAIN", f"reason={LEAVING_REASON}"]]


def test_nothing_leaving_asks_sinfo_only_and_changes_nothing():
    slurm = Slurm({"gpu-001": "none"})
    found = drain_leaving(slurm, ["gpu-001", "gpu-002"], 0)
    assert (found.nodes, found.changed) == ([], False)
    assert [c[0] for c in slurm.calls] == ["sinfo"]


def test_a_node_drained_already_is_not_drained_again_and_keeps_another_reason():
    """Another reason (the health checker's) is not overwritten: put back in the inventory,
    that node must stay drained for what its drainer found."""
    slurm = Slurm({"gpu-001": "none", "gpu-002": LEAVING_REASON,
                   "gpu-003": "health: gpu-003 lost a GPU"})
    found = drain_leaving(slurm, ["gpu-001"], 0)
    assert (found.nodes, found.drained, found.changed) == (["gpu-002", "gpu-003"], [], False)
    assert slurm.changes() == []
    assert slurm.reasons["gpu-003"] == "health: gpu-003 lost a GPU"
    back = drain_leaving(slurm, ["gpu-001", "gpu-003"], 0)
    assert back.resumed == [] and slurm.reasons["gpu-003"] == "health: gpu-003 lost a GPU"


def test_a_node_resumed_by_an_operator_meanwhile_is_drained_again():
    slurm = Slurm({"gpu-001": "none", "gpu-002": "none"})
    drain_leaving(slurm, ["gpu-001"], 0)
    slurm.reasons["gpu-002"] = "none"  # scontrol update state=RESUME
    assert drain_leaving(slurm, ["gpu-001"], 0).drained == ["gpu-002"]


def test_a_node_back_in_the_inventory_is_resumed():
    slurm = Slurm({"gpu-001": LEAVING_REASON, "gpu-002": "none"})
    said: list[str] = []
    found = drain_leaving(slurm, ["gpu-001", "gpu-002"], 0, log=said.append)
    assert (found.resumed, found.nodes, found.changed) == (["gpu-001"], [], True)
    assert slurm.changes() == [["scontrol", "update", "nodename=gpu-001", "state=RESUME"]]
    assert said == ["resuming nodes back in the inventory: gpu-001"]


def test_jobs_on_a_leaving_node_refuse_the_run_naming_them_and_the_node_stays_drained():
    slurm = Slurm({"gpu-001": "none", "gpu-002": "none"}, jobs=(JOB,), jobs_for=99)
    with pytest.raises(LeavingNodesBusy) as refused:
        drain_leaving(slurm, ["gpu-001"], 0)
    assert str(refused.value).startswith(
        "gpu-002 is no longer in the inventory but a job still needs it: job 41 (carol, "
        "running on gpu-002); nothing was removed. gpu-002 is drained")
    assert "Run the configure again once those jobs end, or with --drain-wait SECONDS" in \
        str(refused.value)
    assert slurm.reasons["gpu-002"] == LEAVING_REASON


def test_a_pending_job_that_asked_for_a_leaving_node_refuses_the_run_too():
    """slurmctld would fail it (invalid requested nodes) once slurm.conf no longer names the
    node: pending jobs asking for other nodes, or for none, do not count."""
    slurm = Slurm({"gpu-001": "none", "gpu-002": "none", "gpu-003": "none"},
                  pending=("50|dave|PENDING|gpu-[001,003]", "51|erin|PENDING|gpu-001",
                           "52|frank|PENDING|"))
    with pytest.raises(LeavingNodesBusy) as refused:
        drain_leaving(slurm, ["gpu-001", "gpu-002"], 0)
    assert "jobs still need" not in str(refused.value)
    assert ("gpu-003 is no longer in the inventory but a job still needs it: job 50 (dave, "
            "pending for gpu-[001,003]); nothing was removed") in str(refused.value)


def test_the_run_waits_up_to_the_bound_polling_then_goes_on_when_the_jobs_end():
    slurm = Slurm({"gpu-001": "none", "gpu-002": "none"}, jobs=(JOB,), jobs_for=3)
    clock, said = Clock(), []
    found = drain_leaving(slurm, ["gpu-001"], 60, poll_s=5, sleep=clock.sleep, clock=clock,
                          log=said.append, words=LOCAL)
    assert found.nodes == ["gpu-002"]
    assert clock.slept == [5, 5, 5]
    assert said == [f"waiting for 1 job(s) on leaving nodes gpu-002 ({s} of 60 s)"
                    for s in (0, 5, 10)]


def test_a_wait_that_runs_out_refuses_saying_how_long_it_waited():
    slurm = Slurm({"gpu-002": "none"}, jobs=(JOB, "42|dave|COMPLETING|gpu-002"), jobs_for=99)
    clock = Clock()
    with pytest.raises(LeavingNodesBusy) as refused:
        drain_leaving(slurm, [], 12, poll_s=5, sleep=clock.sleep, clock=clock)
    assert clock.slept == [5, 5, 2]
    assert ("jobs still need it: job 41 (carol, running on gpu-002); job 42 (dave, completing "
            "on gpu-002) after a wait of 12 s; nothing was removed") in str(refused.value)


def test_more_than_half_the_nodes_leaving_is_refused_before_any_drain():
    slurm = Slurm({f"gpu-00{i}": "none" for i in range(1, 5)})
    with pytest.raises(LeavingError) as refused:
        drain_leaving(slurm, ["gpu-001"], 0, max_share=0.5)
    assert str(refused.value) == (
        "3 of the 4 nodes Slurm knows are not in the inventory (gpu-002,gpu-003,gpu-004): "
        "more than 50% would leave in one run, so nothing was drained or removed. Check that "
        "this is the cluster's inventory; if those nodes are to leave, run the configure "
        "again with -e metalslurm_leaving_max_share=1.")
    assert slurm.changes() == []
    # Half is not more than half; a share of 1 takes any number out.
    assert drain_leaving(Slurm({"gpu-001": "none", "gpu-002": "none"}), ["gpu-001"], 0,
                         max_share=0.5).drained == ["gpu-002"]
    assert len(drain_leaving(slurm, [], 0, max_share=1).drained) == 4


def test_no_slurm_on_the_controller_means_no_job_anywhere():
    slurm = Slurm({}, sinfo=(NOT_INSTALLED, "sinfo: command not found"))
    found = drain_leaving(slurm, ["gpu-001"], 0, candidates=["gpu-002"],
                          fallback=lambda: pytest.fail("slurm.conf read"))
    assert (found.asked, found.error, found.nodes) == (False, "", ["gpu-002"])
    assert len(slurm.calls) == 1


def test_slurmctld_not_answering_refuses_a_departure_it_cannot_check():
    slurm = Slurm({}, sinfo=(1, "slurm_load_node error: Unable to contact slurm controller"))
    with pytest.raises(LeavingError) as refused:
        drain_leaving(slurm, ["gpu-001"], 0, candidates=["gpu-001", "gpu-002"], words=LOCAL)
    assert str(refused.value) == (
        "cannot ask Slurm whether jobs run on gpu-002, which is no longer in the stack config: "
        "slurm_load_node error: Unable to contact slurm controller; nothing was removed. Start "
        "slurmctld (or run 'local up' with those nodes still in the stack config, which "
        "repairs it), then run 'local up' again.")


def test_without_slurmctld_the_configure_takes_the_leaving_nodes_from_slurm_conf():
    """slurmctld, restarted with a slurm.conf that no longer names a node, fails the jobs it
    had there: a run that cannot ask refuses when the controller's slurm.conf names a node
    the inventory lacks, and goes on (it is the run that repairs slurmctld) when none."""
    conf = ("ClusterName=lab\nNodeName=DEFAULT RealMemory=1000\n"
            "NodeName=gpu-[001-002] CPUs=4 Gres=gpu:h100:8\n  nodename=gpu-003 CPUs=4\n"
            "PartitionName=train Nodes=gpu-[001-003]\n")
    slurm = Slurm({}, sinfo=(1, "Unable to contact slurm controller"))
    assert conf_node_names(slurm, conf) == ["gpu-001", "gpu-002", "gpu-003"]
    with pytest.raises(LeavingError, match="^cannot ask Slurm whether jobs run on gpu-003,"):
        drain_leaving(slurm, ["gpu-001", "gpu-002"], 0,
                      fallback=lambda: conf_node_names(slurm, conf))
    found = drain_leaving(slurm, ["gpu-001", "gpu-002", "gpu-003"], 0,
                          fallback=lambda: conf_node_names(slurm, conf))
    assert (found.asked, found.error, found.changed) == (
        False, "Unable to contact slurm controller", False)


@pytest.mark.parametrize("failing", ["scontrol", "squeue"])
def test_a_failing_drain_or_job_listing_refuses_rather_than_guessing(failing):
    slurm = Slurm({"gpu-002": "none"}, fails=failing)
    with pytest.raises(LeavingError, match=f"^{failing} .*failed.*nothing was removed$"):
        drain_leaving(slurm, [], 0)


def test_check_mode_and_the_last_look_change_nothing_and_predict_the_refusal():
    slurm = Slurm({"gpu-001": LEAVING_REASON, "gpu-002": "none"})
    found = drain_leaving(slurm, ["gpu-001"], 0, dry_run=True)
    assert (found.nodes, found.drained, found.resumed, found.changed) == (
        ["gpu-002"], ["gpu-002"], ["gpu-001"], True)
    assert slurm.changes() == []
    busy = Slurm({"gpu-002": LEAVING_REASON}, jobs=(JOB,), jobs_for=99)
    with pytest.raises(LeavingNodesBusy):
        drain_leaving(busy, [], 0, dry_run=True)
    assert busy.changes() == []
    # With a wait, the real run might not refuse: check mode does not wait, and says nothing.
    assert drain_leaving(Slurm({"gpu-002": "none"}, jobs=(JOB,), jobs_for=99), [], 30,
                         dry_run=True).nodes == ["gpu-002"]


def test_the_refusal_speaks_of_several_nodes_and_jobs_in_the_plural():
    text = refusal(["gpu-002", "gpu-003"], [JOB, "43|erin|RUNNING|gpu-[002-003]"], 0, LOCAL)
    assert text.startswith("gpu-002,gpu-003 are no longer in the stack config but jobs still "
                           "need them: job 41 (carol, running on gpu-002); job 43 (erin, "
                           "running on gpu-[002-003]); nothing was removed. gpu-002,gpu-003 "
                           "are drained")
    assert text.endswith("put them back in the stack config and run 'local up', which "
                         "resumes them.")
