"""Slurm's REST API settings over their defaults and what the installed release offers
(module_utils/rest.py), for the slurm_rest, slurm_common, slurm_controller and slurmdbd
roles."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils import rest
from ansible_collections.metalslurm.cluster.plugins.plugin_utils.filters import filter_errors


def rest_release(version: str) -> dict[str, Any]:
    """The RELEASES entry for a Slurm version, as a dict."""
    return asdict(rest.rest_release(version))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        wrap = filter_errors(rest.RestSettingsError)
        return {"rest_settings": wrap(rest.rest_settings),
                "rest_release": wrap(rest_release)}
