"""The operating systems metalslurm supports: one table, its one owner.

Every reader takes the list from :data:`OPERATING_SYSTEMS`: the stack config's choices for
``metalslurm:os`` (infra/stack/config.py), the byo host check (os-release ``ID``/``VERSION_ID``),
the images the local provider builds (the Debian suite), the nodes' Python (the wheelhouse),
the Slurm release each ships (``slurm_versions.DISTRO_SLURM``), NVIDIA's CUDA repository
and its first driver branch (``gpu.py``), and which releases have sackd
(infra/ops/playbook.py). A row's ``id`` is what a stack's ``metalslurm:os`` and an inventory's
``metalslurm_os`` name.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LOCAL_OS_IDS", "OPERATING_SYSTEMS", "OS_IDS", "OperatingSystem", "by_id",
           "by_release", "cuda_repository"]


@dataclass(frozen=True)
class OperatingSystem:
    """One supported operating system."""

    id: str  # metalslurm:os / metalslurm_os
    distribution: str  # os-release ID (ansible_distribution, lower case)
    version: str  # os-release VERSION_ID (Debian: the major version)
    codename: str  # the Debian suite / Ubuntu series
    python: str  # the python3 it ships (the wheelhouse's target)
    slurm_package: str  # the slurmctld / slurm-client package version it ships
    slurm_source: str  # where slurm_package was read
    local_image: bool  # the local provider builds node images of it
    cuda_repository: str  # NVIDIA's CUDA apt repository directory (developer.download...)
    first_nvidia_branch: int  # the first driver branch that repository carries

    @property
    def slurm_release(self) -> str:
        """The Slurm release it ships (``24.11``)."""
        return ".".join(self.slurm_package.split(".")[:2])


# NVIDIA's first branches, from its CUDA and driver installation guides: Debian 13's
# repository starts with CUDA 13.0, whose driver is 580; Ubuntu 24.04's with driver 550; 535
# is the oldest long-term branch still supported on the other two. Open kernel modules for
# Hopper need 515 or later, which each of these is.
OPERATING_SYSTEMS: tuple[OperatingSystem, ...] = (
    OperatingSystem(
        "debian12", "debian", "12", "bookworm", "3.11", "22.05.8-4+deb12u3",
        "'apt-cache policy slurmctld' against deb.debian.org bookworm/main and "
        "bookworm-security/main", True, "debian12", 535),
    OperatingSystem(
        "debian13", "debian", "13", "trixie", "3.13", "24.11.5-4",
        "'apt-cache policy slurmctld' against deb.debian.org trixie/main", True, "debian13", 580),
    OperatingSystem(
        "ubuntu22.04", "ubuntu", "22.04", "jammy", "3.10", "21.08.5-2ubuntu1",
        "https://manpages.ubuntu.com/manpages/jammy/en/man5/cgroup.conf.5.html: "
        "'Provided by: slurm-client_21.08.5-2ubuntu1_amd64'", False, "ubuntu2204", 535),
    OperatingSystem(
        "ubuntu24.04", "ubuntu", "24.04", "noble", "3.12", "23.11.4-1.2ubuntu5",
        "https://manpages.ubuntu.com/manpages/noble/man5/cgroup.conf.5.html: "
        "'Provided by: slurm-client_23.11.4-1.2ubuntu5_amd64'", False, "ubuntu2404", 550),
)
OS_IDS: tuple[str, ...] = tuple(o.id for o in OPERATING_SYSTEMS)
# The operating systems the local (podman) provider builds node images of.
LOCAL_OS_IDS: tuple[str, ...] = tuple(o.id for o in OPERATING_SYSTEMS if o.local_image)


def by_id(os_id: str) -> OperatingSystem:
    """The row of ``os_id`` (``debian13``); KeyError naming the known ids otherwise."""
    for entry in OPERATING_SYSTEMS:
        if entry.id == os_id:
            return entry
    raise KeyError(f"unknown os {os_id!r}; supported: {', '.join(OS_IDS)}")


def by_release(distribution: str, version: str) -> OperatingSystem | None:
    """The row of Ansible's ``distribution`` and ``distribution_version`` (or os-release's
    ``ID`` and ``VERSION_ID``; Debian's point release is ignored: ``12.11`` is 12); None for
    an OS metalslurm does not support."""
    name = distribution.lower()
    wanted = version.split(".")[0] if name == "debian" else version
    return next((o for o in OPERATING_SYSTEMS
                 if o.distribution == name and o.version == wanted), None)


def cuda_repository(distribution: str, version: str) -> str:
    """NVIDIA's CUDA repository directory for an OS (``debian12``, ``ubuntu2404``), from
    Ansible's ``distribution`` and ``distribution_version``; for an OS outside the table,
    the name NVIDIA's scheme would give it (so a message can name it)."""
    known = by_release(distribution, version)
    if known is not None:
        return known.cuda_repository
    dist = distribution.lower()
    if dist == "debian":
        return f"debian{version.split('.')[0]}"
    return f"{dist}{version.replace('.', '')}"
