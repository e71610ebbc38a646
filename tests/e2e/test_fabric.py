"""The fabric on the shared Debian 13 cluster: topology.conf discovered by ibnetdiscover
from an InfiniBand fabric the controller simulates (ibsim, management layer only), the
placement Slurm makes with it, a cable pulled in the simulator, and the RDMA packages and
NCCL settings of nodes without an HCA.

The simulated fabric is tests/fixtures/ib/local-e2e.ibnetdiscover: leaf ibleaf-001 with
gpu-001 and gpu-003, leaf ibleaf-002 with gpu-002 and gpu-004, spine ibspine-01. Every
link pulled here is put back before the module ends.
"""

from __future__ import annotations

import re

import pytest

from infra.ops.configure import run_playbook
from tests.e2e.cluster import metalslurm

CONSOLE = "/run/metalslurm-ibsim/console"
UMAD2SIM = "LD_PRELOAD=/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so"
# gpu-003's HCA in the fabric file (an elastic node: powered down, yet still cabled).
GPU_003_HCA = '"H-e09d730300000010"'
TREE = ["SwitchName=ibleaf-001 Level=0 LinkSpeed=1 Nodes=gpu-[001,003]",
        "SwitchName=ibleaf-002 Level=0 LinkSpeed=1 Nodes=gpu-[002,004]",
        "SwitchName=ibspine-01 Level=1 LinkSpeed=1 Nodes=gpu-[001-004] "
        "Switches=ibleaf-[001-002]"]


@pytest.fixture(scope="module")
def cluster(debian13):
    debian13.wait_for_elastic_nodes_down()
    return debian13


def placement(cluster, options: str) -> str:
    """The nodes a 2-node job would get (srun --test-only, as alice)."""
    proc = cluster.ctl(f"srun --test-only -N2 {options} true", user="alice",
                       check=False)
    match = re.search(r" on nodes (\S+) in partition ", proc.stdout + proc.stderr)
    assert match, proc.stdout + proc.stderr
    return match[1]


def test_topology_conf_is_the_tree_ibnetdiscover_finds(cluster):
    conf = cluster.ctl("cat /etc/slurm/topology.conf").stdout.splitlines()
    assert conf[1:] == ["SwitchName=ibleaf-001 Nodes=gpu-[001,003]",
                        "SwitchName=ibleaf-002 Nodes=gpu-[002,004]",
                        "SwitchName=ibspine-01 Switches=ibleaf-[001-002]"]
    assert cluster.ctl("scontrol show topology").stdout.splitlines() == TREE


def test_the_management_tools_see_the_simulated_fabric(cluster):
    """ibnetdiscover, run as the role runs it, finds the file's 3 switches and 4 HCAs."""
    out = cluster.ctl(f"{UMAD2SIM} ibnetdiscover 2>/dev/null").stdout
    assert sorted(re.findall(r'^Ca\t1 "H-\w+"\t\t# "(\S+) mlx5_0"', out, re.M)) == [
        "gpu-001", "gpu-002", "gpu-003", "gpu-004"]
    assert sorted(re.findall(r'^Switch\t\d+ "S-\w+"\t\t# "MF0;([\w-]+):', out, re.M)) == [
        "ibleaf-001", "ibleaf-002", "ibspine-01"]


def test_a_two_node_job_stays_under_one_leaf(cluster):
    """Without gpu-001, Slurm's default order would pick gpu-[002-003] (across both
    leaves); with the tree it takes gpu-002 and gpu-004, both under ibleaf-002."""
    assert placement(cluster, "--switches=1 --exclude=gpu-001") == "gpu-[002,004]"
    assert placement(cluster, "--exclude=gpu-001") == "gpu-[002,004]"
    assert placement(cluster, "--switches=1 --exclude=gpu-002") == "gpu-[001,003]"


def test_a_pulled_cable_names_the_node_and_keeps_it_in_slurm(cluster):
    """gpu-003's link goes down in the simulator: discovery names gpu-003, keeps it under
    the leaf the current topology.conf gives it, and changes nothing; once the link is
    back, discovery is quiet again."""
    before = cluster.ctl("sha256sum /etc/slurm/topology.conf").stdout
    cluster.ctl(f"echo 'Unlink {GPU_003_HCA}' > {CONSOLE}")
    try:
        seen = cluster.ctl(f"{UMAD2SIM} ibnetdiscover 2>/dev/null | grep -c '^Ca'").stdout
        assert seen.strip() == "3"
        proc = metalslurm("topology", "discover", "-i", str(cluster.inventory))
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert ("WARNING: gpu-003 is not in the fabric (no HCA description names it); kept "
                "under ibleaf-001, where the current topology.conf places it.") in proc.stdout
        assert "0 changed task(s)" in proc.stdout
        assert cluster.ctl("sha256sum /etc/slurm/topology.conf").stdout == before
        assert cluster.ctl("scontrol show topology").stdout.splitlines() == TREE
        assert cluster.ctl("sinfo --noheader --Node --partition=train --nodes=gpu-003 "
                           "--format='%N %T'").stdout.strip() == "gpu-003 idle~"
    finally:
        cluster.ctl(f"echo 'ReLink {GPU_003_HCA}' > {CONSOLE}")
    again = metalslurm("topology", "discover", "-i", str(cluster.inventory))
    assert again.returncode == 0, again.stdout[-3000:]
    assert "WARNING" not in again.stdout
    assert "0 changed task(s)" in again.stdout


@pytest.mark.parametrize("package", ["rdma-core", "ibverbs-providers", "ibverbs-utils",
                                     "infiniband-diags", "perftest"])
def test_the_rdma_packages_are_installed_on_compute_nodes(cluster, package):
    status = cluster.on("gpu-001", f"dpkg-query -W -f='${{db:Status-Abbrev}}' {package}").stdout
    assert status.startswith("ii"), status


def test_nodes_without_an_hca_get_only_the_socket_interface(cluster):
    """No /sys/class/infiniband on these nodes: nccl.conf names the interface carrying
    the node's private address, exactly, and nothing else; no RDMA module is set to load."""
    iface = cluster.on("gpu-001", "ip -o -4 addr show to 10.78.13.11").stdout.split()[1]
    conf = cluster.on("gpu-001", "grep -v '^#' /etc/nccl.conf").stdout.splitlines()
    assert conf == [f"NCCL_SOCKET_IFNAME=={iface}"]
    gone = cluster.on("gpu-001", "ls /etc/modules-load.d/metalslurm-rdma.conf", check=False)
    assert gone.returncode != 0


def test_a_job_that_sources_the_nccl_environment_gets_it(cluster):
    out = cluster.ctl("srun -N1 -w gpu-002 bash -c "
                      "'. /etc/nccl.env; echo NCCL_SOCKET_IFNAME=$NCCL_SOCKET_IFNAME'",
                      user="bob").stdout
    iface = cluster.on("gpu-002", "ip -o -4 addr show to 10.78.13.12").stdout.split()[1]
    assert out.strip() == f"NCCL_SOCKET_IFNAME=={iface}"


def test_an_nccl_setting_nccl_does_not_read_is_refused_before_any_change(cluster):
    before = cluster.on("gpu-001", "sha256sum /etc/nccl.conf").stdout
    result = run_playbook(cluster.inventory, out=lambda _line: None, tags="configure",
                          limit="gpu-001",
                          extra_vars={"nccl_ib_settings": {"NCCL_IB_HCAS": "=mlx5_0:1"}})
    assert not result.ok
    assert any("metalslurm:nccl.settings.NCCL_IB_HCAS is not a variable NCCL reads" in f
               for f in result.failures), result.failures
    assert cluster.on("gpu-001", "sha256sum /etc/nccl.conf").stdout == before


def test_an_hca_override_naming_a_missing_device_is_refused(cluster):
    result = run_playbook(cluster.inventory, out=lambda _line: None, tags="configure",
                          limit="gpu-001",
                          extra_vars={"nccl_ib_settings": {"NCCL_IB_HCA": "=mlx5_7:1"}})
    assert not result.ok
    assert any("Nothing was changed: gpu-001: NCCL_IB_HCA override names mlx5_7, which this "
               "node does not have (it has no RDMA device)." in f
               for f in result.failures), result.failures
