"""Local provider planning: names, addresses and inventory vars (no podman needed)."""

from pathlib import Path

import pytest

from infra.ops.local import stack_name, state_dir_for
from infra.providers.host_ca import NODE_HOST_CA_DIR
from infra.providers.local import (
    LocalCluster,
    LocalPlan,
    boot_time_stand_in,
    container_name,
    host_hardware,
    kernel_has_nfs,
    network_name,
    node_specs,
    spec_from_json,
    spec_to_json,
    storage_mode,
    write_local_inventory,
)
from infra.providers.node_container import node_mac
from infra.stack.config import parse_config
from infra.stack.state import StateDir, ensure_cluster_secrets


def test_addresses_start_at_dot_ten():
    cfg = parse_config({"metalslurm:privateCidr": "192.168.50.0/24",
                        "metalslurm:clusterName": "lab"})
    specs = node_specs(cfg, shared_storage="host-bind")
    assert [(s.name, s.address, s.groups) for s in specs] == [
        ("ctl", "192.168.50.10", ("slurm_controller", "slurmdbd")),
        ("gpu-001", "192.168.50.11", ("slurm_compute",)),
        ("gpu-002", "192.168.50.12", ("slurm_compute",)),
    ]
    assert container_name(cfg.cluster_name, "gpu-001") == "lab-gpu-001"
    assert network_name(cfg.cluster_name) == "lab-net"


def local_cluster(cfg, tmp_path, shared="host-bind") -> LocalCluster:
    procfs = tmp_path / "filesystems"
    procfs.write_text(WITH_NFS if shared == "nfs" else NO_NFS)
    return LocalCluster(plan=LocalPlan.from_config(cfg, procfs), state=StateDir(tmp_path / "st"))


def test_inventory_file_keeps_secrets_out(tmp_path):
    cfg = parse_config({})
    cluster = local_cluster(cfg, tmp_path)
    secrets = ensure_cluster_secrets(cluster.state)
    inventory = write_local_inventory(cfg, cluster, secrets)
    text = inventory.read_text()
    key_file = cluster.state.secret_file("munge_key_b64_file")
    assert key_file.read_text().strip() not in text
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    assert f"munge_key_b64_file: {key_file}" in text
    assert "StrictHostKeyChecking=yes" in text
    assert "metalslurm_shared_storage: host-bind" in text


def test_cluster_secrets_are_made_once_and_kept(tmp_path):
    state = StateDir(tmp_path / "st")
    first = ensure_cluster_secrets(state)
    contents = {var: Path(path).read_text() for var, path in first.items()}
    assert ensure_cluster_secrets(state) == first
    assert {var: Path(path).read_text() for var, path in first.items()} == contents
    assert sorted(first) == ["monitoring_password_file", "munge_key_b64_file",
                             "slurm_jwt_key_b64_file", "slurmdbd_password_file"]


def test_the_plan_crosses_a_process_boundary_unchanged(tmp_path):
    """The Pulumi local stack's steps get the plan as JSON instead of parsing the config."""
    cfg = parse_config({"metalslurm:computePools": [
        {"name": "gpu", "count": 1, "elasticCount": 1, "gpuType": "h100", "gpuCount": 8}]})
    plan = local_cluster(cfg, tmp_path).plan
    assert LocalPlan.from_json(plan.to_json()) == plan
    small = LocalPlan.from_json(plan.to_json(with_specs=False))
    assert (small.specs, small.elastic_nodes) == ((), ("gpu-002",))
    assert [spec_from_json(spec_to_json(s)) for s in plan.specs] == list(plan.specs)


def test_stack_names_follow_pulumi():
    assert stack_name(Path("Pulumi.local.yaml")) == "local"
    assert stack_name(Path("x/Pulumi.e2e-debian12.yaml")) == "e2e-debian12"
    assert state_dir_for(Path("Pulumi.local.yaml")) == Path(".metalslurm/local")


# /proc/filesystems of this machine kind's kernel (no NFS) and of a stock Debian 12
# kernel after 'modprobe nfsd nfs' (recorded by hand; tab-separated as the kernel prints).
NO_NFS = "nodev\tsysfs\nnodev\ttmpfs\nnodev\toverlay\n\text4\n\tsquashfs\nnodev\tfuse\n"
WITH_NFS = NO_NFS + "nodev\tnfsd\nnodev\tnfs\nnodev\tnfs4\n"


def test_storage_falls_back_to_host_directories_without_kernel_nfs(tmp_path):
    procfs = tmp_path / "filesystems"
    procfs.write_text(NO_NFS)
    cfg = parse_config({})
    assert not kernel_has_nfs(procfs)
    assert storage_mode(cfg, procfs) == "host-bind"
    procfs.write_text(WITH_NFS)
    assert kernel_has_nfs(procfs)
    assert storage_mode(cfg, procfs) == "nfs"
    assert storage_mode(parse_config({"metalslurm:storage": {"backend": "none"}}),
                        procfs) == "none"
    assert not kernel_has_nfs(tmp_path / "missing")


def test_nfs_mode_adds_the_server_node_at_the_last_address():
    cfg = parse_config({"metalslurm:privateCidr": "192.168.50.0/24"})
    nfs = [s for s in node_specs(cfg, shared_storage="nfs") if "nfs_server" in s.groups]
    assert [(s.name, s.address) for s in nfs] == [("nfs", "192.168.50.254")]


def test_host_bind_mounts_one_directory_per_shared_path(tmp_path):
    cluster = local_cluster(parse_config(
        {"metalslurm:storage": {"paths": ["/home", "/shared", "/data/ckpt"]}}), tmp_path)
    mounts = cluster.bind_mounts()
    assert [(d.relative_to(tmp_path / "st").as_posix(), p) for d, p in mounts] == [
        ("shared/home", "/home"), ("shared/shared", "/shared"), ("shared/data_ckpt", "/data/ckpt")]
    cluster.ensure_shared_dirs()
    assert [oct(d.stat().st_mode & 0o7777) for d, _p in mounts] == ["0o755", "0o1777", "0o1777"]


# /proc/cpuinfo of a 2-socket machine with 2 cores per socket and 2 threads per core (the
# fields Linux prints per processor, other lines left out) and its /proc/meminfo head.
CPUINFO = "\n".join(
    f"processor\t: {i}\nphysical id\t: {i // 4}\nsiblings\t: 4\ncore id\t\t: {(i // 2) % 2}\n"
    f"cpu cores\t: 2\n" for i in range(8))
MEMINFO = "MemTotal:       32816396 kB\nMemFree:        30000000 kB\n"


def test_elastic_node_hardware_comes_from_the_hosts_cpus_and_memory():
    assert host_hardware(CPUINFO, MEMINFO) == {
        "Sockets": 2, "CoresPerSocket": 2, "ThreadsPerCore": 2, "CPUs": 8,
        "RealMemory": 32047 * 97 // 100}


def test_elastic_nodes_are_cloud_nodes_with_their_hardware_in_the_inventory(tmp_path):
    cfg = parse_config({"metalslurm:computePools": [
        {"name": "gpu", "count": 1, "elasticCount": 2, "gpuType": "h100", "gpuCount": 8}]})
    specs = {s.name: s for s in local_cluster(cfg, tmp_path).specs()}
    assert [(n, specs[n].node_state) for n in ("gpu-001", "gpu-002", "gpu-003")] == [
        ("gpu-001", "static"), ("gpu-002", "cloud"), ("gpu-003", "cloud")]
    assert "metalslurm_node_options" not in specs["gpu-001"].extra_vars
    options = specs["gpu-002"].extra_vars["metalslurm_node_options"]
    assert {"Sockets", "CoresPerSocket", "ThreadsPerCore", "RealMemory"} <= set(options)
    assert specs["gpu-003"].power == {"driver": "local", "container": "metalslurm-gpu-003"}


def test_a_compute_nodes_container_is_the_one_local_up_always_ran(tmp_path):
    """The node container description gives 'podman run' exactly the arguments it had before
    it was one description with two renderings (infra/providers/node_container.py), and a
    hardware address fixed by its IP address (CONTAINER_SPEC 4), started again when it exits
    (a static node: CONTAINER_SPEC 5)."""
    cfg = parse_config({"metalslurm:computePools": [
        {"name": "gpu", "count": 1, "gpuType": "h100", "gpuCount": 8}]})
    cluster = local_cluster(cfg, tmp_path)
    spec = cluster.plan.spec("gpu-001")
    node_dir, ca = cluster.state.node_dir("gpu-001").resolve(), cluster.state.host_ca.resolve()
    shared = [(d.resolve(), p) for d, p in cluster.bind_mounts()]
    args = cluster.node_container(spec, "img:1", cluster.bind_mounts()).run_args()
    assert args == [
        "--runtime", "runc", "run", "-d", "--privileged", "--systemd=always",
        "--name", "metalslurm-gpu-001", "--hostname", "gpu-001", "--no-hosts",
        "--network", "metalslurm-net", "--ip", "10.77.0.11", "--mac-address", "02:6d:0a:4d:00:0b",
        "--label", "metalslurm.spec=5", "--label", "metalslurm.cluster=metalslurm",
        "--label", "metalslurm.node=gpu-001", "--label", "metalslurm.groups=slurm_compute",
        "-v", f"{node_dir}:/etc/metalslurm:ro", "-v", f"{ca}:{NODE_HOST_CA_DIR}:ro",
        *[a for d, p in shared for a in ("-v", f"{d}:{p}:nosuid,nodev")],
        "--ulimit", "nofile=8192:8192", "--ulimit", "nproc=8192:8192",
        "--cgroupns=private", "--restart=always", "img:1", "/sbin/init"]
    body = cluster.node_container(spec, "img:1", cluster.bind_mounts()).create_body()
    assert (body["Networks"], body["cgroupns"], body["r_limits"][0]) == (
        {"metalslurm-net": {"static_ips": ["10.77.0.11"], "static_mac": "02:6d:0a:4d:00:0b"}},
        {"nsmode": "private"},
        {"type": "nofile", "soft": 8192, "hard": 8192})
    assert body["restart_policy"] == "always"
    assert [(m["source"], m["destination"], m["options"]) for m in body["mounts"]][:2] == [
        (str(node_dir), "/etc/metalslurm", ["rbind", "ro"]),
        (str(ca), NODE_HOST_CA_DIR, ["rbind", "ro"])]


def test_an_elastic_nodes_container_is_left_to_the_power_driver_when_it_exits(tmp_path):
    """Only static nodes come back by themselves after a reboot (podman's restart policy);
    a stopped elastic node is the power driver's to start."""
    cfg = parse_config({"metalslurm:computePools": [
        {"name": "gpu", "count": 1, "elasticCount": 1, "gpuType": "h100", "gpuCount": 8}]})
    cluster = local_cluster(cfg, tmp_path)
    made = {name: cluster.node_container(cluster.plan.spec(name), "img:1", [])
            for name in ("ctl", "gpu-001", "gpu-002")}
    assert {n: "--restart=always" in c.run_args() for n, c in made.items()} == {
        "ctl": True, "gpu-001": True, "gpu-002": False}
    assert "restart_policy" not in made["gpu-002"].create_body()


@pytest.mark.parametrize("os_id, stand_in", [("debian13", True), ("debian12", False)])
def test_slurmd_reports_its_containers_start_as_a_boot_only_where_slurm_reads_it(os_id,
                                                                              stand_in):
    """slurmd -b takes SLURMD_BOOT_TIME from 24.11 (Debian 13); 22.05's (Debian 12) would
    count every slurmd restart as a reboot."""
    assert boot_time_stand_in(os_id) is stand_in


@pytest.mark.parametrize("address, mac", [("10.77.0.11", "02:6d:0a:4d:00:0b"),
                                          ("192.168.255.0", "02:6d:c0:a8:ff:00")])
def test_a_nodes_hardware_address_is_fixed_by_its_ip_address(address, mac):
    assert node_mac(address) == mac


@pytest.mark.parametrize("address", ["10.77.0", "10.77.0.256", "fd00::1", ""])
def test_a_hardware_address_is_refused_for_what_is_not_an_ipv4_address(address):
    with pytest.raises(ValueError, match="not an IPv4 address"):
        node_mac(address)
