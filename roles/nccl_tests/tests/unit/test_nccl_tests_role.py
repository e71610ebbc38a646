"""The nccl_tests role, run by Ansible on this machine (connection local) against a
STAND-IN source archive: a Makefile that "builds" all_reduce_perf as a script printing the
make variables it got. No CUDA, NCCL or GPU is here, so nvcc, nccl.h and mpi.h are empty
STAND-IN files at the paths the role looks for. What is real: the pin check (a local copy
and an HTTP download, each refused on a sha256 that is not the pin, nothing built), the
unpacking, the make command line, the record of what was built, the rebuild when the
source changes, 0 changed on a second run, and the note on a node without CUDA."""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import os
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest
import yaml

from tests.paths import REPO

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the role installs files as root")

MAKEFILE = """\
# STAND-IN for nccl-tests' Makefile (metalslurm's role test): all_reduce_perf prints the
# variables the role built it with.
BUILDDIR ?= build
SAID = MPI=$(MPI) MPI_HOME=$(MPI_HOME) CUDA_HOME=$(CUDA_HOME) NCCL_HOME=$(NCCL_HOME) \\
  NVCC_GENCODE=$(NVCC_GENCODE) VERSION={version}
all:
\tmkdir -p $(BUILDDIR)
\tprintf '#!/bin/sh\\necho "%s"\\n' '$(SAID)' > $(BUILDDIR)/all_reduce_perf
\tchmod 755 $(BUILDDIR)/all_reduce_perf
"""


def source_archive(path: Path, version: str) -> str:
    """A tag archive as GitHub makes them (one top directory); returns its sha256."""
    with tarfile.open(path, "w:gz") as tar:
        data = MAKEFILE.format(version=version).encode()
        info = tarfile.TarInfo(f"nccl-tests-{version}/Makefile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """A GPU node's CUDA, NCCL and OpenMPI, as the files the role looks for (STAND-INS)."""
    for rel in ("cuda/bin/nvcc", "nccl/include/nccl.h", "mpi/include/mpi.h"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    return tmp_path


def run_role(tmp: Path, artifact: dict, gpus: int = 8, **over) -> subprocess.CompletedProcess:
    host_vars = {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "metalslurm_gpu_count": gpus, "nccl_tests_prefix": str(tmp / "opt"),
        "nccl_tests_cuda_home": str(tmp / "cuda"), "nccl_tests_nccl_home": str(tmp / "nccl"),
        "nccl_tests_mpi_home": str(tmp / "mpi"), "nccl_tests_build_packages": [],
        "metalslurm_accept": {"nccl_tests": artifact}, **over}
    (tmp / "inventory.yml").write_text(yaml.safe_dump(
        {"all": {"hosts": {"gpu-001": host_vars}}}))
    (tmp / "play.yml").write_text(yaml.safe_dump([{
        "hosts": "all", "gather_facts": False,
        "roles": [{"role": str(REPO / "roles" / "nccl_tests")}]}]))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"),
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default"}
    return subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i",
                           str(tmp / "inventory.yml"), str(tmp / "play.yml")],
                          capture_output=True, text=True, env=env, check=False, timeout=300)


def changed(proc: subprocess.CompletedProcess) -> int:
    recap = next(line for line in proc.stdout.splitlines() if line.startswith("gpu-001 "))
    return int(recap.split("changed=")[1].split()[0])


def built(tmp: Path) -> str:
    return subprocess.run([str(tmp / "opt/build/all_reduce_perf")], capture_output=True,
                          text=True, check=True).stdout.strip()


def test_the_pinned_source_is_built_with_the_nodes_cuda_nccl_and_mpi_once(node: Path):
    sha = source_archive(node / "nccl-tests-2.13.6.tar.gz", "2.13.6")
    artifact = {"url": str(node / "nccl-tests-2.13.6.tar.gz"), "sha256": sha}
    first = run_role(node, artifact)
    assert first.returncode == 0, first.stdout[-3000:]
    assert built(node) == (
        f"MPI=1 MPI_HOME={node}/mpi CUDA_HOME={node}/cuda NCCL_HOME={node}/nccl "
        "NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 "
        "-gencode=arch=compute_100,code=sm_100 VERSION=2.13.6")
    assert (node / "opt/build/.metalslurm-source").read_text() == sha + "\n"
    again = run_role(node, artifact)
    assert (again.returncode, changed(again)) == (0, 0), again.stdout[-3000:]
    # Another source (a newer tag): rebuilt from it.
    sha2 = source_archive(node / "nccl-tests-2.13.7.tar.gz", "2.13.7")
    newer = run_role(node, {"url": str(node / "nccl-tests-2.13.7.tar.gz"), "sha256": sha2})
    assert newer.returncode == 0, newer.stdout[-3000:]
    assert built(node).endswith("VERSION=2.13.7")


def test_a_source_that_is_not_the_pinned_one_is_refused_and_nothing_is_built(node: Path):
    source_archive(node / "nccl-tests.tar.gz", "2.13.6")
    proc = run_role(node, {"url": str(node / "nccl-tests.tar.gz"), "sha256": "0" * 64})
    assert proc.returncode != 0
    assert "nccl-tests was not built: artifact nccl_tests: " in proc.stdout
    assert f"not the pinned {'0' * 64}" in proc.stdout
    assert not (node / "opt").exists()


def test_a_download_is_checked_against_its_pin(node: Path):
    sha = source_archive(node / "v2.13.6.tar.gz", "2.13.6")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(node))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v2.13.6.tar.gz"
        wrong = run_role(node, {"url": url, "sha256": "f" * 64})
        assert wrong.returncode != 0
        assert "checksum" in wrong.stdout.lower(), wrong.stdout[-3000:]
        assert not (node / "opt/build").exists()
        right = run_role(node, {"url": url, "sha256": sha})
        assert right.returncode == 0, right.stdout[-3000:]
        assert built(node).endswith("VERSION=2.13.6")
    finally:
        server.shutdown()


def test_a_gpu_node_without_cuda_is_left_out_with_a_note_and_a_cpu_node_silently(node: Path):
    (node / "cuda/bin/nvcc").unlink()
    sha = source_archive(node / "src.tar.gz", "2.13.6")
    artifact = {"url": str(node / "src.tar.gz"), "sha256": sha}
    proc = run_role(node, artifact)
    assert proc.returncode == 0, proc.stdout[-3000:]
    note = " ".join(proc.stdout.split())
    assert (f"NOTE: gpu-001: nccl-tests is not built here: no CUDA compiler "
            f"({node}/cuda/bin/nvcc).") in note
    assert not (node / "opt").exists()
    cpu = run_role(node, artifact, gpus=0)
    assert (cpu.returncode, changed(cpu), "NOTE:" in cpu.stdout) == (0, 0, False)
