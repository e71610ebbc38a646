"""The monitoring settings (``metalslurm_monitoring``): the one table of their defaults, and
the rules a value must follow.

Owner of these defaults and rules. They are read by:

- the operator's stack parser (``infra/stack/monitoring.py``: ``metalslurm:monitoring`` keys
  left out, and the same checks, so a bad value is refused before any node is touched);
- the roles, through the ``metalslurm.cluster.monitoring_settings`` filter (an inventory
  written by hand): monitoring (Prometheus, Alertmanager, the rules), node_exporter and
  slurm_exporter.

Keys are in the inventory's form (snake_case); the stack config spells them in camelCase
(:data:`STACK_NAMES`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

DEFAULTS: dict[str, Any] = {
    "enabled": True,            # Prometheus, Alertmanager and the exporters
    "host": "",                 # the inventory host that runs Prometheus; "": the controller
    "scrape_interval": 30,      # seconds between scrapes (and rule evaluations)
    "exporter_interval": 30,    # seconds between the Slurm exporter's questions to Slurm
    "retention_time": "15d",    # Prometheus --storage.tsdb.retention.time
    "retention_size": "20GB",   # Prometheus --storage.tsdb.retention.size
    "pending_threshold": 3600,  # seconds a job may pend for Resources before the alert
    "disk_free_ratio": 0.10,    # free space below this fraction of a file system: alert
    "group_wait": 30,           # Alertmanager: seconds to wait before a group's first notice
    "group_interval": 300,      # seconds before a group's next notice about new alerts
    "repeat_interval": 14400,   # seconds before an unresolved alert is sent again
    "receivers": [],            # [{name, type (webhook, slack, email), its fields, send_resolved}]
}
# The stack config's spelling of each key.
STACK_NAMES = {
    "enabled": "enabled", "host": "host", "scrape_interval": "scrapeInterval",
    "exporter_interval": "exporterInterval", "retention_time": "retentionTime",
    "retention_size": "retentionSize", "pending_threshold": "pendingThreshold",
    "disk_free_ratio": "diskFreeRatio", "group_wait": "groupWait",
    "group_interval": "groupInterval", "repeat_interval": "repeatInterval",
    "receivers": "receivers",
}
# Ports on each node's private address (Prometheus' default port allocations).
PORTS = {"prometheus": 9090, "alertmanager": 9093, "node_exporter": 9100, "slurm_exporter": 9341,
         "dcgm_exporter": 9400}
# The Slurm exporter asks Slurm at most once per exporter_interval; below this it would
# cost slurmctld more than it tells (6 Slurm commands per refresh).
MIN_EXPORTER_INTERVAL = 5
# Xid errors the GPU alert fires on: the health checker's list (roles/slurm_health's
# metalslurm-health DEFAULT_CRITICAL_XIDS is their owner; tests/unit/test_setting_owners.py
# keeps this copy equal to it).
CRITICAL_XIDS = (48, 61, 62, 63, 64, 68, 69, 73, 74, 79, 92, 94, 95, 119, 120, 140)
# Receivers: the fields each type takes in the stack config (besides name, type and
# sendResolved), those it must have, and the credentials it takes from the alert secrets
# (metalslurm:alertSecrets or monitoring.secretsFile: {<receiver name>: {field: value}}),
# never from the config, so never in the inventory or a stack's plain outputs: a webhook's URL
# (it often carries a token, and whoever has it can post alerts) and a Slack incoming-webhook
# URL are credentials, so is an SMTP password.
RECEIVER_TYPES = ("webhook", "slack", "email")
RECEIVER_FIELDS: dict[str, tuple[str, ...]] = {
    "webhook": (), "slack": ("channel",),
    "email": ("to", "from", "smarthost", "username", "requireTls")}
RECEIVER_REQUIRED: dict[str, tuple[str, ...]] = {
    "webhook": (), "slack": ("channel",), "email": ("to", "from", "smarthost")}
RECEIVER_SECRETS = {"webhook": ("url",), "slack": ("url",), "email": ("password",)}
RECEIVER_KEYS = ("name", "type", "sendResolved") + tuple(
    sorted({f for fields in RECEIVER_FIELDS.values() for f in fields}))
# A hand-written inventory may spell the two-word keys in snake case.
RECEIVER_ALIASES = {"send_resolved": "sendResolved", "require_tls": "requireTls"}
EMAIL_RE = re.compile(r"^[^@\s<>]+@[^@\s<>]+$")
SMARTHOST_RE = re.compile(r"^[A-Za-z0-9.-]+:[0-9]{1,5}$|^\[[0-9A-Fa-f:]+\]:[0-9]{1,5}$")
RECEIVER_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
# Prometheus' duration (model.ParseDuration) and byte-size (units.Base2Bytes) syntax.
DURATION_RE = re.compile(r"^(?:[0-9]+y)?(?:[0-9]+w)?(?:[0-9]+d)?(?:[0-9]+h)?(?:[0-9]+m)?"
                         r"(?:[0-9]+s)?(?:[0-9]+ms)?$")
SIZE_RE = re.compile(r"^[1-9][0-9]*(?:B|KB|MB|GB|TB|PB|EB)$")
URL_RE = re.compile(r"^https?://[^\s/]+(?:/\S*)?$")


class MonitoringSettingsError(ValueError):
    """``metalslurm_monitoring`` has a setting that is unknown or out of its rules."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _a(kind: str) -> str:
    """'a webhook', 'an email'."""
    return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"


def _field_problem(kind: str, field: str, value: Any) -> str | None:
    """What is wrong with one receiver field's value, or None."""
    if field == "requireTls":
        return None if isinstance(value, bool) else f"{value!r} is not true or false"
    if not isinstance(value, str) or not value.strip():
        return f"{value!r} is not a non-empty string"
    if field in ("to", "from") and not all(EMAIL_RE.match(a.strip()) for a in value.split(",")):
        return f"{value!r} is not an e-mail address (or a comma-separated list of them)"
    if field == "smarthost" and not SMARTHOST_RE.match(value):
        return f"{value!r} is not host:port of an SMTP server (e.g. smtp.example.org:587)"
    return None


def receiver_problems(receivers: Any) -> list[tuple[str, str]]:
    """(key, sentence) for each receiver rule broken; keys in the stack config's spelling,
    relative to the section (``receivers[0].url``)."""
    if not isinstance(receivers, list):
        return [("receivers", "must be a list of {name, type, ...}")]
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()
    for i, item in enumerate(receivers):
        where = f"receivers[{i}]"
        if not isinstance(item, Mapping):
            problems.append((where, "must be a mapping {name, type, ...}"))
            continue
        item = {RECEIVER_ALIASES.get(str(k), str(k)): v for k, v in item.items()}
        name = item.get("name")
        if not isinstance(name, str) or not RECEIVER_NAME_RE.match(name):
            problems.append((f"{where}.name", f"{name!r} is not a receiver name (letters, "
                                              "digits, '_', '.', '-')"))
        elif name in seen:
            problems.append((f"{where}.name", f"{name!r} names two receivers"))
        else:
            seen.add(name)
        kind = item.get("type", "webhook")
        if kind not in RECEIVER_TYPES:
            problems.append((f"{where}.type", f"{kind!r} is not a receiver type metalslurm "
                                              f"writes; it writes {', '.join(RECEIVER_TYPES)}"))
            continue
        given = set(item)
        allowed = {"name", "type", "sendResolved", *RECEIVER_FIELDS[kind]}
        for secret in sorted((given - allowed) & set(RECEIVER_SECRETS[kind])):
            problems.append((f"{where}.{secret}", f"{_a(kind)} receiver's {secret} is a "
                             "credential: give it in the alert secrets (metalslurm:alertSecrets "
                             f"or monitoring.secretsFile) under {name!r}, not in the config"))
        unknown = sorted(given - allowed - set(RECEIVER_SECRETS[kind]))
        if unknown:
            problems.append((where, f"unknown key(s) {', '.join(unknown)}; {_a(kind)} receiver "
                                    f"has {', '.join(sorted(allowed))}"))
        for field in RECEIVER_FIELDS[kind]:
            if field not in item:
                if field in RECEIVER_REQUIRED[kind]:
                    problems.append((f"{where}.{field}", f"{_a(kind)} receiver needs {field}"))
                continue
            wrong = _field_problem(kind, field, item[field])
            if wrong:
                problems.append((f"{where}.{field}", wrong))
        resolved = item.get("sendResolved", True)
        if not isinstance(resolved, bool):
            problems.append((f"{where}.sendResolved", f"{resolved!r} is not true or false"))
    return problems


def secrets_problems(receivers: list[Mapping[str, Any]], secrets: Any) -> list[str]:
    """Sentences for what the alert secrets (``{receiver name: {field: value}}``) lack or
    have wrong for ``receivers`` (already checked); values are never quoted."""
    if secrets is None:
        secrets = {}
    if not isinstance(secrets, Mapping) or not all(
            isinstance(v, Mapping) and all(isinstance(x, str) for x in v.values())
            for v in secrets.values()):
        return ["must map each receiver's name to {field: text} (url for webhook and slack, "
                "password for email)"]
    problems = []
    by_name = {str(r.get("name")): r for r in receivers if isinstance(r, Mapping)}
    for stranger in sorted(set(map(str, secrets)) - set(by_name)):
        problems.append(f"{stranger!r} names no receiver of metalslurm:monitoring.receivers")
    for name, receiver in by_name.items():
        kind = receiver.get("type", "webhook")
        mine = secrets.get(name, {})
        for field in sorted(set(map(str, mine)) - set(RECEIVER_SECRETS.get(kind, ()))):
            problems.append(f"{name}.{field}: {_a(kind)} receiver takes no {field} from the "
                            f"secrets ({', '.join(RECEIVER_SECRETS.get(kind, ())) or 'none'})")
        if kind in ("webhook", "slack"):
            if not mine.get("url"):
                problems.append(f"{name}.url: " + (
                    f"the Slack receiver {name!r} needs its incoming-webhook URL here"
                    if kind == "slack" else f"the webhook receiver {name!r} needs the URL "
                    "Alertmanager posts alerts to here (http:// or https://)"))
            elif not URL_RE.match(mine["url"]):
                problems.append(f"{name}.url: not an http:// or https:// URL")
        if kind == "email" and receiver.get("username") and not mine.get("password"):
            problems.append(f"{name}.password: the e-mail receiver {name!r} logs in as "
                            f"{receiver['username']!r} and needs its password here")
    return problems


def _normalised(receiver: Mapping[str, Any]) -> dict[str, Any]:
    receiver = {RECEIVER_ALIASES.get(str(k), str(k)): v for k, v in receiver.items()}
    kind = receiver.get("type", "webhook")
    out = {"name": receiver["name"], "type": kind,
           "send_resolved": receiver.get("sendResolved", True)}
    for field in RECEIVER_FIELDS[kind]:
        if field in receiver:
            out["require_tls" if field == "requireTls" else field] = receiver[field]
    if kind == "email":
        out.setdefault("require_tls", True)
    return out


# What a Slack message and an e-mail say (Alertmanager's Go templates): the alert and its
# node, then each alert's description, instead of the defaults' every common label value.
NOTICE_TITLE = ('[{{ .Status | toUpper }}{{ if eq .Status "firing" }}:{{ .Alerts.Firing | len }}'
                '{{ end }}] {{ .CommonLabels.alertname }}{{ if .CommonLabels.node }} on '
                '{{ .CommonLabels.node }}{{ end }} ({{ .CommonLabels.cluster }})')
NOTICE_TEXT = ('{{ range .Alerts }}{{ .Annotations.summary }}: {{ .Annotations.description }}\n'
               '{{ end }}')


def alertmanager_receiver(settings: Mapping[str, Any], secrets: Any) -> dict[str, Any]:
    """Alertmanager's one receiver (every alert goes to every configured receiver), with
    the credentials from ``secrets`` filled in; MonitoringSettingsError if they lack one."""
    problems = secrets_problems(settings["receivers"], secrets)
    if problems:
        raise MonitoringSettingsError("alert secrets: " + "; ".join(problems))
    secrets = secrets or {}
    out: dict[str, Any] = {"name": "metalslurm"}
    for r in settings["receivers"]:
        mine = secrets.get(r["name"], {})
        if r["type"] == "webhook":
            out.setdefault("webhook_configs", []).append(
                {"url": mine["url"], "send_resolved": r["send_resolved"]})
        elif r["type"] == "slack":
            out.setdefault("slack_configs", []).append(
                {"api_url": mine["url"], "channel": r["channel"],
                 "send_resolved": r["send_resolved"], "title": NOTICE_TITLE,
                 "text": NOTICE_TEXT})
        else:
            email = {"to": r["to"], "from": r["from"], "smarthost": r["smarthost"],
                     "require_tls": r["require_tls"], "send_resolved": r["send_resolved"],
                     "headers": {"Subject": NOTICE_TITLE}}
            if r.get("username"):
                email.update(auth_username=r["username"], auth_password=mine["password"])
            out.setdefault("email_configs", []).append(email)
    return out


def settings_problems(settings: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(inventory key, sentence) for every rule ``settings`` (all keys present) breaks."""
    problems: list[tuple[str, str]] = []

    def integer(name: str, minimum: int, maximum: int) -> None:
        value = settings[name]
        if not _is_int(value) or not minimum <= value <= maximum:
            problems.append((name, f"{value!r} is not a whole number of seconds from "
                                   f"{minimum} to {maximum}"))

    if not isinstance(settings["enabled"], bool):
        problems.append(("enabled", f"{settings['enabled']!r} is not true or false"))
    if not isinstance(settings["host"], str):
        problems.append(("host", f"{settings['host']!r} is not a host name"))
    integer("exporter_interval", MIN_EXPORTER_INTERVAL, 3600)
    integer("scrape_interval", 1, 3600)
    integer("pending_threshold", 60, 30 * 86400)
    integer("group_wait", 0, 3600)
    integer("group_interval", 1, 86400)
    integer("repeat_interval", 60, 30 * 86400)
    if (_is_int(settings["scrape_interval"]) and _is_int(settings["exporter_interval"])
            and settings["scrape_interval"] < settings["exporter_interval"]):
        problems.append(("scrape_interval", f"{settings['scrape_interval']} s is below the "
                         f"Slurm exporter's interval ({settings['exporter_interval']} s): "
                         "scrapes in between would only repeat its last answer; raise it to "
                         "the exporter's interval or more"))
    for name, rule, example in (("retention_time", DURATION_RE, "15d, 12h, 2w"),
                                ("retention_size", SIZE_RE, "500MB, 20GB, 1TB")):
        value = settings[name]
        if not isinstance(value, str) or not value or not rule.match(value):
            problems.append((name, f"{value!r} is not a Prometheus "
                                   f"{'duration' if name == 'retention_time' else 'size'} "
                                   f"(e.g. {example})"))
    ratio = settings["disk_free_ratio"]
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio < 1:
        problems.append(("disk_free_ratio", f"{ratio!r} is not a fraction between 0 and 1 "
                                            "(e.g. 0.1)"))
    problems += [(key.replace("sendResolved", "send_resolved"), sentence)
                 for key, sentence in receiver_problems(settings["receivers"])]
    return problems


def monitoring_settings(given: Mapping[str, Any] | None) -> dict[str, Any]:
    """``given`` (the inventory's ``metalslurm_monitoring``, or part of it) over the defaults,
    every rule checked; receivers normalised to ``{name, type, send_resolved}`` and their
    type's fields in snake case."""
    given = dict(given or {})
    unknown = sorted(set(map(str, given)) - set(DEFAULTS))
    if unknown:
        raise MonitoringSettingsError(
            f"metalslurm_monitoring: unknown setting(s) {', '.join(unknown)}; monitoring has "
            f"{', '.join(DEFAULTS)}")
    settings = {**DEFAULTS, **given}
    problems = settings_problems(settings)
    if problems:
        raise MonitoringSettingsError("; ".join(f"metalslurm_monitoring.{key}: {sentence}"
                                                for key, sentence in problems))
    settings["receivers"] = [_normalised(r) for r in settings["receivers"]]
    return settings


def rule_values(settings: Mapping[str, Any], shared_paths: list[str]) -> dict[str, Any]:
    """The values the alert rules' template reads (roles/monitoring, ``[[ name ]]``)."""
    return {
        "pending_threshold": settings["pending_threshold"],
        "disk_free_ratio": settings["disk_free_ratio"],
        # A regular expression that matches nothing when there is no shared storage.
        "shared_paths_regex": "|".join(re.escape(p) for p in shared_paths) or "^$",
        "critical_xids_regex": "|".join(str(x) for x in CRITICAL_XIDS),
    }
