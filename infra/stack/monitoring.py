"""``metalslurm:monitoring``: Prometheus, Alertmanager and the exporters (roles/monitoring,
roles/monitoring_node, roles/slurm_exporter).

The defaults of keys left out and the rules each value follows are the collection's
(``module_utils/monitoring.py``), which the roles read too (a hand-written inventory is held
to the same rules); this module maps the stack's camelCase keys onto them, adds the rule only
the stack knows (the monitoring host must be one of the cluster's machines) and reports every
problem with the stack key to change.
"""

from __future__ import annotations

import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.metalslurm.cluster.plugins.module_utils.monitoring import (
    DEFAULTS as MONITORING_DEFAULTS,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.monitoring import (
    RECEIVER_SECRETS,
    STACK_NAMES,
    secrets_problems,
    settings_problems,
)

from infra.stack.schema import Collector
from infra.stack.schema import key as stack_key

_INVENTORY_NAME = {camel: snake for snake, camel in STACK_NAMES.items()}


@dataclass(frozen=True)
class MonitoringSettings:
    """``metalslurm:monitoring``, parsed: ``given`` holds the keys the stack sets; the
    inventory gets them over the defaults table (the roles read the same table)."""

    given: Mapping[str, Any] = field(default_factory=dict)
    # The receivers' credentials from a file on this machine (monitoring.secretsFile; the
    # alternative to the secret metalslurm:alertSecrets), absolute; "" for none.
    secrets_file: str = ""

    @property
    def needs_secrets(self) -> bool:
        """Whether a receiver takes a credential (a webhook's or Slack's URL, an SMTP
        login's password)."""
        receivers = self.given.get("receivers")
        return isinstance(receivers, list) and any(
            r.get("type", "webhook") in ("webhook", "slack")
            or (r.get("type") == "email" and bool(r.get("username")))
            for r in receivers if isinstance(r, Mapping))

    @property
    def enabled(self) -> bool:
        return bool(self.given.get("enabled", MONITORING_DEFAULTS["enabled"]))

    def inventory_vars(self) -> dict[str, Any]:
        return {**MONITORING_DEFAULTS, **self.given}


def read_alert_secrets(text: str) -> Any:
    """The alert secrets as given (YAML or JSON); ValueError when neither."""
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError:
        raise ValueError("not YAML or JSON") from None


def _secrets_file(c: Collector, value: Any, where: str, base_dir: Path | None,
                  receivers: list[Any]) -> str:
    """The file's absolute path, after checking it is a private, readable mapping with
    every credential the receivers need; "" (and problems in ``c``) otherwise."""
    if not isinstance(value, str) or not value.strip():
        c.problem(where, f"{value!r} is not a path")
        return ""
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = (base_dir or Path.cwd()) / path
    try:
        mode = path.stat().st_mode
        text = path.read_text()
    except OSError as exc:
        c.problem(where, f"cannot read {path}: {exc.strerror}")
        return ""
    except UnicodeDecodeError:
        c.problem(where, f"{path} is not UTF-8 text (a binary file?); give YAML or JSON "
                  "{<receiver>: {url: ...} or {password: ...}}")
        return ""
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        c.problem(where, f"{path} is readable by other users (mode {stat.S_IMODE(mode):o}); "
                  f"run 'chmod 600 {path}'")
    try:
        secrets = read_alert_secrets(text)
    except ValueError:
        c.problem(where, f"{path} is not YAML or JSON")
        return ""
    for sentence in secrets_problems([r for r in receivers if isinstance(r, Mapping)],
                                     secrets):
        c.problem(where, sentence)
    return str(path.resolve())


def parse_monitoring(c: Collector, raw: Mapping[str, Any], hosts: Iterable[str],
                     elastic: Iterable[str] = (), base_dir: Path | None = None,
                     secret_given: bool = False) -> MonitoringSettings:
    """The section, every problem recorded in ``c`` with its stack key; ``hosts``: the names
    of the cluster's machines (the monitoring host must be one of them); ``elastic``: those
    Slurm powers down when idle (it must not be one of those); ``base_dir``: what a relative
    secretsFile is relative to (the stack file's directory); ``secret_given``: whether the
    stack has the secret metalslurm:alertSecrets (opaque here: Pulumi checks it at 'up')."""
    where = stack_key("monitoring")
    item = c.mapping(raw, "monitoring", where)
    c.unknown_keys(item, (*STACK_NAMES.values(), "secretsFile"), where)
    given = {_INVENTORY_NAME[k]: v for k, v in item.items() if k in _INVENTORY_NAME}
    for name, sentence in settings_problems({**MONITORING_DEFAULTS, **given}):
        stack_name = STACK_NAMES.get(name, name).replace("send_resolved", "sendResolved")
        c.problem(f"{where}.{stack_name}", sentence)
    host = given.get("host")
    names = sorted(hosts)
    if isinstance(host, str) and host and host not in names:
        c.problem(f"{where}.host", f"{host!r} is not a machine of this cluster; name one of "
                  f"{', '.join(names)} (or leave it out: the controller)")
    elif isinstance(host, str) and host in set(elastic):
        c.problem(f"{where}.host", f"{host!r} is an elastic node: Slurm powers it down when "
                  "idle, and Prometheus with it; name a static machine (or leave it out: the "
                  "controller)")
    listed = given.get("receivers")
    receivers: list[Any] = listed if isinstance(listed, list) else []
    secrets_file = ""
    if "secretsFile" in item:
        secrets_file = _secrets_file(c, item["secretsFile"], f"{where}.secretsFile", base_dir,
                                     receivers)
        if secret_given:
            c.problem(stack_key("alertSecrets"), f"and {where}.secretsFile are both set: keep "
                      "one")
    settings = MonitoringSettings(given=given, secrets_file=secrets_file)
    if settings.needs_secrets and not secrets_file and not secret_given \
            and "secretsFile" not in item:
        kinds = " and ".join(f"{kind} ({', '.join(fields)})"
                             for kind, fields in RECEIVER_SECRETS.items() if fields)
        c.problem(f"{where}.receivers", "a receiver needs credentials that the config must "
                  f"not hold ({kinds}): set the secret {stack_key('alertSecrets')} ('pulumi "
                  f"config set --secret --path ...') or {where}.secretsFile, a 0600 YAML "
                  "file {<receiver>: {url: ...} or {password: ...}}")
    return settings
