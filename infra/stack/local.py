"""Stack config of the local provider: where its node images come from.

``metalslurm:local`` is read only when the provider is ``local``. The local provider
builds Debian node images (a registry image when one can be pulled, else debootstrap),
so ``metalslurm:os`` must name a Debian release there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.elastic import (
    ELASTIC_MODES,
    START_STOP,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.operating_systems import (
    LOCAL_OS_IDS,
)

from infra.stack.schema import Collector, key

IMAGE_SOURCES = ("auto", "registry", "debootstrap")
_LOCAL_KEYS = ("imageSource", "mirror", "preparedImages", "elasticMode")
DEFAULT = {"imageSource": "auto"}


@dataclass(frozen=True)
class LocalSettings:
    """Options only the local (podman) provider reads."""

    image_source: str = "auto"
    mirror: str | None = None
    # Nodes start from prepared images (infra/providers/prepared.py); false: from the bare
    # node image, every package installed by the configure (the cold path).
    prepared_images: bool = True
    # How the power driver powers elastic nodes: their containers kept and started and
    # stopped, or made anew from the prepared image on resume and removed on suspend.
    elastic_mode: str = START_STOP


def parse_local(c: Collector, raw: Mapping[str, Any], provider: str | None,
                os_name: str | None) -> LocalSettings:
    """``metalslurm:local`` (defaults when the provider is another one)."""
    where = key("local")
    item = c.mapping(raw, "local", where, default=DEFAULT)
    c.unknown_keys(item, _LOCAL_KEYS, where)
    image_source = c.string(item, "imageSource", f"{where}.imageSource", default="auto",
                            choices=IMAGE_SOURCES)
    mirror = item.get("mirror")
    if mirror is not None and not (isinstance(mirror, str) and re.match(r"^https?://", mirror)):
        c.problem(f"{where}.mirror", f"{mirror!r} must be an http(s) URL of a Debian mirror")
        mirror = None
    if provider == "local" and os_name is not None and os_name not in LOCAL_OS_IDS:
        c.problem(key("os"), f"{os_name!r}: the local provider builds Debian node images only; "
                  f"use one of {', '.join(LOCAL_OS_IDS)} (Ubuntu runs with the byo "
                  "and oci providers)")
    prepared = c.boolean(item, "preparedImages", f"{where}.preparedImages", True)
    mode = c.string(item, "elasticMode", f"{where}.elasticMode", default=START_STOP,
                    choices=ELASTIC_MODES)
    if mode == "launch-terminate" and prepared is False:
        # A machine made anew is configured by the join within ResumeTimeout: from the bare
        # node image that is a cold configure, every package installed on each resume.
        c.problem(f"{where}.elasticMode",
                  "launch-terminate makes each elastic node's machine from the prepared compute "
                  f"image: set {where}.preparedImages to true, or elasticMode to start-stop")
    return LocalSettings(image_source=image_source or "auto", mirror=mirror,
                         prepared_images=prepared, elastic_mode=mode or START_STOP)
