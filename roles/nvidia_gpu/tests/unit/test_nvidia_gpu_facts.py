"""The GPU facts module (roles/nvidia_gpu/library/nvidia_gpu_facts.py) on the DGX H100
fixtures of tests/fixtures/gpu (built from NVIDIA's schema and topo format, not recorded)
and a CPU topology tree built here, and the gres.conf records made from its facts."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.metalslurm.cluster.plugins.module_utils import gpu

from tests.paths import REPO, load_module

GPU = REPO / "tests" / "fixtures" / "gpu"


@pytest.fixture(scope="module")
def facts_module():
    return load_module(REPO / "roles" / "nvidia_gpu" / "library" / "nvidia_gpu_facts.py",
                       "nvidia_gpu_facts")


def dgx_cpus(root: Path) -> Path:
    """Two 56-core sockets with hyperthreads: CPU n is core n % 56 of socket (n % 112) // 56,
    as Linux numbers a DGX H100's 224 CPUs."""
    for n in range(224):
        topo = root / f"sys/devices/system/cpu/cpu{n}/topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text(f"{(n % 112) // 56}\n")
        (topo / "core_id").write_text(f"{n % 56}\n")
    return root


def test_a_dgx_h100_maps_each_gpu_to_its_sockets_slurm_cores(facts_module, tmp_path):
    gpus = facts_module.gpu_facts((GPU / "dgx-h100-healthy.xml").read_text(),
                                  (GPU / "dgx-h100-topo.txt").read_text(),
                                  str(dgx_cpus(tmp_path)))
    assert [(g["minor"], g["pci_bus_id"], g["numa_node"], g["cores"]) for g in gpus] == [
        (0, "00000000:18:00.0", 0, "0-55"), (1, "00000000:2A:00.0", 0, "0-55"),
        (2, "00000000:3A:00.0", 0, "0-55"), (3, "00000000:5D:00.0", 0, "0-55"),
        (4, "00000000:9A:00.0", 1, "56-111"), (5, "00000000:AB:00.0", 1, "56-111"),
        (6, "00000000:BA:00.0", 1, "56-111"), (7, "00000000:DB:00.0", 1, "56-111")]
    assert {(g["name"], g["mig_mode"], g["nvlink_peers"], g["nvlinks"]) for g in gpus} == {
        ("NVIDIA H100 80GB HBM3", "Disabled", 7, 18)}
    assert gpus[0]["uuid"] == "GPU-00000000-5a3c-4e7b-9d21-0c6f1e8a0000"
    assert gpus[4]["cpus"] == "56-111,168-223"


@pytest.mark.parametrize(("recording", "name", "uuid"), [
    ("h100-vm", "NVIDIA H100 80GB HBM3", "GPU-92f5db81-0a99-a977-66da-a93c1ccc49d5"),
    ("h200-vm", "NVIDIA H200", "GPU-3d836c38-b663-c548-b16b-05b9b70632ce"),
])
def test_a_recorded_vm_gives_its_gpu_and_the_one_sockets_cores(facts_module, tmp_path,
                                                                recording, name, uuid):
    # Recorded on a real H100 and a real H200, each passed through to a 16-CPU VM (driver
    # 580.159.04; see tests/fixtures/gpu/RECORDING-record.txt): one GPU, no NVLink peers, one
    # NUMA node.
    gpus = facts_module.gpu_facts((GPU / f"{recording}-smi.xml").read_text(),
                                  (GPU / f"{recording}-topo.txt").read_text(),
                                  str(cpu_tree(tmp_path, 1, 16)))
    assert gpus == [{"index": 0, "name": name, "uuid": uuid,
                     "pci_bus_id": "00000000:00:06.0", "minor": 0, "mig_mode": "Disabled",
                     "cpus": "0-15", "numa_node": 0, "nvlink_peers": 0, "nvlinks": 0,
                     "cores": "0-15"}]


def test_the_headers_terminal_underline_does_not_hide_the_first_gpus_nvlinks(facts_module):
    # nvidia-smi 580 wraps topo -m's header row in an underline escape even into a file
    # (the recording h100-vm-topo.txt); the DGX matrix written that way must still count
    # GPU0's NVLinks for every other GPU.
    recorded_header = (GPU / "h100-vm-topo.txt").read_text().splitlines()[0]
    assert recorded_header.startswith("\t\x1b[4mGPU0") and recorded_header.endswith("\x1b[0m")
    header, *rest = (GPU / "dgx-h100-topo.txt").read_text().splitlines()
    underlined = "\n".join(["\t\x1b[4m" + header.lstrip("\t") + "\x1b[0m", *rest])
    found = facts_module.parse_topo(underlined)
    assert {i: (v["nvlink_peers"], v["cpus"]) for i, v in found.items()} == {
        i: (7, "0-55,112-167" if i < 4 else "56-111,168-223") for i in range(8)}


def cpu_tree(root: Path, sockets: int, cores: int) -> Path:
    """``sockets`` sockets of ``cores`` cores each, no hyperthreads, CPUs numbered socket by
    socket."""
    for n in range(sockets * cores):
        topo = root / f"sys/devices/system/cpu/cpu{n}/topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text(f"{n // cores}\n")
        (topo / "core_id").write_text(f"{n % cores}\n")
    return root


@pytest.mark.parametrize(("cpus", "cores"), [
    # one NUMA node of four on a 32-core socket (AMD EPYC in NPS4): the whole socket, as
    # Slurm 24.11 accepts only whole sockets (else the node registers INVALID)
    ("8-15", "0-31"), ("40-47", "32-63"),
    # affinity to a single CPU
    ("1", "0-31"),
    # across both sockets, or every CPU
    ("24-39", "0-63"), ("0-63", "0-63"),
])
def test_a_gpus_cores_are_the_whole_sockets_its_affinity_touches(facts_module, tmp_path,
                                                                 cpus, cores):
    topology = facts_module.cpu_topology(str(cpu_tree(tmp_path, 2, 32)))
    assert facts_module.socket_cores(cpus, topology) == cores


def test_cpus_the_node_does_not_have_give_no_cores(facts_module, tmp_path):
    (tmp_path / "sys/devices/system/cpu/cpu0/topology").mkdir(parents=True)
    gpus = facts_module.gpu_facts((GPU / "dgx-h100-healthy.xml").read_text(),
                                  (GPU / "dgx-h100-topo.txt").read_text(), str(tmp_path))
    assert {g["cores"] for g in gpus} == {""}


def test_ranges_expand_and_compress(facts_module):
    assert facts_module.expand("0-2,8") == [0, 1, 2, 8]
    assert facts_module.compress([8, 0, 2, 1, 10, 11]) == "0-2,8,10-11"
    assert facts_module.compress([]) == ""


def test_gres_lines_group_the_gpus_of_one_socket_with_their_cores(facts_module, tmp_path):
    gpus = facts_module.gpu_facts((GPU / "dgx-h100-healthy.xml").read_text(),
                                  (GPU / "dgx-h100-topo.txt").read_text(),
                                  str(dgx_cpus(tmp_path)))
    assert gpu.gres_gpu_records("gpu-001", gpus, "h100") == [
        {"NodeName": "gpu-001", "Name": "gpu", "Type": "h100", "File": "/dev/nvidia[0-3]",
         "Cores": "0-55"},
        {"NodeName": "gpu-001", "Name": "gpu", "Type": "h100", "File": "/dev/nvidia[4-7]",
         "Cores": "56-111"}]
    no_affinity = [{**g, "cores": ""} for g in gpus[:2]]
    assert gpu.gres_gpu_records("gpu-002", no_affinity, "h100") == [
        {"NodeName": "gpu-002", "Name": "gpu", "Type": "h100", "File": "/dev/nvidia[0-1]"}]


def test_a_gpu_count_or_type_other_than_the_inventorys_is_an_error_naming_the_host(
        facts_module):
    gpus = facts_module.parse_smi_xml((GPU / "dgx-h100-lost-gpu.xml").read_text())
    assert gpu.facts_problems(gpus, "gpu-007", 8, "h100") == [
        "gpu-007: the driver sees 7 GPUs (NVIDIA H100 80GB HBM3), the inventory says 8 h100: "
        "fix the node (a GPU off the bus needs a reset or a repair) or its "
        "metalslurm_gpu_count"]
    assert gpu.facts_problems(gpus, "gpu-007", 7, "h100") == []
    assert gpu.facts_problems(gpus, "gpu-007", 7, "h200") == [
        "gpu-007: the driver sees NVIDIA H100 80GB HBM3, not h200 as the inventory says: fix "
        "its metalslurm_gpu_type"]
    assert gpu.facts_problems([{"name": "NVIDIA A100-SXM4-80GB"}], "a", 1, "a10") != []
    assert gpu.facts_problems([{"name": "NVIDIA A10"}], "a", 1, "a10") == []
    assert gpu.facts_problems([{"name": "NVIDIA L40S"}], "a", 1, "l4") != []


