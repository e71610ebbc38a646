"""The NVIDIA driver stack's rules (roles/nvidia_gpu).

The role applies them (:func:`gpu_problems`) to its inventory through the collection's
filters, with the node's own operating system, so a hand-written inventory is held to them
and every problem is reported before anything is installed; the operator's stack config
(infra/stack/gpu.py) is held to the same function.

What the role installs comes from NVIDIA's CUDA apt repository (one per OS release,
signed by a key pinned here by its fingerprint): the driver of one branch with the open
kernel modules (the only flavour NVIDIA supports for Hopper and later from branch 560 on),
nvidia-persistenced, the fabric manager at exactly the driver's version where NVSwitches
are present, DCGM, and nvidia-container-toolkit for Enroot's GPU hook.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.operating_systems import (
    OPERATING_SYSTEMS,
    cuda_repository,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.slurmconf import (
    compress_hostlist,
)

MODES = ("install", "preinstalled", "off")
GPUDIRECT_CHOICES = ("auto", "dmabuf", "peermem", "off")
REBOOT_POLICIES = ("never", "drain")
FABRIC_MANAGER_CHOICES = ("auto", "off")
# What a node gets for a key ``metalslurm_gpu`` leaves out: the stack parser
# (infra/stack/gpu.py) fills the stack's keys from here, the role merges a hand-written
# inventory's value over it (filter ``gpu_settings``).
DEFAULTS: dict[str, Any] = {
    "mode": "install",
    "branch": "580",
    "version": "",                 # empty: the newest of the branch
    "fabric_manager": "auto",      # auto: where lspci shows NVSwitches
    "fabric_manager_version": "",  # must be the driver's, when given
    "dcgm": True,
    "dcgm_version": "",            # empty: the newest at the first install, then held
    "dcgm_exporter_version": "",   # likewise; an exporter release is built for one DCGM
    "gpudirect": "auto",
    "container_toolkit": True,     # when containers are enabled
    "mig": False,
    "reboot_policy": "never",
    # NVIDIA's repositories unless these name a mirror (empty: NVIDIA's URL for the node's
    # OS release, the repository's published key, the fingerprint pinned below).
    "repository": {"url": "", "key_url": "", "key_fingerprint": ""},
    "container_toolkit_repository": {"url": "", "key_url": "", "key_fingerprint": ""},
}
DEFAULT_BRANCH: str = DEFAULTS["branch"]
BRANCH_RE = re.compile(r"^[0-9]{3}$")
VERSION_RE = re.compile(r"^[0-9]{3}\.[0-9]{2,3}(\.[0-9]{2})?$")
FINGERPRINT_RE = re.compile(r"^[0-9A-F]{40}$")
# A Debian package version (epoch optional), as apt takes it after "name=".
PACKAGE_VERSION_RE = re.compile(r"^([0-9]+:)?[0-9][A-Za-z0-9.+~-]*$")
# The first driver branch NVIDIA's CUDA repository carries for each release, by the
# repository's directory name (ubuntu2204...; module_utils/operating_systems.py owns both).
FIRST_BRANCH = {o.cuda_repository: o.first_nvidia_branch for o in OPERATING_SYSTEMS}
# GPUs that can be partitioned with MIG (NVIDIA's MIG user guide: A100, A30, H100, H200,
# GH200, B200). The rest of the inventory's GPU types cannot.
MIG_CAPABLE = ("a100", "a30", "b200", "gh200", "h100", "h200")
# NVIDIA's CUDA repository key (cuda-keyring; the same fingerprint NVIDIA's CUDA container
# images pin) and the libnvidia-container repository's key.
CUDA_KEY_FINGERPRINT = "EB693B3035CD5710E231E123A4B469963BF863CC"
TOOLKIT_KEY_FINGERPRINT = "C95B321B61E88C1809C4F759DDCAE044F796ECB0"


def os_release(distribution: str, version: str) -> str:
    """The CUDA repository's name for an OS (``debian12``, ``ubuntu2404``), from Ansible's
    ``distribution`` and ``distribution_version`` (module_utils/operating_systems.py)."""
    return cuda_repository(distribution, version)


def gpu_settings(settings: Mapping[str, Any] | None) -> dict[str, Any]:
    """``settings`` (the inventory's ``metalslurm_gpu``) over :data:`DEFAULTS`: a key it
    leaves out gets the default (a key it gives, even empty, stays its own)."""
    merged = {k: (dict(v) if isinstance(v, dict) else v) for k, v in DEFAULTS.items()}
    merged.update(settings or {})
    return merged


def _version_problems(settings: Mapping[str, Any], branch: str) -> list[str]:
    """The driver's and the fabric manager's versions against the branch and each other."""
    problems: list[str] = []
    version = str(settings.get("version") or "")
    fm_version = str(settings.get("fabric_manager_version") or "")
    for name, value in (("version", version), ("fabric_manager_version", fm_version)):
        if value and not VERSION_RE.match(value):
            problems.append(f"{name} is {value!r}; it must be a driver version such as "
                            f"580.95.05")
        elif value and value.split(".")[0] != branch:
            problems.append(f"{name} {value} is not of branch {branch}; set branch to "
                            f"{value.split('.')[0]}, or a {branch} version")
    if fm_version and not version:
        problems.append(f"fabric_manager_version {fm_version} is set but the driver's version "
                        f"is not: set version {fm_version} too (the fabric manager follows it)")
    elif fm_version and fm_version != version:
        problems.append(f"fabric_manager_version {fm_version} differs from the driver's "
                        f"{version}: the fabric manager must be exactly the driver's version "
                        f"(CUDA fails with error 802 otherwise); remove it or set {version}")
    return problems


def _dcgm_problems(settings: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    for name in ("dcgm_version", "dcgm_exporter_version"):
        value = str(settings.get(name) or "")
        if value and not PACKAGE_VERSION_RE.match(value):
            problems.append(f"{name} is {value!r}; it must be a package version as apt shows "
                            f"it (apt-cache policy), such as 1:4.2.3-1")
        elif value and settings.get("dcgm") is False:
            problems.append(f"{name} {value} is set but dcgm is false; remove it or set dcgm "
                            f"true")
    return problems


def _choice_problems(settings: Mapping[str, Any]) -> list[str]:
    return [f"{name} is {value!r}; it must be one of {', '.join(choices)}"
            for name, choices in (("gpudirect", GPUDIRECT_CHOICES),
                                  ("fabric_manager", FABRIC_MANAGER_CHOICES),
                                  ("reboot_policy", REBOOT_POLICIES))
            if (value := str(settings.get(name, DEFAULTS[name]))) not in choices]


def _release_problems(branch: str, release: str) -> list[str]:
    """Whether NVIDIA's repository for ``release`` carries ``branch``."""
    first = FIRST_BRANCH.get(release)
    if first is None:
        return [f"the OS release {release} has no NVIDIA CUDA repository metalslurm knows; "
                f"supported: {', '.join(sorted(FIRST_BRANCH))} (or set mode preinstalled)"]
    if int(branch) < first:
        return [f"branch {branch} is not supported on {release}: NVIDIA's repository for it "
                f"starts with branch {first}; set branch {max(first, int(DEFAULT_BRANCH))}"]
    return []


def _repository_problems(settings: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    for name in ("repository", "container_toolkit_repository"):
        repo = settings.get(name) or {}
        fpr = str(repo.get("key_fingerprint") or "")
        if fpr and not FINGERPRINT_RE.match(fpr):
            problems.append(f"{name}.key_fingerprint is {fpr!r}; it must be the key's "
                            f"40-digit fingerprint in capitals (gpg --show-keys)")
        if repo.get("url") and not str(repo["url"]).startswith(("https://", "http://", "file:/")):
            problems.append(f"{name}.url {repo['url']!r} must be an http(s):// or file:/ URL")
    return problems


def gpu_problems(settings: Mapping[str, Any], release: str | None = None,
                 gpu_types: Sequence[str] = ()) -> list[str]:
    """Why the role must not install ``settings`` (``metalslurm_gpu``) on a node running
    ``release`` (``debian12``...; None: not known yet) with GPUs of ``gpu_types``; one
    sentence each, naming the setting."""
    problems: list[str] = []
    mode = str(settings.get("mode", DEFAULTS["mode"]))
    if mode not in MODES:
        problems.append(f"mode is {mode!r}; it must be one of {', '.join(MODES)}")
    branch = str(settings.get("branch", DEFAULT_BRANCH))
    if not BRANCH_RE.match(branch):
        problems.append(f"branch is {branch!r}; it must be a driver branch, three digits such "
                        f"as {DEFAULT_BRANCH}")
    problems += _version_problems(settings, branch)
    problems += _dcgm_problems(settings)
    problems += _choice_problems(settings)
    if mode == "install" and release is not None and BRANCH_RE.match(branch):
        problems += _release_problems(branch, release)
    if settings.get("mig"):
        cannot = sorted({t for t in gpu_types if t and t not in MIG_CAPABLE})
        if cannot:
            problems.append(f"mig is true, but {', '.join(cannot)} GPUs cannot be partitioned "
                            f"with MIG (only {', '.join(MIG_CAPABLE)} can); set mig false")
    return problems + _repository_problems(settings)


def fingerprints(gpg_colons: str) -> list[str]:
    """The fingerprints in ``gpg --show-keys --with-colons`` output (keys and subkeys)."""
    return [line.split(":")[9] for line in gpg_colons.splitlines()
            if line.startswith("fpr:") and len(line.split(":")) > 9]


def key_problems(checked: Sequence[Mapping[str, Any]]) -> list[str]:
    """One sentence per fetched key that is not the pinned one; ``checked`` holds the
    role's loop results: ``item`` (a repository of :func:`repositories`) and ``stdout``."""
    problems = []
    for result in checked:
        repo = result["item"]
        found = fingerprints(str(result.get("stdout", "")))
        if repo["fingerprint"] not in found:
            setting = "repository" if repo["name"] == "cuda" else "container_toolkit_repository"
            problems.append(
                f"the {repo['name']} repository's key ({repo['key_url']}) has fingerprint "
                f"{', '.join(found) or 'none (not an OpenPGP key)'}, not the pinned "
                f"{repo['fingerprint']}; fetch the right key, or pin its fingerprint in "
                f"metalslurm_gpu.{setting}.key_fingerprint")
    return problems


def driver_packages(family: str, branch: str, fabric_manager: bool) -> list[str]:
    """The packages of a compute-only (headless) driver with open kernel modules, from
    NVIDIA's CUDA repository (its driver installation guide, "Compute-only (headless)"):
    Ubuntu names them per branch until 590, Debian never does."""
    b = int(branch)
    if family == "ubuntu":
        suffix = f"-{branch}" if b < 590 else ""
        packages = [f"libnvidia-compute{suffix}", f"nvidia-dkms{suffix}-open",
                    f"nvidia-utils{suffix}", f"nvidia-compute-utils{suffix}"]
        if fabric_manager:
            packages += [f"nvidia-fabricmanager{suffix}", f"libnvidia-nscq{suffix}"]
        return packages
    packages = ["nvidia-driver-cuda", "nvidia-kernel-open-dkms", "nvidia-persistenced"]
    if fabric_manager:
        packages += ["nvidia-fabricmanager", "libnvidia-nscq"]
    return packages


def dcgm_package(branch: str) -> str:
    """DCGM 4 is built per CUDA major version: 12 up to driver 575, 13 from 580."""
    return "datacenter-gpu-manager-4-cuda13" if int(branch) >= 580 \
        else "datacenter-gpu-manager-4-cuda12"


def repositories(settings: Mapping[str, Any], release: str, machine: str,
                 toolkit: bool) -> list[dict[str, str]]:
    """The apt repositories the role adds, each {name, url, key_url, fingerprint}: NVIDIA's
    for ``release`` and ``machine`` (x86_64, aarch64), or the settings' mirror."""
    cuda_arch = {"aarch64": "sbsa"}.get(machine, machine)
    deb_arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)
    wanted = [("cuda", "repository",
               f"https://developer.download.nvidia.com/compute/cuda/repos/{release}/{cuda_arch}",
               "{url}/3bf863cc.pub", CUDA_KEY_FINGERPRINT)]
    if toolkit:
        wanted.append(("container-toolkit", "container_toolkit_repository",
                       f"https://nvidia.github.io/libnvidia-container/stable/deb/{deb_arch}",
                       "https://nvidia.github.io/libnvidia-container/gpgkey",
                       TOOLKIT_KEY_FINGERPRINT))
    result = []
    for name, setting, url, key_url, fingerprint in wanted:
        given = settings.get(setting) or {}
        url = str(given.get("url") or url).rstrip("/")
        result.append({"name": name, "url": url,
                       "key_url": str(given.get("key_url") or key_url.format(url=url)),
                       "fingerprint": str(given.get("key_fingerprint") or fingerprint)})
    return result


def _type_matches(gpu_type: str, product: str) -> bool:
    """``h100`` in "NVIDIA H100 80GB HBM3", but ``a10`` not in "NVIDIA A100-SXM4-80GB"."""
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(gpu_type)}(?![0-9])", product,
                     re.IGNORECASE) is not None


def facts_problems(gpus: Sequence[Mapping[str, Any]], host: str, count: int,
                   gpu_type: str) -> list[str]:
    """Why the driver's view of ``host``'s GPUs (the nvidia_gpu_facts module's) is not
    the inventory's; one sentence, naming the host. The GPUs come first: the filter
    ``metalslurm_gpu_facts_problems`` is applied to them."""
    names = sorted({str(g.get("name", "")) for g in gpus})
    if len(gpus) != count:
        return [f"{host}: the driver sees {len(gpus)} GPUs ({', '.join(names) or 'none'}), the "
                f"inventory says {count} {gpu_type}: fix the node (a GPU off the bus needs a "
                f"reset or a repair) or its metalslurm_gpu_count"]
    wrong = [n for n in names if gpu_type and not _type_matches(gpu_type, n)]
    if wrong:
        return [f"{host}: the driver sees {', '.join(wrong)}, not {gpu_type} as the inventory "
                f"says: fix its metalslurm_gpu_type"]
    return []


def gres_gpu_records(host: str, gpus: Sequence[Mapping[str, Any]],
                     gpu_type: str | None) -> list[dict[str, Any]]:
    """gres.conf records for one node from its GPU facts: the device files of the GPUs
    that share a CPU affinity together, with ``Cores=`` (Slurm core indices); GPUs whose
    affinity is unknown without it."""
    by_cores: dict[str, list[int]] = {}
    for gpu in sorted(gpus, key=lambda g: int(g["minor"])):
        by_cores.setdefault(str(gpu.get("cores") or ""), []).append(int(gpu["minor"]))
    records = []
    for cores, minors in by_cores.items():
        record: dict[str, Any] = {"NodeName": host, "Name": "gpu", "Type": gpu_type,
                                  "File": compress_hostlist(f"/dev/nvidia{m}" for m in minors)}
        if cores:
            record["Cores"] = cores
        records.append(record)
    return records


