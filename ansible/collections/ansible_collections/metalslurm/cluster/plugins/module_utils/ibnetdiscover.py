"""``ibnetdiscover``'s default output, parsed into the switches, adapters and cables of an
InfiniBand fabric.

Hosts in the fabric. An HCA's node description is set by rdma-core's ``rdma-ndd`` to
``"<hostname> <hca>"`` (``"a08-p1-dgx-04-c01 mlx5_5"``), so the host is its first token
(:func:`host_of`). Descriptions the firmware sets before rdma-ndd runs
(``"MT4129 ConnectX7   Mellanox Technologies"``) name no host: such HCAs are reported as
``unnamed_hcas``. SHARP aggregation nodes (``"Mellanox Technologies Aggregation Node"``, a
CA inside each Quantum switch) are neither hosts nor unnamed HCAs and are left out. A host
matches an inventory node case-insensitively, by full name or by short name (before the
first '.'); hosts that match none are reported by name (``unmatched_hosts``), never
dropped silently.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ansible_collections.metalslurm.cluster.plugins.module_utils.topology import TopologyError


@dataclass(frozen=True)
class Peer:
    """The far end of a cable: kind 'S' (switch), 'H' (channel adapter) or 'R' (router)."""

    kind: str
    guid: str
    port: int
    description: str



@dataclass(frozen=True)
class FabricNode:
    """A switch or channel adapter (HCA) with its cabled ports (port number -> peer)."""

    kind: str
    guid: str
    description: str
    nports: int
    ports: Mapping[int, Peer]



@dataclass(frozen=True)
class Fabric:
    switches: Mapping[str, FabricNode]  # by GUID (16 hex digits, lower case)
    cas: Mapping[str, FabricNode]
    routers: Mapping[str, FabricNode] = field(default_factory=dict)



_NODE_KINDS = {"Switch": "S", "Ca": "H", "Rt": "R"}



# Switch	65 "S-2c5eab0300b87b40"		# "MF0;A09-P1-IBLEAF-04-04:MQM9701/U1" enhanced port 0 ...
# Ca	1 "H-e09d7303007a5a68"		# "a08-p1-dgx-04-c17 mlx5_5"
_HEADER_RE = re.compile(
    r'(Switch|Ca|Rt)\s+(\d+)\s+"([SHR])-([0-9A-Fa-f]+)"\s*(?:#\s*"(.*)"(.*))?')



# [1]	"H-e09d7303007a4bd8"[1](e09d7303007a4bd8) 		# "a08-p1-dgx-04-c01 mlx5_5" lid 647 4xNDR
# [1](e09d7303007a5a68) 	"S-2c5eab0300b87b40"[17]		# lid 657 lmc 0 "MF0;..." lid 73 4xNDR
_PORT_RE = re.compile(
    r'\[(\d+)\](?:\[ext\s+\d+\])?(?:\([0-9A-Fa-f]+\))?\s+"([SHR])-([0-9A-Fa-f]+)"'
    r'\[(\d+)\](?:\[ext\s+\d+\])?(?:\([0-9A-Fa-f]+\))?\s*(?:#\s*(.*))?')



_QUOTED_RE = re.compile(r'"(.*)"')



_IGNORED_PREFIXES = ("vendid=", "devid=", "sysimgguid=", "switchguid=", "caguid=", "rtguid=")



def parse_ibnetdiscover(text: str) -> Fabric:
    """The switches, CAs and cables of an ``ibnetdiscover`` dump (its default output).

    Comments, blank lines and the ``vendid=``/``devid=``/``sysimgguid=``/``switchguid=``/
    ``caguid=`` lines are skipped. Anything else that is not a node header or a port line
    raises :class:`TopologyError` naming the line.
    """
    nodes: dict[str, dict[str, FabricNode]] = {"S": {}, "H": {}, "R": {}}
    current: tuple[str, str, str, int, dict[int, Peer]] | None = None

    def close() -> None:
        if current is not None:
            kind, guid, desc, nports, ports = current
            nodes[kind][guid] = FabricNode(kind, guid, desc, nports, ports)

    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            close()
            current = None
            continue
        if line.startswith("#") or line.lower().startswith(_IGNORED_PREFIXES):
            continue
        if line.startswith("["):
            match = _PORT_RE.fullmatch(line)
            if match is None:
                raise TopologyError(f"ibnetdiscover line {number}: not a port line: {raw!r}")
            if current is None:
                raise TopologyError(f"ibnetdiscover line {number}: a port line outside a "
                                    "Switch or Ca block")
            port = int(match[1])
            if not 1 <= port <= current[3]:
                raise TopologyError(f"ibnetdiscover line {number}: port {port} is not one "
                                    f"of the {current[3]} ports of {current[1]}")
            if port in current[4]:
                raise TopologyError(f"ibnetdiscover line {number}: port {port} of "
                                    f"{current[1]} is listed twice")
            quoted = _QUOTED_RE.search(match[5] or "")
            current[4][port] = Peer(match[2], match[3].lower(), int(match[4]),
                                    quoted[1] if quoted else "")
            continue
        match = _HEADER_RE.fullmatch(line)
        if match is None:
            raise TopologyError(f"ibnetdiscover line {number}: not ibnetdiscover output: "
                                f"{raw!r}")
        kind = _NODE_KINDS[match[1]]
        if match[3] != kind:
            raise TopologyError(f"ibnetdiscover line {number}: a {match[1]} with GUID "
                                f"{match[3]}-{match[4]}")
        guid = match[4].lower()
        if any(guid in known for known in nodes.values()):
            raise TopologyError(f"ibnetdiscover line {number}: GUID {guid} is listed twice")
        close()
        current = (kind, guid, match[5] or "", int(match[2]), {})
    close()
    return Fabric(switches=nodes["S"], cas=nodes["H"], routers=nodes["R"])



# Descriptions the firmware sets while no rdma-ndd has named the HCA after its host.
_UNSET_RE = re.compile(r"Mellanox Technologies|NVIDIA Technologies|^MT\d+\b", re.IGNORECASE)



AGGREGATION_RE = re.compile(r"Aggregation Node", re.IGNORECASE)



def host_of(description: str) -> str | None:
    """The host an HCA belongs to, from its node description; None when it names none.

    rdma-core's rdma-ndd sets the description to ``"<hostname> <hca>"``, so the host is the
    first token: ``"a08-p1-dgx-04-c01 mlx5_5"`` -> ``"a08-p1-dgx-04-c01"``. Empty and
    firmware-default descriptions (``"MT4129 ConnectX7   Mellanox Technologies"``,
    ``"Mellanox Technologies Aggregation Node"``) give None.
    """
    text = description.strip()
    if not text or _UNSET_RE.search(text):
        return None
    return text.split()[0]



class NodeMatcher:
    """Inventory node names by lower-case full name and by lower-case short name."""

    def __init__(self, nodes: Iterable[str]) -> None:
        self.full: dict[str, str] = {}
        shorts: dict[str, list[str]] = defaultdict(list)
        for node in nodes:
            self.full.setdefault(node.lower(), node)
            shorts[node.lower().split(".", 1)[0]].append(node)
        self.short = {s: names[0] for s, names in shorts.items() if len(set(names)) == 1}

    def __call__(self, host: str) -> str | None:
        lower = host.lower()
        return self.full.get(lower) or self.short.get(lower.split(".", 1)[0])
