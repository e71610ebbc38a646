"""The host's extra CA certificates, trusted by the local cluster's nodes (local provider only).

A host behind a TLS-inspecting proxy trusts the proxy's CA; node containers start from a
Debian image that trusts Debian's CA set only, so pip, curl or Python inside a job fail
with CERTIFICATE_VERIFY_FAILED. The local provider hands the nodes the host's trust the
way kind and minikube hand extra certificates to their nodes, without baking anything
host-specific into the node image (whose cache key would then differ on every host):

- the certificates of the host's bundle that are not in its distribution's own CA set
  (on Debian and Ubuntu hosts: those outside ``/usr/share/ca-certificates``; on other
  hosts every certificate of the bundle, duplicates being harmless) are written one per
  file under the stack's state directory (:func:`write_host_ca_dir`);
- that directory is bind-mounted read-only into every node at
  :data:`NODE_HOST_CA_DIR`, inside the directory where ``update-ca-certificates`` reads
  local CAs; the image's ``metalslurm-host-ca.service`` runs ``update-ca-certificates``
  at boot, so the node's own ``/etc/ssl/certs/ca-certificates.crt`` (the file OpenSSL,
  GnuTLS, curl, apt and Python's ssl read) stays the ca-certificates package's, and a
  package upgrade that rebuilds it keeps the host's CAs;
- the image's ``/etc/pip.conf`` points pip (which would otherwise trust only its own
  certifi bundle) at that system bundle.

Real clusters manage their own CAs: nothing here runs for them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import textwrap
from collections.abc import Iterable
from pathlib import Path

# Where the host's bundle is, by distribution family (Debian/Ubuntu, Fedora/RHEL, Alpine
# and others); the first that exists is read, and the file SSL_CERT_FILE names as well.
HOST_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
                "/etc/ssl/cert.pem")
# The distribution's own CA set on Debian and Ubuntu (what the nodes have already).
DISTRO_CA_DIRS = ("/usr/share/ca-certificates",)
# On the node: a directory update-ca-certificates reads (it searches
# /usr/local/share/ca-certificates recursively for *.crt files).
NODE_HOST_CA_DIR = "/usr/local/share/ca-certificates/metalslurm-host"
FILE_PREFIX = "metalslurm-host-"

_PEM = re.compile(r"-----BEGIN CERTIFICATE-----\s*(.*?)\s*-----END CERTIFICATE-----", re.S)


def certificates(text: str) -> list[bytes]:
    """The DER bytes of every PEM certificate in ``text`` (malformed blocks skipped)."""
    found = []
    for body in _PEM.findall(text):
        try:
            found.append(base64.b64decode("".join(body.split()), validate=True))
        except (binascii.Error, ValueError):
            continue
    return found


def to_pem(der: bytes) -> str:
    body = "\n".join(textwrap.wrap(base64.b64encode(der).decode(), 64))
    return f"-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n"


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def host_bundles(candidates: Iterable[str] | None = None,
                 environ: dict[str, str] | None = None) -> list[Path]:
    """The host's system bundle (the first of ``candidates``, default
    :data:`HOST_BUNDLES`, that exists) and the file SSL_CERT_FILE names, when that is
    another one."""
    environ = dict(os.environ) if environ is None else environ
    found = [Path(c) for c in (candidates or HOST_BUNDLES) if Path(c).is_file()][:1]
    extra = environ.get("SSL_CERT_FILE")
    if extra and Path(extra).is_file() and all(
            Path(extra).resolve() != p.resolve() for p in found):
        found.append(Path(extra))
    return found


def host_extra_certificates(bundles: Iterable[Path],
                            distro_dirs: Iterable[str] | None = None) -> list[bytes]:
    """The certificates of ``bundles`` that are not in the distribution's own CA set
    (``distro_dirs``, default :data:`DISTRO_CA_DIRS`), in the bundles' order, each once."""
    distro: set[bytes] = set()
    for directory in distro_dirs or DISTRO_CA_DIRS:
        for path in sorted(Path(directory).rglob("*.crt")):
            distro.update(certificates(_read(path)))
    extra: list[bytes] = []
    for bundle in bundles:
        for der in certificates(_read(bundle)):
            if der not in distro and der not in extra:
                extra.append(der)
    return extra


def write_host_ca_dir(dest: Path, certs: list[bytes]) -> str:
    """One ``metalslurm-host-NN-<sha256 prefix>.crt`` file per certificate in ``dest``
    (files of earlier runs that are no longer wanted removed); returns
    :func:`host_ca_digest` of the result."""
    dest.mkdir(parents=True, exist_ok=True)
    wanted = {f"{FILE_PREFIX}{i:02d}-{hashlib.sha256(der).hexdigest()[:12]}.crt": to_pem(der)
              for i, der in enumerate(certs, 1)}
    for old in dest.glob(f"{FILE_PREFIX}*.crt"):
        if old.name not in wanted:
            old.unlink()
    for name, pem in wanted.items():
        path = dest / name
        if _read(path) != pem:
            tmp = dest / f".{name}.tmp"
            tmp.write_text(pem)
            tmp.chmod(0o644)
            os.replace(tmp, path)
    return host_ca_digest(dest)


def host_ca_digest(directory: Path) -> str:
    """A short digest of the certificates in ``directory`` ("none" when there are none):
    a node's files carry it, so a node is made again when the host's CAs change."""
    h = hashlib.sha256()
    files = sorted(directory.glob(f"{FILE_PREFIX}*.crt")) if directory.is_dir() else []
    for path in files:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:12] if files else "none"
