"""slurm.conf rendering from data, and hostlist compression."""

import pytest
from ansible_collections.metalslurm.cluster.plugins.module_utils.slurmconf import (
    SlurmConfError,
    compress_hostlist,
    expand_hostlist,
    gpu_device_files,
    grouped_lines,
    partition_lines,
    settings_lines,
    slurm_value,
)


@pytest.mark.parametrize(("names", "expr"), [
    (["gpu-001"], "gpu-001"),
    (["gpu-002", "gpu-001", "gpu-003"], "gpu-[001-003]"),
    (["gpu-001", "gpu-002", "gpu-004"], "gpu-[001-002,004]"),
    (["a100-01", "h100-001", "h100-002"], "a100-01,h100-[001-002]"),
    ([f"node{i}" for i in range(1, 1001)], "node[1-1000]"),
    (["n1", "n1", "n2"], "n[1-2]"),
])
def test_compress_hostlist(names, expr):
    assert compress_hostlist(names) == expr
    assert sorted(expand_hostlist(expr)) == sorted(set(names))


def test_compress_empty_list_is_an_error():
    with pytest.raises(SlurmConfError):
        compress_hostlist([])


@pytest.mark.parametrize(("value", "text"), [
    (True, "YES"), (False, "NO"), (3, "3"), ("cons_tres", "cons_tres"),
    (["task/cgroup", "task/affinity"], "task/cgroup,task/affinity"),
    ({"b": 2, "a": True}, "a=YES,b=2"),
])
def test_slurm_value(value, text):
    assert slurm_value(value) == text


@pytest.mark.parametrize("value", ["two words", "", "a#b"])
def test_values_slurm_would_misread_are_refused(value):
    with pytest.raises(SlurmConfError):
        slurm_value(value)


def test_settings_are_sorted_and_none_removes_a_key():
    assert settings_lines({"SlurmUser": "slurm", "AuthType": "auth/munge", "Gone": None}) == [
        "AuthType=auth/munge", "SlurmUser=slurm"]


def test_identical_nodes_share_one_line():
    nodes = [{"NodeName": f"gpu-{i:03d}", "Gres": "gpu:h100:8", "RealMemory": 2000000}
             for i in range(1, 65)]
    nodes.append({"NodeName": "cpu-001", "RealMemory": 500000})
    assert grouped_lines("NodeName", nodes) == [
        "NodeName=cpu-001 RealMemory=500000",
        "NodeName=gpu-[001-064] Gres=gpu:h100:8 RealMemory=2000000",
    ]


def test_partition_lines_compress_nodes():
    assert partition_lines([{"PartitionName": "train", "Nodes": ["gpu-002", "gpu-001"],
                             "Default": True, "MaxTime": "7-00:00:00"}]) == [
        "PartitionName=train Default=YES MaxTime=7-00:00:00 Nodes=gpu-[001-002]"]


def test_partition_without_nodes_is_refused():
    with pytest.raises(SlurmConfError, match="has no nodes"):
        partition_lines([{"PartitionName": "empty", "Nodes": []}])


@pytest.mark.parametrize(("count", "files"), [(8, "/dev/nvidia[0-7]"), (1, "/dev/nvidia0"),
                                               (16, "/dev/nvidia[0-15]")])
def test_gpu_device_files(count, files):
    assert gpu_device_files(count) == files


def test_bad_settings_name_the_key():
    with pytest.raises(SlurmConfError, match="setting SchedulerParameters: value 'a b'"):
        settings_lines({"SchedulerParameters": "a b"})
    with pytest.raises(SlurmConfError, match="'Bad Key' is not a Slurm setting name"):
        settings_lines({"Bad Key": "x"})
