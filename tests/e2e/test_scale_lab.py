"""The scale lab's smoke (bench/scale, docs/lab/scale-lab.md): 256 simulated 8-GPU nodes, each a
real slurmd, under the real slurmctld of Slurm 24.11 in one container, configured with the
slurm.conf and gres.conf the controller role renders for 256 nodes and the topology.conf
the topology code makes of a synthetic rail-optimized fat tree (8 units of 32). Jobs land as
the tree promises; a burst of 1,000 jobs from four users all runs. Block placement (a restart
with topology/block, about 35 s) is left to the benchmark, to keep CI under its budget.

It needs no local cluster and shares nothing with one (its own container and image); the
full lab (128 to 1,024 nodes, 10,000 jobs, before and after the size tuning) is the benchmark.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.scale import lab as scale_lab
from bench.scale import placement
from bench.scale.__main__ import synthetic_topologies

NODES = 256
JOBS = 1000


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("scale-lab")


@pytest.fixture(scope="module")
def topologies() -> tuple[list[str], dict[str, str]]:
    return synthetic_topologies(NODES)


@pytest.fixture(scope="module")
def lab(work, topologies) -> Iterator[scale_lab.Lab]:
    nodes, topos = topologies
    the_lab = scale_lab.Lab(work)
    rendered = scale_lab.render(work, nodes, topos["tree"], "tree", tuning=True)
    the_lab.start(rendered)
    yield the_lab
    the_lab.stop()


def test_every_simulated_node_registers_with_the_rendered_config(lab, topologies):
    nodes, _ = topologies
    listed = lab.sh("sinfo -h -N -p train -t idle -o %N").split()
    assert sorted(listed) == nodes
    assert len(lab.sh("pgrep -x slurmd").split()) == NODES
    node = lab.sh("scontrol show node gpu-0256")
    assert "Gres=gpu:h100:8" in node and "CPUTot=224" in node and "State=IDLE" in node
    # What the controller role wrote for 256 nodes on 24.11 (module_utils/slurm_scale.py,
    # the 65-512 band), as slurmctld runs it.
    config = lab.sh("scontrol show config")
    assert "TreeWidth               = 23" in config
    assert "MaxJobCount             = 20000" in config
    assert "MessageTimeout          = 30 sec" in config
    assert "TopologyPlugin          = topology/tree" in config
    scheduler = next(x for x in config.splitlines() if x.startswith("SchedulerParameters"))
    options = scheduler.split("=", 1)[1].strip().split(",")
    for option in ("bf_continue", "max_rpc_cnt=32", "partition_job_depth=500"):
        assert option in options
    # Throttled passes only above 512 nodes (measured by the lab itself, docs/lab/scale-lab.md).
    assert "defer_batch" not in options
    assert not any(o.startswith("sched_min_interval") for o in options)


def test_tree_placement_keeps_units_on_one_leaf_and_spans_the_fewest(lab, topologies):
    _, topos = topologies
    groups = placement.leaf_groups(topos["tree"])
    cases = placement.cases_for(groups, NODES)
    assert [c.nodes for c in cases] == [32, 16, 16, 80, 48]
    results = placement.run_cases(lab, topos["tree"], "tree", cases)
    assert [r.line() for r in results if not r.ok] == []
    unit, half, other, large, mid = results
    assert set(unit.nodes) == set(groups[unit.spanned[0]])          # a whole leaf
    assert half.spanned == other.spanned and unit.spanned != half.spanned  # best fit
    assert (len(large.spanned), len(mid.spanned)) == (3, 2)


def test_a_burst_of_short_jobs_from_four_users_all_runs(lab):
    result = scale_lab.burst(lab, JOBS, scale_lab.USERS, timeout=600)
    row = scale_lab.burst_summary(result)
    print(scale_lab.summary_line(f"{NODES} nodes, {JOBS} jobs", row))
    assert (result.submitted, result.refused) == (JOBS, 0)
    assert result.sdiag.rpcs["REQUEST_SUBMIT_BATCH_JOB"][0] == JOBS
    assert result.sdiag.rpcs["REQUEST_COMPLETE_BATCH_SCRIPT"][0] == JOBS
    assert result.sdiag.counters["Jobs completed"] == JOBS
    assert result.sdiag.counters["Jobs failed"] == 0
    assert result.sdiag.main["Total cycles"] > 0
