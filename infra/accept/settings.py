"""The acceptance gate's settings, checked before any node is touched, each problem naming
the key: the stack's ``metalslurm:accept`` (camelCase keys; :func:`parse_accept`, which
writes the inventory's ``metalslurm_accept``) and the inventory's ``metalslurm_accept``
(snake_case keys, for hand-written inventories too; :func:`settings_from_inventory`). One
validation serves both. Every key is optional; the defaults and their sources are in
infra/accept/gate.py. ``sharedDir`` (``shared_dir``) is refused with what to do: the gate keeps
nothing on shared storage any more (docs/how-to/accept.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any

from infra.accept.gate import DEFAULT_THRESHOLDS, LEVELS, LOCAL_DIR, GateSettings
from infra.inputs import InputError
from infra.schema import Collector
from infra.schema import key as stack_key

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


class _Problem(Exception):
    """A bad setting: ``key`` its inventory path (``timeouts.ib_write_bw``)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key} {message}")
        self.key, self.message = key, message


def _stack_name(path: str) -> str:
    """The stack's spelling of an inventory path: timeouts.ib_write_bw -> timeouts.ibWriteBw
    (threshold names are the tests' own, the same in both)."""
    parts = path.split(".")
    if parts[0] == "timeouts" and len(parts) > 1:
        parts[1] = TIMEOUTS_CAMEL.get(parts[1], parts[1])
    parts[0] = CAMEL.get(parts[0], parts[0])
    return ".".join(parts)


def _positive(value: Any, key: str, integer: bool = False) -> float:
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or value <= 0:
        kind = "a whole number" if integer else "a number"
        raise _Problem(key, f"is {value!r}; give {kind} above 0")
    return value


def settings_from_inventory(all_vars: Mapping[str, Any],
                            level: str | None = None) -> GateSettings:
    """The gate's settings from an inventory's vars; a bad one is an InputError naming
    ``metalslurm_accept.<key>`` (or ``--level``)."""
    if level is not None and level not in LEVELS:
        raise InputError("--level", f"is {level!r}; give quick (dcgmi diag -r 2) or full "
                         "(-r 3)")
    try:
        return _validate(all_vars.get(WHERE) or {}, level, str)
    except _Problem as p:
        raise InputError("--inventory", f"{WHERE}.{p.key} {p.message}".replace(
            f"{WHERE}. ", f"{WHERE} ")) from None


def parse_accept(c: Collector, raw: Mapping[str, Any]) -> dict[str, Any]:
    """``metalslurm:accept`` of a stack config, checked (problems go to ``c``, named
    ``metalslurm:accept.<key>``); returns the inventory's ``metalslurm_accept``: the keys
    given, in the inventory's spelling, and ``gate``."""
    item = raw.get("accept")
    where = stack_key("accept")
    converted: Any = {} if item is None else item  # not a mapping: _validate says so
    if isinstance(item, Mapping):
        converted = {}
        back = {v: k for k, v in CAMEL.items()}
        t_back = {v: k for k, v in TIMEOUTS_CAMEL.items()}
        for name, value in ((str(n), v) for n, v in item.items()):
            timeouts = value if name == "timeouts" and isinstance(value, Mapping) else {}
            snake = [f"timeouts.{k}" for k in map(str, timeouts) if k in TIMEOUTS_CAMEL]
            if (name in CAMEL and name not in REMOVED) or snake:
                wrong = name if name in CAMEL else snake[0]
                c.problem(f"{where}.{wrong}",
                          f"is spelled {_stack_name(wrong)} in a stack config")
                return {"gate": False}
            if timeouts:
                value = {t_back.get(str(k), str(k)): v for k, v in timeouts.items()}
            converted[back.get(name, name)] = value
    try:
        _validate(converted, None, _stack_name)
    except _Problem as p:
        c.problem(f"{where}.{_stack_name(p.key)}" if p.key else where, p.message)
        return {"gate": False}
    return {"gate": False, **converted}


def _check_keys(raw: Any, shown: Callable[[str], str]) -> None:
    """A mapping of known settings, none of them removed ones."""
    if not isinstance(raw, Mapping):
        raise _Problem("", f"is {type(raw).__name__}; give a mapping of "
                       f"{', '.join(shown(k) for k in KEYS)}")
    for key, message in REMOVED.items():
        if key in raw:
            raise _Problem(key, message)
    unknown = sorted(set(raw) - set(KEYS), key=str)
    if unknown:
        raise _Problem(str(unknown[0]), f"is not a setting; the settings are "
                       f"{', '.join(shown(k) for k in KEYS)}")


def _judging_values(raw: Mapping[str, Any], level: str | None,
                    values: dict[str, Any]) -> None:
    """gate, level and the numbers the verdicts use (history, samples, rounds, the fleet
    fraction) into ``values``."""
    if "gate" in raw:
        if not isinstance(raw["gate"], bool):
            raise _Problem("gate", f"is {raw['gate']!r}; give true (new nodes and nodes "
                           "rebooted onto a new driver wait in the gate) or false")
        values["gate"] = raw["gate"]
    chosen = level or raw.get("level", values["level"])
    if not isinstance(chosen, str) or chosen not in LEVELS:
        raise _Problem("level", f"is {chosen!r}; give quick (dcgmi diag -r 2) or full (-r 3)")
    values["level"] = chosen
    for key in ("history_days", "min_samples", "max_rounds"):
        if key in raw:
            values[key] = int(_positive(raw[key], key, integer=True))
    if values["max_rounds"] < 2:
        raise _Problem("max_rounds", "is 1; the pairing needs 2 rounds to name a bad node")
    if "fleet_fraction" in raw:
        fraction = _positive(raw["fleet_fraction"], "fleet_fraction")
        if fraction >= 1:
            raise _Problem("fleet_fraction", f"is {fraction}; give a fraction below 1 (0.1 "
                           "fails a figure 10 % under the fleet's median)")
        values["fleet_fraction"] = float(fraction)


def _node_values(raw: Mapping[str, Any], values: dict[str, Any]) -> None:
    """What the tests run on (HCA type and names, the tools' path, GPUDirect) into
    ``values``."""
    if "hca_type" in raw:
        if not isinstance(raw["hca_type"], str) or not raw["hca_type"]:
            raise _Problem("hca_type", f"is {raw['hca_type']!r}; give the HCAs' type, as "
                           "the hca thresholds name it (ndr)")
        values["hca_type"] = raw["hca_type"]
    if "hcas" in raw:
        hcas = raw["hcas"]
        if not isinstance(hcas, list) or not all(isinstance(h, str) and h.isidentifier()
                                                 for h in hcas):
            raise _Problem("hcas", f"is {hcas!r}; give a list of HCA names (mlx5_0, ...)")
        values["hcas"] = tuple(hcas)
    if "path" in raw:
        path = raw["path"]
        if not isinstance(path, list) or not all(isinstance(d, str) and d.startswith("/")
                                                 for d in path):
            raise _Problem("path", f"is {path!r}; give a list of absolute directories")
        values["path"] = tuple(path)
    if "gpudirect" in raw:
        if not isinstance(raw["gpudirect"], bool):
            raise _Problem("gpudirect", f"is {raw['gpudirect']!r}; give true or false")
        values["gpudirect"] = raw["gpudirect"]


def _timeouts(raw: Mapping[str, Any], defaults: Mapping[str, int],
              shown: Callable[[str], str]) -> dict[str, int]:
    """Each tool's timeout: the defaults with the ones ``timeouts`` gives."""
    timeouts = dict(defaults)
    given = raw.get("timeouts") or {}
    if not isinstance(given, Mapping):
        raise _Problem("timeouts", f"is {given!r}; give a mapping of " + ", ".join(
            shown(f"timeouts.{t}").split(".")[1] for t in TIMEOUTS))
    for key, value in given.items():
        if key not in TIMEOUTS:
            raise _Problem(f"timeouts.{key}", "is not a tool; the tools are " + ", ".join(
                shown(f"timeouts.{t}").split(".")[1] for t in TIMEOUTS))
        timeouts[key] = int(_positive(value, f"timeouts.{key}", integer=True))
    return timeouts


def _thresholds(raw: Mapping[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """The floors per kind, hardware type and test: the defaults with the ones
    ``thresholds`` gives."""
    thresholds = {kind: {hw: dict(t) for hw, t in table.items()}
                  for kind, table in DEFAULT_THRESHOLDS.items()}
    given = raw.get("thresholds") or {}
    if not isinstance(given, Mapping):
        raise _Problem("thresholds", "is not a mapping; give {gpu: {<type>: {nccl_1node, "
                       "nccl_pair}}, hca: {<type>: {ib_write_bw}}}")
    for kind, table in given.items():
        if kind not in THRESHOLD_TESTS:
            raise _Problem(f"thresholds.{kind}", "is not a kind; give gpu or hca")
        if not isinstance(table, Mapping):
            raise _Problem(f"thresholds.{kind}", "is not a mapping of hardware types")
        for hardware, tests in table.items():
            if not isinstance(tests, Mapping):
                raise _Problem(f"thresholds.{kind}.{hardware}", "is not a mapping of tests")
            for test, value in tests.items():
                key = f"thresholds.{kind}.{hardware}.{test}"
                if test not in THRESHOLD_TESTS[kind]:
                    raise _Problem(key, f"is not a test; the {kind} tests are "
                                   f"{', '.join(THRESHOLD_TESTS[kind])}")
                thresholds.setdefault(kind, {}).setdefault(str(hardware), {})[test] = float(
                    _positive(value, key))
    return thresholds


def _validate(raw: Any, level: str | None, shown: Callable[[str], str]) -> GateSettings:
    """The checks both spellings share; ``shown`` spells a key the way the user wrote it."""
    _check_keys(raw, shown)
    d = GateSettings()
    values: dict[str, Any] = {f.name: getattr(d, f.name) for f in fields(GateSettings)}
    _judging_values(raw, level, values)
    _node_values(raw, values)
    values["timeouts"] = _timeouts(raw, d.timeouts, shown)
    values["thresholds"] = _thresholds(raw)
    _check_nccl_tests(raw.get("nccl_tests"))
    return GateSettings(**values)


def _check_nccl_tests(source: Any) -> None:
    """nccl_tests: {url, sha256}, the source the nccl_tests role builds instead of its pin
    (a newer tag, a mirror's or a local copy); the role reads it, the gate does not."""
    if source is None:
        return
    if not isinstance(source, Mapping) or set(source) != {"url", "sha256"}:
        raise _Problem("nccl_tests", f"is {source!r}; give {{url, sha256}}: the archive's "
                       "http(s) URL or absolute path, and its sha256")
    url = source["url"]
    if not isinstance(url, str) or not (re.match(r"^(https?|file)://\S+$", url)
                                        or url.startswith("/")):
        raise _Problem("nccl_tests.url", f"is {url!r}; give an http(s) URL or an absolute "
                       "path of the nccl-tests source archive")
    if not isinstance(source["sha256"], str) or not SHA256_RE.fullmatch(source["sha256"]):
        raise _Problem("nccl_tests.sha256", f"is {source['sha256']!r}; give the archive's "
                       "sha256, 64 lower-case hexadecimal digits (sha256sum prints it)")
