"""roles/host_firewall's program (files/metalslurm-firewall): how it puts the cluster's
openings in a host's own nftables ruleset, fed `nft -j list ruleset` documents, and run
through main() against a stand-in nft that records what it was asked."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json

import pytest

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


def ruleset(*rules, hook="input", family="inet", policy="drop", table="filter",
            chain="input"):
    """An `nft -j list ruleset` document: one input chain with ``rules`` (handle, comment,
    expressions), and the DCGM guard's output chain."""
    items = [{"metainfo": {"json_schema_version": 1}},
             {"table": {"family": family, "name": table, "handle": 1}},
             {"chain": {"family": family, "table": table, "name": chain, "handle": 1,
                        "type": "filter", "hook": hook, "prio": 0, "policy": policy}},
             {"chain": {"family": "inet", "table": "metalslurm_dcgm_guard", "name": "output",
                        "handle": 1, "type": "filter", "hook": "output", "prio": 0,
                        "policy": "accept"}}]
    for handle, comment, *expr in rules:
        rule = {"family": family, "table": table, "chain": chain, "handle": handle,
                "expr": expr[0] if expr else [{"accept": None}]}
        if comment:
            rule["comment"] = comment
        items.append({"rule": rule})
    return items


DROP = [{"match": {"op": "==", "left": {"meta": {"key": "iifname"}}, "right": "eth0"}},
        {"drop": None}]
IPTABLES = "ip filter INPUT (managed by iptables-nft)"
XT = [{"xt": {"type": "match", "name": "conntrack"}}, {"counter": None}, {"drop": None}]


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
    # A chain that lets everything through needs nothing; one with a drop rule does.
    assert fw.plan(ruleset((4, None), policy="accept"), WANTED) == ("", [])
    assert fw.plan(ruleset((4, None, DROP), policy="accept"), WANTED)[1] == ["inet filter input"]


@pytest.mark.parametrize(("doc", "why"), [
    (ruleset((4, None, XT), family="ip", chain="INPUT"), IPTABLES),
    (ruleset((4, None, XT), family="ip", table="docker", chain="in"),
     "ip docker in (managed by iptables-nft)"),
    (ruleset((4, None), family="ip", chain="INPUT"), IPTABLES),
    (ruleset((4, None), table="my table"),
     "inet my table input (a name nft's rule syntax cannot take as it is)"),
])
def test_chains_another_tool_owns_or_nft_cannot_name_are_refused_not_touched(doc, why):
    fw = program()
    assert fw.plan(doc, WANTED) == ("", [])
    chains, refused = fw.input_chains(doc)
    assert chains == []
    assert [f"{' '.join(c)} ({w})" for c, w in refused] == [why]


def test_remove_takes_out_only_the_tagged_rules_of_every_chain():
    fw = program()
    doc = ruleset((9, "metalslurm aa: slurmd"), (4, None), (10, "metalslurm bb: jobs"))
    assert fw.plan(doc, []) == ("delete rule inet filter input handle 9\n"
                                "delete rule inet filter input handle 10\n",
                                ["inet filter input"])
    assert fw.plan(ruleset((4, None)), []) == ("", [])


def test_ufw_is_on_only_where_its_own_switch_says_so(tmp_path, monkeypatch):
    fw = program()
    conf = tmp_path / "ufw.conf"
    monkeypatch.setattr(fw, "UFW_CONF", str(conf))
    assert not fw.ufw_enabled()  # not installed
    conf.write_text("# /etc/ufw/ufw.conf\nENABLED=no\nLOGLEVEL=low\n")
    assert not fw.ufw_enabled()  # Ubuntu's default: the unit is active, ufw is off
    conf.write_text("ENABLED=yes\n")
    assert fw.ufw_enabled()
    # Ours, but below a rule of the host's (moved by hand): put back on top.
    moved = ruleset((4, None), (9, "metalslurm aa: slurmd"), (10, "metalslurm bb: jobs"))
    assert fw.plan(moved, WANTED)[1] == ["inet filter input"]


def stand_in_nft(tmp_path, monkeypatch, ufw=False, firewalld=False):
    """The program with WANTED as its rules and a stand-in nft that lists one host rule and
    logs every call (and what it is fed) to the returned file; ufw and firewalld as given,
    not as on this machine."""
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
    monkeypatch.setattr(fw, "LOCK", str(tmp_path / "lock"))
    monkeypatch.setattr(fw, "ufw_enabled", lambda: ufw)
    monkeypatch.setattr(fw, "unit_active", lambda unit: firewalld and unit == "firewalld")
    return fw, config, log


def test_the_program_reads_the_ruleset_nft_prints(tmp_path, monkeypatch, capsys):
    fw, config, log = stand_in_nft(tmp_path, monkeypatch)
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


@pytest.mark.parametrize(("ufw", "firewalld", "owner"), [
    (True, False, "ufw is enabled"), (False, True, "firewalld is active")])
def test_the_program_leaves_a_firewall_ufw_or_firewalld_owns_alone(tmp_path, monkeypatch, ufw,
                                                                   firewalld, owner):
    """At boot and from the repair timer no role stops it: it refuses as the role does."""
    fw, config, log = stand_in_nft(tmp_path, monkeypatch, ufw, firewalld)
    monkeypatch.setattr("sys.argv", ["metalslurm-firewall", "--config", str(config)])
    with pytest.raises(SystemExit, match=f"metalslurm-firewall: {owner}: its rules are "
                                         "rewritten by the tool that owns them"):
        fw.main()
    assert log.read_text().splitlines() == ["-j list ruleset"]
