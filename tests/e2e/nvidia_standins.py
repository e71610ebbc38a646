"""A local, signed apt repository of STAND-IN packages for the NVIDIA role's install path.

The packages carry the names and versions of NVIDIA's (the driver with open kernel
modules, nvidia-persistenced, the fabric manager, DCGM and its exporter, the container
toolkit) and nothing
of NVIDIA's: each installs a placeholder script and, for the daemons, a systemd unit of
NVIDIA's name that runs the placeholder. Their descriptions say so. They let the role's
real code run here: the repository and its key (checked by fingerprint), the branch pin
(the repository also holds an older version of the branch and a newer branch, which the
pin must not pick), the holds, the NVSwitch gating and the services' enablement and order.

Built with dpkg-deb and signed with a throwaway gpg key, in flat repository layout
(Packages and InRelease at the top), like NVIDIA's.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

BRANCH_VERSIONS = ("580.65.06", "580.95.05", "590.44.01")
NEWEST_OF_BRANCH = "580.95.05"
DCGM_VERSION = "1:4.2.3-1"
EXPORTER_VERSION = "4.1.3-1"
# Older releases a pinned version moves to (the newest above is what an unpinned install gets).
DCGM_OLDER = "1:4.2.2-1"
EXPORTER_OLDER = "4.1.1-1"
TOOLKIT_VERSION = "1.17.8-1"
DESCRIPTION = ("STAND-IN for metalslurm's tests, not NVIDIA's package\n"
               " It carries the name and version of NVIDIA's package and installs only a\n"
               " placeholder script (and, for a daemon, a unit of NVIDIA's name running it).")
# package -> (placeholder program, systemd unit or None)
DRIVER_PACKAGES = {
    "nvidia-driver-cuda": ("nvidia-driver-cuda-standin", None),
    "nvidia-kernel-open-dkms": ("nvidia-kernel-open-dkms-standin", None),
    "nvidia-persistenced": ("nvidia-persistenced", "nvidia-persistenced.service"),
    "nvidia-fabricmanager": ("nv-fabricmanager", "nvidia-fabricmanager.service"),
    "libnvidia-nscq": ("libnvidia-nscq-standin", None),
}


@dataclass(frozen=True)
class StandinRepository:
    root: Path           # holds cuda/, container-toolkit/ and key.asc
    fingerprint: str     # the signing key's


# The exporter's stand-in answers HTTP, so the scrape path can be checked: on the --address
# it was given, one series that echoes the flags it was started with (nothing of DCGM's).
EXPORTER_STANDIN = """#!/usr/bin/python3
# STAND-IN for metalslurm's tests (datacenter-gpu-manager-exporter), not NVIDIA's program.
import argparse, http.server
flags = argparse.ArgumentParser()
for flag in ("--address", "--collectors", "--remote-hostengine-info", "--hpc-job-mapping-dir"):
    flags.add_argument(flag, default="")
args = flags.parse_args()
body = ("# STAND-IN dcgm-exporter (metalslurm tests)\\n"
        f'metalslurm_standin_dcgm_exporter{{collectors="{args.collectors}",'
        f'hostengine="{args.remote_hostengine_info}",'
        f'hpc_job_mapping_dir="{args.hpc_job_mapping_dir}"}} 1\\n').encode()
class Metrics(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(body)
host, _, port = args.address.rpartition(":")
http.server.HTTPServer((host, int(port)), Metrics).serve_forever()
"""


HOSTENGINE_STANDIN = """#!/usr/bin/python3
# STAND-IN for metalslurm's tests (datacenter-gpu-manager-4's nv-hostengine), not NVIDIA's
# program: it listens where the real one does (127.0.0.1:5555, no authentication) and
# answers every connection with one line.
import socketserver
class Hello(socketserver.StreamRequestHandler):
    def handle(self):
        self.wfile.write(b"STAND-IN nv-hostengine\\n")
socketserver.TCPServer.allow_reuse_address = True
socketserver.TCPServer(("127.0.0.1", 5555), Hello).serve_forever()
"""


def _build_deb(out: Path, name: str, version: str, program: str, unit: str | None,
               program_text: str | None = None) -> None:
    tree = out / "build" / f"{name}_{version.replace(':', '%')}"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN/control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: metalslurm tests "
        f"<tests@metalslurm.invalid>\nSection: misc\nPriority: optional\n"
        f"Description: {DESCRIPTION}\n")
    bin_dir = tree / "usr/bin"
    bin_dir.mkdir(parents=True)
    upstream = version.split(":")[-1].split("-")[0]
    script = bin_dir / program
    if program == "nv-fabricmanager":
        body = (f'case "$1" in --version) echo "Fabric Manager version is : {upstream}"; '
                'exit 0;; esac\n')
    else:
        body = ""
    if program_text is None:
        program_text = (f"#!/bin/sh\n# STAND-IN for metalslurm's tests ({name} {version}), not "
                        f"NVIDIA's program.\n{body}exec sleep infinity\n")
    script.write_text(program_text)
    script.chmod(0o755)
    if unit:
        unit_dir = tree / "usr/lib/systemd/system"
        unit_dir.mkdir(parents=True)
        (unit_dir / unit).write_text(
            f"[Unit]\nDescription=STAND-IN {unit} (metalslurm tests, not NVIDIA's)\n\n"
            f"[Service]\nExecStart=/usr/bin/{program}\n\n[Install]\nWantedBy=multi-user.target\n")
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree),
                    str(out / f"{name}_{version.split(':')[-1]}_all.deb")],
                   check=True, capture_output=True)


def _control(deb: Path) -> str:
    return subprocess.run(["dpkg-deb", "--field", str(deb)], check=True, capture_output=True,
                          text=True).stdout.strip()


def _index(repo: Path, gnupg: dict[str, str]) -> None:
    """Packages(.gz), Release and InRelease of a flat repository."""
    stanzas = []
    for deb in sorted(repo.glob("*.deb")):
        data = deb.read_bytes()
        stanzas.append(f"{_control(deb)}\nFilename: ./{deb.name}\nSize: {len(data)}\n"
                       f"SHA256: {hashlib.sha256(data).hexdigest()}\n")
    packages = "\n".join(stanzas).encode()
    (repo / "Packages").write_bytes(packages)
    (repo / "Packages.gz").write_bytes(gzip.compress(packages))
    lines = ["Origin: metalslurm-tests", "Label: STAND-IN NVIDIA repository (tests)",
             "Date: Thu, 01 Jan 2026 00:00:00 UTC", "SHA256:"]
    for name in ("Packages", "Packages.gz"):
        data = (repo / name).read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
    (repo / "Release").write_text("\n".join(lines) + "\n")
    subprocess.run(["gpg", "--batch", "--yes", "--clearsign", "--output", str(repo / "InRelease"),
                    str(repo / "Release")], check=True, capture_output=True, env=gnupg)


def build(root: Path) -> StandinRepository:
    """The two repositories under ``root`` (made anew), signed by a new key."""
    subprocess.run(["rm", "-rf", str(root)], check=True)
    cuda, toolkit = root / "cuda", root / "container-toolkit"
    for repo in (cuda, toolkit):
        repo.mkdir(parents=True)
    for version in BRANCH_VERSIONS:
        for name, (program, unit) in DRIVER_PACKAGES.items():
            _build_deb(cuda, name, f"{version}-1", program, unit)
    for dcgm in ("datacenter-gpu-manager-4-cuda13", "datacenter-gpu-manager-4-cuda12"):
        for version in (DCGM_OLDER, DCGM_VERSION):
            _build_deb(cuda, dcgm, version, "nv-hostengine",
                       "nvidia-dcgm.service" if dcgm.endswith("13") else None,
                       HOSTENGINE_STANDIN)
    for version in (EXPORTER_OLDER, EXPORTER_VERSION):
        _build_deb(cuda, "datacenter-gpu-manager-exporter", version, "dcgm-exporter",
                   "nvidia-dcgm-exporter.service", EXPORTER_STANDIN)
    for name in ("nvidia-container-toolkit", "libnvidia-container-tools"):
        _build_deb(toolkit, name, TOOLKIT_VERSION, f"{name}-standin", None)
    for repo in (cuda, toolkit):
        subprocess.run(["rm", "-rf", str(repo / "build")], check=True)
    with tempfile.TemporaryDirectory(prefix="metalslurm-gpg-") as home:
        gnupg = {**os.environ, "GNUPGHOME": home}
        subprocess.run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key",
                        "metalslurm stand-in repository <tests@metalslurm.invalid>",
                        "ed25519", "sign", "1d"], check=True, capture_output=True, env=gnupg)
        for repo in (cuda, toolkit):
            _index(repo, gnupg)
        (root / "key.asc").write_text(subprocess.run(
            ["gpg", "--armor", "--export"], check=True, capture_output=True, text=True,
            env=gnupg).stdout)
        colons = subprocess.run(["gpg", "--with-colons", "--list-keys"], check=True,
                                capture_output=True, text=True, env=gnupg).stdout
        subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=gnupg, capture_output=True)
    fingerprint = next(line.split(":")[9] for line in colons.splitlines()
                       if line.startswith("fpr:"))
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return StandinRepository(root, fingerprint)
