"""The nvidia_pci module: GPUs and NVSwitches from lspci, on DGX H100 and PCIe H100 outputs
built in lspci's format from pci.ids, not recorded (tests/fixtures/pci, whose README says so)."""

from __future__ import annotations

from tests.paths import FIXTURES, ROLES, load_module

PCI = FIXTURES / "pci"


def _nvidia_pci():
    return load_module(ROLES / "nvidia_gpu" / "library" / "nvidia_pci.py", "nvidia_pci")


def test_lspci_finds_eight_gpus_and_four_nvswitches_on_a_dgx_h100():
    found = _nvidia_pci().parse_lspci((PCI / "dgx-h100-lspci.txt").read_text())
    assert [g["slot"] for g in found["gpus"]] == [
        "0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0", "0000:9a:00.0",
        "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]
    assert {(g["device"], g["name"]) for g in found["gpus"]} == {
        ("2330", "GH100 [H100 SXM5 80GB]")}
    assert [s["slot"] for s in found["nvswitches"]] == [
        "0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]



def test_lspci_on_pcie_h100s_finds_no_nvswitch_and_without_domain_adds_it():
    found = _nvidia_pci().parse_lspci((PCI / "h100-pcie-lspci.txt").read_text())
    assert [(g["slot"], g["device"]) for g in found["gpus"]] == [
        ("0000:41:00.0", "2331"), ("0000:c1:00.0", "2331")]
    assert found["nvswitches"] == []
    assert _nvidia_pci().parse_lspci(
        "18:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] "
        "(rev a1)\n00:1f.6 Ethernet controller [0200]: Intel Corporation Device [8086:0dc5]\n"
        "01:00.1 Audio device [0403]: NVIDIA Corporation Device [10de:22ba] (rev a1)\n") == {
        "gpus": [{"slot": "0000:18:00.0", "device": "2330",
                  "name": "GH100 [H100 SXM5 80GB]"}], "nvswitches": []}
