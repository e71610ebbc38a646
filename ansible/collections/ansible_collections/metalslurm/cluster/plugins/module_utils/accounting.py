"""slurmdbd accounting's settings (``metalslurm_accounting``) for what an inventory leaves out.

infra/accounting_config.py (the stack config's ``metalslurm:accounting``) fills the stack's
keys from :data:`DEFAULTS`; the slurmdbd and slurm_accounting roles merge a hand-written
inventory's value over it (filter ``accounting_settings``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULTS", "accounting_settings"]

DEFAULTS: dict[str, Any] = {
    "database_host": "",  # empty: MariaDB on the slurmdbd host, on 127.0.0.1 only
    "database_port": 3306,
    "database_name": "slurm_acct_db",
    "database_user": "slurm",
    "accounts": [],
    "qos": [],
    # Remove what metalslurm made earlier and the config no longer lists.
    "prune": True,
}


def accounting_settings(value: Mapping[str, Any] | None) -> dict[str, Any]:
    """``metalslurm_accounting`` over :data:`DEFAULTS` (a key it gives stays its own)."""
    merged = {k: (list(v) if isinstance(v, list) else v) for k, v in DEFAULTS.items()}
    merged.update(value or {})
    return merged
