"""Accounting's settings over their defaults (module_utils/accounting.py), for the slurmdbd
and slurm_accounting roles."""

from __future__ import annotations

from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.accounting import (
    accounting_settings,
)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"accounting_settings": accounting_settings}
