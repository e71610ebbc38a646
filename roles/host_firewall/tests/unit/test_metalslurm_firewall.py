"""roles/host_firewall's program (files/metalslurm-firewall): how it puts the cluster's
openings in a host's own nftables ruleset, fed `nft -j list ruleset` documents, and run
through main() against a stand-in nft that records what it was asked."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json

from tests.paths import REPO

PROGRAM = REPO / "roles" / "host_firewall" / "files" / "metalslurm-firewall"



def program():
    loader = importlib.machinery.SourceFileLoader("metalslurm_firewall", str(PROGRAM))
    spec = importlib.util.spec_from_loader("metalslurm_firewall", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


WANTED = [{"rule": "ip saddr 10.0.0.0/24 tcp dport 6818 accept",
           "comment": "metalslurm aa: slurmd"},
          {"rule": "ip saddr { 10.0.0.11 } accept", "comment": "metalslurm bb: jobs"}]


def ruleset(*rules, hook="input", family="inet"):
    items = [{"metainfo": {"json_schema_version": 1}},
             {"table": {"family": family, "name": "filter", "handle": 1}},
             {"chain": {"family": family, "table": "filter", "name": "input", "handle": 1,
                        "type": "filter", "hook": hook, "prio": 0, "policy": "drop"}},
             {"chain": {"family": "inet", "table": "metalslurm_dcgm_guard", "name": "output",
                        "handle": 1, "type": "filter", "hook": "output", "prio": 0,
                        "policy": "accept"}}]
    for handle, comment in rules:
        rule = {"family": family, "table": "filter", "chain": "input", "handle": handle,
                "expr": []}
        if comment:
            rule["comment"] = comment
        items.append({"rule": rule})
    return items


def test_the_rules_go_first_in_each_input_chain_and_replace_the_earlier_ones():
    fw = program()
    batch, stale = fw.plan(ruleset((4, None), (7, "metalslurm 00: old")), WANTED)
    assert stale == ["inet filter input"]
    assert batch.splitlines() == [
        "delete rule inet filter input handle 7",
        'insert rule inet filter input ip saddr { 10.0.0.11 } accept comment "metalslurm bb: jobs"',
        'insert rule inet filter input ip saddr 10.0.0.0/24 tcp dport 6818 accept '
        'comment "metalslurm aa: slurmd"',
    ]


def test_nothing_is_done_where_the_rules_are_in_place_or_no_input_chain_exists():
    fw = program()
    placed = ruleset((9, "metalslurm aa: slurmd"), (10, "metalslurm bb: jobs"), (4, None))
    assert fw.plan(placed, WANTED) == ("", [])
    assert fw.plan(ruleset((4, None), hook="output"), WANTED) == ("", [])
    assert fw.plan(ruleset((4, None), family="bridge"), WANTED) == ("", [])
    # Ours, but below a rule of the host's (moved by hand): put back on top.
    moved = ruleset((4, None), (9, "metalslurm aa: slurmd"), (10, "metalslurm bb: jobs"))
    assert fw.plan(moved, WANTED)[1] == ["inet filter input"]


def test_the_program_reads_the_ruleset_nft_prints(tmp_path, monkeypatch, capsys):
    fw = program()
    config = tmp_path / "firewall.json"
    config.write_text(json.dumps(WANTED))
    nft = tmp_path / "nft"
    log = tmp_path / "nft.log"
    listing = json.dumps({"nftables": ruleset((4, None))})
    nft.write_text(f"#!/bin/sh\necho \"$*\" >> {log}\nif [ \"$1\" = -j ]; then echo '{listing}'; "
                   f"else cat >> {log}; fi\n")
    nft.chmod(0o755)
    monkeypatch.setattr(fw, "NFT", str(nft))
    monkeypatch.setattr("sys.argv", ["metalslurm-firewall", "--check", "--config", str(config)])
    assert fw.main() == 1
    assert capsys.readouterr().out == "stale: inet filter input\n"
    monkeypatch.setattr("sys.argv", ["metalslurm-firewall", "--config", str(config)])
    assert fw.main() == 0
    assert log.read_text().splitlines()[-3:] == [
        "-f -",
        'insert rule inet filter input ip saddr { 10.0.0.11 } accept comment "metalslurm bb: jobs"',
        'insert rule inet filter input ip saddr 10.0.0.0/24 tcp dport 6818 accept '
        'comment "metalslurm aa: slurmd"',
    ]
