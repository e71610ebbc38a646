"""Where a benchmark writes its results when ``--out`` names no directory: under the
operator's own cache directory (``$XDG_CACHE_HOME``, else ``~/.cache``), never a fixed name
under /tmp, which another local user could make first (owning the results, or a symbolic link
there sending the benchmark's writes to a file of their choice)."""

from __future__ import annotations

import os
from pathlib import Path


def default_out(name: str) -> Path:
    """``<cache>/metalslurm/<name>``: the same on every run (``--replot`` finds it again),
    in a directory only its user writes."""
    cache = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(cache) if os.path.isabs(cache) else Path.home() / ".cache"
    return base / "metalslurm" / name
