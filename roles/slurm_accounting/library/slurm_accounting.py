#!/usr/bin/python
"""Ansible module: converge Slurm accounting (cluster, QOS, accounts, users) with sacctmgr."""

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_accounting
short_description: Converge the cluster, QOS, accounts and users in slurmdbd with sacctmgr
description:
  - One call converges the whole desired state. It reads the current state with
    C(sacctmgr --noheader --parsable2 show cluster/qos/account/assoc/user format=...),
    computes the difference, and applies it with C(sacctmgr --immediate add/modify/delete).
    A second run with the same arguments reports C(changed=false) and runs no sacctmgr write.
  - Values are compared in normalised form, because sacctmgr prints them differently from how
    they are written (TRES in TRES-id order with memory in units, C(MaxWall=2880) printed as
    C(2-00:00:00), C(GraceTime) in seconds printed as C(00:05:00), flag and QOS lists in any
    order and case, account descriptions lower-cased).
  - Every argument is validated before sacctmgr is called for a write. A QOS referenced by an
    account (C(qos), C(default_qos)) or by another QOS (C(Preempt)) must be defined in C(qos) or
    already exist in the database (and not be about to be pruned); otherwise the module fails
    and applies nothing.
  - "Which objects are managed (the removal policy). An account is managed when its
    Organization is C(metalslurm); the module sets that on every account it creates or is given.
    A QOS is managed when its Description is C(metalslurm) or starts with C(metalslurm:); the
    module writes descriptions as C(metalslurm: <description>). The mark lives in slurmdbd
    itself, so it survives a lost inventory and needs no list of previously managed names (a
    parameter listing them would have to be kept by hand and is wrong the moment someone
    forgets). A user association is managed when its account is managed. Objects named in the
    arguments are always managed (an existing hand-made account or QOS of the same name is
    adopted and marked)."
  - "With C(prune=true), a managed QOS or account that is no longer in the arguments is
    deleted, and so is a user's association with a managed account that no longer lists the
    user (a user whose last association goes is deleted). Hand-made (unmarked) accounts and QOS
    are never modified or deleted, and neither are their user associations. The C(root) account,
    the C(root) user and the C(normal) QOS are never deleted. Partition-level associations are
    not managed."
  - "A removal that would hit active work is refused: if a pending, running or suspended job
    (from C(squeue)) uses an account, user association or QOS that is about to be deleted, the
    module fails before running any sacctmgr write, naming the jobs. The operator lets them
    finish or cancels them (C(scancel --account=NAME)), or sets C(prune=false), and runs again.
    Failing early, instead of skipping, keeps a run all-or-nothing and never reports a state as
    converged when it is not; slurmdbd itself would refuse the deletion half-way through."
  - "Fields that are left out are not managed: an account without C(qos) keeps whatever QOS it
    has (it inherits its parent's), an account without C(default_qos) keeps its default. QOS
    limits are managed as a whole: a limit removed from C(limits) is reset to Slurm's default
    (C(-1), no limit)."
options:
  cluster: {type: str, required: true, description: Slurm ClusterName; registered if missing.}
  qos:
    type: list
    elements: dict
    default: []
    description:
      - "QOS: C(name), C(description), C(priority) (int, default 0), C(limits) (a dict of sacctmgr
        QOS fields such as C(GrpTRESMins: gres/gpu=43200), C(MaxTRESPerUser: cpu=16),
        C(MaxWall: 2-00:00:00), C(Flags: DenyOnLimit,NoDecay), C(Preempt: scavenger),
        C(PreemptMode: requeue)); C(flags), C(preempt) and C(preempt_mode) may be given as keys
        of their own."
  accounts:
    type: list
    elements: dict
    default: []
    description:
      - "Accounts: C(name), C(description), C(fairshare) (int or C(parent), default 1), C(qos)
        (list), C(default_qos), C(parent) (default C(root)), C(users) (list). A user's default
        account is the first account that lists the user."
  prune:
    type: bool
    default: false
    description: Delete managed objects missing from the arguments (see above).
  sacctmgr: {type: path, default: sacctmgr, description: The sacctmgr executable.}
  squeue:
    type: path
    default: squeue
    description: The squeue executable, asked for active jobs before any deletion.
"""

EXAMPLES = r"""
- name: Converge accounts, users and QOS
  slurm_accounting:
    cluster: metalslurm
    prune: true
    qos:
      - name: team-gpu
        description: 720 GPU-hours a month
        priority: 10
        limits: {GrpTRESMins: gres/gpu=43200, MaxTRESPerUser: cpu=16}
    accounts:
      - {name: team-a, fairshare: 10, qos: [normal, team-gpu], default_qos: team-gpu,
         users: [alice]}
      - {name: team-b, users: [bob, alice]}
"""

RETURN = r"""
changed:
  description: Whether sacctmgr changed (in check mode, would change) anything.
  returned: always
  type: bool
commands:
  description: The sacctmgr write commands run (in check mode, that would run), in order.
  returned: always
  type: list
actions:
  description: One dict per change, C({action, object, name, changes}), in the order applied.
  returned: always
  type: list
diff:
  description: C(before) and C(after) of the managed objects (shown with --diff).
  returned: always
  type: dict
unmanaged:
  description: Accounts and QOS left alone because they are not marked as managed.
  returned: always
  type: dict
blocked:
  description: With a failure, the removals active jobs block, one sentence each.
  returned: when prune is blocked
  type: list
"""

import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ansible.module_utils.basic import AnsibleModule

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
    description = description.strip()
    return f"{QOS_MARK}: {description}" if description else QOS_MARK


def is_managed_qos(description: str) -> bool:
    d = description.strip().lower()
    return d == QOS_MARK or d.startswith(QOS_MARK + ":")


# ---------------------------------------------------------------- desired state

@dataclass
class DesiredQos:
    name: str
    description: str
    values: dict[str, Any]


@dataclass
class DesiredAccount:
    name: str
    description: str
    fairshare: str
    qos: frozenset[str] | None
    default_qos: str | None
    parent: str
    users: list[str]


@dataclass
class Desired:
    qos: dict[str, DesiredQos] = field(default_factory=dict)
    accounts: dict[str, DesiredAccount] = field(default_factory=dict)
    users: dict[str, list[str]] = field(default_factory=dict)  # user -> accounts, default first


def _name(value: Any, what: str) -> str:
    text = str(value or "").strip()
    if not NAME_RE.match(text):
        raise InputError(f"{what} {value!r}: use lower-case letters, digits, '_', '.' and '-' "
                         "(Slurm stores these names lower-case)")
    return text


def _plain_text(value: Any, what: str) -> str:
    text = "" if value is None else str(value).strip()
    if any(ch in text for ch in "|\n'\""):
        raise InputError(f"{what}: {text!r} must not contain '|', quotes or a line break")
    return text


def parse_desired(qos_args: list[dict[str, Any]], account_args: list[dict[str, Any]]
                  ) -> Desired:
    desired = Desired()
    for item in qos_args:
        name = _name(item.get("name"), "QOS name")
        if name in desired.qos:
            raise InputError(f"QOS {name!r} is listed twice")
        unknown = set(item) - {"name", "description", "priority", "limits", "flags", "preempt",
                               "preempt_mode"}
        if unknown:
            raise InputError(f"QOS {name}: unknown key(s) {', '.join(sorted(unknown))}")
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
        values = dict(DEFAULTS)
        for key, value in raw.items():
            try:
                values[key] = normalise(QOS_FIELDS[key], value)
            except (InputError, ValueError) as exc:
                raise InputError(f"QOS {name}: {key}={value!r}: {exc}") from None
        if values["PreemptMode"] not in ("cluster", "off", "cancel", "requeue", "suspend",
                                         "gang", "within"):
            raise InputError(f"QOS {name}: PreemptMode {values['PreemptMode']!r} is not one of "
                             "cluster, off, cancel, requeue, suspend")
        desc = qos_description(_plain_text(item.get("description"), f"QOS {name} description"))
        desired.qos[name] = DesiredQos(name, desc, values)

    for item in account_args:
        name = _name(item.get("name"), "account name")
        if name in PROTECTED_ACCOUNTS:
            raise InputError("'root' is Slurm's own top account; it is not configured here")
        if name in desired.accounts:
            raise InputError(f"account {name!r} is listed twice")
        unknown = set(item) - {"name", "description", "fairshare", "qos", "default_qos",
                               "parent", "users", "organization"}
        if unknown:
            raise InputError(f"account {name}: unknown key(s) {', '.join(sorted(unknown))}")
        fairshare = str(item.get("fairshare", 1) if item.get("fairshare") is not None else 1)
        if fairshare.lower() != "parent" and not fairshare.isdigit():
            raise InputError(f"account {name}: fairshare {fairshare!r} must be a whole number "
                             "or 'parent'")
        qos_list = item.get("qos") or []
        qos = frozenset(_name(q, f"account {name} QOS") for q in qos_list) or None
        default_qos = item.get("default_qos")
        if default_qos is not None:
            default_qos = _name(default_qos, f"account {name} default QOS")
            # Without a qos list the account inherits its parent's; sacctmgr checks that one.
            if qos is not None and default_qos not in qos:
                raise InputError(f"account {name}: default_qos {default_qos!r} is not in its qos "
                                 f"list ({', '.join(sorted(qos))})")
        users = [_name(u, f"account {name} user") for u in item.get("users") or []]
        if len(set(users)) != len(users):
            raise InputError(f"account {name}: a user is listed twice")
        description = _plain_text(item.get("description"), f"account {name} description")
        desired.accounts[name] = DesiredAccount(
            name=name, description=(description or name).lower(),
            fairshare=fairshare.lower(), qos=qos, default_qos=default_qos,
            parent=_name(item.get("parent") or "root", f"account {name} parent"), users=users)
        for user in users:
            desired.users.setdefault(user, []).append(name)
    return desired


# ---------------------------------------------------------------- current state

@dataclass
class Assoc:
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
    clusters: set[str]
    qos: dict[str, dict[str, str]]  # name -> raw printed fields
    accounts: dict[str, dict[str, str]]  # name -> {description, organization}
    assocs: list[Assoc]
    default_accounts: dict[str, str]  # user -> default account

    def account_assoc(self, cluster: str, account: str) -> Assoc | None:
        for a in self.assocs:
            if a.cluster == cluster and a.account == account and not a.user and not a.partition:
                return a
        return None

    def user_accounts(self, cluster: str, user: str) -> list[str]:
        return sorted({a.account for a in self.assocs
                       if a.cluster == cluster and a.user == user and not a.partition})

    def users_on(self, cluster: str) -> set[str]:
        return {a.user for a in self.assocs if a.cluster == cluster and a.user}

    def on_other_clusters(self, cluster: str, account: str | None = None,
                          user: str | None = None) -> bool:
        return any(a.cluster != cluster and (account is None or a.account == account)
                   and (user is None or a.user == user) for a in self.assocs)


def _rows(text: str, width: int) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) < width:
            parts += [""] * (width - len(parts))
        rows.append(parts[:width])
    return rows


def read_current(show: Callable[[list[str]], str]) -> Current:
    clusters = {r[0].lower() for r in _rows(show(["cluster", "format=Cluster"]), 1)}
    qos = {}
    for r in _rows(show(["qos", "format=" + ",".join(QOS_FORMAT)]), len(QOS_FORMAT)):
        qos[r[0]] = dict(zip(QOS_FORMAT, r, strict=True))
    accounts = {r[0]: {"description": r[1], "organization": r[2]}
                for r in _rows(show(["account", "format=Account,Description,Organization"]), 3)}
    assocs = [Assoc(r[0], r[1], r[2], r[3], r[4].lower(),
                    frozenset(q for q in r[5].lower().split(",") if q), r[6].lower(), r[7])
              for r in _rows(show(["assoc", "format=" + ",".join(ASSOC_FORMAT)]),
                             len(ASSOC_FORMAT))]
    users = {r[0]: r[1] for r in _rows(show(["user", "format=User,DefaultAccount"]), 2)}
    return Current(clusters, qos, accounts, assocs, users)


def current_qos_values(raw: dict[str, str]) -> dict[str, Any]:
    values = {}
    for name, kind in QOS_FIELDS.items():
        try:
            values[name] = normalise(kind, raw.get(name, ""))
        except (InputError, ValueError):
            values[name] = raw.get(name, "")  # unparseable: never equal, so it gets rewritten
    return values


def display_qos(description: str, values: dict[str, Any]) -> dict[str, str]:
    shown = {"Description": description}
    for name, value in values.items():
        if value != DEFAULTS[name]:
            shown[name] = render(QOS_FIELDS[name], value)
    return shown


# ---------------------------------------------------------------- the plan

@dataclass
class Action:
    action: str
    object: str
    name: str
    args: list[str]
    changes: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {"action": self.action, "object": self.object, "name": self.name,
                "changes": self.changes}


@dataclass
class Removal:
    what: str  # e.g. "account team-c", "user alice in account team-a"
    account: str | None = None
    user: str | None = None
    qos: str | None = None


@dataclass
class Plan:
    actions: list[Action] = field(default_factory=list)
    removals: list[Removal] = field(default_factory=list)
    unmanaged: dict[str, list[str]] = field(default_factory=dict)
    before: dict[str, Any] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)

    def add(self, action: str, obj: str, name: str, args: Iterable[str], **changes: Any) -> None:
        self.actions.append(Action(action, obj, name, list(args), changes))


def _parents_first(accounts: dict[str, DesiredAccount]) -> list[DesiredAccount]:
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


def build_plan(desired: Desired, current: Current, cluster: str, prune: bool) -> Plan:
    plan = Plan()
    if cluster not in current.clusters:
        plan.add("add", "cluster", cluster, ["add", "cluster", cluster])

    # Which existing objects are managed, and which of them prune will delete.
    managed_qos = {n for n, raw in current.qos.items() if is_managed_qos(raw["Description"])}
    managed_accounts = {n for n, a in current.accounts.items()
                        if a["organization"].lower() == MANAGED_ORG}
    prune_qos = sorted(n for n in managed_qos - set(desired.qos) - PROTECTED_QOS) if prune else []
    prune_accounts = sorted(
        n for n in managed_accounts - set(desired.accounts) - PROTECTED_ACCOUNTS
        if current.account_assoc(cluster, n) is not None
        or not any(a.account == n for a in current.assocs)) if prune else []
    plan.unmanaged = {
        "qos": sorted(set(current.qos) - managed_qos - set(desired.qos)),
        "accounts": sorted(set(current.accounts) - managed_accounts - set(desired.accounts)
                           - PROTECTED_ACCOUNTS),
    }

    # Every QOS referenced must exist once the run is over.
    known_qos = set(desired.qos) | (set(current.qos) - set(prune_qos))
    for q in desired.qos.values():
        for ref in sorted(q.values["Preempt"] - known_qos):
            raise InputError(f"QOS {q.name}: Preempt names QOS {ref!r}, which is neither in qos "
                             f"nor in the database (known: {', '.join(sorted(known_qos))})")
    for acc in desired.accounts.values():
        for ref in sorted((acc.qos or frozenset()) - known_qos):
            raise InputError(f"account {acc.name}: QOS {ref!r} is neither in qos nor in the "
                             f"database (known: {', '.join(sorted(known_qos))})")
        if acc.parent not in desired.accounts and (
                acc.parent not in current.accounts or acc.parent in prune_accounts):
            raise InputError(f"account {acc.name}: parent account {acc.parent!r} does not exist")

    # 1. QOS: create (without Preempt, which may name a QOS created later), then modify.
    preempt_later: list[tuple[DesiredQos, frozenset[str]]] = []
    for q in desired.qos.values():
        if q.name in current.qos:
            continue
        settings = {n: v for n, v in q.values.items() if v != DEFAULTS[n] and n != "Preempt"}
        plan.add("add", "qos", q.name,
                 ["add", "qos", q.name, f"Description={q.description}",
                  *(f"{n}={render(QOS_FIELDS[n], v)}" for n, v in settings.items())],
                 **{n: render(QOS_FIELDS[n], v) for n, v in settings.items()})
        if q.values["Preempt"]:
            preempt_later.append((q, q.values["Preempt"]))
    for q in desired.qos.values():
        raw = current.qos.get(q.name)
        if raw is None:
            continue
        now = current_qos_values(raw)
        sets, changes = [], {}
        if raw["Description"].strip().lower() != q.description.lower():
            sets.append(f"Description={q.description}")
            changes["Description"] = {"before": raw["Description"], "after": q.description}
        for n, want in q.values.items():
            if now[n] != want:
                sets.append(render_change(n, now[n] if isinstance(now[n], tuple) else (), want))
                changes[n] = {"before": raw.get(n, ""), "after": render(QOS_FIELDS[n], want)}
        if sets:
            plan.add("modify", "qos", q.name, ["modify", "qos", "where", f"name={q.name}", "set",
                                               *sets], **changes)
    for q, preempt in preempt_later:
        value = render("names", preempt)
        plan.add("modify", "qos", q.name, ["modify", "qos", "where", f"name={q.name}", "set",
                                           f"Preempt={value}"], Preempt=value)

    # 2. Accounts, parents before children.
    for acc in _parents_first(desired.accounts):
        record = current.accounts.get(acc.name)
        assoc = current.account_assoc(cluster, acc.name)
        if record is None or assoc is None:
            args = ["add", "account", acc.name, f"Cluster={cluster}", f"Parent={acc.parent}",
                    f"Description={acc.description}", f"Organization={MANAGED_ORG}",
                    f"Fairshare={acc.fairshare}"]
            if acc.qos is not None:
                args.append(f"QOS={','.join(sorted(acc.qos))}")
            if acc.default_qos is not None:
                args.append(f"DefaultQOS={acc.default_qos}")
            plan.add("add", "account", acc.name, args, parent=acc.parent,
                     fairshare=acc.fairshare, qos=sorted(acc.qos or ()),
                     default_qos=acc.default_qos)
        if record is not None:
            sets, changes = [], {}
            if record["description"].strip().lower() != acc.description:
                sets.append(f"Description={acc.description}")
                changes["Description"] = {"before": record["description"],
                                          "after": acc.description}
            if record["organization"].strip().lower() != MANAGED_ORG:
                sets.append(f"Organization={MANAGED_ORG}")
                changes["Organization"] = {"before": record["organization"],
                                           "after": MANAGED_ORG}
            if sets:
                plan.add("modify", "account", acc.name,
                         ["modify", "account", "where", f"name={acc.name}", "set", *sets],
                         **changes)
        if assoc is not None:
            sets, changes = [], {}
            if assoc.parent.lower() != acc.parent:
                sets.append(f"Parent={acc.parent}")
                changes["Parent"] = {"before": assoc.parent, "after": acc.parent}
            if assoc.share != acc.fairshare:
                sets.append(f"Fairshare={acc.fairshare}")
                changes["Fairshare"] = {"before": assoc.share, "after": acc.fairshare}
            if acc.qos is not None and assoc.qos != acc.qos:
                sets.append(f"QOS={','.join(sorted(acc.qos))}")
                changes["QOS"] = {"before": ",".join(sorted(assoc.qos)),
                                  "after": ",".join(sorted(acc.qos))}
            if acc.default_qos is not None and assoc.default_qos != acc.default_qos:
                sets.append(f"DefaultQOS={acc.default_qos}")
                changes["DefaultQOS"] = {"before": assoc.default_qos, "after": acc.default_qos}
            if sets:
                plan.add("modify", "account", acc.name,
                         ["modify", "account", "where", f"name={acc.name}", f"cluster={cluster}",
                          "set", *sets], **changes)

    # 3. Users: add associations, then move the default, then (prune) remove associations.
    managed_now = managed_accounts | set(desired.accounts)
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
            plan.add("modify", "user", user,
                     ["modify", "user", "where", f"name={user}", f"cluster={cluster}", "set",
                      f"DefaultAccount={accounts[0]}"],
                     DefaultAccount={"before": current.default_accounts.get(user, ""),
                                     "after": accounts[0]})
    if prune:
        for user in sorted(existing_users - PROTECTED_USERS):
            have = current.user_accounts(cluster, user)
            wanted = desired.users.get(user, [])
            drop = [a for a in have if a in managed_now and a not in wanted]
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
                plan.add("modify", "user", user,
                         ["modify", "user", "where", f"name={user}", f"cluster={cluster}", "set",
                          f"DefaultAccount={keep[0]}"],
                         DefaultAccount={"before": current.default_accounts.get(user, ""),
                                         "after": keep[0]})
            for account in drop:
                plan.add("delete", "user", user,
                         ["delete", "user", "where", f"name={user}", f"account={account}",
                          f"cluster={cluster}"], account=account)
                plan.removals.append(Removal(f"user {user} in account {account}",
                                             account=account, user=user))

    # 4. Accounts (children first), then QOS, nobody references any more.
    deleting = set(prune_accounts)
    for account in sorted(prune_accounts, key=lambda n: _depth(current, cluster, n),
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
    for name in prune_qos:
        users_of = sorted({f"{a.account}/{a.user}" if a.user else a.account
                           for a in current.assocs if a.default_qos == name
                           and a.account not in deleting})
        if users_of:
            raise InputError(f"QOS {name} is no longer configured, but is the default QOS of "
                             f"{', '.join(users_of)}; change that first, or set prune: false")
        plan.add("delete", "qos", name, ["delete", "qos", "where", f"name={name}"])
        plan.removals.append(Removal(f"QOS {name}", qos=name))

    # The diff Ansible shows with --diff: managed objects before and after.
    plan.before = {
        "cluster": cluster if cluster in current.clusters else None,
        "qos": {n: display_qos(r["Description"], current_qos_values(r))
                for n, r in sorted(current.qos.items())
                if n in managed_qos or n in desired.qos},
        "accounts": {n: _display_account(current, cluster, n)
                     for n in sorted(managed_now) if n in current.accounts},
        "users": {u: current.user_accounts(cluster, u) for u in sorted(existing_users)
                  if set(current.user_accounts(cluster, u)) & managed_now},
    }
    plan.after = {
        "cluster": cluster,
        "qos": {**{n: v for n, v in plan.before["qos"].items()
                   if n not in desired.qos and n not in prune_qos},
                **{n: display_qos(q.description, q.values) for n, q in desired.qos.items()}},
        "accounts": {**{n: v for n, v in plan.before["accounts"].items()
                        if n not in desired.accounts and n not in prune_accounts},
                     **{n: {"description": a.description, "organization": MANAGED_ORG,
                            "parent": a.parent, "fairshare": a.fairshare,
                            "qos": sorted(a.qos) if a.qos is not None else
                            plan.before["accounts"].get(n, {}).get("qos", []),
                            "default_qos": a.default_qos or
                            plan.before["accounts"].get(n, {}).get("default_qos", "")}
                        for n, a in desired.accounts.items()}},
        }
    after_users = {}
    for user in sorted(set(plan.before["users"]) | set(desired.users)):
        member_of = set(current.user_accounts(cluster, user))
        kept = member_of - managed_now if prune else member_of
        after_users[user] = sorted(kept | set(desired.users.get(user, [])))
    plan.after["users"] = after_users
    return plan


def _depth(current: Current, cluster: str, account: str) -> int:
    depth, seen = 0, set()
    assoc = current.account_assoc(cluster, account)
    while assoc is not None and assoc.parent and assoc.parent not in seen:
        seen.add(assoc.parent)
        depth += 1
        assoc = current.account_assoc(cluster, assoc.parent)
    return depth


def _display_account(current: Current, cluster: str, name: str) -> dict[str, Any]:
    record = current.accounts[name]
    assoc = current.account_assoc(cluster, name)
    return {"description": record["description"], "organization": record["organization"],
            "parent": assoc.parent if assoc else "", "fairshare": assoc.share if assoc else "",
            "qos": sorted(assoc.qos) if assoc else [],
            "default_qos": assoc.default_qos if assoc else ""}


def blocked_removals(removals: list[Removal], squeue_output: str) -> list[str]:
    """Removals that active jobs would block, from ``squeue -h -a -o %i|%u|%a|%q|%T``."""
    jobs = []
    for line in squeue_output.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 5 and parts[4].upper() not in FINISHED_JOB_STATES:
            jobs.append((parts[0], parts[1].lower(), parts[2].lower(), parts[3].lower(),
                         parts[4].upper()))
    problems = []
    for r in removals:
        hits = [f"{j[0]} ({j[1]}, {j[4].lower()})" for j in jobs
                if (r.account is None or j[2] == r.account)
                and (r.user is None or j[1] == r.user)
                and (r.qos is None or j[3] == r.qos)]
        if hits:
            problems.append(f"{r.what}: job(s) {', '.join(hits)}")
    return problems


# ---------------------------------------------------------------- running it

def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "cluster": {"type": "str", "required": True},
            "qos": {"type": "list", "elements": "dict", "default": []},
            "accounts": {"type": "list", "elements": "dict", "default": []},
            "prune": {"type": "bool", "default": False},
            "sacctmgr": {"type": "path", "default": "sacctmgr"},
            "squeue": {"type": "path", "default": "squeue"},
        },
        supports_check_mode=True,
    )
    p = module.params
    cluster = str(p["cluster"]).lower()
    sacctmgr = module.get_bin_path(p["sacctmgr"], required=True) if "/" not in p["sacctmgr"] \
        else p["sacctmgr"]

    def show(what: list[str]) -> str:
        args = [sacctmgr, "--noheader", "--parsable2", "show", *what]
        rc, out, err = module.run_command(args, environ_update={"LC_ALL": "C"})
        if rc != 0:
            module.fail_json(msg=f"{shlex.join(args)} failed (rc {rc}): {(err or out).strip()}",
                             changed=False, commands=[])
        return out

    try:
        desired = parse_desired(p["qos"] or [], p["accounts"] or [])
        current = read_current(show)
        plan = build_plan(desired, current, cluster, p["prune"])
    except InputError as exc:
        module.fail_json(msg=f"nothing applied: {exc}", changed=False, commands=[])

    commands = [shlex.join([p["sacctmgr"], "--immediate", *a.args]) for a in plan.actions]
    result: dict[str, Any] = {
        "changed": bool(plan.actions), "commands": commands,
        "actions": [a.summary() for a in plan.actions],
        "diff": {"before": plan.before, "after": plan.after}, "unmanaged": plan.unmanaged,
    }
    if plan.removals:
        squeue = p["squeue"]
        args = [squeue, "--noheader", "--all", "--format=%i|%u|%a|%q|%T"]
        try:
            rc, out, err = module.run_command(args, environ_update={"LC_ALL": "C"})
        except OSError as exc:  # pragma: no cover - run_command normally reports this as rc
            rc, out, err = 1, "", str(exc)
        if rc != 0:
            module.fail_json(msg="nothing applied: prune would remove "
                             f"{', '.join(r.what for r in plan.removals)}, but active jobs could "
                             f"not be checked ({shlex.join(args)}: {(err or out).strip()}); "
                             "run again when slurmctld answers, or set prune: false",
                             **{**result, "changed": False})
        blocked = blocked_removals(plan.removals, out)
        if blocked:
            module.fail_json(msg="nothing applied: prune would remove objects that active jobs "
                             "still use. Let the jobs finish or cancel them (scancel "
                             "--account=NAME), or set prune: false, then run again. "
                             + "; ".join(blocked), blocked=blocked,
                             **{**result, "changed": False})
    if module.check_mode or not plan.actions:
        module.exit_json(**result)

    applied: list[str] = []
    for action, command in zip(plan.actions, commands, strict=True):
        args = [sacctmgr, "--immediate", *action.args]
        rc, out, err = module.run_command(args, environ_update={"LC_ALL": "C"})
        text = f"{out}\n{err}"
        if rc != 0 and not any(marker in text for marker in NOOP_MARKERS):
            module.fail_json(msg=f"{command} failed (rc {rc}): {text.strip()}; "
                             f"{len(applied)} earlier command(s) were applied",
                             **{**result, "commands": applied, "changed": bool(applied)})
        applied.append(command)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
