#!/usr/bin/env python3
"""A stand-in for ``scontrol`` in the power programs' unit tests.

Records each call's arguments (one JSON line per call in $FAKE_SLURM_DIR/calls.jsonl) and keeps
node states in $FAKE_SLURM_DIR/nodes.json. ``show node`` prints lines in the shape recorded from
Slurm 24.11.5 (tests/fixtures/slurm/scontrol-show-node-24.11-cloud-states.txt); ``update``
applies the state transitions recorded there (tests/fixtures/slurm/transitions-24.11-*.txt):
POWER_DOWN_FORCE on a non-DOWN node -> IDLE+CLOUD+POWERING_DOWN, then POWERED_DOWN after
$FAKE_SUSPEND_S seconds; on a DOWN node -> DOWN+POWER_DOWN (stuck until RESUME); RESUME on DOWN
-> IDLE (the power down then proceeds). $FAKE_SCONTROL_SLEEP delays ``show hostnames``;
$FAKE_SCONTROL_WAIT_FOR holds it until that file exists (at most 120 s).
$FAKE_SCONTROL_FAIL_UPDATE=1 makes ``update`` fail.
"""

import json
import os
import sys
import time
from pathlib import Path

import hostlist  # python-hostlist: the same expansion as Slurm's for these names

LINE = ("NodeName={name} CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.00 "
        "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr={addr} "
        "NodeHostName={host}  RealMemory=1000 AllocMem=0 FreeMem=N/A Sockets=2 Boards=1 "
        "State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
        "Partitions=gpu  BootTime=None SlurmdStartTime=None LastBusyTime=Unknown "
        "ResumeAfterTime=None CfgTRES=cpu=2,mem=1000M,billing=2 AllocTRES= CurrentWatts=0 "
        "AveWatts=0 {reason}")

ORDER = ["CLOUD", "POWER_DOWN", "NOT_RESPONDING", "POWERED_DOWN", "POWERING_UP",
         "POWERING_DOWN"]


def settle(nodes: dict, now: float) -> None:
    """A forced power down completes after SuspendTimeout."""
    for node in nodes.values():
        if "POWERING_DOWN" in node["flags"] and now >= node.get("settle_at", 0):
            node["flags"] = [f for f in node["flags"] if f != "POWERING_DOWN"] + ["POWERED_DOWN"]


def show_hostnames(words: list[str]) -> int:
    time.sleep(float(os.environ.get("FAKE_SCONTROL_SLEEP", "0")))
    gate = os.environ.get("FAKE_SCONTROL_WAIT_FOR")
    deadline = time.monotonic() + 120
    while gate and not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.05)
    for name in hostlist.expand_hostlist(words[2]) if len(words) > 2 else []:
        print(name)
    return 0


def show_node(nodes: dict) -> int:
    for name, node in sorted(nodes.items()):
        flags = sorted(set(node["flags"]), key=ORDER.index)
        reason = f"Reason={node['reason']} [root@2026-11-22T12:54:16]" if node.get(
            "reason") else ""
        print(LINE.format(name=name, addr=node.get("addr", name),
                          host=node.get("host", name),
                          state="+".join([node["base"], *flags]), reason=reason))
    return 0


def apply_state(node: dict, state: str, now: float) -> None:
    """The transitions recorded from Slurm 24.11 (the module's docstring)."""
    flags = set(node["flags"])
    if state == "POWER_DOWN_FORCE":
        if node["base"] == "DOWN":
            flags.add("POWER_DOWN")
            flags -= {"POWERING_UP"}
        else:
            node["base"] = "IDLE"
            flags -= {"POWERING_UP", "NOT_RESPONDING", "POWERED_DOWN", "POWER_DOWN"}
            flags.add("POWERING_DOWN")
            node["settle_at"] = now + float(os.environ.get("FAKE_SUSPEND_S", "0"))
    elif state == "RESUME" and node["base"] == "DOWN":
        node["base"] = "IDLE"
        if "POWER_DOWN" in flags:
            flags -= {"POWER_DOWN"}
            flags.add("POWERING_DOWN")
            node["settle_at"] = now + float(os.environ.get("FAKE_SUSPEND_S", "0"))
    elif state == "DOWN":
        node["base"] = "DOWN"
    node["flags"] = sorted(flags)


def update(words: list[str], nodes: dict, nodes_file: Path, now: float) -> int:
    if os.environ.get("FAKE_SCONTROL_FAIL_UPDATE") == "1":
        print("slurm_update error: Invalid node state specified", file=sys.stderr)
        return 1
    settings = dict(w.split("=", 1) for w in words[1:])
    names = settings.pop("nodename").split(",")
    for name in names:
        node = nodes[name]
        apply_state(node, settings.get("state", "").upper(), now)
        for key, field in (("reason", "reason"), ("nodeaddr", "addr"), ("nodehostname", "host")):
            if key in settings:
                node[field] = settings[key]
    nodes_file.write_text(json.dumps(nodes))
    return 0


def main() -> int:
    base = Path(os.environ["FAKE_SLURM_DIR"])
    args = sys.argv[1:]
    with open(base / "calls.jsonl", "a") as log:
        log.write(json.dumps({"t": time.time(), "args": args}) + "\n")
    nodes_file = base / "nodes.json"
    nodes = json.loads(nodes_file.read_text()) if nodes_file.exists() else {}
    now = time.time()
    settle(nodes, now)
    words = [a for a in args if a != "-o"]
    if words[:2] == ["show", "hostnames"]:
        return show_hostnames(words)
    if words[:2] == ["show", "node"]:
        return show_node(nodes)
    if words[:1] == ["update"]:
        return update(words, nodes, nodes_file, now)
    print(f"fake scontrol: unsupported arguments {args}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
