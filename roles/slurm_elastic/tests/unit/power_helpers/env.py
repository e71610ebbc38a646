"""Shared test setup: a fake scontrol on PATH, power configs, the power log.

The programs' package (roles/slurm_elastic/files/metalslurm-power) is installed in the dev
environment (Makefile: ``pip install -e``), with its console scripts next to the interpreter.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from tests.paths import REPO

FIXTURES = REPO / "tests/fixtures/slurm"
HELPERS = Path(__file__).resolve().parent
# The console scripts (metalslurm-resume, ...) of the installed package.
SCRIPTS = Path(sys.executable).parent


class FakeSlurm:
    """A directory with an ``scontrol`` executable (power_helpers/fake_scontrol.py) and the
    node states it serves; ``calls()`` returns the argument lists it was run with."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        script = self.bin / "scontrol"
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" '
                          f'"{HELPERS / "fake_scontrol.py"}" "$@"\n')
        script.chmod(0o755)
        self.nodes_file = root / "nodes.json"
        self.calls_file = root / "calls.jsonl"

    def set_nodes(self, nodes: dict[str, str], reasons: dict[str, str] | None = None) -> None:
        """``{"gpu-001": "IDLE+CLOUD+POWERED_DOWN"}``."""
        data = {}
        for name, state in nodes.items():
            base, *flags = state.split("+")
            data[name] = {"base": base, "flags": flags,
                          "reason": (reasons or {}).get(name, "")}
        self.nodes_file.write_text(json.dumps(data))

    def states(self) -> dict[str, str]:
        import subprocess

        from metalslurm_power.slurm import parse_show_node

        out = subprocess.run([str(self.bin / "scontrol"), "-o", "show", "node"], env=self.env(),
                             capture_output=True, text=True, check=True).stdout
        return {n: s.state for n, s in parse_show_node(out).items()}

    def calls(self) -> list[list[str]]:
        if not self.calls_file.exists():
            return []
        return [json.loads(line)["args"] for line in self.calls_file.read_text().splitlines()]

    def updates(self) -> list[list[str]]:
        return [c for c in self.calls() if c[:1] == ["update"]]

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env["FAKE_SLURM_DIR"] = str(self.root)
        env["PATH"] = f"{self.bin}:{env.get('PATH', '')}"
        env.update(extra)
        return env


def write_config(path: Path, fake: FakeSlurm, nodes: dict[str, dict[str, Any]],
                 **settings: Any) -> Path:
    config = {
        "log_file": str(path.parent / "power.log"),
        "batch_size": 2,
        "dry_run": False,
        "slurm_bin": str(fake.bin),
        "settle_timeout": 10,
        "poll_interval": 0.05,
        "power_on_retry_delay": 0.01,  # a failing driver's retries without the 5 s waits
        "stuck_after": 600,
        "orphan_after": 600,
        "nodes": nodes,
        "credentials": {"default": {"username": "admin", "password": "s3cr3t-never-logged"}},
    }
    config.update(settings)
    path.write_text(json.dumps(config))
    return path


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]
