"""bench/bench_strategy.py refuses wrong input before running anything: exit 2 and a line
naming the argument and what to give."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.paths import REPO


@pytest.mark.parametrize(("args", "says"), [
    (["--runs", "0"], "--runs: give 1 or more"),
    (["--runs", "many"], "argument --runs: invalid int value: 'many'"),
    (["--inventory", "/nonexistent/inventory.yml"],
     "--inventory: /nonexistent/inventory.yml is not a file; give a local cluster's inventory"),
    (["--before", "no-such-commit"],
     "--before: no-such-commit has no ansible/strategy_plugins/mitogen_linear.py; give a "
     "commit that has it"),
])
def test_wrong_input_is_refused_naming_the_argument(args, says):
    proc = subprocess.run([sys.executable, "-m", "bench.bench_strategy", *args], cwd=REPO,
                          capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == "" and says in proc.stderr.splitlines()[-1], proc.stderr
