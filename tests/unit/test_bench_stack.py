"""The benchmark measures the default stack: bench/Pulumi.bench.yaml is Pulumi.local.yaml
under another cluster name and network."""

from dataclasses import replace
from pathlib import Path

from infra.config import load_stack_file

REPO = Path(__file__).resolve().parents[2]


def test_the_bench_stack_is_the_default_stack_on_its_own_network():
    default = load_stack_file(REPO / "Pulumi.local.yaml")
    bench = load_stack_file(REPO / "bench/Pulumi.bench.yaml")
    assert (bench.cluster_name, str(bench.private_cidr)) == ("ms-bench", "10.78.20.0/24")
    assert replace(bench, cluster_name=default.cluster_name,
                   private_cidr=default.private_cidr) == default
