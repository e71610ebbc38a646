"""The local cluster's nodes trust the host's extra CAs (infra/providers/host_ca.py): which
certificates are extra, the files written under the state directory, the read-only mount
every node gets, and a node image that holds nothing of the host's. No podman: the podman
calls are recorded.

The "certificates" here are stand-ins: PEM-armoured random bytes (what is compared is the
DER bytes, never parsed as X.509).
"""

from __future__ import annotations

import os
import re

import pytest

from infra.providers import host_ca, images, local
from infra.providers.local import LocalCluster, LocalPlan
from infra.stack.config import parse_config
from infra.stack.state import StateDir
from tests.paths import REPO

DISTRO_CA = os.urandom(300)  # stands in for a certificate of the distribution's own set
PROXY_CA = os.urandom(310)  # stands in for a TLS-inspecting proxy's CA
COMPANY_CA = os.urandom(320)


@pytest.fixture
def host(tmp_path):
    """A host whose bundle holds a distribution CA and a proxy's CA."""
    distro = tmp_path / "usr-share-ca-certificates" / "mozilla"
    distro.mkdir(parents=True)
    (distro / "Some_Root.crt").write_text(host_ca.to_pem(DISTRO_CA))
    bundle = tmp_path / "ca-certificates.crt"
    bundle.write_text(host_ca.to_pem(DISTRO_CA) + host_ca.to_pem(PROXY_CA))
    return {"bundle": bundle, "distro": str(distro.parent)}


def test_only_the_certificates_outside_the_distributions_set_are_extra(host):
    assert host_ca.host_extra_certificates([host["bundle"]], [host["distro"]]) == [PROXY_CA]


def test_a_host_without_extra_cas_has_none(host):
    host["bundle"].write_text(host_ca.to_pem(DISTRO_CA))
    assert host_ca.host_extra_certificates([host["bundle"]], [host["distro"]]) == []


def test_the_system_bundle_and_the_one_ssl_cert_file_names_are_read(tmp_path, host):
    other = tmp_path / "company.pem"
    other.write_text(host_ca.to_pem(COMPANY_CA) + host_ca.to_pem(PROXY_CA))
    bundles = host_ca.host_bundles([str(tmp_path / "absent.crt"), str(host["bundle"])],
                                   environ={"SSL_CERT_FILE": str(other)})
    assert bundles == [host["bundle"], other]
    assert host_ca.host_extra_certificates(bundles, [host["distro"]]) == [PROXY_CA, COMPANY_CA]
    assert host_ca.host_bundles([str(host["bundle"])],
                                environ={"SSL_CERT_FILE": str(host["bundle"])}) == [host["bundle"]]


def test_pem_blocks_are_read_whatever_their_line_lengths():
    body = host_ca.to_pem(PROXY_CA).splitlines()[1:-1]
    text = "junk\n-----BEGIN CERTIFICATE-----\n" + "".join(body) + "\n-----END CERTIFICATE-----\n"
    assert host_ca.certificates(text) == [PROXY_CA]


def test_one_file_per_certificate_is_written_and_stale_ones_removed(tmp_path):
    dest = tmp_path / "host-ca"
    first = host_ca.write_host_ca_dir(dest, [PROXY_CA, COMPANY_CA])
    names = sorted(p.name for p in dest.iterdir())
    assert [re.sub(r"-[0-9a-f]{12}\.crt$", "", n) for n in names] == [
        "metalslurm-host-01", "metalslurm-host-02"]
    assert all(oct((dest / n).stat().st_mode & 0o777) == "0o644" for n in names)
    assert host_ca.certificates((dest / names[0]).read_text()) == [PROXY_CA]
    assert host_ca.write_host_ca_dir(dest, [PROXY_CA, COMPANY_CA]) == first
    second = host_ca.write_host_ca_dir(dest, [PROXY_CA])
    assert second != first
    assert sorted(p.name for p in dest.iterdir()) == names[:1]
    assert host_ca.write_host_ca_dir(dest, []) == "none"
    assert list(dest.iterdir()) == []


# ---- the nodes: a read-only mount, and a node made again when the host's CAs change ----

@pytest.fixture
def podman_calls(tmp_path, monkeypatch, host):
    """A local cluster whose podman is a recorder, on a host with a proxy CA."""
    calls: list[tuple[str, ...]] = []
    found: list[dict] = []
    monkeypatch.setattr(local, "podman", lambda *args, **_kw: calls.append(args))
    # No container exists here, so none has an address to compare.
    monkeypatch.setattr(LocalCluster, "container_address", lambda _self, _name: None)
    monkeypatch.setattr(local, "containers", lambda _filters: found)
    monkeypatch.setattr(local, "remove_containers", lambda names: calls.append(("rm", *names)))
    monkeypatch.setattr(local, "host_bundles", lambda: [host["bundle"]])
    monkeypatch.setattr(host_ca, "DISTRO_CA_DIRS", (host["distro"],))
    procfs = tmp_path / "filesystems"
    procfs.write_text("nodev\ttmpfs\n")
    cluster = LocalCluster(plan=LocalPlan.from_config(parse_config({}), procfs),
                           state=StateDir(tmp_path / "st"), log=lambda _m: None)
    cluster.state.ssh_key.parent.mkdir(parents=True)
    cluster.state.ssh_key.with_suffix(".pub").write_text("ssh-ed25519 AAAA test\n")
    return cluster, calls, found


def test_every_node_mounts_the_hosts_cas_read_only_where_update_ca_certificates_looks(
        podman_calls):
    cluster, calls, _found = podman_calls
    digest = cluster.ensure_host_ca()
    assert digest != "none"
    spec = cluster.plan.spec("gpu-001")
    cluster.create_node(spec, "localhost/metalslurm-node:trixie-x")
    args = calls[-1]
    ca_dir = cluster.state.host_ca.resolve()
    assert f"{ca_dir}:/usr/local/share/ca-certificates/metalslurm-host:ro" in args
    assert host_ca.certificates("".join(p.read_text() for p in ca_dir.iterdir())) == [PROXY_CA]
    node_env = (cluster.state.node_dir("gpu-001") / "node.env").read_text()
    assert f"METALSLURM_HOST_CA={digest}\n" in node_env
    # The bundle apt's ca-certificates package manages is never mounted over.
    assert not [a for a in args if a.startswith(("/etc/ssl", f"{ca_dir}:/etc"))]


def test_a_node_is_made_again_when_the_hosts_cas_change(podman_calls, host):
    cluster, calls, found = podman_calls
    cluster.ensure_host_ca()
    spec = cluster.plan.spec("gpu-001")
    cluster.create_node(spec, "img")
    found.append({"State": "running", "Labels": {"metalslurm.spec": local.CONTAINER_SPEC}})
    calls.clear()
    cluster.ensure_host_ca()
    cluster.create_node(spec, "img")
    assert calls == []  # unchanged: left as it is
    host["bundle"].write_text(host_ca.to_pem(DISTRO_CA) + host_ca.to_pem(COMPANY_CA))
    cluster.ensure_host_ca()
    cluster.create_node(spec, "img")
    assert calls[0] == ("rm", cluster.container("gpu-001"))
    assert calls[1][:2] == ("--runtime", "runc")


def test_a_node_is_made_again_when_its_address_changes(podman_calls, monkeypatch):
    """A plan that moves a node (login nodes moved to the top of the subnet) recreates its
    container: podman cannot readdress a running one. An unknown address changes nothing."""
    cluster, calls, found = podman_calls
    cluster.ensure_host_ca()
    spec = cluster.plan.spec("gpu-001")
    cluster.create_node(spec, "img")
    found.append({"State": "running", "Labels": {"metalslurm.spec": local.CONTAINER_SPEC}})
    for seen, made_again in ((None, False), (spec.address, False), ("10.77.0.99", True)):
        monkeypatch.setattr(LocalCluster, "container_address", lambda _s, _n, a=seen: a)
        calls.clear()
        cluster.create_node(spec, "img")
        assert (calls[:1] == [("rm", cluster.container("gpu-001"))]) is made_again, seen


def test_the_node_image_holds_nothing_of_the_hosts_cas(tmp_path, podman_calls):
    """Its cache key is the same on every host: the certificates arrive by the mount."""
    cluster, _calls, _found = podman_calls
    sources = images.AptSources("http://mirror.example/debian", None)
    before = images.recipe_hash("trixie", sources)
    cluster.ensure_host_ca()
    assert images.recipe_hash("trixie", sources) == before
    assert not [p for p in images.IMAGE_FILES.rglob("*")
                if p.is_file() and "BEGIN CERTIFICATE" in p.read_text(errors="replace")]


def test_the_image_trusts_the_mounted_cas_at_boot_and_points_pip_at_the_system_bundle():
    rootfs = REPO / "templates/local/rootfs"
    unit = (rootfs / "etc/systemd/system/metalslurm-host-ca.service").read_text()
    assert f"ConditionDirectoryNotEmpty={host_ca.NODE_HOST_CA_DIR}\n" in unit
    assert "ExecStart=/usr/sbin/update-ca-certificates\n" in unit
    assert "metalslurm-host-ca.service" in (REPO / "templates/local/finalize-image.sh").read_text()
    pip_conf = (rootfs / "etc/pip.conf").read_text()
    assert "[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n" in pip_conf
