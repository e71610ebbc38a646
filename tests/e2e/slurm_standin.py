"""A STAND-IN for a newer build of the cluster's Slurm (and of munge, for 'maintain --update'),
for the upgrade tests: no newer build
of either Debian Slurm line can be had here (bookworm ships 22.05.8-4+deb12u3 only, trixie
24.11.5-4+deb13u1 only), and rebuilding forky's 26.05 from source takes longer than the
suite has. So the test takes Debian's own packages of the release the cluster runs and
relabels them: the same binaries, the version ``<debian version>+standin1`` (which dpkg
orders after it), the exact-version dependencies between Slurm's packages rewritten to
match, and each description saying what it is. apt, dpkg, the packages' maintainer scripts
and metalslurm's upgrade order all act on a real version change; Slurm's own release does
not change, so the database conversion and the state-format change of a real major upgrade
are not exercised here.

The packages are published on each host as a flat apt repository in ``REPO`` with a sources
file, as an operator's own mirror of a newer build would be.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from tests.e2e.cluster import APT_GET, quoted

SUFFIX = "+standin1"
REPO = "/var/lib/metalslurm-standin"
SOURCES = "/etc/apt/sources.list.d/metalslurm-standin.sources"

# Run on the controller: download the installed packages of Slurm's source (and those the
# other hosts name), relabel each, and write the repository's index.
_BUILD = r"""
set -euo pipefail
version=$1; shift
label="metalslurm test STAND-IN: Debian's $version relabelled"
rm -rf /tmp/standin-build /tmp/standin-repo && mkdir -p /tmp/standin-build /tmp/standin-repo
cd /tmp/standin-build
apt-get -qq -o APT::Sandbox::User=root download \
    $(for package in "$@"; do printf '%s=%s ' "$package" "$version"; done)
for deb in *.deb; do
    rm -rf unpacked && dpkg-deb -R "$deb" unpacked
    sed -i -e "s/^Version: .*/Version: $version{suffix}/" \
        -e "s/(= $version)/(= $version{suffix})/g" \
        -e "s/^Description: \(.*\)/Description: \1 [$label]/" \
        unpacked/DEBIAN/control
    dpkg-deb --root-owner-group -Zxz -b unpacked \
        /tmp/standin-repo/"${{deb%%_*}}_$version{suffix}_amd64.deb" >/dev/null
done
cd /tmp/standin-repo
for deb in *.deb; do
    dpkg-deb -f "$deb"
    printf 'Filename: ./%s\nSize: %s\nSHA256: %s\n\n' "$deb" "$(stat -c %s "$deb")" \
        "$(sha256sum "$deb" | cut -d' ' -f1)"
done > Packages
cd / && rm -rf {repo} /tmp/standin-build && mv /tmp/standin-repo {repo}
"""


def installed_of(cluster, host: str, source: str = "slurm-wlm") -> dict[str, str]:
    """The installed packages of ``source`` on ``host``, with their versions."""
    out = cluster.on(host, "dpkg-query --show --showformat='${db:Status-Abbrev}|${Package}|"
                           "${source:Package}|${Version}\\n'").stdout
    return {fields[1]: fields[3] for fields in (line.split("|") for line in out.splitlines())
            if len(fields) == 4 and fields[0][1:2] == "i" and fields[2] == source}


def publish(cluster, hosts: tuple[str, ...], source: str = "slurm-wlm") -> str:
    """Build the stand-in of ``source``'s packages installed on ``hosts`` on the controller
    and publish it on ``hosts``; its version."""
    installed: dict[str, str] = {}
    for host in hosts:
        installed.update(installed_of(cluster, host, source))
    (version,) = set(installed.values())
    script = _BUILD.format(repo=REPO, suffix=SUFFIX)
    cluster.ctl(f"bash -c {quoted(script)} standin {version} {' '.join(sorted(installed))}")
    sources = (f"Types: deb\nURIs: file:{REPO}\nSuites: ./\nTrusted: yes\n"
               "# metalslurm test STAND-IN (tests/e2e/slurm_standin.py)\n")
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "repo"
        _podman("cp", f"{cluster.name}-ctl:{REPO}", str(copy))
        for host in hosts:
            if host != "ctl":
                cluster.on(host, f"rm -rf {REPO}")
                _podman("cp", str(copy), f"{cluster.name}-{host}:{REPO}")
            cluster.on(host, f"printf %s {quoted(sources)} > {SOURCES}")
    return version + SUFFIX


def withdraw(cluster, hosts: tuple[str, ...]) -> None:
    """Take the stand-in's sources and repository off ``hosts`` (the packages stay)."""
    for host in hosts:
        cluster.on(host, f"rm -rf {REPO} {SOURCES} && {APT_GET} -qq update", check=False)


def _podman(*args: str) -> None:
    subprocess.run(["podman", *args], check=True, capture_output=True, text=True, timeout=300)
