"""Shared storage: every Slurm node sees the shared paths; only the NFS server exports."""

import pytest

EXPORTS = "/etc/exports.d/metalslurm.exports"


def test_shared_paths_are_mounted_from_the_storage_backend(host, host_name, cluster):
    if "nfs_server" in cluster.groups_of(host_name) or cluster.shared_storage == "none":
        paths = []  # the server's paths are local disk; 'none' mounts nothing
    else:
        paths = cluster.shared_paths
    mounts = {p: host.mount_point(p) for p in paths}
    for path, mount in mounts.items():
        assert mount.exists, f"{path} is not a mount point on {host_name}"
        if cluster.shared_storage == "nfs":
            assert mount.filesystem == "nfs4", (path, mount.filesystem)
            assert "hard" in mount.options, (path, mount.options)
    assert sorted(mounts) == sorted(paths)


def test_only_the_nfs_server_exports(host, host_name, cluster):
    exports = host.file(EXPORTS)
    if "nfs_server" not in cluster.groups_of(host_name):
        assert not exports.exists, f"{host_name} is not the NFS server but has {EXPORTS}"
        return
    cidr = cluster.var("metalslurm_private_cidr")
    lines = [line for line in exports.content_string.splitlines()
             if line and not line.startswith("#")]
    assert [line.split()[0] for line in lines] == cluster.shared_paths
    for line in lines:
        assert line.split()[1].startswith(f"{cidr}(") and "root_squash" in line, line
    active = host.check_output("exportfs -v")
    for path in cluster.shared_paths:
        assert path in active


@pytest.fixture(scope="module")
def compute_hosts(cluster):
    import testinfra

    return [testinfra.get_host(f"ansible://{h}", ansible_inventory=cluster.inventory)
            for h in cluster.static_compute]


def test_a_file_written_on_one_compute_node_is_read_on_another(cluster, compute_hosts):
    if cluster.shared_storage == "none" or "/shared" not in cluster.shared_paths:
        pytest.skip("no shared /shared in this inventory")
    first, last = compute_hosts[0], compute_hosts[-1]
    writer = cluster.static_compute[0]
    name = f"/shared/.metalslurm-verify-{writer}"
    first.check_output(f"echo written-on-{writer} > {name}")
    try:
        assert last.file(name).content_string.strip() == f"written-on-{writer}"
    finally:
        first.run(f"rm -f {name}")


def test_every_node_lists_the_shared_paths_for_jobs(host, host_name, cluster):
    """Jobs check their checkpoint and output directories against this list
    (examples/lib/preflight.sh): it must be the cluster's shared paths, exactly."""
    listing = host.file("/etc/metalslurm-shared-paths")
    assert listing.exists, f"{host_name} has no /etc/metalslurm-shared-paths"
    lines = [line for line in listing.content_string.splitlines()
             if line and not line.startswith("#")]
    assert lines == cluster.shared_paths, (host_name, lines)
