"""The acceptance gate's STAND-IN tools, put where a local cluster's jobs find them: the one
script (tests/fixtures/accept/standin/metalslurm-accept-standin) linked as each tool it
stands in for, beside the DGX H100 XML its nvidia-smi replays, and an empty knobs
directory. Used by the e2e module and the gate's benchmark."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.paths import FIXTURES

STANDIN = FIXTURES / "accept" / "standin" / "metalslurm-accept-standin"
TOOLS = ("all_reduce_perf", "ib_write_bw", "dcgmi", "nvidia-smi")
GPU_XML = ("dgx-h100-healthy.xml", "dgx-h100-ecc.xml")  # what the stand-in nvidia-smi prints


def install(tools: Path, knobs: Path) -> None:
    """Fresh ``tools`` (on shared storage: the gate's ``path``) and ``knobs`` directories."""
    for directory in (tools, knobs):
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
    shutil.copy(STANDIN, tools / STANDIN.name)
    for name in TOOLS:
        (tools / name).symlink_to(STANDIN.name)
    for xml in GPU_XML:
        shutil.copy(FIXTURES / "gpu" / xml, tools / xml)
