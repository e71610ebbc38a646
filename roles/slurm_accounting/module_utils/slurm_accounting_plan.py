"""Planning for the slurm_accounting module: sacctmgr output in, sacctmgr commands out.

Everything here is pure. It parses what ``sacctmgr --noheader --parsable2 show`` and ``squeue``
print, validates the module's arguments, and turns the desired state and the current state into
an ordered plan of sacctmgr writes, including the prune rules and the refusal to remove what
active jobs still use. The module (``roles/slurm_accounting/library/slurm_accounting.py``) runs
the commands; Ansible ships this file with it from the role's ``module_utils`` directory.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

MANAGED_ORG = "metalslurm"
QOS_MARK = "metalslurm"
PROTECTED_ACCOUNTS = frozenset({"root"})
PROTECTED_USERS = frozenset({"root"})
PROTECTED_QOS = frozenset({"normal"})
NAME_RE = re.compile(r"^[a-z0-9_][a-z0-9_.-]{0,63}$")
# sacctmgr exits 1 with these when a write turns out to be a no-op (e.g. a race with an operator).
NOOP_MARKERS = ("Nothing new added", "Nothing modified", "Nothing deleted")
# squeue lists jobs in these states only briefly; every other state it shows counts as active.
FINISHED_JOB_STATES = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
                                 "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"})
# The squeue options whose output blocked_removals reads: id|user|account|qos|state.
SQUEUE_ARGS = ["--noheader", "--all", "--format=%i|%u|%a|%q|%T"]
PREEMPT_MODES = ("cluster", "off", "cancel", "requeue", "suspend", "gang", "within")

# QOS fields the module manages: sacctmgr name (used both in `set` and in `format=`; sacctmgr's
# format parser accepts these long names) -> kind. The kind decides parsing and the default.
QOS_FIELDS: dict[str, str] = {
    "Priority": "int0",
    "Flags": "flags",
    "GraceTime": "seconds",
    "GrpJobs": "int",
    "GrpJobsAccrue": "int",
    "GrpSubmitJobs": "int",
    "GrpTRES": "tres",
    "GrpTRESMins": "tres",
    "GrpTRESRunMins": "tres",
    "GrpWall": "minutes",
    "MaxJobsAccruePerUser": "int",
    "MaxJobsPerAccount": "int",
    "MaxJobsPerUser": "int",
    "MaxSubmitJobsPerAccount": "int",
    "MaxSubmitJobsPerUser": "int",
    "MaxTRESMinsPerJob": "tres",
    "MaxTRESPerAccount": "tres",
    "MaxTRESPerJob": "tres",
    "MaxTRESPerNode": "tres",
    "MaxTRESPerUser": "tres",
    "MaxWall": "minutes",
    "MinPrioThreshold": "int",
    "MinTRESPerJob": "tres",
    "Preempt": "names",
    "PreemptExemptTime": "minutes",
    "PreemptMode": "mode",
    "UsageFactor": "factor",
    "UsageThreshold": "float",
}
_FIELD_BY_LOWER = {name.lower(): name for name in QOS_FIELDS}
QOS_FORMAT = ["Name", "Description", *QOS_FIELDS]
ASSOC_FORMAT = ["Cluster", "Account", "User", "Partition", "Share", "QOS", "DefaultQOS",
                "ParentName"]
QOS_KEYS = frozenset({"name", "description", "priority", "limits", "flags", "preempt",
                      "preempt_mode"})
ACCOUNT_KEYS = frozenset({"name", "description", "fairshare", "qos", "default_qos", "parent",
                          "users", "organization"})
TRES_BASE = frozenset({"cpu", "mem", "energy", "node", "billing", "fs/disk", "vmem", "pages"})
TRES_TYPED_RE = re.compile(r"^(gres|license|bb|fs|ic)/[A-Za-z0-9_.:-]+$")
_MEM_UNITS = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 ** 2, "P": 1024 ** 3}
_DHMS_RE = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
INFINITE_WORDS = frozenset({"-1", "infinite", "unlimited", "none", ""})


class InputError(ValueError):
    """A problem with the module's arguments or the database state, in a sentence."""


# ---------------------------------------------------------------- value normalisation

def parse_slurm_duration(value: str, plain_unit: int = 60) -> int | None:
    """Seconds from a Slurm time string: 'M', 'M:S', 'H:M:S', 'D-H', 'D-H:M', 'D-H:M:S'.

    A plain number counts ``plain_unit`` seconds (minutes for MaxWall, seconds for GraceTime).
    'UNLIMITED'/'-1'/'' mean no limit (None)."""
    text = str(value).strip()
    if text.lower() in INFINITE_WORDS:
        return None
    m = _DHMS_RE.match(text)
    if not m:
        raise InputError(f"{value!r} is not a Slurm time (minutes, [days-]hours:minutes:seconds)")
    days, first, second, third = m.groups()
    if days is not None:  # D-H, D-H:M, D-H:M:S
        return (int(days) * 86400 + int(first) * 3600 + int(second or 0) * 60
                + int(third or 0))
    if third is not None:  # H:M:S
        return int(first) * 3600 + int(second) * 60 + int(third)
    if second is not None:  # M:S
        return int(first) * 60 + int(second)
    return int(first) * plain_unit


def format_duration(seconds: int) -> str:
    """Slurm's own print form: [days-]HH:MM:SS."""
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{text}" if days else text


def _tres_value(name: str, value: str) -> int | None:
    """One TRES count; memory in MB from a size with a unit ('512G'); None for no limit."""
    text = value.strip()
    if text.lower() in INFINITE_WORDS:
        return None
    if name == "mem":
        m = re.match(r"^(\d+(?:\.\d+)?)([KMGTP]?)B?$", text.upper())
        if not m:
            raise InputError(f"mem={value!r} is not a memory size such as 64G")
        return round(float(m.group(1)) * _MEM_UNITS[m.group(2)])
    if not text.isdigit():
        raise InputError(f"{name}={value!r}: a TRES limit is a whole number")
    return int(text)


def parse_tres(value: Any) -> dict[str, int | None]:
    """'gres/gpu=43200,cpu=16' -> {'cpu': 16, 'gres/gpu': 43200}; ``name=-1`` -> None (remove)."""
    text = "" if value is None else str(value).strip()
    result: dict[str, int | None] = {}
    if text.lower() in INFINITE_WORDS:
        return result
    for item in text.split(","):
        name, sep, val = item.strip().partition("=")
        name = name.strip().lower()
        if not sep or not name:
            raise InputError(f"{item!r} is not NAME=COUNT (e.g. gres/gpu=8)")
        if name not in TRES_BASE and not TRES_TYPED_RE.match(name):
            raise InputError(f"{name!r} is not a TRES name (cpu, mem, node, billing, "
                             "gres/gpu, gres/gpu:h100, license/NAME, ...)")
        result[name] = _tres_value(name, val)
    return result


def format_tres(tres: dict[str, int | None]) -> str:
    """'cpu=16,gres/gpu=8': set limits sorted by name, unset (None) ones left out."""
    return ",".join(f"{k}={v}" for k, v in sorted(tres.items()) if v is not None)


def normalise(kind: str, value: Any) -> Any:
    """A comparable form of one QOS field, from an argument or from sacctmgr output."""
    text = "" if value is None else str(value).strip()
    if kind == "int0":
        return 0 if text.lower() in INFINITE_WORDS else int(text)
    if kind == "int":
        return None if text.lower() in INFINITE_WORDS else int(text)
    if kind == "tres":
        return tuple(sorted((k, v) for k, v in parse_tres(text).items() if v is not None))
    if kind == "minutes":
        return parse_slurm_duration(text, 60)
    if kind == "seconds":
        return parse_slurm_duration(text, 1) or 0
    if kind == "factor":
        return 1.0 if text.lower() in INFINITE_WORDS else round(float(text), 6)
    if kind == "float":
        return None if text.lower() in INFINITE_WORDS else round(float(text), 6)
    if kind in ("flags", "names"):
        if text.lower() in INFINITE_WORDS:
            return frozenset()
        return frozenset(s.strip().lower() for s in text.split(",") if s.strip())
    if kind == "mode":
        return "cluster" if not text else text.lower()
    raise AssertionError(kind)


DEFAULTS: dict[str, Any] = {name: normalise(kind, None) for name, kind in QOS_FIELDS.items()}


def render(kind: str, value: Any) -> str:
    """The value to write after ``Field=`` in sacctmgr (also the display form in the diff)."""
    if kind in ("int0", "int"):
        return "-1" if value is None else str(value)
    if kind == "tres":
        return format_tres(dict(value))
    if kind == "minutes":
        return "-1" if value is None else format_duration(value)
    if kind == "seconds":
        return str(value)
    if kind in ("factor", "float"):
        return "-1" if value is None else f"{value:g}"
    if kind == "flags":
        return ",".join(sorted(value)) if value else "-1"
    if kind == "names":
        return ",".join(sorted(value)) if value else "''"
    if kind == "mode":
        return str(value)
    raise AssertionError(kind)


def render_change(name: str, old: Any, new: Any) -> str:
    """``Field=value`` for a modify; for TRES, limits that go away are written as ``name=-1``."""
    kind = QOS_FIELDS[name]
    if kind == "tres":
        wanted = dict(new)
        for key, _ in old:
            wanted.setdefault(key, -1)
        return f"{name}={format_tres(wanted)}"
    return f"{name}={render(kind, new)}"


def qos_description(description: str) -> str:
    """The description the module writes: 'metalslurm: <description>', the mark of a managed QOS."""
    description = description.strip()
    return f"{QOS_MARK}: {description}" if description else QOS_MARK


def is_managed_qos(description: str) -> bool:
    """Whether a QOS description carries the mark qos_description writes."""
    d = description.strip().lower()
    return d == QOS_MARK or d.startswith(QOS_MARK + ":")


# ---------------------------------------------------------------- desired state

@dataclass
class DesiredQos:
    """One QOS from the arguments: the marked description and every managed field, normalised."""
    name: str
    description: str
    values: dict[str, Any]


@dataclass
class DesiredAccount:
    """One account from the arguments; ``qos``/``default_qos`` None means 'not managed'."""
    name: str
    description: str
    fairshare: str
    qos: frozenset[str] | None
    default_qos: str | None
    parent: str
    users: list[str]


@dataclass
class Desired:
    """The whole desired state, validated and normalised."""
    qos: dict[str, DesiredQos] = field(default_factory=dict)
    accounts: dict[str, DesiredAccount] = field(default_factory=dict)
    users: dict[str, list[str]] = field(default_factory=dict)  # user -> accounts, default first


def _name(value: Any, what: str) -> str:
    """A Slurm object name as given, refused unless it is lower-case and simple."""
    text = str(value or "").strip()
    if not NAME_RE.match(text):
        raise InputError(f"{what} {value!r}: use lower-case letters, digits, '_', '.' and '-' "
                         "(Slurm stores these names lower-case)")
    return text


def _plain_text(value: Any, what: str) -> str:
    """A description, refused when sacctmgr's parsable output or argument parsing would break."""
    text = "" if value is None else str(value).strip()
    if any(ch in text for ch in "|\n'\""):
        raise InputError(f"{what}: {text!r} must not contain '|', quotes or a line break")
    return text


def _unknown_keys(item: dict[str, Any], known: frozenset[str], what: str) -> None:
    """Refuse keys the module does not know (a typo would otherwise be silently ignored)."""
    unknown = set(item) - known
    if unknown:
        raise InputError(f"{what}: unknown key(s) {', '.join(sorted(unknown))}")


def parse_desired(qos_args: list[dict[str, Any]], account_args: list[dict[str, Any]]
                  ) -> Desired:
    """Validate the module's ``qos`` and ``accounts`` arguments into a Desired state."""
    desired = Desired()
    for item in qos_args:
        name = _name(item.get("name"), "QOS name")
        if name in desired.qos:
            raise InputError(f"QOS {name!r} is listed twice")
        desired.qos[name] = parse_qos(name, item)
    for item in account_args:
        name = _name(item.get("name"), "account name")
        if name in PROTECTED_ACCOUNTS:
            raise InputError("'root' is Slurm's own top account; it is not configured here")
        if name in desired.accounts:
            raise InputError(f"account {name!r} is listed twice")
        desired.accounts[name] = parse_account(name, item)
        for user in desired.accounts[name].users:
            desired.users.setdefault(user, []).append(name)
    return desired


def _qos_settings(name: str, item: dict[str, Any]) -> dict[str, Any]:
    """The QOS fields an argument sets, as given, keyed by their sacctmgr names."""
    raw: dict[str, Any] = {"Priority": item.get("priority") or 0}
    for key, top in (("flags", "Flags"), ("preempt", "Preempt"),
                     ("preempt_mode", "PreemptMode")):
        if item.get(key) is not None:
            value = item[key]
            raw[top] = ",".join(value) if isinstance(value, list) else value
    for key, value in (item.get("limits") or {}).items():
        canonical = _FIELD_BY_LOWER.get(str(key).lower())
        if canonical is None or canonical == "Priority":
            known = ", ".join(f for f in QOS_FIELDS if f != "Priority")
            raise InputError(f"QOS {name}: {key!r} is not a QOS limit this module manages; "
                             f"use one of: {known}")
        if canonical in raw and canonical != "Priority":
            raise InputError(f"QOS {name}: {canonical} is given twice")
        raw[canonical] = ",".join(value) if isinstance(value, list) else value
    return raw


def parse_qos(name: str, item: dict[str, Any]) -> DesiredQos:
    """One ``qos`` argument: every managed field normalised, unset ones at Slurm's default."""
    _unknown_keys(item, QOS_KEYS, f"QOS {name}")
    values = dict(DEFAULTS)
    for key, value in _qos_settings(name, item).items():
        try:
            values[key] = normalise(QOS_FIELDS[key], value)
        except (InputError, ValueError) as exc:
            raise InputError(f"QOS {name}: {key}={value!r}: {exc}") from None
    if values["PreemptMode"] not in PREEMPT_MODES:
        raise InputError(f"QOS {name}: PreemptMode {values['PreemptMode']!r} is not one of "
                         "cluster, off, cancel, requeue, suspend")
    desc = qos_description(_plain_text(item.get("description"), f"QOS {name} description"))
    return DesiredQos(name, desc, values)


def _account_qos(name: str, item: dict[str, Any]) -> tuple[frozenset[str] | None, str | None]:
    """An account's QOS list and default QOS (None where not given, so not managed)."""
    qos = frozenset(_name(q, f"account {name} QOS") for q in item.get("qos") or []) or None
    default_qos = item.get("default_qos")
    if default_qos is not None:
        default_qos = _name(default_qos, f"account {name} default QOS")
        # Without a qos list the account inherits its parent's; sacctmgr checks that one.
        if qos is not None and default_qos not in qos:
            raise InputError(f"account {name}: default_qos {default_qos!r} is not in its qos "
                             f"list ({', '.join(sorted(qos))})")
    return qos, default_qos


def parse_account(name: str, item: dict[str, Any]) -> DesiredAccount:
    """One ``accounts`` argument, with its description lower-cased as slurmdbd stores it."""
    _unknown_keys(item, ACCOUNT_KEYS, f"account {name}")
    fairshare = str(item.get("fairshare", 1) if item.get("fairshare") is not None else 1)
    if fairshare.lower() != "parent" and not fairshare.isdigit():
        raise InputError(f"account {name}: fairshare {fairshare!r} must be a whole number "
                         "or 'parent'")
    qos, default_qos = _account_qos(name, item)
    users = [_name(u, f"account {name} user") for u in item.get("users") or []]
    if len(set(users)) != len(users):
        raise InputError(f"account {name}: a user is listed twice")
    description = _plain_text(item.get("description"), f"account {name} description")
    return DesiredAccount(
        name=name, description=(description or name).lower(),
        fairshare=fairshare.lower(), qos=qos, default_qos=default_qos,
        parent=_name(item.get("parent") or "root", f"account {name} parent"), users=users)


# ---------------------------------------------------------------- current state

@dataclass
class Assoc:
    """One row of ``sacctmgr show assoc format=<ASSOC_FORMAT>`` (QOS lower-cased)."""
    cluster: str
    account: str
    user: str
    partition: str
    share: str
    qos: frozenset[str]
    default_qos: str
    parent: str


@dataclass
class Current:
    """What slurmdbd holds now, as sacctmgr prints it."""
    clusters: set[str]
    qos: dict[str, dict[str, str]]  # name -> raw printed fields
    accounts: dict[str, dict[str, str]]  # name -> {description, organization}
    assocs: list[Assoc]
    default_accounts: dict[str, str]  # user -> default account

    def account_assoc(self, cluster: str, account: str) -> Assoc | None:
        """The account's own association on the cluster (not a user's, not a partition's)."""
        for a in self.assocs:
            if a.cluster == cluster and a.account == account and not a.user and not a.partition:
                return a
        return None

    def user_accounts(self, cluster: str, user: str) -> list[str]:
        """The accounts a user has an association with on the cluster, sorted."""
        return sorted({a.account for a in self.assocs
                       if a.cluster == cluster and a.user == user and not a.partition})

    def users_on(self, cluster: str) -> set[str]:
        """Every user with an association on the cluster."""
        return {a.user for a in self.assocs if a.cluster == cluster and a.user}

    def on_other_clusters(self, cluster: str, account: str | None = None,
                          user: str | None = None) -> bool:
        """Whether the account/user also has associations on another cluster."""
        return any(a.cluster != cluster and (account is None or a.account == account)
                   and (user is None or a.user == user) for a in self.assocs)


def parse_rows(text: str, width: int) -> list[list[str]]:
    """``--parsable2`` lines split on '|', padded or cut to ``width`` fields, blank ones skipped."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) < width:
            parts += [""] * (width - len(parts))
        rows.append(parts[:width])
    return rows


def parse_assocs(text: str) -> list[Assoc]:
    """Associations from ``sacctmgr show assoc format=<ASSOC_FORMAT>``."""
    return [Assoc(r[0], r[1], r[2], r[3], r[4].lower(),
                  frozenset(q for q in r[5].lower().split(",") if q), r[6].lower(), r[7])
            for r in parse_rows(text, len(ASSOC_FORMAT))]


def read_current(show: Callable[[list[str]], str]) -> Current:
    """The current state, from ``show(what)``: the output of ``sacctmgr ... show *what``."""
    clusters = {r[0].lower() for r in parse_rows(show(["cluster", "format=Cluster"]), 1)}
    qos = {r[0]: dict(zip(QOS_FORMAT, r, strict=True))
           for r in parse_rows(show(["qos", "format=" + ",".join(QOS_FORMAT)]), len(QOS_FORMAT))}
    accounts = {r[0]: {"description": r[1], "organization": r[2]} for r in parse_rows(
        show(["account", "format=Account,Description,Organization"]), 3)}
    assocs = parse_assocs(show(["assoc", "format=" + ",".join(ASSOC_FORMAT)]))
    users = {r[0]: r[1] for r in parse_rows(show(["user", "format=User,DefaultAccount"]), 2)}
    return Current(clusters, qos, accounts, assocs, users)


def current_qos_values(raw: dict[str, str]) -> dict[str, Any]:
    """The managed fields of a printed QOS row, normalised like DesiredQos.values."""
    values = {}
    for name, kind in QOS_FIELDS.items():
        try:
            values[name] = normalise(kind, raw.get(name, ""))
        except (InputError, ValueError):
            values[name] = raw.get(name, "")  # unparseable: never equal, so it gets rewritten
    return values


def display_qos(description: str, values: dict[str, Any]) -> dict[str, str]:
    """A QOS for the diff: its description and the fields not at Slurm's default."""
    shown = {"Description": description}
    for name, value in values.items():
        if value != DEFAULTS[name]:
            shown[name] = render(QOS_FIELDS[name], value)
    return shown


# ---------------------------------------------------------------- the plan

@dataclass
class Action:
    """One sacctmgr write (its arguments after ``--immediate``) and what it changes."""
    action: str
    object: str
    name: str
    args: list[str]
    changes: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """The module's ``actions`` entry for this write."""
        return {"action": self.action, "object": self.object, "name": self.name,
                "changes": self.changes}


@dataclass
class Removal:
    """A deletion in the plan, with what an active job must match to block it."""
    what: str  # e.g. "account team-c", "user alice in account team-a"
    account: str | None = None
    user: str | None = None
    qos: str | None = None


@dataclass
class Plan:
    """The ordered writes, the deletions among them, and what the module reports."""
    actions: list[Action] = field(default_factory=list)
    removals: list[Removal] = field(default_factory=list)
    unmanaged: dict[str, list[str]] = field(default_factory=dict)
    before: dict[str, Any] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)

    def add(self, action: str, obj: str, name: str, args: Iterable[str], **changes: Any) -> None:
        """Append one sacctmgr write."""
        self.actions.append(Action(action, obj, name, list(args), changes))

    def commands(self, sacctmgr: str) -> list[str]:
        """The writes as shell lines, the form the module reports."""
        return [shlex.join([sacctmgr, "--immediate", *a.args]) for a in self.actions]


@dataclass
class Settings:
    """The ``set`` part of one sacctmgr modify, with before/after for each field changed."""
    sets: list[str] = field(default_factory=list)
    changes: dict[str, Any] = field(default_factory=dict)

    def change(self, name: str, setting: str, before: Any, after: Any) -> None:
        """Add ``setting`` (``Field=value``) and record the change of ``name``."""
        self.sets.append(setting)
        self.changes[name] = {"before": before, "after": after}


@dataclass
class Scope:
    """Which existing objects the module manages, and which of them prune deletes."""
    managed_qos: set[str]
    managed_accounts: set[str]  # marked in slurmdbd, or named in the arguments
    prune_qos: list[str]
    prune_accounts: list[str]


def is_noop_write(output: str) -> bool:
    """Whether a failed sacctmgr write only said there was nothing to do."""
    return any(marker in output for marker in NOOP_MARKERS)


def build_plan(desired: Desired, current: Current, cluster: str, prune: bool) -> Plan:
    """The ordered sacctmgr writes that take ``current`` to ``desired`` on ``cluster``.

    Order: cluster, QOS, accounts (parents first), user associations, then with ``prune`` the
    deletions (users' associations, accounts children first, QOS). Raises InputError, with
    nothing planned to run, for a reference to a QOS or parent that will not exist, a parent
    cycle, or a deletion slurmdbd would refuse."""
    plan = Plan()
    if cluster not in current.clusters:
        plan.add("add", "cluster", cluster, ["add", "cluster", cluster])
    scope = find_scope(desired, current, cluster, prune)
    plan.unmanaged = unmanaged_objects(desired, current, scope)
    check_references(desired, current, scope)
    plan_qos(plan, desired, current)
    plan_accounts(plan, desired, current, cluster)
    plan_users(plan, desired, current, cluster)
    if prune:
        plan_user_prune(plan, desired, current, cluster, scope)
    plan_account_prune(plan, current, cluster, scope)
    plan_qos_prune(plan, current, scope)
    plan.before = diff_before(desired, current, cluster, scope)
    plan.after = diff_after(desired, current, cluster, prune, scope, plan.before)
    return plan


def find_scope(desired: Desired, current: Current, cluster: str, prune: bool) -> Scope:
    """Managed objects (by their mark in slurmdbd) and, with prune, those no longer configured.

    ``root`` and ``normal`` are never pruned, nor an account that only exists on other clusters.
    """
    managed_qos = {n for n, raw in current.qos.items() if is_managed_qos(raw["Description"])}
    marked_accounts = {n for n, a in current.accounts.items()
                       if a["organization"].lower() == MANAGED_ORG}
    prune_qos = sorted(n for n in managed_qos - set(desired.qos) - PROTECTED_QOS) if prune else []
    prune_accounts = sorted(
        n for n in marked_accounts - set(desired.accounts) - PROTECTED_ACCOUNTS
        if current.account_assoc(cluster, n) is not None
        or not any(a.account == n for a in current.assocs)) if prune else []
    return Scope(managed_qos, marked_accounts | set(desired.accounts), prune_qos, prune_accounts)


def unmanaged_objects(desired: Desired, current: Current, scope: Scope) -> dict[str, list[str]]:
    """The hand-made QOS and accounts the module leaves alone (reported as ``unmanaged``)."""
    return {
        "qos": sorted(set(current.qos) - scope.managed_qos - set(desired.qos)),
        "accounts": sorted(set(current.accounts) - scope.managed_accounts - PROTECTED_ACCOUNTS),
    }


def check_references(desired: Desired, current: Current, scope: Scope) -> None:
    """Every QOS (Preempt, an account's qos) and parent account named must exist after the run."""
    known_qos = set(desired.qos) | (set(current.qos) - set(scope.prune_qos))
    for q in desired.qos.values():
        for ref in sorted(q.values["Preempt"] - known_qos):
            raise InputError(f"QOS {q.name}: Preempt names QOS {ref!r}, which is neither in qos "
                             f"nor in the database (known: {', '.join(sorted(known_qos))})")
    for acc in desired.accounts.values():
        for ref in sorted((acc.qos or frozenset()) - known_qos):
            raise InputError(f"account {acc.name}: QOS {ref!r} is neither in qos nor in the "
                             f"database (known: {', '.join(sorted(known_qos))})")
        if acc.parent not in desired.accounts and (
                acc.parent not in current.accounts or acc.parent in scope.prune_accounts):
            raise InputError(f"account {acc.name}: parent account {acc.parent!r} does not exist")


def plan_qos(plan: Plan, desired: Desired, current: Current) -> None:
    """QOS: create the new ones, modify the existing ones, then set the new ones' Preempt.

    Preempt is set last because it may name a QOS that is created later in the same run."""
    for q in desired.qos.values():
        if q.name not in current.qos:
            _plan_new_qos(plan, q)
    for q in desired.qos.values():
        raw = current.qos.get(q.name)
        if raw is not None:
            _plan_qos_changes(plan, q, raw)
    for q in desired.qos.values():
        if q.name not in current.qos and q.values["Preempt"]:
            value = render("names", q.values["Preempt"])
            plan.add("modify", "qos", q.name, ["modify", "qos", "where", f"name={q.name}", "set",
                                               f"Preempt={value}"], Preempt=value)


def _plan_new_qos(plan: Plan, q: DesiredQos) -> None:
    """``add qos`` with the description and every field not at its default, except Preempt."""
    settings = {n: render(QOS_FIELDS[n], v) for n, v in q.values.items()
                if v != DEFAULTS[n] and n != "Preempt"}
    plan.add("add", "qos", q.name,
             ["add", "qos", q.name, f"Description={q.description}",
              *(f"{n}={v}" for n, v in settings.items())], **settings)


def _plan_qos_changes(plan: Plan, q: DesiredQos, raw: dict[str, str]) -> None:
    """One ``modify qos`` for the fields of an existing QOS that differ (none if all equal)."""
    now = current_qos_values(raw)
    settings = Settings()
    if raw["Description"].strip().lower() != q.description.lower():
        settings.change("Description", f"Description={q.description}", raw["Description"],
                        q.description)
    for n, want in q.values.items():
        if now[n] != want:
            settings.change(n, render_change(n, now[n] if isinstance(now[n], tuple) else (), want),
                            raw.get(n, ""), render(QOS_FIELDS[n], want))
    if settings.sets:
        plan.add("modify", "qos", q.name, ["modify", "qos", "where", f"name={q.name}", "set",
                                           *settings.sets], **settings.changes)


def _parents_first(accounts: dict[str, DesiredAccount]) -> list[DesiredAccount]:
    """The configured accounts, each after its configured parent; a parent cycle is refused."""
    ordered: list[DesiredAccount] = []
    seen: set[str] = set()

    def visit(acc: DesiredAccount, trail: tuple[str, ...]) -> None:
        if acc.name in seen:
            return
        if acc.name in trail:
            raise InputError(f"accounts {' -> '.join((*trail, acc.name))} form a parent cycle")
        parent = accounts.get(acc.parent)
        if parent is not None:
            visit(parent, (*trail, acc.name))
        seen.add(acc.name)
        ordered.append(acc)

    for acc in accounts.values():
        visit(acc, ())
    return ordered


def plan_accounts(plan: Plan, desired: Desired, current: Current, cluster: str) -> None:
    """Accounts, parents before children: add missing ones, then fix the existing ones."""
    for acc in _parents_first(desired.accounts):
        record = current.accounts.get(acc.name)
        assoc = current.account_assoc(cluster, acc.name)
        if record is None or assoc is None:
            _plan_new_account(plan, acc, cluster)
        if record is not None:
            _plan_account_record(plan, acc, record)
        if assoc is not None:
            _plan_account_assoc(plan, acc, assoc, cluster)


def _plan_new_account(plan: Plan, acc: DesiredAccount, cluster: str) -> None:
    """``add account`` on the cluster, marked with Organization=metalslurm."""
    args = ["add", "account", acc.name, f"Cluster={cluster}", f"Parent={acc.parent}",
            f"Description={acc.description}", f"Organization={MANAGED_ORG}",
            f"Fairshare={acc.fairshare}"]
    if acc.qos is not None:
        args.append(f"QOS={','.join(sorted(acc.qos))}")
    if acc.default_qos is not None:
        args.append(f"DefaultQOS={acc.default_qos}")
    plan.add("add", "account", acc.name, args, parent=acc.parent, fairshare=acc.fairshare,
             qos=sorted(acc.qos or ()), default_qos=acc.default_qos)


def _plan_account_record(plan: Plan, acc: DesiredAccount, record: dict[str, str]) -> None:
    """``modify account`` for the description and the mark (this adopts a hand-made account)."""
    settings = Settings()
    if record["description"].strip().lower() != acc.description:
        settings.change("Description", f"Description={acc.description}", record["description"],
                        acc.description)
    if record["organization"].strip().lower() != MANAGED_ORG:
        settings.change("Organization", f"Organization={MANAGED_ORG}", record["organization"],
                        MANAGED_ORG)
    if settings.sets:
        plan.add("modify", "account", acc.name,
                 ["modify", "account", "where", f"name={acc.name}", "set", *settings.sets],
                 **settings.changes)


def _plan_account_assoc(plan: Plan, acc: DesiredAccount, assoc: Assoc, cluster: str) -> None:
    """``modify account ... cluster=`` for parent, fairshare and, where given, QOS settings."""
    settings = Settings()
    if assoc.parent.lower() != acc.parent:
        settings.change("Parent", f"Parent={acc.parent}", assoc.parent, acc.parent)
    if assoc.share != acc.fairshare:
        settings.change("Fairshare", f"Fairshare={acc.fairshare}", assoc.share, acc.fairshare)
    if acc.qos is not None and assoc.qos != acc.qos:
        wanted = ",".join(sorted(acc.qos))
        settings.change("QOS", f"QOS={wanted}", ",".join(sorted(assoc.qos)), wanted)
    if acc.default_qos is not None and assoc.default_qos != acc.default_qos:
        settings.change("DefaultQOS", f"DefaultQOS={acc.default_qos}", assoc.default_qos,
                        acc.default_qos)
    if settings.sets:
        plan.add("modify", "account", acc.name,
                 ["modify", "account", "where", f"name={acc.name}", f"cluster={cluster}",
                  "set", *settings.sets], **settings.changes)


def _plan_default_account(plan: Plan, current: Current, cluster: str, user: str,
                          account: str) -> None:
    """``modify user`` to make ``account`` the user's default account."""
    plan.add("modify", "user", user,
             ["modify", "user", "where", f"name={user}", f"cluster={cluster}", "set",
              f"DefaultAccount={account}"],
             DefaultAccount={"before": current.default_accounts.get(user, ""), "after": account})


def plan_users(plan: Plan, desired: Desired, current: Current, cluster: str) -> None:
    """Users: add missing associations, then move a user's default to its first account.

    A user new to the cluster gets its first configured account as default in the ``add``."""
    existing_users = current.users_on(cluster)
    for user, accounts in desired.users.items():
        have = current.user_accounts(cluster, user)
        for i, account in enumerate(accounts):
            if account in have:
                continue
            args = ["add", "user", user, f"Account={account}", f"Cluster={cluster}"]
            if i == 0 and user not in existing_users:
                args.append(f"DefaultAccount={account}")
            plan.add("add", "user", user, args, account=account)
        if user in existing_users and current.default_accounts.get(user) != accounts[0]:
            _plan_default_account(plan, current, cluster, user, accounts[0])


def plan_user_prune(plan: Plan, desired: Desired, current: Current, cluster: str,
                    scope: Scope) -> None:
    """(prune) Delete users' associations with managed accounts that no longer list them.

    A user left with no association is deleted; a user not configured any more whose default
    account goes gets one of its remaining accounts as default first. Associations with
    hand-made accounts and the ``root`` user are never touched."""
    for user in sorted(current.users_on(cluster) - PROTECTED_USERS):
        have = current.user_accounts(cluster, user)
        wanted = desired.users.get(user, [])
        drop = [a for a in have if a in scope.managed_accounts and a not in wanted]
        if not drop:
            continue
        # A configured user keeps its wanted accounts (its default already moved there).
        keep = wanted if user in desired.users else [a for a in have if a not in drop]
        if not keep:
            where = ["where", f"name={user}"]
            if current.on_other_clusters(cluster, user=user):
                where.append(f"cluster={cluster}")
            plan.add("delete", "user", user, ["delete", "user", *where], accounts=drop)
            plan.removals.append(Removal(f"user {user}", user=user))
            continue
        if user not in desired.users and current.default_accounts.get(user) in drop:
            _plan_default_account(plan, current, cluster, user, keep[0])
        for account in drop:
            plan.add("delete", "user", user,
                     ["delete", "user", "where", f"name={user}", f"account={account}",
                      f"cluster={cluster}"], account=account)
            plan.removals.append(Removal(f"user {user} in account {account}",
                                         account=account, user=user))


def _depth(current: Current, cluster: str, account: str) -> int:
    """How many parents an account has on the cluster (root's children: 1)."""
    depth, seen = 0, set()
    assoc = current.account_assoc(cluster, account)
    while assoc is not None and assoc.parent and assoc.parent not in seen:
        seen.add(assoc.parent)
        depth += 1
        assoc = current.account_assoc(cluster, assoc.parent)
    return depth


def plan_account_prune(plan: Plan, current: Current, cluster: str, scope: Scope) -> None:
    """(prune) Delete the managed accounts no longer configured, children first.

    Refused while an account that stays still sits under one of them."""
    deleting = set(scope.prune_accounts)
    for account in sorted(scope.prune_accounts, key=lambda n: _depth(current, cluster, n),
                          reverse=True):
        children = sorted({a.account for a in current.assocs if a.cluster == cluster
                           and not a.user and a.parent == account} - deleting)
        if children:
            raise InputError(f"account {account} is no longer configured, but account(s) "
                             f"{', '.join(children)} still sit under it; move or remove them "
                             "first, or set prune: false")
        where = ["where", f"name={account}"]
        if current.on_other_clusters(cluster, account=account):
            where.append(f"cluster={cluster}")
        plan.add("delete", "account", account, ["delete", "account", *where])
        plan.removals.append(Removal(f"account {account}", account=account))


def plan_qos_prune(plan: Plan, current: Current, scope: Scope) -> None:
    """(prune) Delete the managed QOS no longer configured.

    Refused while a QOS is the default QOS of an association that stays."""
    deleting = set(scope.prune_accounts)
    for name in scope.prune_qos:
        users_of = sorted({f"{a.account}/{a.user}" if a.user else a.account
                           for a in current.assocs if a.default_qos == name
                           and a.account not in deleting})
        if users_of:
            raise InputError(f"QOS {name} is no longer configured, but is the default QOS of "
                             f"{', '.join(users_of)}; change that first, or set prune: false")
        plan.add("delete", "qos", name, ["delete", "qos", "where", f"name={name}"])
        plan.removals.append(Removal(f"QOS {name}", qos=name))


# ---------------------------------------------------------------- the diff

def _display_account(current: Current, cluster: str, name: str) -> dict[str, Any]:
    """An existing account for the diff: its record and its association on the cluster."""
    record = current.accounts[name]
    assoc = current.account_assoc(cluster, name)
    return {"description": record["description"], "organization": record["organization"],
            "parent": assoc.parent if assoc else "", "fairshare": assoc.share if assoc else "",
            "qos": sorted(assoc.qos) if assoc else [],
            "default_qos": assoc.default_qos if assoc else ""}


def diff_before(desired: Desired, current: Current, cluster: str, scope: Scope
                ) -> dict[str, Any]:
    """The managed objects as they are (``diff.before``)."""
    existing_users = current.users_on(cluster)
    return {
        "cluster": cluster if cluster in current.clusters else None,
        "qos": {n: display_qos(r["Description"], current_qos_values(r))
                for n, r in sorted(current.qos.items())
                if n in scope.managed_qos or n in desired.qos},
        "accounts": {n: _display_account(current, cluster, n)
                     for n in sorted(scope.managed_accounts) if n in current.accounts},
        "users": {u: current.user_accounts(cluster, u) for u in sorted(existing_users)
                  if set(current.user_accounts(cluster, u)) & scope.managed_accounts},
    }


def _desired_account_display(acc: DesiredAccount, before: dict[str, Any]) -> dict[str, Any]:
    """A configured account for the diff; fields it leaves out keep their ``before`` value."""
    return {"description": acc.description, "organization": MANAGED_ORG,
            "parent": acc.parent, "fairshare": acc.fairshare,
            "qos": sorted(acc.qos) if acc.qos is not None else before.get("qos", []),
            "default_qos": acc.default_qos or before.get("default_qos", "")}


def diff_after(desired: Desired, current: Current, cluster: str, prune: bool, scope: Scope,
               before: dict[str, Any]) -> dict[str, Any]:
    """The managed objects as the plan leaves them (``diff.after``)."""
    qos = {n: v for n, v in before["qos"].items()
           if n not in desired.qos and n not in scope.prune_qos}
    qos.update({n: display_qos(q.description, q.values) for n, q in desired.qos.items()})
    accounts = {n: v for n, v in before["accounts"].items()
                if n not in desired.accounts and n not in scope.prune_accounts}
    accounts.update({n: _desired_account_display(a, before["accounts"].get(n, {}))
                     for n, a in desired.accounts.items()})
    users = {}
    for user in sorted(set(before["users"]) | set(desired.users)):
        member_of = set(current.user_accounts(cluster, user))
        kept = member_of - scope.managed_accounts if prune else member_of
        users[user] = sorted(kept | set(desired.users.get(user, [])))
    return {"cluster": cluster, "qos": qos, "accounts": accounts, "users": users}


# ---------------------------------------------------------------- active jobs

@dataclass
class Job:
    """A job squeue lists as active (names lower-case, state upper-case)."""
    id: str
    user: str
    account: str
    qos: str
    state: str


def parse_active_jobs(squeue_output: str) -> list[Job]:
    """The active jobs in the output of ``squeue SQUEUE_ARGS`` (id|user|account|qos|state)."""
    jobs = []
    for line in squeue_output.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 5 and parts[4].upper() not in FINISHED_JOB_STATES:
            jobs.append(Job(parts[0], parts[1].lower(), parts[2].lower(), parts[3].lower(),
                            parts[4].upper()))
    return jobs


def blocked_removals(removals: list[Removal], squeue_output: str) -> list[str]:
    """Removals that active jobs would block, one sentence each naming the jobs."""
    jobs = parse_active_jobs(squeue_output)
    problems = []
    for r in removals:
        hits = [f"{j.id} ({j.user}, {j.state.lower()})" for j in jobs
                if (r.account is None or j.account == r.account)
                and (r.user is None or j.user == r.user)
                and (r.qos is None or j.qos == r.qos)]
        if hits:
            problems.append(f"{r.what}: job(s) {', '.join(hits)}")
    return problems


def refusal_message(blocked: list[str]) -> str:
    """The failure message when active jobs block a removal."""
    return ("nothing applied: prune would remove objects that active jobs still use. Let the "
            "jobs finish or cancel them (scancel --account=NAME), or set prune: false, then run "
            "again. " + "; ".join(blocked))


def jobs_unknown_message(removals: list[Removal], command: str, output: str) -> str:
    """The failure message when squeue could not say which jobs are active."""
    return (f"nothing applied: prune would remove {', '.join(r.what for r in removals)}, but "
            f"active jobs could not be checked ({command}: {output.strip()}); run again when "
            "slurmctld answers, or set prune: false")
