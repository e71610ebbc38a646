"""The benchmarks' default result directories (bench/out_dir.py): the operator's own cache
directory, never a fixed name under /tmp another local user could make first."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.out_dir import default_out

REPO = Path(__file__).resolve().parents[2]


def test_results_go_under_xdg_cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_out("scale") == tmp_path / "cache" / "metalslurm" / "scale"


@pytest.mark.parametrize("cache", ["", "relative/cache"])
def test_without_an_absolute_xdg_cache_home_results_go_under_the_home(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: str) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", cache)
    assert default_out("cfgscale") == tmp_path / ".cache" / "metalslurm" / "cfgscale"


def test_no_benchmark_writes_to_a_fixed_path_under_tmp() -> None:
    fixed = re.compile(r"""["']/tmp/[^"'\s]*["']""")
    found = [f"{path.relative_to(REPO)}:{n}: {line.strip()}"
             for path in sorted((REPO / "bench").rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), start=1)
             if fixed.search(line) and "Path(" in line]
    assert found == []
