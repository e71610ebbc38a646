"""The acceptance gate's settings (the inventory's metalslurm_accept) and the command line's
refusals: each bad value named, before any node is touched."""

from __future__ import annotations

import pytest
import yaml

from infra.cli import main
from infra.stack.accept import settings_from_inventory
from infra.stack.inputs import InputError
from tests.paths import REPO

SHARED = ["/home", "/shared"]
GONE = ("is no longer a setting: the gate keeps its job scripts, results and history off "
        "shared storage, which users can write, on the controller's and the nodes' own disks "
        "(/var/lib/metalslurm/accept, root's alone); remove it")


def settings(raw, level=None):
    return settings_from_inventory({"metalslurm_accept": raw}, level)


def test_defaults_carry_the_published_floors():
    s = settings({})
    assert (s.level, s.fleet_fraction) == ("quick", 0.10)
    assert (s.floor("nccl_1node", "h100"), s.floor("nccl_pair", "h100"),
            s.floor("ib_write_bw:mlx5_0", "ndr"), s.floor("nccl_1node", "a100")) == (
        460.0, 340.0, 380.0, None)


def test_given_values_replace_the_defaults_and_add_hardware():
    s = settings({"level": "full", "thresholds": {"gpu": {"h200": {"nccl_1node": 431}},
                                                  "hca": {"ndr": {"ib_write_bw": 360}}},
                  "timeouts": {"nccl": 30}, "hcas": ["mlx5_0"], "path": ["/opt/x"]})
    assert (s.level, s.floor("nccl_1node", "h200"), s.floor("ib_write_bw:mlx5_0", "ndr")) == (
        "full", 431.0, 360.0)
    assert (s.floor("nccl_1node", "h100"), s.timeouts["nccl"], s.timeouts["dcgm"]) == (
        460.0, 30, 1800)
    assert (s.hcas, s.path) == (("mlx5_0",), ("/opt/x",))


@pytest.mark.parametrize("raw, said", [
    ({"level": "slow"}, "metalslurm_accept.level is 'slow'; give quick"),
    ({"thresholds": {"gpu": {"h100": {"nccl_1node": 0}}}},
     "metalslurm_accept.thresholds.gpu.h100.nccl_1node is 0; give a number above 0"),
    ({"thresholds": {"gpu": {"h100": {"nccl_1node": "fast"}}}}, "is 'fast'; give a number"),
    ({"thresholds": {"gpu": {"h100": {"nccl_1node": True}}}}, "is True; give a number"),
    ({"thresholds": {"gpu": {"h100": {"ib_write_bw": 380}}}}, "the gpu tests are"),
    ({"thresholds": {"cpu": {}}}, "thresholds.cpu is not a kind"),
    ({"shared_dir": "/shared/metalslurm/accept"}, f"metalslurm_accept.shared_dir {GONE}"),
    ({"fleet_fraction": 1.5}, "give a fraction below 1"),
    ({"max_rounds": 1}, "needs 2 rounds"),
    ({"timeouts": {"nccl": -5}}, "timeouts.nccl is -5"),
    ({"timeouts": {"hpl": 5}}, "timeouts.hpl is not a tool"),
    ({"hcas": "mlx5_0"}, "give a list of HCA names"),
    ({"path": ["relative"]}, "absolute directories"),
    ({"colour": "red"}, "colour is not a setting"),
])
def test_bad_settings_are_refused_naming_the_key(raw, said):
    with pytest.raises(InputError, match=said.replace("(", r"\(").replace(")", r"\)")):
        settings(raw)


def test_a_level_on_the_command_line_is_named_as_such():
    with pytest.raises(InputError, match="--level: is 'slow'"):
        settings({}, level="slow")


@pytest.fixture
def inventory(tmp_path):
    doc = {"all": {"vars": {"metalslurm_shared_paths": SHARED},
                   "hosts": {"ctl": {"ansible_host": "127.0.0.1"},
                             "gpu-001": {"metalslurm_gpu_type": "h100"}},
                   "children": {"slurm_controller": {"hosts": {"ctl": None}},
                                "slurm_compute": {"hosts": {"gpu-001": None}}}}}
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize("args, said", [
    ([], "error: --inventory: is required"),
    (["--nodes", "gpu-009"], "error: --nodes gpu-009: names gpu-009, not compute nodes of the "
                             "inventory (gpu-001)"),
    (["--nodes", "gpu-[001"], "error: --nodes 'gpu-[001': is not a hostlist"),
    (["--level", "slow"], "error: --level: is 'slow'"),
])
def test_the_command_refuses_bad_arguments_with_one_line_and_exit_2(inventory, capsys, args,
                                                                    said):
    argv = ["accept", *(["-i", str(inventory)] if args else []), *args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(said) and err.count("\n") == 1, err


def test_an_inventory_without_compute_nodes_is_refused(tmp_path, capsys):
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": {"ctl": {}}, "children": {
        "slurm_controller": {"hosts": {"ctl": None}}}}}))
    assert main(["accept", "-i", str(path)]) == 2
    assert "has no host in group slurm_compute" in capsys.readouterr().err


# ---- the stack's metalslurm:accept: the same checks, the stack's spelling ---------------------

def stack(accept, storage=None):
    from infra.stack.config import parse_config

    raw = yaml.safe_load((REPO / "Pulumi.example-local.yaml").read_text())["config"]
    raw["metalslurm:accept"] = accept
    if storage is not None:
        raw["metalslurm:storage"] = storage
    return parse_config(raw)


def test_the_stack_key_becomes_the_inventorys_and_the_gate_reads_it():
    from infra.stack.inventory import cluster_vars

    cfg = stack({"gate": True, "level": "full", "fleetFraction": 0.05, "hcaType": "ndr",
                 "timeouts": {"ibWriteBw": 30},
                 "thresholds": {"gpu": {"h200": {"nccl_1node": 431}}}})
    inventory = cluster_vars(cfg, [])["metalslurm_accept"]
    assert inventory == {"gate": True, "level": "full", "fleet_fraction": 0.05,
                         "hca_type": "ndr", "timeouts": {"ib_write_bw": 30},
                         "thresholds": {"gpu": {"h200": {"nccl_1node": 431}}}}
    s = settings_from_inventory({"metalslurm_accept": inventory})
    assert (s.gate, s.level, s.fleet_fraction, s.timeouts["ib_write_bw"],
            s.floor("nccl_1node", "h200")) == (True, "full", 0.05, 30, 431.0)


def test_another_nccl_tests_source_reaches_the_role_as_given():
    from infra.stack.inventory import cluster_vars

    source = {"url": "https://mirror.example.org/nccl-tests-2.16.9.tar.gz", "sha256": "c" * 64}
    assert cluster_vars(stack({"ncclTests": source}), [])["metalslurm_accept"] == {
        "gate": False, "nccl_tests": source}


def test_without_the_key_the_gate_is_off():
    from infra.stack.inventory import cluster_vars

    assert cluster_vars(stack(None), [])["metalslurm_accept"] == {"gate": False}


@pytest.mark.parametrize("accept, said", [
    ({"gate": "yes"}, "metalslurm:accept.gate: is 'yes'; give true"),
    ({"sharedDir": "/shared/x"}, f"metalslurm:accept.sharedDir: {GONE}"),
    ({"shared_dir": "/shared/x"}, f"metalslurm:accept.sharedDir: {GONE}"),
    ({"historyDays": 30, "history_days": 30}, "metalslurm:accept.history_days: is spelled "
                                              "historyDays"),
    ({"timeouts": {"ib_write_bw": 5}}, "metalslurm:accept.timeouts.ib_write_bw: is spelled "
                                       "timeouts.ibWriteBw"),
    ({"timeouts": {"hpl": 5}}, "timeouts.hpl: is not a tool; the tools are dcgm, nccl, "
                               "ibWriteBw"),
    ({"maxRounds": 1}, "metalslurm:accept.maxRounds: is 1; the pairing needs 2 rounds"),
    ({"thresholds": {"hca": {"ndr": {"ib_write_bw": -1}}}},
     "metalslurm:accept.thresholds.hca.ndr.ib_write_bw: is -1; give a number above 0"),
    ({"colour": 1}, "metalslurm:accept.colour: is not a setting; the settings are gate, level, "
                    "historyDays, fleetFraction"),
    (["gate"], "metalslurm:accept: is list; give a mapping of gate"),
    ({"ncclTests": {"url": "https://example.org/v2.16.0.tar.gz"}},
     "metalslurm:accept.ncclTests: is {'url': 'https://example.org/v2.16.0.tar.gz'}; give "
     "{url, sha256}"),
    ({"ncclTests": {"url": "ftp://x/y.tar.gz", "sha256": "a" * 64}},
     "metalslurm:accept.ncclTests.url: is 'ftp://x/y.tar.gz'; give an http(s) URL or an "
     "absolute path"),
    ({"ncclTests": {"url": "/srv/mirror/n.tar.gz", "sha256": "A" * 64}},
     "metalslurm:accept.ncclTests.sha256: is '" + "A" * 64 + "'; give the archive's sha256"),
])
def test_bad_stack_settings_are_refused_naming_the_stack_key(accept, said):
    from infra.stack.config import ConfigError

    with pytest.raises(ConfigError) as caught:
        stack(accept)
    assert said in str(caught.value)


def test_the_gate_needs_no_shared_storage():
    """Its scripts, results and history are on the controller's and the nodes' own disks."""
    from infra.stack.inventory import cluster_vars

    cfg = stack({"gate": True}, storage={"backend": "none"})
    assert cluster_vars(cfg, [])["metalslurm_accept"] == {"gate": True}


WRONG_TYPES = (["x"], {"k": "v"}, {"k": None}, "text", 5, 0.5, -1, None, True, [{"a": 1}])


@pytest.mark.parametrize("key", ["gate", "level", "shared_dir", "history_days",
                                 "fleet_fraction", "min_samples", "max_rounds", "hca_type",
                                 "hcas", "gpudirect", "path", "timeouts", "thresholds",
                                 "nccl_tests"])
def test_any_value_at_any_key_is_taken_or_refused_naming_the_key(key):
    """Never another exception: a hand-written inventory can hold anything there."""
    for value in WRONG_TYPES:
        for nested in (value, {"nccl": value}, {"gpu": {"h100": {"nccl_1node": value}}}):
            try:
                settings({key: nested})
            except InputError as exc:
                assert f"metalslurm_accept.{key}" in str(exc)


def test_config_validate_lists_the_gates_problems_with_the_other_sections(tmp_path, capsys):
    """Two bad gate settings and a bad health setting: all three in one list, one pass."""
    doc = yaml.safe_load((REPO / "Pulumi.example-local.yaml").read_text())
    doc["config"]["metalslurm:accept"] = {"gate": "yes", "maxRounds": 1}
    doc["config"]["metalslurm:health"] = {"checkTimeout": 0}
    stack_file = tmp_path / "Pulumi.bad.yaml"
    stack_file.write_text(yaml.safe_dump(doc))
    assert main(["config", "validate", str(stack_file)]) == 2
    err = capsys.readouterr().err
    assert "3 problem(s):\n" in err, err
    assert "\n  - metalslurm:accept.gate: is 'yes'; give true" in err
    assert ("\n  - metalslurm:accept.maxRounds: is 1; the pairing needs 2 rounds to name a "
            "bad node") in err
    assert "\n  - metalslurm:health.checkTimeout: must be at least 1, got 0" in err


def test_every_bad_inventory_setting_is_named_at_once():
    with pytest.raises(InputError) as caught:
        settings({"gate": "yes", "colour": "red", "timeouts": {"nccl": -5, "hpl": 5},
                  "thresholds": {"gpu": {"h100": {"nccl_1node": 0}}}})
    said = str(caught.value)
    assert said.startswith("--inventory: 5 problem(s):\n"), said
    for line in ("metalslurm_accept.gate is 'yes'; give true",
                 "metalslurm_accept.colour is not a setting",
                 "metalslurm_accept.timeouts.nccl is -5; give a whole number above 0",
                 "metalslurm_accept.timeouts.hpl is not a tool",
                 "metalslurm_accept.thresholds.gpu.h100.nccl_1node is 0; give a number above 0"):
        assert f"\n  - {line}" in said, said

