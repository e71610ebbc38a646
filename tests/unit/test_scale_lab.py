"""The scale lab's pure parts (bench/scale): the rendered slurm.conf turned into the lab's,
sdiag's text (a recording from the lab, tests/fixtures/slurm/README-sdiag.md), the placement
judgement against topology.conf, and the command line's refusals. The lab itself runs in
tests/e2e/test_scale_lab.py and as the benchmark."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bench.scale import __main__ as cli
from bench.scale import lab, placement

REPO = Path(__file__).resolve().parents[2]
SDIAG = REPO / "tests/fixtures/slurm/sdiag-24.11.5-scalelab.txt"

RENDERED = """\
# Managed by Ansible
ClusterName=metalslurm
SlurmctldHost=ctl(10.77.0.10)
SlurmdSpoolDir=/var/lib/slurm/slurmd
TaskPlugin=task/cgroup,task/affinity
HealthCheckProgram=/usr/local/sbin/metalslurm-health
JobContainerType=job_container/tmpfs
TreeWidth=23

# Nodes
NodeName=gpu-[0001-0003] NodeAddr=10.77.0.11 CPUs=224 RealMemory=2002018 Gres=gpu:h100:8
NodeName=gpu-0010 CPUs=224 Gres=gpu:h100:8 State=UNKNOWN

# Partitions
PartitionName=train Default=YES Nodes=gpu-[0001-0003,0010] State=UP
"""


def test_lab_conf_gives_each_node_its_own_port_and_keeps_its_attributes():
    conf, nodes = lab.lab_slurm_conf(RENDERED)
    assert nodes == ["gpu-0001", "gpu-0002", "gpu-0003", "gpu-0010"]
    node_lines = [x for x in conf.splitlines() if x.startswith("NodeName=")]
    assert node_lines == [
        "NodeName=gpu-0001 NodeHostname=localhost NodeAddr=127.0.0.1 Port=20001 CPUs=224 "
        "RealMemory=2002018 Gres=gpu:h100:8",
        "NodeName=gpu-0002 NodeHostname=localhost NodeAddr=127.0.0.1 Port=20002 CPUs=224 "
        "RealMemory=2002018 Gres=gpu:h100:8",
        "NodeName=gpu-0003 NodeHostname=localhost NodeAddr=127.0.0.1 Port=20003 CPUs=224 "
        "RealMemory=2002018 Gres=gpu:h100:8",
        "NodeName=gpu-0010 NodeHostname=localhost NodeAddr=127.0.0.1 Port=20004 CPUs=224 "
        "Gres=gpu:h100:8 State=UNKNOWN"]


def test_lab_conf_changes_only_the_simulation_settings_and_says_so():
    conf, _ = lab.lab_slurm_conf(RENDERED)
    settings = lab.settings_of(conf)
    assert settings["SlurmctldHost"] == "ctl(127.0.0.1)"
    assert settings["SlurmdSpoolDir"] == "/var/lib/slurm/slurmd/%n"
    assert settings["TaskPlugin"] == "task/none"
    assert settings["HealthCheckProgram"] == "/bin/true"
    # Not in the rendered file: added before the nodes.
    assert settings["SlurmdParameters"] == "config_overrides,conmgr_threads=2"
    assert settings["ProctrackType"] == "proctrack/linuxproc"
    # Everything else as rendered, and each replaced line kept as a comment.
    assert settings["TreeWidth"] == "23" and settings["ClusterName"] == "metalslurm"
    assert "# scale lab: TaskPlugin=task/cgroup,task/affinity" in conf
    # Left out, as a comment: no job container in the lab.
    assert "JobContainerType" not in settings
    assert "# scale lab: JobContainerType=job_container/tmpfs" in conf
    assert "PartitionName=train Default=YES Nodes=gpu-[0001-0003,0010] State=UP" in conf


def test_lab_conf_without_nodes_is_refused():
    with pytest.raises(lab.LabError, match="no NodeName line"):
        lab.lab_slurm_conf("ClusterName=x\n")


def test_sdiag_recording_is_read():
    s = lab.parse_sdiag(SDIAG.read_text())
    assert s.counters["Jobs submitted"] == 5 and s.counters["Jobs started"] == 4
    assert s.counters["Server thread count"] == 1
    assert s.main["Mean cycle"] == 2713 and s.main["Max cycle"] == 5678
    assert s.main["Total cycles"] == 5 and s.main["Hit max_rpc_cnt"] == 0
    assert s.backfill["Mean cycle"] == 2433 and s.backfill["Total cycles"] == 1
    assert s.backfill["Total backfilled jobs (since last slurm start)"] == 0
    assert s.rpcs["REQUEST_SUBMIT_BATCH_JOB"] == (5, 2304)
    assert s.rpcs["MESSAGE_NODE_REGISTRATION_STATUS"] == (142, 70)
    assert len(s.rpcs) == 7  # the by-user section is not read as message types
    assert lab.top_rpcs(s, 2) == [("MESSAGE_NODE_REGISTRATION_STATUS", 142, 70),
                                  ("REQUEST_COMPLETE_PROLOG", 81, 55)]


def test_jobs_that_left_the_queue_are_counted_from_sdiag():
    counters = lab.parse_sdiag(SDIAG.read_text()).counters
    assert lab.ended(counters) == 0  # 4 started, none ended yet: the burst goes on waiting
    assert lab.ended({"Jobs completed": 7, "Jobs canceled": 2, "Jobs failed": 1,
                      "Jobs started": 12, "Jobs submitted": 12}) == 10


def test_percentiles_by_nearest_rank_leave_missing_probes_out():
    values = [float(v) for v in range(1, 21)] + [float("nan")]
    assert lab.percentile(values, 50) == 10 and lab.percentile(values, 95) == 19
    assert lab.percentile(values, 100) == 20 and lab.percentile(values, 0) == 1
    assert lab.percentile([float("nan")], 50) is None and lab.percentile([], 95) is None


def test_the_probe_is_read_apart_from_sdiag():
    out = SDIAG.read_text() + "== sinfo us: 1234\n"  # what PROBE prints in the lab
    text, _, probe = out.partition(lab.PROBE_MARK)
    assert lab.parse_sdiag(text).counters["Jobs submitted"] == 5 and probe.strip() == "1234"


def test_sdiag_refuses_other_text():
    with pytest.raises(lab.LabError, match="not sdiag's output"):
        lab.parse_sdiag("slurm_load_partitions: Unable to contact slurm controller\n")


TREE = """\
SwitchName=leaf1 Nodes=n[01-04]
SwitchName=leaf2 Nodes=n[05-08]
SwitchName=leaf3 Nodes=n[09-10]
SwitchName=spine Switches=leaf[1-3]
"""
BLOCK = "BlockName=b1 Nodes=n[01-04]\nBlockName=b2 Nodes=n[05-08]\nBlockSizes=4,8\n"


def test_leaf_groups_from_tree_and_block_files():
    assert placement.leaf_groups(TREE) == {
        "leaf1": ("n01", "n02", "n03", "n04"), "leaf2": ("n05", "n06", "n07", "n08"),
        "leaf3": ("n09", "n10")}
    assert placement.leaf_groups(BLOCK) == {"b1": ("n01", "n02", "n03", "n04"),
                                            "b2": ("n05", "n06", "n07", "n08")}


def test_fewest_groups_takes_the_largest_free_first():
    assert placement.fewest_groups({"a": 4, "b": 1, "c": 3}, 4) == 1
    assert placement.fewest_groups({"a": 2, "b": 1, "c": 3}, 4) == 2
    assert placement.fewest_groups({"a": 2, "b": 1}, 4) == 0


def test_judge_a_switches_job_must_stay_on_one_leaf():
    groups = placement.leaf_groups(TREE)
    free = {"leaf1": 4, "leaf2": 4, "leaf3": 2}
    one = placement.Case("one", 3, switches=True)
    assert placement.judge(one, ["n05", "n06", "n07"], groups, free, "tree") == (
        ("leaf2",), 1, True)
    assert placement.judge(one, ["n04", "n05", "n06"], groups, free, "tree") == (
        ("leaf1", "leaf2"), 1, False)


def test_judge_a_large_job_may_span_only_the_fewest_leaves():
    groups = placement.leaf_groups(TREE)
    free = {"leaf1": 1, "leaf2": 4, "leaf3": 2}
    six = placement.Case("six", 6)
    assert placement.judge(six, ["n05", "n06", "n07", "n08", "n09", "n10"], groups, free,
                           "tree") == (("leaf2", "leaf3"), 2, True)
    assert placement.judge(six, ["n04", "n05", "n06", "n07", "n09", "n10"], groups, free,
                           "tree")[2] is False
    # a node list shorter than asked is not as intended either
    assert placement.judge(six, ["n05", "n06"], groups, free, "tree")[2] is False


def test_judge_block_jobs_up_to_a_block_stay_in_one():
    groups = placement.leaf_groups(BLOCK)
    free = {"b1": 4, "b2": 4}
    three = placement.Case("three", 3)
    assert placement.judge(three, ["n02", "n03", "n04"], groups, free, "block")[1:] == (1, True)
    assert placement.judge(three, ["n04", "n05", "n06"], groups, free, "block")[2] is False


def test_judge_names_nodes_outside_the_topology():
    with pytest.raises(lab.LabError, match="in no group"):
        placement.judge(placement.Case("x", 1), ["zz"], placement.leaf_groups(TREE), {}, "tree")


def test_cases_fit_what_is_left():
    groups = {f"l{i}": tuple(f"n{i}-{k}" for k in range(32)) for i in range(8)}
    cases = placement.cases_for(groups, 256)
    assert [(c.nodes, c.switches) for c in cases] == [
        (32, True), (16, True), (16, True), (80, False), (48, False)]
    assert sum(c.nodes for c in cases) <= 256


def test_synthetic_tree_has_units_of_32_in_tree_and_block_form():
    nodes, topos = cli.synthetic_topologies(128)
    assert nodes[0] == "gpu-0001" and nodes[-1] == "gpu-0128"
    tree = placement.leaf_groups(topos["tree"])
    assert sorted(len(m) for m in tree.values()) == [32, 32, 32, 32]
    assert tree == placement.leaf_groups(topos["block"])


@pytest.mark.parametrize(("argv", "message"), [
    (["--nodes", "12x"], "--nodes: '12x' is not a comma-separated list"),
    (["--nodes", "16"], "--nodes: each count must be between 32 and 4096"),
    (["--nodes", ""], "--nodes: each count must be between 32"),
    (["--jobs", "0"], "--jobs: must be between 1 and 100000, not 0"),
    (["--users", "9"], "--users: must be between 1 and 4, not 9"),
])
def test_cli_refuses_bad_input_in_one_line(argv, message, capsys, tmp_path):
    assert cli.main([*argv, "--out", str(tmp_path / "o"), "--plots", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_cli_refuses_an_unwritable_out(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cli.main(["--out", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out/--plots:") and err.count("\n") == 1


def test_judge_block_jobs_larger_than_a_block_stay_in_one_aligned_segment():
    four = "".join(f"BlockName=b{i} Nodes=n{i}[1-4]\n" for i in range(1, 5))
    groups = placement.leaf_groups(four)
    free = dict.fromkeys(groups, 4)
    six = placement.Case("six", 6)
    assert placement.segment_blocks(4, 6) == 2 and placement.segment_blocks(4, 9) == 4
    assert placement.judge(six, ["n11", "n12", "n13", "n14", "n21", "n22"], groups, free,
                           "block") == (("b1", "b2"), 2, True)
    assert placement.judge(six, ["n31", "n32", "n33", "n34", "n41", "n42"], groups, free,
                           "block")[2] is True
    # b2 and b3 are two blocks, but not one aligned segment of two
    assert placement.judge(six, ["n21", "n22", "n23", "n24", "n31", "n32"], groups, free,
                           "block")[2] is False


def test_block_cases_are_in_blocks_of_the_smallest_block():
    groups = {f"b{i}": tuple(f"n{i}-{k}" for k in range(32)) for i in range(8)}
    assert [c.nodes for c in placement.cases_for(groups, 256, "block")] == [32, 16, 16, 125, 63]


class ScriptedLab:
    """A stand-in for the lab container: records every command, answers sdiag from the
    recording with the counters a burst of ``jobs`` reaches, the first ``busy`` polls with
    the error a swamped slurmctld gives."""

    slurmctld_usage = lab.Lab.slurmctld_usage   # the real parsing, over the answer below

    def __init__(self, jobs: int, busy: int = 0, timed_out: int = 0, stale: int = 0):
        self.jobs, self.busy, self.commands = jobs, busy, []
        # timed_out: jobs that end by their time limit, outside sdiag's three end counters;
        # the first ``stale`` polls then show an empty queue counted before the release.
        self.timed_out, self.stale = timed_out, stale
        self.recording = SDIAG.read_text()

    def sdiag(self, started: int, ended: int, poll: bool = False) -> str:
        text = (self.recording.replace("Jobs started:   4", f"Jobs started:   {started}")
                .replace("Jobs completed: 0", f"Jobs completed: {ended - self.timed_out}"))
        if self.timed_out:
            counted = time.time() - 3600 if self.stale else time.time() + 1
            self.stale = max(0, self.stale - poll)
            text = (text.replace("(1795807010)", f"({counted:.0f})")
                    .replace("Jobs pending:   1", "Jobs pending:   0")
                    .replace("Jobs running:   4", "Jobs running:   0"))
        return text

    def sh(self, script: str, user=None, timeout=600, check=True) -> str:
        self.commands.append(script)
        if script.startswith("sdiag;"):   # the poll
            if self.busy:
                self.busy -= 1
                return ("sdiag: error: slurm_get_statistics: Socket timed out on send/recv "
                        "operation\n== sinfo us: 10000000\n")
            return self.sdiag(self.jobs, self.jobs, poll=True) + "== sinfo us: 2500\n"
        if script == "sdiag":
            return self.sdiag(self.jobs, self.jobs)
        if script.startswith("p=$(pgrep"):
            return "100\n150 50\nVmRSS:\t 2048 kB\nVmHWM:\t 4096 kB\n"
        if script.startswith("sinfo -h -p debug -t drain"):
            return f"{self.timed_out} Kill task failed\n" if self.timed_out else ""
        return ""

    def popen(self, script: str, user=None):
        self.commands.append(f"{user}: {script}")
        count = int(script.split("seq ")[1].split(")")[0])

        class Done:
            def communicate(self, timeout=None):
                if user == "carol":   # one refused, as a swamped slurmctld makes sbatch say
                    return ("".join(f"{200 + i}\n" for i in range(count - 1)) + "refused\n",
                            "sbatch: error: Batch job submission failed: Socket timed out "
                            "on send/recv operation\n")
                return "".join(f"{100 + i}\n" for i in range(count)), ""
        return Done()


def test_a_held_burst_submits_to_a_down_partition_and_releases_it_in_one_update():
    fake = ScriptedLab(jobs=9, busy=2)
    b = lab.burst(fake, 10, ("alice", "bob", "carol"), held=True, timeout=60)
    steps = [c for c in fake.commands if c.startswith(("scontrol", "sdiag -r", "alice", "bob"))]
    assert steps[:2] == ["sdiag -r >/dev/null", "scontrol update PartitionName=debug State=DOWN"]
    assert steps[-2:] == ["sdiag -r >/dev/null", "scontrol update PartitionName=debug State=UP"]
    assert [c.split("seq ")[1].split(")")[0] for c in fake.commands if ": for i" in c] == \
        ["4", "3", "3"]   # 10 jobs shared out
    assert (b.submitted, b.refused, b.held, b.sdiag_unanswered) == (9, 1, True, 2)
    assert b.refusals == ("sbatch: error: Batch job submission failed: Socket timed out on "
                          "send/recv operation",)
    assert b.sinfo_ms == (10000.0, 10000.0, 2.5)   # the two unanswered polls counted too
    assert b.cpu_seconds == 0.0 and b.submit_sdiag is not None
    row = lab.burst_summary(b)
    assert (row["sinfo_ms_p50"], row["sinfo_ms_max"], row["sdiag_unanswered"]) == (
        10000.0, 10000.0, 2)
    assert "after their release" in lab.summary_line("x", row)


def test_jobs_ended_by_their_time_limit_end_the_burst_by_the_empty_queue_counted_after_it():
    # sdiag's completed counter stops 2 short (the time limit's jobs are not in it): the burst
    # ends once slurmctld's own count of pending and running jobs, taken after the release,
    # is 0, not at the timeout; an empty count from before the release does not end it.
    fake = ScriptedLab(jobs=9, timed_out=2, stale=3)
    b = lab.burst(fake, 9, ("alice",), held=True, timeout=60)
    polls = [c for c in fake.commands if c.startswith("sdiag;")]
    assert len(polls) == 4    # three stale counts passed over, the fourth ends it
    assert (b.submitted, b.ended_otherwise, b.drained) == (9, 2, ("2 Kill task failed",))
    row = lab.burst_summary(b)
    assert (row["ended_otherwise"], row["drained_nodes"], row["drain_reasons"]) == (
        2, 2, ["2 Kill task failed"])


def test_the_job_count_sdiag_took_is_read_with_its_time():
    counters = lab.parse_sdiag(SDIAG.read_text()).counters
    assert (counters["Job states ts"], counters["Jobs pending"], counters["Jobs running"]) == (
        1795807010, 1, 4)
    assert not lab.queue_empty({**counters, "Jobs pending": 0, "Jobs running": 0}, 1795807010)
    assert lab.queue_empty({**counters, "Jobs pending": 0, "Jobs running": 0}, 1795807009)
    assert not lab.queue_empty({"Jobs pending": 0, "Jobs running": 0}, 0)   # no count at all


def test_an_unheld_burst_leaves_the_partition_alone():
    fake = ScriptedLab(jobs=4)
    b = lab.burst(fake, 4, ("alice",), timeout=60)
    assert not [c for c in fake.commands if c.startswith("scontrol")]
    assert (b.submitted, b.held, b.submit_sdiag) == (4, False, None)
