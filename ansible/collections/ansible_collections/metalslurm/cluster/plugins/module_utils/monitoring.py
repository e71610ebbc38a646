"""The monitoring settings (``metalslurm_monitoring``): the one table of their defaults, and
the rules a value must follow.

Owner of these defaults and rules. They are read by:

- the operator's stack parser (``infra/monitoring_config.py``: ``metalslurm:monitoring`` keys
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
    "receivers": [],            # [{name, type: webhook, url, send_resolved}]
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
PORTS = {"prometheus": 9090, "alertmanager": 9093, "node_exporter": 9100, "slurm_exporter": 9341}
# The Slurm exporter asks Slurm at most once per exporter_interval; below this it would
# cost slurmctld more than it tells (5 Slurm commands per refresh).
MIN_EXPORTER_INTERVAL = 5
# Xid errors the GPU alert fires on: the health checker's list (roles/slurm_health's
# metalslurm-health DEFAULT_CRITICAL_XIDS is their owner; tests/unit/test_setting_owners.py
# keeps this copy equal to it).
CRITICAL_XIDS = (48, 61, 62, 63, 64, 68, 69, 73, 74, 79, 92, 94, 95, 119, 120, 140)
RECEIVER_TYPES = ("webhook",)
RECEIVER_KEYS = ("name", "type", "url", "sendResolved")
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


def receiver_problems(receivers: Any) -> list[tuple[str, str]]:
    """(key, sentence) for each receiver rule broken; keys in the stack config's spelling,
    relative to the section (``receivers[0].url``)."""
    if not isinstance(receivers, list):
        return [("receivers", "must be a list of {name, type, url}")]
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()
    for i, item in enumerate(receivers):
        where = f"receivers[{i}]"
        if not isinstance(item, Mapping):
            problems.append((where, "must be a mapping {name, type, url}"))
            continue
        unknown = sorted(set(map(str, item)) - set(RECEIVER_KEYS) - {"send_resolved"})
        if unknown:
            problems.append((where, f"unknown key(s) {', '.join(unknown)}; a receiver has "
                                    f"{', '.join(RECEIVER_KEYS)}"))
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
        url = item.get("url")
        if not url:
            problems.append((f"{where}.url", "a webhook receiver needs the URL Alertmanager "
                                             "posts alerts to (http:// or https://)"))
        elif not isinstance(url, str) or not URL_RE.match(url):
            problems.append((f"{where}.url", f"{url!r} is not an http:// or https:// URL"))
        resolved = item.get("sendResolved", item.get("send_resolved", True))
        if not isinstance(resolved, bool):
            problems.append((f"{where}.sendResolved", f"{resolved!r} is not true or false"))
    return problems


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
    every rule checked; receivers normalised to ``{name, type, url, send_resolved}``."""
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
    settings["receivers"] = [
        {"name": r["name"], "type": r.get("type", "webhook"), "url": r["url"],
         "send_resolved": r.get("send_resolved", r.get("sendResolved", True))}
        for r in settings["receivers"]]
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
