"""NCCL settings from the HCA facts of the sysfs fixture trees (module_utils/nccl.py): the
facts as the nccl_ib role's module reads them, recorded in tests/fixtures/hca."""

import copy
import json
import subprocess

import pytest
from ansible_collections.metalslurm.cluster.plugins.module_utils import nccl

from tests.paths import FIXTURES

DGX_HCA = "=mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_9:1,mlx5_10:1,mlx5_11:1"
# OCI's documented NCCL_IB_HCA for BM.GPU.H100.8, with the ports spelled out.
OCI_HCA = "=" + ",".join(f"mlx5_{i}:1" for i in (0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 14,
                                                  15, 16, 17))


@pytest.fixture(scope="module")
def hcas():
    return {tree: json.loads((FIXTURES / "hca" / f"{tree}.json").read_text())
            for tree in ("dgx-h100", "roce-8x400", "oci-bm-gpu-h100-8", "ethernet-only")}


def derive(hcas, *, socket_ifname="eth0", gpudirect=None, overrides=None, host="gpu-001"):
    return nccl.derive_nccl_settings(hcas, host=host, socket_ifname=socket_ifname,
                                     gpudirect=gpudirect, overrides=overrides or {})


def test_dgx_h100_infiniband(hcas):
    result = derive(hcas["dgx-h100"], socket_ifname="bond0")
    assert result.settings == {"NCCL_IB_HCA": DGX_HCA, "NCCL_SOCKET_IFNAME": "=bond0"}
    assert (result.problems, result.warnings) == ([], [])


def test_exact_names_avoid_the_prefix_pitfall(hcas):
    """NCCL reads NCCL_IB_HCA entries as prefixes unless the list starts with '=':
    on the DGX, storage port mlx5_1 would otherwise select compute mlx5_10 and mlx5_11."""
    value = derive(hcas["dgx-h100"]).settings["NCCL_IB_HCA"]
    assert value.startswith("=")
    devices = [h["device"] for h in hcas["dgx-h100"]]
    for entry in value[1:].split(","):
        name = entry.split(":")[0]
        assert [d for d in devices if d == name] == [name]
    assert "mlx5_1:" not in value and "mlx5_1," not in value
    # An override without '=' is accepted, with a warning naming what NCCL will select.
    result = derive(hcas["dgx-h100"], overrides={"NCCL_IB_HCA": "mlx5_1"})
    assert result.problems == []
    assert result.warnings == [
        "gpu-001: NCCL_IB_HCA entry mlx5_1 has no '=' in front, so NCCL reads it as a prefix "
        "and selects mlx5_1, mlx5_10, mlx5_11; write '=mlx5_1' to name one device"]


def test_roce_gid_index_3_only_on_roce(hcas):
    roce = derive(hcas["roce-8x400"], socket_ifname="bond0")
    assert roce.settings == {
        "NCCL_IB_HCA": "=" + ",".join(f"mlx5_{i}:1" for i in range(8)),
        "NCCL_IB_GID_INDEX": "3", "NCCL_SOCKET_IFNAME": "=bond0"}
    oci = derive(hcas["oci-bm-gpu-h100-8"])
    assert oci.settings == {"NCCL_IB_HCA": OCI_HCA, "NCCL_IB_GID_INDEX": "3",
                            "NCCL_SOCKET_IFNAME": "=eth0"}
    assert (oci.problems, oci.warnings) == ([], [])
    assert "NCCL_IB_GID_INDEX" not in derive(hcas["dgx-h100"]).settings


def test_differing_gid_indexes_are_left_to_nccl(hcas):
    facts = copy.deepcopy(hcas["roce-8x400"])
    facts[2]["roce_v2_ipv4_gid_index"] = 5
    facts[4]["roce_v2_ipv4_gid_index"] = None
    result = derive(facts)
    assert "NCCL_IB_GID_INDEX" not in result.settings
    assert result.warnings == [
        "gpu-001: the compute ports have no common RoCE v2 IPv4 GID index (mlx5_0:1=3, "
        "mlx5_1:1=3, mlx5_2:1=5, mlx5_3:1=3, mlx5_4:1=None, mlx5_5:1=3, mlx5_6:1=3, "
        "mlx5_7:1=3); NCCL_IB_GID_INDEX is not set and NCCL picks one"]


def test_down_compute_ports_are_left_out_with_a_warning(hcas):
    facts = copy.deepcopy(hcas["dgx-h100"])
    for hca in facts:
        if hca["device"] in ("mlx5_3", "mlx5_10"):
            hca["state"] = "DOWN"
    result = derive(facts)
    assert result.settings["NCCL_IB_HCA"] == (
        "=mlx5_0:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_9:1,mlx5_11:1")
    assert result.warnings == [
        "gpu-001: compute ports not ACTIVE, left out of NCCL_IB_HCA: mlx5_3:1, mlx5_10:1"]
    for hca in facts:
        hca["state"] = "DOWN"
    result = derive(facts)
    assert result.settings["NCCL_IB_HCA"] == DGX_HCA
    assert result.warnings[0].startswith("gpu-001: no compute port is ACTIVE (mlx5_0:1, ")


def test_gpudirect_settings_only_when_asked(hcas):
    gdr_keys = {"NCCL_NET_GDR_LEVEL", "NCCL_NET_GDR_READ", "NCCL_DMABUF_ENABLE"}
    assert not gdr_keys & set(derive(hcas["dgx-h100"]).settings)
    peermem = derive(hcas["dgx-h100"], gpudirect="peermem").settings
    assert {k: peermem[k] for k in gdr_keys & set(peermem)} == {
        "NCCL_NET_GDR_LEVEL": "PXB", "NCCL_NET_GDR_READ": "1"}
    dmabuf = derive(hcas["oci-bm-gpu-h100-8"], gpudirect="dmabuf").settings
    assert {k: dmabuf[k] for k in gdr_keys} == {
        "NCCL_NET_GDR_LEVEL": "PXB", "NCCL_NET_GDR_READ": "1", "NCCL_DMABUF_ENABLE": "1"}
    bogus = derive(hcas["dgx-h100"], gpudirect="nvlink")
    assert not gdr_keys & set(bogus.settings)
    assert bogus.problems == [
        "gpu-001: gpudirect is 'nvlink'; it must be one of peermem, dmabuf, or unset"]
    # Compute ports chosen by NUMA node only: no GDR level, and a warning says why.
    numa_only = copy.deepcopy(hcas["dgx-h100"])
    for hca in numa_only:
        hca["gpu_affinity"] = "numa" if hca["gpu_affinity"] == "pcie-switch" else hca[
            "gpu_affinity"]
    result = derive(numa_only, gpudirect="peermem")
    assert "NCCL_NET_GDR_LEVEL" not in result.settings
    assert result.settings["NCCL_NET_GDR_READ"] == "1"
    assert "do not share a PCIe switch with the GPUs" in result.warnings[0]


def test_ethernet_only_node_gets_no_ib_keys(hcas):
    result = derive(hcas["ethernet-only"], socket_ifname="eno1", gpudirect="peermem")
    assert result.settings == {"NCCL_SOCKET_IFNAME": "=eno1"}
    assert (result.problems, result.warnings) == ([], [])
    assert derive(hcas["ethernet-only"], socket_ifname=None).settings == {}


def test_no_compute_port_does_not_force_ib_off(hcas):
    storage_only = [dict(h, role="storage") for h in hcas["dgx-h100"] if h["role"] != "frontend"]
    result = derive(storage_only)
    assert result.settings == {"NCCL_SOCKET_IFNAME": "=eth0"}
    assert result.warnings == [
        "gpu-001: no compute HCA port; NCCL may use the others (mlx5_0:1, mlx5_1:1, mlx5_3:1, "
        "mlx5_4:1, mlx5_5:1, mlx5_6:1, mlx5_7:1, mlx5_9:1, mlx5_10:1, mlx5_11:1) unless "
        "overrides set NCCL_IB_HCA or NCCL_IB_DISABLE=1"]


def test_overrides_win(hcas):
    result = derive(hcas["oci-bm-gpu-h100-8"], gpudirect="peermem", overrides={
        "NCCL_IB_GID_INDEX": "5", "NCCL_IB_TC": "41", "NCCL_IB_SL": "0",
        "NCCL_IB_TIMEOUT": "22", "NCCL_NET_GDR_LEVEL": "PHB",
        "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1"})
    assert (result.problems, result.warnings) == ([], [])
    assert result.settings == {
        "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_IB_GID_INDEX": "5",
        "NCCL_NET_GDR_LEVEL": "PHB", "NCCL_NET_GDR_READ": "1", "NCCL_SOCKET_IFNAME": "=eth0",
        "NCCL_IB_TC": "41", "NCCL_IB_SL": "0", "NCCL_IB_TIMEOUT": "22"}


def test_bad_overrides_are_refused_with_a_sentence(hcas):
    result = derive(hcas["dgx-h100"], overrides={
        "NCCL_IB_HCAS": "=mlx5_0", "NCCL_DEBUG": "WARN\nNCCL_IB_DISABLE=1",
        "NCCL_IB_HCA": "=mlx5_0:1,mlx5_12,mlx5_3:2"})
    assert result.problems == [
        "gpu-001: override NCCL_IB_HCAS is not a variable NCCL reads (the list, with its "
        "source, is NCCL_VARIABLES in module_utils/nccl.py)",
        "gpu-001: override NCCL_DEBUG must be one value on one line of at most 1023 characters "
        "(NCCL reads nccl.conf line by line), got 'WARN\\nNCCL_IB_DISABLE=1'",
        "gpu-001: NCCL_IB_HCA override names mlx5_12, which this node does not have (it has "
        "mlx5_0, mlx5_1, mlx5_2, mlx5_3, mlx5_4, mlx5_5, mlx5_6, mlx5_7, mlx5_8, mlx5_9, "
        "mlx5_10, mlx5_11)",
        "gpu-001: NCCL_IB_HCA override names port 2 of mlx5_3, which this node does not have"]
    assert "NCCL_IB_HCAS" not in result.settings and "NCCL_DEBUG" not in result.settings


def test_hca_override_problems(hcas):
    dgx = hcas["dgx-h100"]
    assert nccl.hca_override_problems("gpu-001", dgx, DGX_HCA) == []
    assert nccl.hca_override_problems("gpu-001", dgx, "^=mlx5_1,mlx5_7") == []
    assert nccl.hca_override_problems("gpu-001", dgx, "mlx5") == []
    assert nccl.hca_override_problems("gpu-001", dgx, "=mlx5") == [
        "gpu-001: NCCL_IB_HCA override names mlx5, which this node does not have (it has "
        "mlx5_0, mlx5_1, mlx5_2, mlx5_3, mlx5_4, mlx5_5, mlx5_6, mlx5_7, mlx5_8, mlx5_9, "
        "mlx5_10, mlx5_11)"]
    assert nccl.hca_override_problems("cpu-001", [], "=mlx5_0") == [
        "cpu-001: NCCL_IB_HCA override names mlx5_0, which this node does not have (it has "
        "no RDMA device)"]
    assert nccl.hca_override_problems("gpu-001", dgx, "=mlx5_0,,mlx5_3") == [
        "gpu-001: NCCL_IB_HCA override '=mlx5_0,,mlx5_3' has an empty entry"]


def test_nccl_variables_cover_what_metalslurm_writes():
    required = {
        "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "NCCL_IB_GID_INDEX", "NCCL_NET_GDR_LEVEL",
        "NCCL_NET_GDR_READ", "NCCL_IB_DISABLE", "NCCL_DEBUG", "NCCL_IB_TIMEOUT",
        "NCCL_IB_RETRY_CNT", "NCCL_IB_QPS_PER_CONNECTION", "NCCL_IB_TC", "NCCL_IB_SL",
        "NCCL_IB_ADAPTIVE_ROUTING", "NCCL_CROSS_NIC", "NCCL_NVLS_ENABLE", "NCCL_TOPO_FILE",
        "NCCL_IB_SPLIT_DATA_ON_QPS", "NCCL_ALGO", "NCCL_PROTO", "NCCL_NET_PLUGIN",
        "NCCL_DMABUF_ENABLE", "NCCL_IB_PCI_RELAXED_ORDERING", "NCCL_SOCKET_FAMILY"}
    assert required <= set(nccl.NCCL_VARIABLES)
    for key, meaning in nccl.NCCL_VARIABLES.items():
        assert key.startswith("NCCL_") and key.isupper(), key
        assert meaning and "\n" not in meaning and len(meaning) <= 100, key


def test_render_nccl_conf(hcas):
    settings = derive(hcas["oci-bm-gpu-h100-8"], gpudirect="peermem").settings
    text = nccl.render_nccl_conf(settings)
    lines = text.splitlines()
    comments = [line for line in lines if line.startswith("#")]
    assert len(comments) == 2 and not any("=" in line for line in comments)
    assert lines[len(comments):] == [
        "NCCL_IB_GID_INDEX=3", f"NCCL_IB_HCA={OCI_HCA}", "NCCL_NET_GDR_LEVEL=PXB",
        "NCCL_NET_GDR_READ=1", "NCCL_SOCKET_IFNAME==eth0"]
    assert text.endswith("\n")


def test_render_nccl_env_round_trips_through_a_shell(tmp_path):
    settings = {"NCCL_IB_HCA": DGX_HCA, "NCCL_SOCKET_IFNAME": "=bond0",
                "NCCL_DEBUG_FILE": "/tmp/nccl $USER's log.%h.%p", "NCCL_TOPO_FILE": ""}
    text = nccl.render_nccl_env(settings)
    assert "export NCCL_IB_HCA==mlx5_0:1,mlx5_3:1" in text
    env_file = tmp_path / "nccl.sh"
    env_file.write_text(text)
    script = (f". {env_file}; " + "; ".join(
        f'printf "%s\\0" "${{{key}}}"' for key in sorted(settings)))
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "USER": "someone"}).stdout
    assert out.split("\0")[:-1] == [settings[key] for key in sorted(settings)]
