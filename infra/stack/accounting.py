"""Stack config of slurmdbd accounting: the database, QOS (with their limits) and accounts.

``metalslurm:accounting`` is checked here as sacctmgr would take it, so a limit sacctmgr
refuses (a negative count, a TRES it cannot read, an unknown flag, a QOS preempting one
that does not exist) stops the config before any machine exists rather than at
configure time. Parsed with the core schema's collector (infra/stack/config.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.cluster_defaults import (
    ACCOUNTING_DEFAULTS as DEFAULTS,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.slurmconf import (
    SlurmConfError,
    slurm_time_seconds,
)

from infra.stack.schema import USER_NAME_RE, Collector, key

# Slurm account and QOS names: what sacctmgr accepts without quoting.
ACCOUNT_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")

_ACCOUNTING_KEYS = ("database", "accounts", "qos", "prune")
_DATABASE_KEYS = ("host", "port", "name", "user")
_ACCOUNT_KEYS = ("name", "users", "fairshare", "qos", "defaultQos", "description")
_QOS_KEYS = ("name", "priority", "limits", "description")

# sacctmgr QOS fields metalslurm passes through, by the kind of value they take
# (sacctmgr(1), "SPECIFICATIONS FOR QOS"); anything else is most likely a typo.
QOS_TRES_FIELDS = ("GrpTRES", "GrpTRESMins", "GrpTRESRunMins", "MaxTRESMinsPerJob",
                   "MaxTRESPerAccount", "MaxTRESPerJob", "MaxTRESPerNode", "MaxTRESPerUser",
                   "MinTRESPerJob")
QOS_COUNT_FIELDS = ("GraceTime", "GrpJobs", "GrpJobsAccrue", "GrpSubmitJobs",
                    "MaxJobsAccruePerUser", "MaxJobsPerAccount", "MaxJobsPerUser",
                    "MaxSubmitJobsPerAccount", "MaxSubmitJobsPerUser", "MinPrioThreshold")
QOS_TIME_FIELDS = ("GrpWall", "MaxWall", "PreemptExemptTime")
QOS_FACTOR_FIELDS = ("UsageFactor", "UsageThreshold")
QOS_FLAGS = ("DenyOnLimit", "EnforceUsageThreshold", "NoDecay", "NoReserve", "OverPartQOS",
             "PartitionMaxNodes", "PartitionMinNodes", "PartitionTimeLimit", "Relative",
             "RequiresReservation", "UsageFactorSafe")
QOS_PREEMPT_MODES = ("cluster", "off", "cancel", "requeue", "suspend", "gang", "within")
QOS_LIMIT_FIELDS = tuple(sorted(QOS_TRES_FIELDS + QOS_COUNT_FIELDS + QOS_TIME_FIELDS
                                + QOS_FACTOR_FIELDS + ("Flags", "Preempt", "PreemptMode")))
# One TRES limit: cpu=64, mem=512G, node=4, gres/gpu=43200, gres/gpu:h100=8, license/x=2.
# The names and preempt modes are the ones the slurm_accounting module takes
# (roles/slurm_accounting/module_utils/slurm_accounting_plan.py: TRES_BASE, TRES_TYPED_RE,
# PREEMPT_MODES); tests/unit/test_accounting_config.py keeps them equal.
TRES_BASE = frozenset({"cpu", "mem", "energy", "node", "billing", "fs/disk", "vmem", "pages"})
TRES_TYPED_RE = re.compile(r"^(gres|license|bb|fs|ic)/[A-Za-z0-9_.:-]+$")
_TRES_ITEM_RE = re.compile(r"(?P<name>[A-Za-z/][A-Za-z0-9_.:/-]*)"
                           r"=(?P<value>-?\d+)(?P<unit>[KMGTP]?)")


@dataclass(frozen=True)
class Qos:
    """A Slurm QOS: ``limits`` are sacctmgr QOS fields (GrpTRESMins, MaxTRESPerUser, ...)."""

    name: str
    priority: int = 0
    limits: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""


@dataclass(frozen=True)
class Account:
    """A Slurm account (a team): its users, fair-share and QOS."""

    name: str
    users: tuple[str, ...] = ()
    fairshare: int = 1
    qos: tuple[str, ...] = ()
    default_qos: str | None = None
    description: str = ""


@dataclass(frozen=True)
class AccountingSettings:
    """slurmdbd accounting: a database (MariaDB on the controller unless ``database_host``
    names an external one), accounts, users and QOS."""

    database_host: str | None = None  # the inventory's "" (module_utils/cluster_defaults.py)
    database_port: int = DEFAULTS["database_port"]
    database_name: str = DEFAULTS["database_name"]
    database_user: str = DEFAULTS["database_user"]
    accounts: tuple[Account, ...] = ()
    qos: tuple[Qos, ...] = ()
    prune: bool = DEFAULTS["prune"]


def _check_tres_limit(c: Collector, where: str, value: str) -> None:
    for part in value.split(","):
        m = _TRES_ITEM_RE.fullmatch(part)
        name = m["name"].lower() if m else ""
        if m is None:
            c.problem(where, f"{part!r} is not a TRES limit such as gres/gpu=43200, cpu=64 or "
                      "mem=512G")
        elif name not in TRES_BASE and not TRES_TYPED_RE.match(name):
            c.problem(where, f"{m['name']!r} is not a TRES name (cpu, mem, node, billing, "
                      "gres/gpu, gres/gpu:h100, license/NAME, ...)")
        elif int(m["value"]) < 0:
            c.problem(where, f"{part!r} is negative: give a whole number of 0 or more (leave "
                      "the field out for no limit)")
        elif m["unit"] and name != "mem":
            c.problem(where, f"{part!r}: only mem takes a unit (K, M, G, T, P)")


def _check_qos_limit(c: Collector, where: str, name: str, value: Any,
                     known_qos: set[str]) -> None:
    """One QOS limit field: its value must be what sacctmgr takes for that field."""
    text = str(value)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or not text or any(
            ch.isspace() for ch in text):
        c.problem(where, f"{value!r} must be a number or a string without spaces, e.g. "
                  "gres/gpu=43200")
    elif name in QOS_TRES_FIELDS:
        _check_tres_limit(c, where, text)
    elif name in QOS_COUNT_FIELDS and not (isinstance(value, int) and value >= 0):
        c.problem(where, f"{value!r} must be a whole number of 0 or more (leave the field out "
                  "for no limit)")
    elif name in QOS_TIME_FIELDS:
        try:
            slurm_time_seconds(text)
        except SlurmConfError as exc:
            c.problem(where, str(exc))
    elif name in QOS_FACTOR_FIELDS and not (
            isinstance(value, (int, float)) and value >= 0):
        c.problem(where, f"{value!r} must be a number of 0 or more")
    elif name == "Flags":
        for flag in text.split(","):
            if flag not in QOS_FLAGS:
                c.problem(where, f"{flag!r} is not a QOS flag: {', '.join(QOS_FLAGS)}")
    elif name == "Preempt":
        for q in text.split(","):
            if q not in known_qos:
                c.problem(where, f"{q!r} is not a QOS in {key('accounting')}.qos (or normal)")
    elif name == "PreemptMode" and text.lower() not in QOS_PREEMPT_MODES:
        c.problem(where, f"{text!r} is not one of {', '.join(QOS_PREEMPT_MODES)}")


def _parse_qos(c: Collector, value: Any, where: str) -> list[Qos]:
    if value in (None, []):
        return []
    items = c.mappings(value, where, _QOS_KEYS, "QOS, each with a name")
    known = {str(item.get("name")) for _qkey, item in items} | {"normal"}
    found = []
    for qkey, item in items:
        name = c.string(item, "name", f"{qkey}.name", pattern=ACCOUNT_NAME_RE,
                        what="lower-case letters, digits, '_', '.' and '-'")
        priority = c.integer(item, "priority", f"{qkey}.priority", default=0, minimum=0,
                             maximum=2**31 - 1)
        limits = c.mapping(item, "limits", f"{qkey}.limits")
        for field_name, limit in limits.items():
            if field_name not in QOS_LIMIT_FIELDS:
                c.problem(f"{qkey}.limits.{field_name}", "not a QOS field metalslurm knows; "
                          f"use one of: {', '.join(QOS_LIMIT_FIELDS)}")
            else:
                _check_qos_limit(c, f"{qkey}.limits.{field_name}", field_name, limit, known)
        description = c.string(item, "description", f"{qkey}.description", default="")
        if name is not None and priority is not None:
            found.append(Qos(name, priority, dict(limits), description or ""))
    c.duplicates(where, [q.name for q in found], "QOS name")
    return found


def _parse_account(c: Collector, akey: str, acc: Mapping[str, Any],
                   known_qos: set[str]) -> Account | None:
    where = key("accounting")
    name = c.string(acc, "name", f"{akey}.name", pattern=ACCOUNT_NAME_RE,
                    what="lower-case letters, digits, '_', '.' and '-'")
    if name == "root":
        c.problem(f"{akey}.name", "'root' is Slurm's own top account; choose another name")
    users = c.string_list(acc, "users", f"{akey}.users", USER_NAME_RE, "user name")
    fairshare = c.integer(acc, "fairshare", f"{akey}.fairshare", default=1, minimum=1,
                          maximum=2**31 - 1)
    acc_qos = c.string_list(acc, "qos", f"{akey}.qos", ACCOUNT_NAME_RE, "QOS name")
    for q in acc_qos:
        if q not in known_qos:
            c.problem(f"{akey}.qos", f"{q!r} is not defined in {where}.qos (defined: "
                      f"{', '.join(sorted(known_qos))})")
    default_qos = acc.get("defaultQos")
    if default_qos is not None and default_qos not in (acc_qos or ("normal",)):
        c.problem(f"{akey}.defaultQos", f"{default_qos!r} must be one of the account's qos: "
                  f"{', '.join(acc_qos or ('normal',))}")
    description = c.string(acc, "description", f"{akey}.description", default="")
    if name is None or fairshare is None:
        return None
    return Account(name, users, fairshare, acc_qos, default_qos, description or "")


def parse_accounting(c: Collector, raw: Mapping[str, Any]) -> AccountingSettings:
    where = key("accounting")
    item = c.mapping(raw, "accounting", where)
    c.unknown_keys(item, _ACCOUNTING_KEYS, where)
    db = c.mapping(item, "database", f"{where}.database")
    c.unknown_keys(db, _DATABASE_KEYS, f"{where}.database")
    db_host = c.string(db, "host", f"{where}.database.host", default="",
                       pattern=re.compile(r"^[A-Za-z0-9.-]*$"), what="a host name or address")
    d = AccountingSettings()
    db_port = c.integer(db, "port", f"{where}.database.port", default=d.database_port,
                        minimum=1, maximum=65535)
    db_name = c.string(db, "name", f"{where}.database.name", default=d.database_name,
                       pattern=re.compile(r"^[A-Za-z0-9_]{1,64}$"),
                       what="letters, digits and '_'")
    db_user = c.string(db, "user", f"{where}.database.user", default=d.database_user,
                       pattern=re.compile(r"^[A-Za-z0-9_]{1,32}$"),
                       what="letters, digits and '_'")
    qos = _parse_qos(c, item.get("qos"), f"{where}.qos")
    known_qos = {q.name for q in qos} | {"normal"}
    accounts: list[Account] = []
    if item.get("accounts") not in (None, []):
        accounts = [a for akey, acc in c.mappings(item["accounts"], f"{where}.accounts",
                                                  _ACCOUNT_KEYS, "accounts, each with a name")
                    if (a := _parse_account(c, akey, acc, known_qos)) is not None]
        c.duplicates(f"{where}.accounts", [a.name for a in accounts], "account name")
    prune = c.boolean(item, "prune", f"{where}.prune", d.prune)
    return AccountingSettings(database_host=db_host or None,
                              database_port=db_port or d.database_port,
                              database_name=db_name or d.database_name,
                              database_user=db_user or d.database_user, accounts=tuple(accounts),
                              qos=tuple(qos), prune=prune)
