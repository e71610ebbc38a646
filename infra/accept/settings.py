"""The acceptance gate's settings: the inventory's ``metalslurm_accept`` (every key optional;
the defaults and their sources are in infra/accept/gate.py), checked before any node is
touched, each problem naming the key."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from infra.accept.gate import DEFAULT_THRESHOLDS, LEVELS, GateSettings
from infra.inputs import InputError

KEYS = {"level", "shared_dir", "history_days", "fleet_fraction", "min_samples", "max_rounds",
        "hca_type", "hcas", "gpudirect", "path", "timeouts", "thresholds"}
TIMEOUTS = ("dcgm", "nccl", "ib_write_bw")
THRESHOLD_TESTS = {"gpu": ("nccl_1node", "nccl_pair"), "hca": ("ib_write_bw",)}
WHERE = "metalslurm_accept"


def _problem(key: str, message: str) -> InputError:
    return InputError("--inventory", f"{WHERE}.{key} {message}")


def _positive(value: Any, key: str, integer: bool = False) -> float:
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or value <= 0:
        kind = "a whole number" if integer else "a number"
        raise _problem(key, f"is {value!r}; give {kind} above 0")
    return value


def settings_from_inventory(all_vars: Mapping[str, Any], shared_paths: list[str],
                            level: str | None = None) -> GateSettings:
    raw = all_vars.get(WHERE) or {}
    if not isinstance(raw, Mapping):
        raise _problem("", f"is {type(raw).__name__}; give a mapping of {', '.join(sorted(KEYS))}")
    unknown = sorted(set(raw) - KEYS)
    if unknown:
        raise _problem(unknown[0], f"is not a setting; the settings are {', '.join(sorted(KEYS))}")
    d = GateSettings()
    values: dict[str, Any] = {f.name: getattr(d, f.name) for f in fields(GateSettings)}
    chosen = level or raw.get("level", d.level)
    if chosen not in LEVELS:
        if level:
            raise InputError("--level", f"is {level!r}; give quick (dcgmi diag -r 2) or full "
                             "(-r 3)")
        raise _problem("level", f"is {chosen!r}; give quick (dcgmi diag -r 2) or full (-r 3)")
    values["level"] = chosen
    shared_dir = str(raw.get("shared_dir", d.shared_dir))
    if not any(shared_dir == p or shared_dir.startswith(p.rstrip("/") + "/")
               for p in shared_paths):
        raise _problem("shared_dir", f"is {shared_dir}, not on shared storage ("
                       f"{', '.join(shared_paths) or 'none'}): the history and the jobs' "
                       "outputs must be seen by every node; give a path under one of them")
    values["shared_dir"] = shared_dir
    for key in ("history_days", "min_samples", "max_rounds"):
        if key in raw:
            values[key] = int(_positive(raw[key], key, integer=True))
    if values["max_rounds"] < 2:
        raise _problem("max_rounds", "is 1; the pairing needs 2 rounds to name a bad node")
    if "fleet_fraction" in raw:
        fraction = _positive(raw["fleet_fraction"], "fleet_fraction")
        if fraction >= 1:
            raise _problem("fleet_fraction", f"is {fraction}; give a fraction below 1 (0.1 "
                           "fails a figure 10 % under the fleet's median)")
        values["fleet_fraction"] = float(fraction)
    if "hca_type" in raw:
        values["hca_type"] = str(raw["hca_type"])
    if "hcas" in raw:
        hcas = raw["hcas"]
        if not isinstance(hcas, list) or not all(isinstance(h, str) and h.isidentifier()
                                                 for h in hcas):
            raise _problem("hcas", f"is {hcas!r}; give a list of HCA names (mlx5_0, ...)")
        values["hcas"] = tuple(hcas)
    if "path" in raw:
        path = raw["path"]
        if not isinstance(path, list) or not all(isinstance(d, str) and d.startswith("/")
                                                 for d in path):
            raise _problem("path", f"is {path!r}; give a list of absolute directories")
        values["path"] = tuple(path)
    if "gpudirect" in raw:
        if not isinstance(raw["gpudirect"], bool):
            raise _problem("gpudirect", f"is {raw['gpudirect']!r}; give true or false")
        values["gpudirect"] = raw["gpudirect"]
    timeouts = dict(d.timeouts)
    given = raw.get("timeouts") or {}
    if not isinstance(given, Mapping):
        raise _problem("timeouts", f"is {given!r}; give a mapping of {', '.join(TIMEOUTS)}")
    for key, value in given.items():
        if key not in TIMEOUTS:
            raise _problem(f"timeouts.{key}", f"is not a tool; the tools are "
                           f"{', '.join(TIMEOUTS)}")
        timeouts[key] = int(_positive(value, f"timeouts.{key}", integer=True))
    values["timeouts"] = timeouts
    thresholds = {kind: {hw: dict(t) for hw, t in table.items()}
                  for kind, table in DEFAULT_THRESHOLDS.items()}
    given = raw.get("thresholds") or {}
    if not isinstance(given, Mapping):
        raise _problem("thresholds", "is not a mapping; give {gpu: {<type>: {nccl_1node, "
                       "nccl_pair}}, hca: {<type>: {ib_write_bw}}}")
    for kind, table in given.items():
        if kind not in THRESHOLD_TESTS:
            raise _problem(f"thresholds.{kind}", "is not a kind; give gpu or hca")
        if not isinstance(table, Mapping):
            raise _problem(f"thresholds.{kind}", "is not a mapping of hardware types")
        for hardware, tests in table.items():
            if not isinstance(tests, Mapping):
                raise _problem(f"thresholds.{kind}.{hardware}", "is not a mapping of tests")
            for test, value in tests.items():
                key = f"thresholds.{kind}.{hardware}.{test}"
                if test not in THRESHOLD_TESTS[kind]:
                    raise _problem(key, f"is not a test; the {kind} tests are "
                                   f"{', '.join(THRESHOLD_TESTS[kind])}")
                thresholds.setdefault(kind, {}).setdefault(str(hardware), {})[test] = float(
                    _positive(value, key))
    values["thresholds"] = thresholds
    return GateSettings(**values)
