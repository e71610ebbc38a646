"""The oci provider's plain-Python side: each compute node's shape, refused naming the
setting when its pool has none."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from infra.pulumi import oci
from infra.stack.config import ConfigError, parse_config

REPO = Path(__file__).resolve().parents[2]


def oci_config():
    raw = yaml.safe_load((REPO / "Pulumi.example-oci.yaml").read_text())["config"]
    return parse_config(raw, check_artifacts=False)


def test_a_compute_node_takes_its_pools_shape():
    cfg = oci_config()
    pool = cfg.compute_pools[0]
    assert pool.shape
    assert oci.compute_shape(cfg, pool.node_names()[0]) == pool.shape


def test_a_pool_without_a_shape_is_refused_naming_the_setting():
    """The stack config fills in every pool's shape; a config built otherwise without one
    is a ConfigError naming the key, not an assert."""
    cfg = oci_config()
    pools = [dataclasses.replace(cfg.compute_pools[0], shape=None), *cfg.compute_pools[1:]]
    cfg = dataclasses.replace(cfg, compute_pools=pools)
    with pytest.raises(ConfigError) as err:
        oci.compute_shape(cfg, pools[0].node_names()[0])
    assert err.value.problems == [
        f"metalslurm:computePools[0].shape: pool {pools[0].name!r} has no OCI shape; the oci "
        "provider launches its nodes with it: set shape"]
