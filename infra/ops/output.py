"""What the operator commands print: progress lines, errors, timed phases."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager


def say(message: str) -> None:
    print(message, flush=True)


def error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)


@contextmanager
def phase(name: str, timings: dict[str, float]) -> Iterator[None]:
    say(f"==> {name}")
    start = time.monotonic()
    try:
        yield
    finally:
        timings[name] = time.monotonic() - start
        say(f"<== {name}: {timings[name]:.1f} s")
