"""The filters that feed slurm.conf and gres.conf from inventory vars and facts
(plugins/filter/slurm.py)."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.metalslurm.cluster.plugins.filter import slurm as filters
from ansible_collections.metalslurm.cluster.plugins.module_utils.cluster_defaults import (
    DEFAULT_JOB_TIME as ROLE_DEFAULT_TIME,  # slurm_controller_default_time
)

FACTS = {"ansible_facts": {"processor_count": 2, "processor_cores": 56,
                           "processor_threads_per_core": 2, "memtotal_mb": 2063937}}


def test_node_records_from_facts():
    hostvars = {
        "gpu-001": dict(FACTS, metalslurm_gpu_count=8, metalslurm_gpu_type="h100"),
        "gpu-002": dict(FACTS, metalslurm_gpu_count=8, metalslurm_gpu_type="h100",
                        metalslurm_node_state="cloud"),
    }
    records = filters.slurm_nodes(["gpu-001", "gpu-002"], hostvars, 3)
    assert records[0] == {"NodeName": "gpu-001", "Sockets": 2, "CoresPerSocket": 56,
                          "ThreadsPerCore": 2, "RealMemory": 2002018,
                          "Gres": "gpu:h100:8", "State": "UNKNOWN"}
    assert records[1]["State"] == "CLOUD"


def test_node_options_override_facts():
    hostvars = {"n1": {"metalslurm_node_options": {"CPUs": 4, "Sockets": 1,
                                                   "RealMemory": 1000, "Weight": 5}}}
    assert filters.slurm_nodes(["n1"], hostvars) == [
        {"NodeName": "n1", "CPUs": 4, "Sockets": 1, "RealMemory": 1000, "Weight": 5,
         "State": "UNKNOWN"}]


def test_missing_facts_say_what_to_do():
    with pytest.raises(AnsibleFilterError,
                       match="ansible_facts.processor_count of compute host n1"):
        filters.slurm_nodes(["n1"], {"n1": {}})


def test_gres_records_only_for_gpu_nodes():
    hostvars = {"g1": {"metalslurm_gpu_count": 4, "metalslurm_gpu_type": "a100"},
                "c1": {"metalslurm_gpu_count": 0}}
    assert filters.gres_records(["g1", "c1"], hostvars) == [
        {"NodeName": "g1", "Name": "gpu", "Type": "a100", "File": "/dev/nvidia[0-3]"}]


def test_partition_records_layer_defaults_and_options():
    parts = [{"name": "train", "nodes": ["g1", "g2"], "default": True, "max_time": "7-00:00:00",
              "options": {"PriorityJobFactor": 2}}]
    records = filters.partition_records(parts, {"OverSubscribe": "NO", "PriorityJobFactor": 1},
                                        ROLE_DEFAULT_TIME)
    assert records == [{"PartitionName": "train", "Nodes": ["g1", "g2"], "Default": True,
                        "MaxTime": "7-00:00:00", "DefaultTime": "1-00:00:00", "State": "UP",
                        "OverSubscribe": "NO", "PriorityJobFactor": 2}]


@pytest.mark.parametrize(("partition", "default_time"), [
    ({"max_time": "7-00:00:00", "default_time": "4:00:00"}, "4:00:00"),
    ({"max_time": "2:00:00"}, "2:00:00"),      # capped at MaxTime
    ({"max_time": "UNLIMITED"}, "1-00:00:00"),
    ({}, "1-00:00:00"),
])
def test_a_partition_from_a_hand_written_inventory_gets_a_default_time(partition,
                                                                        default_time):
    """Jobs without --time must get a bounded limit for GPU-minute budgets to admit them."""
    [record] = filters.partition_records([{"name": "p", "nodes": ["g1"], **partition}], {},
                                         ROLE_DEFAULT_TIME)
    assert record["DefaultTime"] == default_time


def test_identical_records_share_one_line():
    assert filters.slurm_records(
        [{"NodeName": "g1", "Gres": "gpu:a:1"}, {"NodeName": "g2", "Gres": "gpu:a:1"}],
        "NodeName") == ["NodeName=g[1-2] Gres=gpu:a:1"]


def test_def_mem_per_cpu_is_the_smallest_nodes_share():
    nodes = [{"NodeName": "big", "Sockets": 2, "CoresPerSocket": 56, "ThreadsPerCore": 2,
              "RealMemory": 2002018},
             {"NodeName": "small", "CPUs": 16, "RealMemory": 64000}]
    assert filters.def_mem_per_cpu(nodes) == 4000
    assert filters.def_mem_per_cpu([{"NodeName": "x", "CPUs": 4}]) is None


def test_gres_records_take_live_gpu_facts_then_the_controllers_cache_then_the_count():
    facts = [{"minor": m, "cores": "0-55" if m < 4 else "56-111"} for m in range(8)]
    hostvars = {
        "gpu-001": {"metalslurm_gpu_count": 8, "metalslurm_gpu_type": "h100",
                    "metalslurm_node": {"gpus": facts, "gpudirect": "dmabuf"}},
        "gpu-002": {"metalslurm_gpu_count": 8, "metalslurm_gpu_type": "h100"},
        "gpu-003": {"metalslurm_gpu_count": 8, "metalslurm_gpu_type": "h100",
                    "metalslurm_node": {"gpus": [], "gpudirect": "off"}},
        "gpu-004": {"metalslurm_gpu_count": 8, "metalslurm_gpu_type": "h100"},
        "cpu-001": {"metalslurm_gpu_count": 0}}
    hosts = ["gpu-001", "gpu-002", "gpu-003", "gpu-004", "cpu-001"]
    cached = {"gpu-001": facts[:4], "gpu-003": facts, "gpu-002": facts[:7], "gone-001": facts}
    gpus = filters.gpu_facts(hosts, hostvars, cached)
    # this run's facts win; a node without them keeps what the controller kept; a host no
    # longer in the inventory is dropped from what is kept
    assert gpus == {"gpu-001": facts, "gpu-002": facts[:7], "gpu-003": facts}
    records = filters.gres_records(hosts, hostvars, gpus)
    assert [(r["NodeName"], r["File"], r.get("Cores")) for r in records] == [
        ("gpu-001", "/dev/nvidia[0-3]", "0-55"), ("gpu-001", "/dev/nvidia[4-7]", "56-111"),
        # cached facts for 7 GPUs of an 8-GPU node are stale: the count's files, no Cores
        ("gpu-002", "/dev/nvidia[0-7]", None),
        ("gpu-003", "/dev/nvidia[0-3]", "0-55"), ("gpu-003", "/dev/nvidia[4-7]", "56-111"),
        ("gpu-004", "/dev/nvidia[0-7]", None)]


class CountingHostvars(dict):
    """hostvars that count their lookups: each one makes Ansible merge a host's variables."""

    looked_up = 0

    def __getitem__(self, host):
        CountingHostvars.looked_up += 1
        return super().__getitem__(host)


def test_compute_summary_reads_each_node_once_and_gives_what_the_files_take():
    hostvars = CountingHostvars({
        "gpu-001": dict(FACTS, metalslurm_gpu_count=8, metalslurm_gpu_type="h100",
                        metalslurm_node={"job_prolog": "/usr/local/sbin/metalslurm-prolog"}),
        "gpu-002": dict(FACTS, metalslurm_gpu_count=8, metalslurm_gpu_type="h200",
                        metalslurm_node_state="cloud"),
        "cpu-001": {"metalslurm_node_options": {"CPUs": 4, "RealMemory": 1000, "Sockets": 1},
                    "metalslurm_node": {"gpus": []}},
        # Made anew at each resume and joined through the whole playbook: never up in a
        # configure, always with the prolog once it runs jobs.
        "gpu-003": dict(FACTS, metalslurm_gpu_count=8, metalslurm_gpu_type="h100",
                        metalslurm_node_state="cloud",
                        metalslurm_power={"driver": "local", "mode": "launch-terminate"}),
        "gpu-004": dict(FACTS, metalslurm_gpu_count=8, metalslurm_gpu_type="h100",
                        metalslurm_node_state="cloud",
                        metalslurm_power={"driver": "local", "mode": "start-stop"}),
    })
    CountingHostvars.looked_up = 0
    hosts = ["gpu-001", "gpu-002", "cpu-001"]
    summary = filters.compute_summary(hosts, hostvars, 3, {"gpu-002": ["cached"]})
    assert CountingHostvars.looked_up == 3
    assert summary["nodes"] == filters.slurm_nodes(hosts, hostvars, 3)
    assert (summary["cloud"], summary["static"]) == (["gpu-002"], ["gpu-001", "cpu-001"])
    assert (summary["has_gpus"], summary["gpu_types"]) == (True, ["h100", "h200"])
    assert summary["gpus"] == {"gpu-002": ["cached"]}
    assert summary["gres"] == filters.gres_records(hosts, hostvars, summary["gpus"])
    assert summary["job_prolog"] == ["gpu-001"]
    assert summary["launched"] == []
    made_anew = filters.compute_summary(["gpu-003", "gpu-004"], hostvars)
    assert (made_anew["job_prolog"], made_anew["launched"]) == ([], ["gpu-003"])


def test_compute_view_keeps_only_the_facts_the_records_need():
    view = filters.compute_view(["gpu-001"], {"gpu-001": dict(
        ansible_facts=dict(FACTS["ansible_facts"], mounts=["big"], interfaces=["many"]),
        metalslurm_gpu_count=8, unrelated="x")})
    assert view == {"gpu-001": {"metalslurm_gpu_count": 8,
                                "ansible_facts": FACTS["ansible_facts"]}}


def test_release_check_reads_each_hosts_registered_result_and_its_groups():
    """slurm_release_check (roles/slurm_common/tasks/releases.yml): each host's daemons come
    from its groups, its releases from its registered read; a host without one (set aside,
    unreachable) is left out."""
    def read(version, offered):
        return {"stdout": f"installed|ii |slurm-client|slurm-wlm|{version}\noffered|{offered}"}
    hostvars = {"ctl": {"_slurm_common_releases": read("22.05.8-4", "22.05.8-4")},
                "gpu-001": {"_slurm_common_releases": read("22.05.8-4", "24.11.5-1")},
                "login-001": {"_slurm_common_releases": read("24.11.5-1", "24.11.5-1")},
                "gpu-002": {}}
    groups = {"slurm_controller": ["ctl"], "slurmdbd": ["ctl"],
              "slurm_compute": ["gpu-001", "gpu-002"], "login": ["login-001"]}
    check = filters.release_check(["ctl", "gpu-001", "gpu-002", "login-001"], hostvars, groups)
    assert [p.split(":")[0] for p in check["problems"]] == ["gpu-001", "login-001"]
    assert "slurm-client runs Slurm 24.11.5, newer than slurmctld's 22.05.8" in \
        check["problems"][1]
    assert check["notes"] == []
    bad = {"ctl": {"_slurm_common_releases": {"stdout": "offered|something"}}}
    with pytest.raises(AnsibleFilterError, match="cannot read a Slurm version from 'something'"):
        filters.release_check(["ctl"], bad, groups)


def test_release_check_plans_an_upgrade_only_when_asked_and_nothing_is_refused():
    """--upgrade-slurm: ``upgrades`` names what each host of the play installs; the
    controller read from outside a limited run is judged but not planned; a refusal plans
    nothing."""
    new = "24.11.5-1+standin1"

    def read(*packages, version="24.11.5-1", offer=new):
        return {"stdout": "".join(f"installed|ii |{p}|slurm-wlm|{version}\nnewer|{p}|{offer}\n"
                                  for p in packages) + f"offered|{offer}"}
    hostvars = {"gpu-001": {"_slurm_common_releases": read("slurm-client", "slurmd")}}
    groups = {"slurm_controller": ["ctl"], "slurmdbd": ["ctl"], "slurm_compute": ["gpu-001"]}
    outside = {"ctl": read("slurm-client", "slurmctld", "slurmdbd")}
    assert filters.release_check(["gpu-001"], hostvars, groups, outside)["upgrades"] == {}
    check = filters.release_check(["gpu-001"], hostvars, groups, outside, upgrade=True)
    assert (check["problems"], check["upgrades"]) == (
        [], {"gpu-001": [f"slurm-client={new}", f"slurmd={new}"]})
    # A run limited to a node never upgrades it past a controller this run leaves alone.
    major = {"gpu-001": {"_slurm_common_releases": read("slurmd", version="23.11.4-1",
                                                        offer="24.11.5-1")}}
    limited = filters.release_check(["gpu-001"], major, groups, {"ctl": read(
        "slurmctld", version="23.11.4-1", offer="24.11.5-1")}, upgrade=True)
    assert limited["upgrades"] == {}
    assert "slurmd would upgrade to Slurm 24.11.5, newer than slurmctld's 23.11.4" in \
        limited["problems"][0]
    # A separate slurmdbd host left out of a run that would upgrade slurmctld: refused.
    apart = {**groups, "slurmdbd": ["dbd"]}
    ctl_only = filters.release_check(["ctl"], {"ctl": {"_slurm_common_releases": outside["ctl"]}},
                                     apart, upgrade=True)
    assert ctl_only["upgrades"] == {}
    assert ctl_only["problems"] == [
        "dbd: slurmdbd's host was not read in this run (left out by --limit, or unreachable), "
        "and --upgrade-slurm upgrades slurmctld only once slurmdbd runs the same build or a "
        "newer one: run with slurmdbd's host too"]
    jump = {"gpu-001": {"_slurm_common_releases": read("slurmd", version="22.05.8-4")}}
    refused = filters.release_check(["gpu-001"], jump, groups, upgrade=True)
    assert (len(refused["problems"]), refused["upgrades"]) == (1, {})
