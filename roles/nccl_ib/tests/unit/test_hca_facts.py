"""The hca_facts module on the sysfs fixture trees (tests/fixtures/sysfs), on trees built
here for the cases those do not show, and run as Ansible runs it."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

MODULE = REPO / "roles/nccl_ib/library/hca_facts.py"
SYSFS = REPO / "tests/fixtures/sysfs"


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def hca_facts():
    return _load("hca_facts", MODULE)


@pytest.fixture(scope="module")
def trees():
    return _load("metalslurm_sysfs_build_trees", SYSFS / "build_trees.py")


def _snapshot(root: Path) -> dict:
    """Every entry under root: symlink target, file bytes, or directory."""
    entries = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                entries[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                entries[rel] = ("dir",)
            else:
                entries[rel] = ("file", path.read_bytes())
    return entries


def _table(facts):
    return [(h["device"], h["port"], h["role"], h["gpu_affinity"], h["netdev"], h["pci_address"],
             h["numa_node"]) for h in facts["metalslurm_hcas"]]


def test_committed_trees_equal_a_fresh_build(trees, tmp_path):
    assert sorted(p.name for p in SYSFS.iterdir()
                  if p.is_dir() and not p.name.startswith(("_", "."))) == sorted(trees.TREES)
    for name in trees.TREES:
        trees.build(name, tmp_path / name)
        assert _snapshot(SYSFS / name) == _snapshot(tmp_path / name), (
            f"{name} differs from build_trees.py: run python tests/fixtures/sysfs/build_trees.py")


@pytest.mark.parametrize("tree", ["dgx-h100", "roce-8x400", "oci-bm-gpu-h100-8", "ethernet-only"])
def test_the_recorded_hca_facts_are_what_the_module_reads(hca_facts, tree):
    """tests/fixtures/hca holds these as the NCCL derivation's input (the collection's
    tests); METALSLURM_WRITE_HCA_FACTS=1 writes them anew after a change of the module."""
    found = hca_facts.hca_facts(str(SYSFS / tree))["metalslurm_hcas"]
    recorded = REPO / "tests/fixtures/hca" / f"{tree}.json"
    if os.environ.get("METALSLURM_WRITE_HCA_FACTS"):
        recorded.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    assert json.loads(recorded.read_text()) == found


def test_fixture_symlinks_are_relative_and_stay_in_their_tree():
    links = [p for p in SYSFS.rglob("*") if p.is_symlink()]
    assert len(links) > 300
    for link in links:
        target = os.readlink(link)
        assert not os.path.isabs(target), link
        tree = SYSFS / link.relative_to(SYSFS).parts[0]
        assert Path(os.path.realpath(link)).is_relative_to(tree.resolve()), link
        assert link.exists(), f"{link} -> {target} dangles"


def test_dgx_h100_compute_storage_and_frontend_ports(hca_facts):
    facts = hca_facts.hca_facts(str(SYSFS / "dgx-h100"))
    assert facts["metalslurm_hca_present"] is True
    assert facts["metalslurm_gpu_pci"] == [
        "0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0", "0000:9d:00.0",
        "0000:c3:00.0", "0000:d1:00.0", "0000:df:00.0"]
    assert _table(facts) == [
        ("mlx5_0", 1, "compute", "pcie-switch", "ibp24s0", "0000:18:00.0", 0),
        ("mlx5_1", 1, "storage", "numa", "ibp41s0f0", "0000:29:00.0", 0),
        ("mlx5_2", 1, "frontend", "numa", "enp41s0f1np1", "0000:29:00.1", 0),
        ("mlx5_3", 1, "compute", "pcie-switch", "ibp64s0", "0000:40:00.0", 0),
        ("mlx5_4", 1, "compute", "pcie-switch", "ibp79s0", "0000:4f:00.0", 0),
        ("mlx5_5", 1, "compute", "pcie-switch", "ibp94s0", "0000:5e:00.0", 0),
        ("mlx5_6", 1, "compute", "pcie-switch", "ibp154s0", "0000:9a:00.0", 1),
        ("mlx5_7", 1, "storage", "numa", "ibp170s0f0", "0000:aa:00.0", 1),
        ("mlx5_8", 1, "frontend", "numa", "enp170s0f1np1", "0000:aa:00.1", 1),
        ("mlx5_9", 1, "compute", "pcie-switch", "ibp192s0", "0000:c0:00.0", 1),
        ("mlx5_10", 1, "compute", "pcie-switch", "ibp206s0", "0000:ce:00.0", 1),
        ("mlx5_11", 1, "compute", "pcie-switch", "ibp220s0", "0000:dc:00.0", 1)]
    first = facts["metalslurm_hcas"][0]
    assert first == {
        "device": "mlx5_0", "port": 1, "link_layer": "InfiniBand", "state": "ACTIVE",
        "phys_state": "LinkUp", "rate": "400 Gb/sec (4X NDR)", "rate_gbps": 400,
        "roce_v2_gid_indexes": [], "roce_v2_ipv4_gid_index": None, "netdev": "ibp24s0",
        "numa_node": 0, "pci_address": "0000:18:00.0", "gpu_affinity": "pcie-switch",
        "gpu_adjacent": True, "role": "compute"}
    # InfiniBand ports never report RoCE GIDs; the bonded Ethernet ports only link-local.
    for hca in facts["metalslurm_hcas"]:
        if hca["link_layer"] == "InfiniBand":
            assert hca["roce_v2_gid_indexes"] == [], hca["device"]
        else:
            assert (hca["roce_v2_gid_indexes"], hca["roce_v2_ipv4_gid_index"]) == ([1], None)


def test_devices_sort_naturally(hca_facts):
    devices = [h["device"] for h in hca_facts.hca_facts(str(SYSFS / "dgx-h100"))["metalslurm_hcas"]]
    assert devices.index("mlx5_9") < devices.index("mlx5_10") < devices.index("mlx5_11")
    assert sorted(["mlx5_10", "mlx5_2", "mlx5_1"], key=hca_facts.natural_key) == [
        "mlx5_1", "mlx5_2", "mlx5_10"]


def test_roce_8x400_gid_index_3_is_the_ipv4_roce_v2_gid(hca_facts):
    facts = hca_facts.hca_facts(str(SYSFS / "roce-8x400"))
    compute = [h for h in facts["metalslurm_hcas"] if h["role"] == "compute"]
    assert [h["device"] for h in compute] == [f"mlx5_{i}" for i in range(8)]
    for hca in compute:
        assert hca["link_layer"] == "Ethernet"
        assert hca["roce_v2_gid_indexes"] == [1, 3]
        assert hca["roce_v2_ipv4_gid_index"] == 3
        assert hca["rate_gbps"] == 400
    # The BlueField-3 front end is enslaved to bond0, which carries the default route.
    assert [(h["device"], h["role"]) for h in facts["metalslurm_hcas"][8:]] == [
        ("mlx5_8", "frontend"), ("mlx5_9", "frontend")]


def test_oci_bm_gpu_h100_8_sixteen_compute_ports_two_per_gpu(hca_facts):
    facts = hca_facts.hca_facts(str(SYSFS / "oci-bm-gpu-h100-8"))
    by_role: dict[str, list[str]] = {}
    for hca in facts["metalslurm_hcas"]:
        by_role.setdefault(hca["role"], []).append(hca["device"])
    assert by_role == {
        "compute": [f"mlx5_{i}" for i in (0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 14, 15, 16,
                                            17)],
        "frontend": ["mlx5_2"], "storage": ["mlx5_11"]}
    eth1 = facts["metalslurm_hcas"][11]
    assert (eth1["netdev"], eth1["state"], eth1["phys_state"]) == ("eth1", "DOWN", "Disabled")
    assert {h["rate_gbps"] for h in facts["metalslurm_hcas"] if h["role"] == "compute"} == {200}


def test_ethernet_only_node_has_no_hca_and_does_not_fail(hca_facts):
    assert hca_facts.hca_facts(str(SYSFS / "ethernet-only")) == {
        "metalslurm_hcas": [], "metalslurm_gpu_pci": [], "metalslurm_hca_present": False}
    assert hca_facts.hca_facts(str(SYSFS / "does-not-exist"))["metalslurm_hcas"] == []


def test_a_partial_tree_reads_as_unknown(hca_facts, tmp_path):
    root = tmp_path / "partial"
    shutil.copytree(SYSFS / "roce-8x400", root, symlinks=True)
    port = root / "sys/class/infiniband/mlx5_0/ports/1"
    for name in ("rate", "state", "phys_state"):
        (port / name).unlink()
    shutil.rmtree(port / "gids")
    (root / "sys/class/infiniband/mlx5_0/device/numa_node").unlink()
    (root / "sys/class/infiniband/mlx5_1/device/net/enp64s0np0/dev_port").write_text("x\n")
    (root / "proc/net/route").unlink()
    shutil.rmtree(root / "sys/class/infiniband/mlx5_2/ports")
    (root / "sys/class/infiniband/mlx5_3/device").unlink()
    hcas = {h["device"]: h for h in hca_facts.hca_facts(str(root))["metalslurm_hcas"]}
    mlx5_0 = hcas["mlx5_0"]
    assert (mlx5_0["rate"], mlx5_0["rate_gbps"], mlx5_0["state"], mlx5_0["phys_state"]) == (
        None, None, None, None)
    assert mlx5_0["roce_v2_gid_indexes"] == [] and mlx5_0["numa_node"] == -1
    assert mlx5_0["gpu_affinity"] == "pcie-switch"  # the PCI path still tells
    assert hcas["mlx5_1"]["netdev"] == "enp64s0np0"
    assert "mlx5_2" not in hcas  # a device without ports has nothing to report
    assert (hcas["mlx5_3"]["pci_address"], hcas["mlx5_3"]["gpu_affinity"]) == (None, "none")
    # Without /proc/net/route nothing is front end: the bonded ports are plain RDMA ports.
    assert hcas["mlx5_8"]["role"] == "storage"


def _flat_tree(trees, root: Path, gpu_numa: list[int]) -> None:
    """A flat PCIe node (every device right below a root port, as in many VMs): HCAs on
    NUMA 0 and 1, GPUs on the NUMA nodes given."""
    tree = trees.Tree(root)
    for index, numa in enumerate(gpu_numa):
        tree.pci(trees.direct(0x10 + index, 0x11 + index), trees.NVIDIA, trees.H100_SXM5,
                 trees.GPU_CLASS, numa)
    for index, numa in enumerate((0, 1)):
        rel = tree.pci(trees.direct(0x40 + index * 2, 0x41 + index * 2), trees.MELLANOX,
                       trees.CONNECTX7, trees.IB_CLASS, numa)
        tree.netdev(rel, f"ib{index}", 0, up=True)
        tree.hca(rel, f"mlx5_{index}", trees.Port("InfiniBand"), None)
    tree.finish()


def test_without_a_shared_switch_the_gpus_numa_node_decides(hca_facts, trees, tmp_path):
    _flat_tree(trees, tmp_path / "flat", gpu_numa=[0])
    facts = hca_facts.hca_facts(str(tmp_path / "flat"))
    assert [(h["device"], h["gpu_affinity"], h["gpu_adjacent"], h["role"])
            for h in facts["metalslurm_hcas"]] == [("mlx5_0", "numa", True, "compute"),
                                                    ("mlx5_1", "none", False, "storage")]


def test_without_gpus_every_rdma_port_is_compute(hca_facts, trees, tmp_path):
    _flat_tree(trees, tmp_path / "cpu", gpu_numa=[])
    facts = hca_facts.hca_facts(str(tmp_path / "cpu"))
    assert facts["metalslurm_gpu_pci"] == []
    assert [(h["device"], h["gpu_affinity"], h["role"]) for h in facts["metalslurm_hcas"]] == [
        ("mlx5_0", "none", "compute"), ("mlx5_1", "none", "compute")]


def test_parsers(hca_facts):
    assert hca_facts.parse_state("4: ACTIVE") == "ACTIVE"
    assert hca_facts.parse_state("5: LinkUp") == "LinkUp"
    assert hca_facts.parse_state("") is None
    assert hca_facts.parse_rate("400 Gb/sec (4X NDR)") == 400
    assert hca_facts.parse_rate("2.5 Gb/sec (1X SDR)") == 2
    assert hca_facts.parse_rate("garbage") is None
    route = (SYSFS / "oci-bm-gpu-h100-8/proc/net/route").read_text()
    assert hca_facts.default_route_interfaces(route) == {"eth0"}
    assert hca_facts.default_route_interfaces(None) == set()


def test_run_as_ansible_runs_it(tmp_path):
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {
        "sysfs_root": str(SYSFS / "dgx-h100"), "_ansible_check_mode": True}}))
    proc = subprocess.run([sys.executable, str(MODULE), str(args)], capture_output=True,
                          text=True, check=False)
    result = json.loads(proc.stdout)
    assert result["changed"] is False, result
    facts = result["ansible_facts"]
    assert facts["metalslurm_hca_present"] is True
    assert len(facts["metalslurm_gpu_pci"]) == 8
    assert [h["device"] for h in facts["metalslurm_hcas"] if h["role"] == "compute"] == [
        "mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
