"""The acceptance gate's settings the roles read (``metalslurm_accept``).

``gate``: a node that registers for the first time (slurm_compute), or that was rebooted
onto a new NVIDIA driver (nvidia_gpu), is drained with the gate's prefix and waits for a run
of 'metalslurm accept'. infra/accept/gate.py (the stack config's ``metalslurm:accept``)
fills the stack's key from :data:`DEFAULTS`; the roles merge a hand-written inventory's value
over it (filter ``accept_settings``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULTS", "REASON_PREFIX", "accept_gate", "accept_settings"]

DEFAULTS: dict[str, Any] = {"gate": False}
# The drain reason's first word on a node the gate holds: 'metalslurm accept' takes (and alone
# returns) the nodes drained with it (infra/accept/verdicts.py).
REASON_PREFIX = "metalslurm-accept:"


def accept_settings(value: Mapping[str, Any] | None) -> dict[str, Any]:
    """``metalslurm_accept`` over :data:`DEFAULTS` (a key it gives stays its own)."""
    return {**DEFAULTS, **(value or {})}


def accept_gate(_: Any = None) -> dict[str, str]:
    """What the roles need of the gate itself (a filter's input is ignored)."""
    return {"reason_prefix": REASON_PREFIX}
