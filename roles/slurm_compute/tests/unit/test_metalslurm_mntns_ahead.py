"""metalslurm-mntns-ahead (roles/slurm_compute/files), run for real: it needs root (unshare
of a mount namespace), as CI and the nodes have. The per-CPU ID batches it works around are
this machine's kernel's (Linux 6.18: the two CPUs hand out IDs thousands apart)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

import pytest

from tests.paths import REPO

PROGRAM = REPO / "roles/slurm_compute/files/metalslurm-mntns-ahead"
_loader = importlib.machinery.SourceFileLoader("metalslurm_mntns_ahead", str(PROGRAM))
_spec = importlib.util.spec_from_loader("metalslurm_mntns_ahead", _loader)
ahead = importlib.util.module_from_spec(_spec)
sys.modules["metalslurm_mntns_ahead"] = ahead
_loader.exec_module(ahead)

needs_ids = pytest.mark.skipif(
    os.geteuid() != 0 or ahead.mntns_id() is None,
    reason="needs root and a kernel that reports mount namespace IDs (Linux 6.8+)")


@needs_ids
def test_a_cpu_whose_next_id_is_below_the_target_is_moved_above_it():
    """The worst case made on purpose: the target is the other CPU's next ID (or, with one
    CPU, one far ahead of this one's)."""
    cpus = sorted(os.sched_getaffinity(0))
    _made, other = ahead.advance(cpus[-1], 0)
    target = other if len(cpus) > 1 else other + 100
    made, last = ahead.advance(cpus[0], target)
    assert last is not None and last > target, (made, last, target)
    assert 1 <= made <= ahead.LIMIT


@needs_ids
def test_a_cpu_already_ahead_stops_after_one_namespace():
    made, last = ahead.advance(sorted(os.sched_getaffinity(0))[0], 0)
    assert (made, last is not None and last > 0) == (1, True)


def test_without_namespace_ids_it_does_nothing_and_never_fails(monkeypatch, capsys):
    monkeypatch.setattr(ahead, "mntns_id", lambda path="/proc/self/ns/mnt": None)
    assert ahead.main() == 0
    assert capsys.readouterr().err == (
        "metalslurm-mntns-ahead: this kernel does not report mount namespace IDs "
        "(NS_GET_MNTNS_ID): nothing to do\n")


def test_a_file_that_is_no_namespace_has_no_id(tmp_path):
    (tmp_path / "f").write_text("")
    assert ahead.mntns_id(str(tmp_path / "f")) is None
    assert ahead.mntns_id(str(tmp_path / "missing")) is None
