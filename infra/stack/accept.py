"""The acceptance gate's settings and their defaults, checked before any node is touched.

Two spellings, one validation: the stack's ``metalslurm:accept`` (camelCase keys;
:func:`parse_accept`, which writes the inventory's ``metalslurm_accept``) and the
inventory's ``metalslurm_accept`` (snake_case keys, for hand-written inventories too;
:func:`settings_from_inventory`). Every problem of the section is found in one pass, each
naming the key in the spelling it came in: the stack's go to the stack config's
:class:`~infra.stack.schema.Collector`, listed with the other sections' problems; the
inventory's are listed in one :class:`~infra.stack.schema.ConfigError` (``--inventory``). Every
key is optional; :class:`GateSettings` holds the defaults, with their sources.
``sharedDir`` (``shared_dir``) is refused with what to do: the gate keeps nothing on
shared storage any more (docs/how-to/accept.md). The gate's run (infra/accept/gate.py) reads
these settings; nothing here imports it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.cluster_defaults import (
    ACCEPT_DEFAULTS as ROLE_DEFAULTS,
)

from infra.stack.inputs import InputError
from infra.stack.schema import Collector, ConfigError
from infra.stack.schema import key as stack_key

# dcgmi diag's run level for each gate level.
LEVELS = {"quick": 2, "full": 3}
# The gate's own directory on the controller (the history) and on each node (runs/<run>/:
# the jobs' results): on the machine's own disk, under root's /var/lib, mode 0700. Not a
# setting: named here for the refusal of the shared directory that used to be one.
LOCAL_DIR = "/var/lib/metalslurm/accept"

# Defaults, each with where it comes from. A floor is per GPU type (the NCCL tests) or per
# HCA type (ib_write_bw); a type without a floor is judged against the fleet only.
DEFAULT_THRESHOLDS: dict[str, dict[str, dict[str, float]]] = {
    "gpu": {
        "h100": {
            # Azure azurehpc-health-checks, conf/nd96isr_h100_v5.conf:
            # check_nccl_allreduce 460.0 1 16G (all_reduce bus bandwidth at 16 GiB).
            "nccl_1node": 460.0,
            # Two nodes over 8 x NDR 400 Gb/s (400 GB/s of line rate a node): 85 % of it, the
            # lowest 2-node 16 GiB figure of the published H100 runs in tests/fixtures/accept
            # being 464 GB/s with NVLS. This project's choice, not an anchor's.
            "nccl_pair": 340.0,
        },
    },
    "hca": {
        # Azure azurehpc-health-checks, check_ib_bw_gdr 380: ib_write_bw with GPUDirect,
        # 8 MiB messages, Gb/s per NDR port.
        "ndr": {"ib_write_bw": 380.0},
    },
}


@dataclass(frozen=True)
class GateSettings:
    """The gate's settings; each default is the one a key left out takes."""

    # The roles' part (slurm_compute, nvidia_gpu): a node that registers for the first
    # time, or that was rebooted onto a new NVIDIA driver, is drained with the gate's prefix
    # and waits for a run of 'metalslurm accept'.
    gate: bool = ROLE_DEFAULTS["gate"]  # the roles' default too (module_utils/cluster_defaults.py)
    level: str = "quick"
    history_days: int = 90
    fleet_fraction: float = 0.10
    min_samples: int = 3
    max_rounds: int = 4
    hca_type: str = "ndr"
    hcas: tuple[str, ...] = ()  # HCA ports to test; empty: the node's /sys/class/infiniband
    gpudirect: bool = True
    # Where the jobs find the tools before $PATH: nccl-tests builds into its build/.
    path: tuple[str, ...] = ("/opt/nccl-tests/build",)
    timeouts: Mapping[str, int] = field(default_factory=lambda: {
        "dcgm": 1800, "nccl": 600, "ib_write_bw": 120})
    thresholds: Mapping[str, Mapping[str, Mapping[str, float]]] = field(
        default_factory=lambda: DEFAULT_THRESHOLDS)

    def floor(self, test: str, hardware: str) -> float | None:
        kind = "hca" if test.startswith("ib_write_bw") else "gpu"
        value = self.thresholds.get(kind, {}).get(hardware, {}).get(
            "ib_write_bw" if kind == "hca" else test)
        return None if value is None else float(value)


# The inventory's names, and the stack's where they differ.
KEYS = ("gate", "level", "history_days", "fleet_fraction", "min_samples", "max_rounds",
        "hca_type", "hcas", "gpudirect", "path", "timeouts", "thresholds", "nccl_tests")
# Settings that are gone, and what to say to whoever still gives one.
REMOVED = {"shared_dir": (
    "is no longer a setting: the gate keeps its job scripts, results and history off shared "
    f"storage, which users can write, on the controller's and the nodes' own disks "
    f"({LOCAL_DIR}, root's alone); remove it")}
CAMEL = {"shared_dir": "sharedDir", "history_days": "historyDays",
         "fleet_fraction": "fleetFraction", "min_samples": "minSamples",
         "max_rounds": "maxRounds", "hca_type": "hcaType", "nccl_tests": "ncclTests"}
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
TIMEOUTS = ("dcgm", "nccl", "ib_write_bw")
TIMEOUTS_CAMEL = {"ib_write_bw": "ibWriteBw"}
THRESHOLD_TESTS = {"gpu": ("nccl_1node", "nccl_pair"), "hca": ("ib_write_bw",)}
WHERE = "metalslurm_accept"


class _InventoryCollector(Collector):
    """The inventory's problems, worded as the collection's inventory contract words them:
    ``metalslurm_accept.level is 'slow'; ...`` (the key, then the sentence)."""

    def problem(self, where: str, message: str) -> None:
        self.problems.append(f"{where} {message}")


@dataclass(frozen=True)
class _Section:
    """The section under check: the collector its problems go to, ``named`` the key a
    problem names for an inventory path (``timeouts.ib_write_bw``; "" the section itself),
    ``shown`` the user's spelling of an inventory path."""

    c: Collector
    named: Callable[[str], str]
    shown: Callable[[str], str]

    def problem(self, path: str, message: str) -> None:
        self.c.problem(self.named(path), message)


def _stack_name(path: str) -> str:
    """The stack's spelling of an inventory path: timeouts.ib_write_bw -> timeouts.ibWriteBw
    (threshold names are the tests' own, the same in both)."""
    parts = path.split(".")
    if parts[0] == "timeouts" and len(parts) > 1:
        parts[1] = TIMEOUTS_CAMEL.get(parts[1], parts[1])
    parts[0] = CAMEL.get(parts[0], parts[0])
    return ".".join(parts)


def _positive(s: _Section, value: Any, path: str, integer: bool = False) -> float | None:
    """``value`` if it is a number (a whole one with ``integer``) above 0, else a problem."""
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or value <= 0:
        kind = "a whole number" if integer else "a number"
        s.problem(path, f"is {value!r}; give {kind} above 0")
        return None
    return value


def settings_from_inventory(all_vars: Mapping[str, Any],
                            level: str | None = None) -> GateSettings:
    """The gate's settings from an inventory's vars; bad ones are one InputError
    (``--inventory``) naming each ``metalslurm_accept.<key>``, or ``--level``."""
    if level is not None and level not in LEVELS:
        raise InputError("--level", f"is {level!r}; give quick (dcgmi diag -r 2) or full "
                         "(-r 3)")
    c = _InventoryCollector()
    section = _Section(c, lambda path: f"{WHERE}.{path}" if path else WHERE, str)
    settings = _validate(section, all_vars.get(WHERE) or {}, level)
    if c.problems or settings is None:
        raise ConfigError(c.problems, "--inventory")
    return settings


def parse_accept(c: Collector, raw: Mapping[str, Any]) -> dict[str, Any]:
    """``metalslurm:accept`` of a stack config, checked (every problem goes to ``c``, named
    ``metalslurm:accept.<key>``); returns the inventory's ``metalslurm_accept``: the keys
    given, in the inventory's spelling, and ``gate``."""
    item = raw.get("accept")
    where = stack_key("accept")
    section = _Section(c, lambda path: f"{where}.{_stack_name(path)}" if path else where,
                       _stack_name)
    before = len(c.problems)
    converted: Any = {} if item is None else item  # not a mapping: _validate says so
    if isinstance(item, Mapping):
        converted = _inventory_spelling(c, where, item)
    _validate(section, converted, None)
    if len(c.problems) > before:
        return {"gate": GateSettings.gate}
    return {"gate": GateSettings.gate, **converted}


def _inventory_spelling(c: Collector, where: str, item: Mapping[Any, Any]) -> dict[str, Any]:
    """The stack's keys in the inventory's spelling; a key given in the inventory's spelling
    (``history_days``, ``timeouts.ib_write_bw``) is a problem, and left out."""
    back = {v: k for k, v in CAMEL.items()}
    t_back = {v: k for k, v in TIMEOUTS_CAMEL.items()}
    converted: dict[str, Any] = {}
    for name, value in ((str(n), v) for n, v in item.items()):
        if name in CAMEL and name not in REMOVED:
            c.problem(f"{where}.{name}", f"is spelled {_stack_name(name)} in a stack config")
            continue
        if name == "timeouts" and isinstance(value, Mapping):
            for snake in (str(k) for k in value if str(k) in TIMEOUTS_CAMEL):
                c.problem(f"{where}.timeouts.{snake}",
                          f"is spelled {_stack_name(f'timeouts.{snake}')} in a stack config")
            value = {t_back.get(str(k), str(k)): v for k, v in value.items()
                     if str(k) not in TIMEOUTS_CAMEL}
        converted[back.get(name, name)] = value
    return converted


def _check_keys(s: _Section, raw: Any) -> bool:
    """Whether ``raw`` is a mapping (else nothing more can be checked); each removed and
    each unknown key in it is a problem."""
    if not isinstance(raw, Mapping):
        s.problem("", f"is {type(raw).__name__}; give a mapping of "
                  f"{', '.join(s.shown(k) for k in KEYS)}")
        return False
    for key, message in REMOVED.items():
        if key in raw:
            s.problem(key, message)
    for unknown in sorted(set(raw) - set(KEYS) - set(REMOVED), key=str):
        s.problem(str(unknown), f"is not a setting; the settings are "
                  f"{', '.join(s.shown(k) for k in KEYS)}")
    return True


def _judging_values(s: _Section, raw: Mapping[str, Any], level: str | None,
                    values: dict[str, Any]) -> None:
    """gate, level and the numbers the verdicts use (history, samples, rounds, the fleet
    fraction) into ``values``."""
    if "gate" in raw:
        if isinstance(raw["gate"], bool):
            values["gate"] = raw["gate"]
        else:
            s.problem("gate", f"is {raw['gate']!r}; give true (new nodes and nodes rebooted "
                      "onto a new driver wait in the gate) or false")
    chosen = level or raw.get("level", values["level"])
    if isinstance(chosen, str) and chosen in LEVELS:
        values["level"] = chosen
    else:
        s.problem("level", f"is {chosen!r}; give quick (dcgmi diag -r 2) or full (-r 3)")
    for key in ("history_days", "min_samples", "max_rounds"):
        number = _positive(s, raw[key], key, integer=True) if key in raw else None
        if number is not None:
            values[key] = int(number)
    if values["max_rounds"] < 2:
        s.problem("max_rounds", "is 1; the pairing needs 2 rounds to name a bad node")
    fraction = (_positive(s, raw["fleet_fraction"], "fleet_fraction")
                if "fleet_fraction" in raw else None)
    if fraction is not None and fraction >= 1:
        s.problem("fleet_fraction", f"is {fraction}; give a fraction below 1 (0.1 fails a "
                  "figure 10 % under the fleet's median)")
    elif fraction is not None:
        values["fleet_fraction"] = float(fraction)


def _node_values(s: _Section, raw: Mapping[str, Any], values: dict[str, Any]) -> None:
    """What the tests run on (HCA type and names, the tools' path, GPUDirect) into
    ``values``."""
    if "hca_type" in raw:
        if isinstance(raw["hca_type"], str) and raw["hca_type"]:
            values["hca_type"] = raw["hca_type"]
        else:
            s.problem("hca_type", f"is {raw['hca_type']!r}; give the HCAs' type, as the hca "
                      "thresholds name it (ndr)")
    if "hcas" in raw:
        hcas = raw["hcas"]
        if isinstance(hcas, list) and all(isinstance(h, str) and h.isidentifier()
                                          for h in hcas):
            values["hcas"] = tuple(hcas)
        else:
            s.problem("hcas", f"is {hcas!r}; give a list of HCA names (mlx5_0, ...)")
    if "path" in raw:
        path = raw["path"]
        if isinstance(path, list) and all(isinstance(d, str) and d.startswith("/")
                                          for d in path):
            values["path"] = tuple(path)
        else:
            s.problem("path", f"is {path!r}; give a list of absolute directories")
    if "gpudirect" in raw:
        if isinstance(raw["gpudirect"], bool):
            values["gpudirect"] = raw["gpudirect"]
        else:
            s.problem("gpudirect", f"is {raw['gpudirect']!r}; give true or false")


def _timeouts(s: _Section, raw: Mapping[str, Any],
              defaults: Mapping[str, int]) -> dict[str, int]:
    """Each tool's timeout: the defaults with the good ones ``timeouts`` gives."""
    timeouts = dict(defaults)
    given = raw.get("timeouts") or {}
    tools = ", ".join(s.shown(f"timeouts.{t}").split(".")[1] for t in TIMEOUTS)
    if not isinstance(given, Mapping):
        s.problem("timeouts", f"is {given!r}; give a mapping of {tools}")
        return timeouts
    for key, value in given.items():
        if key not in TIMEOUTS:
            s.problem(f"timeouts.{key}", f"is not a tool; the tools are {tools}")
            continue
        seconds = _positive(s, value, f"timeouts.{key}", integer=True)
        if seconds is not None:
            timeouts[key] = int(seconds)
    return timeouts


def _thresholds(s: _Section, raw: Mapping[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """The floors per kind, hardware type and test: the defaults with the good ones
    ``thresholds`` gives."""
    thresholds = {kind: {hw: dict(t) for hw, t in table.items()}
                  for kind, table in DEFAULT_THRESHOLDS.items()}
    given = raw.get("thresholds") or {}
    if not isinstance(given, Mapping):
        s.problem("thresholds", "is not a mapping; give {gpu: {<type>: {nccl_1node, "
                  "nccl_pair}}, hca: {<type>: {ib_write_bw}}}")
        return thresholds
    for kind, table in given.items():
        if kind not in THRESHOLD_TESTS:
            s.problem(f"thresholds.{kind}", "is not a kind; give gpu or hca")
        elif not isinstance(table, Mapping):
            s.problem(f"thresholds.{kind}", "is not a mapping of hardware types")
        else:
            for hardware, tests in table.items():
                floors = _floors(s, kind, hardware, tests)
                if floors:
                    thresholds.setdefault(kind, {}).setdefault(str(hardware), {}).update(floors)
    return thresholds


def _floors(s: _Section, kind: str, hardware: Any, tests: Any) -> dict[str, float]:
    """The good floors of one hardware type's ``tests`` (a mapping of test to figure)."""
    if not isinstance(tests, Mapping):
        s.problem(f"thresholds.{kind}.{hardware}", "is not a mapping of tests")
        return {}
    floors = {}
    for test, value in tests.items():
        path = f"thresholds.{kind}.{hardware}.{test}"
        if test not in THRESHOLD_TESTS[kind]:
            s.problem(path, f"is not a test; the {kind} tests are "
                      f"{', '.join(THRESHOLD_TESTS[kind])}")
            continue
        floor = _positive(s, value, path)
        if floor is not None:
            floors[test] = float(floor)
    return floors


def _validate(s: _Section, raw: Any, level: str | None) -> GateSettings | None:
    """The checks both spellings share, every problem to ``s``; None when ``raw`` is not a
    mapping."""
    if not _check_keys(s, raw):
        return None
    d = GateSettings()
    values: dict[str, Any] = {f.name: getattr(d, f.name) for f in fields(GateSettings)}
    _judging_values(s, raw, level, values)
    _node_values(s, raw, values)
    values["timeouts"] = _timeouts(s, raw, d.timeouts)
    values["thresholds"] = _thresholds(s, raw)
    _check_nccl_tests(s, raw.get("nccl_tests"))
    return GateSettings(**values)


def _check_nccl_tests(s: _Section, source: Any) -> None:
    """nccl_tests: {url, sha256}, the source the nccl_tests role builds instead of its pin
    (a newer tag, a mirror's or a local copy); the role reads it, the gate does not."""
    if source is None:
        return
    if not isinstance(source, Mapping) or set(source) != {"url", "sha256"}:
        s.problem("nccl_tests", f"is {source!r}; give {{url, sha256}}: the archive's "
                  "http(s) URL or absolute path, and its sha256")
        return
    url = source["url"]
    if not isinstance(url, str) or not (re.match(r"^(https?|file)://\S+$", url)
                                        or url.startswith("/")):
        s.problem("nccl_tests.url", f"is {url!r}; give an http(s) URL or an absolute "
                  "path of the nccl-tests source archive")
    if not isinstance(source["sha256"], str) or not SHA256_RE.fullmatch(source["sha256"]):
        s.problem("nccl_tests.sha256", f"is {source['sha256']!r}; give the archive's "
                  "sha256, 64 lower-case hexadecimal digits (sha256sum prints it)")
