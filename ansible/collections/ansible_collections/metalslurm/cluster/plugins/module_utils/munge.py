"""The munge key's rule, for the node (the ``key_file`` module) and the operator's side
(infra/state.py, which checks a key file before it writes one)."""

from __future__ import annotations

__all__ = ["MIN_KEY_BYTES"]

# munged refuses shorter keys; Slurm's JWT keys are as long.
MIN_KEY_BYTES = 32
