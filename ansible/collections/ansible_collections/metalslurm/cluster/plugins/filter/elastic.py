"""The filters of Slurm's power saving: a reproducible wheel of the power programs, built on
the operator's machine and copied to the controller (module_utils/wheel.py), for the
slurm_elastic role; the power-saving timings over their defaults by provider
(module_utils/elastic.py), for slurm_elastic and slurm.conf (slurm_controller)."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.metalslurm.cluster.plugins.module_utils import elastic
from ansible_collections.metalslurm.cluster.plugins.module_utils import wheel as wheels
from ansible_collections.metalslurm.cluster.plugins.plugin_utils.filters import filter_errors


def wheel(project_dir: str, out_dir: str) -> str:
    """The path of a reproducible wheel of the Python project in ``project_dir``, built into
    ``out_dir`` (the same sources give the same bytes, so the copy task changes nothing)."""
    try:
        return str(wheels.build_wheel(project_dir, out_dir))
    except (OSError, wheels.WheelError) as exc:
        raise AnsibleFilterError(f"cannot build a wheel of {project_dir}: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"wheel": wheel,
                "elastic_settings": filter_errors(elastic.ElasticSettingsError)(
                    elastic.elastic_settings)}
