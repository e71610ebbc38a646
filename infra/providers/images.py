"""Node images for the local cluster, built once and cached by content hash.

A registry image (``docker.io/library/debian:<suite>``) is used when one can be pulled;
otherwise the root file system is made with debootstrap from the host's own Debian
mirror and imported. Either way the result is tagged
``localhost/metalslurm-node:<suite>-<hash>``, where the hash covers everything that
goes into the image, so an unchanged recipe is never rebuilt.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ansible_collections.metalslurm.cluster.plugins.module_utils.operating_systems import (
    LOCAL_OS_IDS,
    by_id,
)

from infra.providers.podman import PodmanError, image_exists, podman

REPO_ROOT = Path(__file__).resolve().parents[2]
IMAGE_FILES = REPO_ROOT / "templates" / "local"
IMAGE_REPO = "localhost/metalslurm-node"
RECIPE_VERSION = "1"  # bump to force a rebuild when the recipe changes outside these files

# Installed into every node image: what systemd, SSH and Ansible need to manage a node.
BASE_PACKAGES = ("systemd", "systemd-sysv", "dbus", "iproute2", "openssh-server", "python3",
                 "python3-apt", "procps", "sudo", "ca-certificates")
# Downloaded (not installed) into the image so the roles' apt tasks find them locally.
# Only a speed-up: a package missing here is fetched from the mirror by the role.
PREFETCH_PACKAGES = ("munge", "slurmctld", "slurmd", "slurm-client", "slurmdbd", "mariadb-server",
                     "python3-pymysql", "prometheus", "prometheus-alertmanager",
                     "prometheus-node-exporter", "python3-prometheus-client")
DEFAULT_MIRROR = "http://deb.debian.org/debian"


class ImageError(RuntimeError):
    pass


@dataclass(frozen=True)
class AptSources:
    mirror: str
    security: str | None


def host_apt_sources(root: Path = Path("/")) -> AptSources:
    """The Debian mirror (and security mirror) the host itself uses.

    Reads deb822 ``.sources`` files first, then the one-line ``sources.list`` format.
    """
    mirror: str | None = None
    security: str | None = None
    files = sorted((root / "etc/apt/sources.list.d").glob("*.sources"))
    for f in files:
        for stanza in re.split(r"\n\s*\n", f.read_text()):
            fields = dict(re.findall(r"^(\w[\w-]*):\s*(.+)$", stanza, re.M))
            uris, suites = fields.get("URIs", "").split(), fields.get("Suites", "").split()
            if not uris or not suites:
                continue
            if any(s.endswith("-security") for s in suites):
                security = security or uris[0]
            else:
                mirror = mirror or uris[0]
    lst = root / "etc/apt/sources.list"
    if lst.exists():
        for line in lst.read_text().splitlines():
            m = re.match(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", line.strip())
            if not m:
                continue
            if m.group(2).endswith("-security"):
                security = security or m.group(1)
            else:
                mirror = mirror or m.group(1)
    return AptSources(mirror=(mirror or DEFAULT_MIRROR).rstrip("/"),
                      security=security.rstrip("/") if security else None)


def sources_list(suite: str, sources: AptSources) -> str:
    lines = [f"deb {sources.mirror} {suite} main", f"deb {sources.mirror} {suite}-updates main"]
    if sources.security:
        lines.append(f"deb {sources.security} {suite}-security main")
    return "\n".join(lines) + "\n"


def recipe_hash(suite: str, sources: AptSources) -> str:
    """Hash of everything that decides the image's content."""
    h = hashlib.sha256()
    for part in (RECIPE_VERSION, suite, sources_list(suite, sources), " ".join(BASE_PACKAGES),
                 " ".join(PREFETCH_PACKAGES)):
        h.update(part.encode() + b"\0")
    for f in sorted(p for p in IMAGE_FILES.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(IMAGE_FILES)).encode() + b"\0")
        h.update(f.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def image_ref(os_name: str, sources: AptSources) -> str:
    suite = by_id(os_name).codename
    return f"{IMAGE_REPO}:{suite}-{recipe_hash(suite, sources)}"


def ensure_image(os_name: str, source: str = "auto", mirror: str | None = None,
                 log=print) -> str:
    """Return the cached image for ``os_name``, building it first if needed."""
    if os_name not in LOCAL_OS_IDS:
        raise ImageError(f"unknown os {os_name!r}; allowed: {', '.join(LOCAL_OS_IDS)}")
    suite = by_id(os_name).codename
    sources = host_apt_sources()
    if mirror:
        sources = AptSources(mirror=mirror.rstrip("/"), security=sources.security)
    ref = image_ref(os_name, sources)
    if image_exists(ref):
        log(f"image {ref} (cached)")
        return ref
    errors = []
    if source in ("auto", "registry"):
        try:
            _build_from_registry(suite, sources, ref, log)
            return ref
        except (ImageError, PodmanError) as exc:
            errors.append(f"registry: {exc}")
            if source == "registry":
                raise ImageError(f"could not build {ref} from a registry image: {exc}") from exc
            log(f"registry image not available ({exc}); falling back to debootstrap")
    try:
        _build_with_debootstrap(suite, sources, ref, log)
    except (ImageError, PodmanError, subprocess.CalledProcessError) as exc:
        errors.append(f"debootstrap: {exc}")
        raise ImageError(f"could not build {ref}: " + "; ".join(errors)) from exc
    return ref


def _copy_rootfs_files(dest: Path, suite: str, sources: AptSources) -> None:
    shutil.copytree(IMAGE_FILES / "rootfs", dest, dirs_exist_ok=True, symlinks=True)
    (dest / "etc/apt/sources.list").write_text(sources_list(suite, sources))
    for old in (dest / "etc/apt/sources.list.d").glob("*.sources"):
        old.unlink()


def _build_from_registry(suite: str, sources: AptSources, ref: str, log) -> None:
    base = f"docker.io/library/debian:{suite}"
    log(f"pulling {base}")
    podman("pull", "--quiet", base, timeout=60)
    with tempfile.TemporaryDirectory(prefix="metalslurm-image-") as tmp:
        ctx = Path(tmp)
        _copy_rootfs_files(ctx / "rootfs", suite, sources)
        shutil.copy(IMAGE_FILES / "finalize-image.sh", ctx / "finalize-image.sh")
        (ctx / "Containerfile").write_text(
            f"FROM {base}\n"
            "COPY rootfs/ /\n"
            "COPY finalize-image.sh /tmp/finalize-image.sh\n"
            "RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
            f"--no-install-recommends {' '.join(BASE_PACKAGES)} "
            f"&& sh /tmp/finalize-image.sh {' '.join(PREFETCH_PACKAGES)} "
            "&& rm /tmp/finalize-image.sh\n"
            'CMD ["/sbin/init"]\n')
        log(f"building {ref} from {base}")
        podman("build", "--quiet", "--tag", ref, str(ctx), timeout=1200)


def _build_with_debootstrap(suite: str, sources: AptSources, ref: str, log) -> None:
    if shutil.which("debootstrap") is None:
        raise ImageError("debootstrap is not installed: run 'make deps'")
    with tempfile.TemporaryDirectory(prefix="metalslurm-rootfs-", dir="/var/tmp") as tmp:
        root = Path(tmp) / "rootfs"
        log(f"debootstrap {suite} from {sources.mirror} (about a minute)")
        proc = subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
             suite, str(root), sources.mirror], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
            raise ImageError(f"debootstrap {suite} failed ({proc.returncode}): {tail}")
        _copy_rootfs_files(root, suite, sources)
        shutil.copy(IMAGE_FILES / "finalize-image.sh", root / "tmp/finalize-image.sh")
        shutil.copy("/etc/resolv.conf", root / "etc/resolv.conf")
        proc = subprocess.run(["chroot", str(root), "sh", "/tmp/finalize-image.sh",
                               *PREFETCH_PACKAGES], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ImageError(f"finalizing the image failed: {proc.stderr.strip()[-800:]}")
        (root / "tmp/finalize-image.sh").unlink()
        (root / "etc/resolv.conf").unlink()
        log(f"importing {ref}")
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        imp = subprocess.run(["podman", "import", "--change", "CMD=/sbin/init", "-", ref],
                             stdin=tar.stdout, capture_output=True, text=True, check=False)
        if tar.stdout is not None:
            tar.stdout.close()
        tar.wait()
        if imp.returncode != 0 or tar.returncode != 0:
            raise ImageError(f"podman import failed: {imp.stderr.strip()}")
