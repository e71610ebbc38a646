"""Local provider planning: names, addresses and inventory vars (no podman needed)."""

from pathlib import Path

from infra.cli import stack_name, state_dir_for
from infra.config import parse_config
from infra.providers.local import LocalCluster, container_name, network_name, node_specs


def test_addresses_start_at_dot_ten():
    cfg = parse_config({"metalslurm:privateCidr": "192.168.50.0/24",
                        "metalslurm:clusterName": "lab"})
    specs = node_specs(cfg)
    assert [(s.name, s.address, s.groups) for s in specs] == [
        ("ctl", "192.168.50.10", ("slurm_controller", "slurmdbd")),
        ("gpu-001", "192.168.50.11", ("slurm_compute",)),
        ("gpu-002", "192.168.50.12", ("slurm_compute",)),
    ]
    assert container_name(cfg, "gpu-001") == "lab-gpu-001"
    assert network_name(cfg) == "lab-net"


def test_inventory_file_keeps_secrets_out(tmp_path):
    cluster = LocalCluster(cfg=parse_config({}), state_dir=tmp_path)
    cluster.munge_key_file.parent.mkdir(parents=True)
    cluster.munge_key_file.write_text("c2VjcmV0LWtleS1ieXRlcw==\n")
    cluster.write_inventory(cluster.specs())
    text = cluster.inventory_path.read_text()
    assert "c2VjcmV0" not in text
    assert f"munge_key_b64_file: {cluster.munge_key_file.resolve()}" in text
    assert "StrictHostKeyChecking=yes" in text


def test_stack_names_follow_pulumi():
    assert stack_name(Path("Pulumi.local.yaml")) == "local"
    assert stack_name(Path("x/Pulumi.e2e-debian12.yaml")) == "e2e-debian12"
    assert state_dir_for(Path("Pulumi.local.yaml")) == Path(".metalslurm/local")
