"""The enroot_pyxis role's filters: where each artifact comes from and whether it is the
pinned one, registry credentials as Enroot reads them, the plugstack.conf line, enroot.conf
settings, what the install phase would change on a node (module_utils/containers.py)."""

from __future__ import annotations

from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils import containers
from ansible_collections.metalslurm.cluster.plugins.plugin_utils.filters import filter_errors

containers_errors = filter_errors(containers.ContainersError)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "artifact_sources": containers_errors(containers.artifact_sources),
            "artifact_problems": containers.artifact_problems,
            "local_artifact_problems": containers.local_artifact_problems,
            "enroot_pyxis_install_drift": containers.install_drift,
            "pyxis_build_record": containers.pyxis_build_record,
            "credentials_problems": containers.credentials_problems,
            "netrc_block": containers_errors(containers.netrc_block),
            "plugstack_line": containers_errors(containers.plugstack_line),
            "enroot_settings": containers_errors(containers.enroot_settings),
            "container_settings": containers.container_settings,
        }
