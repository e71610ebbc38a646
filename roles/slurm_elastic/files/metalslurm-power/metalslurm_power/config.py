"""The controller-side power config (written by the slurm_elastic role, mode 0600, owner slurm).

Shape (YAML, or JSON, which is YAML too)::

    log_file: /var/log/slurm/metalslurm-power.log
    state_file: /var/log/slurm/metalslurm-power.state.json   # optional
    batch_size: 50
    dry_run: false
    slurm_bin: /usr/bin
    settle_timeout: 180      # seconds to wait for slurmctld to finish a forced power down
    power_on_attempts: 3     # a failed power on is tried again, this many calls in all
    power_on_retry_delay: 5  # seconds between them
    status_batches: 4        # batches whose power state is read at once (the reconciler)
    stuck_after: 1200        # required: seconds a node may stay POWERING_UP with its machine off
    orphan_after: 1200       # required: seconds a machine may be on while its node is powered down
    nodes:
      gpu-001: {driver: local, container: ms-gpu-001, network: ms-net}
      gpu-002: {driver: redfish, endpoint: https://10.0.0.2, system_id: /redfish/v1/Systems/1}
      gpu-003: {driver: ipmi, address: 10.0.0.3, port: 623}
      gpu-004: {driver: oci, mode: start-stop, instance_id: ocid1.instance...}
    credentials:
      default: {username: admin, password: secret}
      gpu-003: {username: root, password: other}

``stuck_after`` (Slurm's ResumeTimeout) and ``orphan_after`` have no default here: they
depend on the provider's machines, and their one owner is the table of power-saving
timings by provider (the metalslurm.cluster collection's module_utils/elastic.py), from
which the slurm_elastic role writes them. A config file without them is refused, rather
than run with a figure that fits no provider.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_CONFIG = "/etc/slurm/metalslurm-power.yaml"
DRIVERS = ("local", "redfish", "ipmi", "oci")
# How the local and oci drivers power a node: the first is each driver's default.
POWER_MODES = ("start-stop", "launch-terminate")
REQUIRED_PARAMS: dict[str, tuple[str, ...]] = {
    "local": ("container",),
    "redfish": ("endpoint",),
    "ipmi": ("address",),
    "oci": (),
}


# Times that depend on the provider's machines: never defaulted here (see above).
REQUIRED_TIMES = ("stuck_after", "orphan_after")


class ConfigError(Exception):
    """The power config is missing or wrong; the message lists every problem."""


@dataclass(frozen=True)
class PowerConfig:
    log_file: Path
    state_file: Path
    stuck_after: float   # seconds (ResumeTimeout); required in the config file
    orphan_after: float  # seconds; required in the config file
    batch_size: int = 50
    dry_run: bool = False
    slurm_bin: str = "/usr/bin"
    settle_timeout: float = 180.0
    poll_interval: float = 2.0
    # A BMC that times out once must not cost a job its nodes: slurmctld requeues a job as
    # soon as one of its nodes is returned (POWER_DOWN_FORCE), with BeginTime two minutes
    # ahead, and ResumeRate lets the next nodes go only a few at a time (docs/lab/scale-lab.md).
    power_on_attempts: int = 3
    power_on_retry_delay: float = 5.0
    # Power-state reads (the reconciler's, every node each run) of this many batches at once.
    status_batches: int = 4
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    credentials: dict[str, dict[str, str]] = field(default_factory=dict, repr=False)
    # Machines made anew (launch-terminate) are configured by the controller: a resume
    # leaves a request for each in this directory (metalslurm-join takes them).
    join_requests: Path | None = None

    def launched(self, node: str) -> bool:
        """Whether ``node``'s machine is made anew on each resume (launch-terminate)."""
        return (self.nodes.get(node) or {}).get("mode") == POWER_MODES[1]

    def driver_of(self, node: str) -> str | None:
        params = self.nodes.get(node)
        return None if params is None else str(params["driver"])


def _parse_text(text: str) -> Any:
    if text.lstrip().startswith("{"):
        return json.loads(text)
    import yaml  # PyYAML (python3-yaml); only needed for YAML-syntax configs

    return yaml.safe_load(text)


def load_config(path: str | os.PathLike[str]) -> PowerConfig:
    try:
        raw = _parse_text(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read power config: {exc.strerror}") from exc
    except ValueError as exc:  # json.JSONDecodeError and yaml.YAMLError subclasses
        raise ConfigError(f"{path}: not valid YAML/JSON: {exc}") from exc
    return parse_config(raw, str(path))


def _counts(raw: dict[str, Any], problems: list[str]) -> dict[str, int]:
    """batch_size, power_on_attempts and status_batches: whole numbers >= 1 (1 when bad)."""
    counts: dict[str, int] = {}
    for key, default_count in (("batch_size", 50), ("power_on_attempts", 3),
                               ("status_batches", 4)):
        count = raw.get(key, default_count)
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            problems.append(f"{key}: must be an integer >= 1, got {count!r}")
            count = 1
        counts[key] = count
    return counts


def _seconds(raw: dict[str, Any], problems: list[str]) -> dict[str, float]:
    """The times, in seconds >= 0 (the default when bad); the provider's two required."""
    for key in REQUIRED_TIMES:
        if key not in raw:
            problems.append(f"{key}: required (seconds; the slurm_elastic role writes it from "
                            "metalslurm_elastic)")
    numbers: dict[str, float] = {}
    for key, default in (("settle_timeout", 180.0), ("stuck_after", 0.0),
                         ("orphan_after", 0.0), ("poll_interval", 2.0),
                         ("power_on_retry_delay", 5.0)):
        value = raw.get(key, default)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            problems.append(f"{key}: must be a number of seconds >= 0, got {value!r}")
            value = default
        numbers[key] = float(value)
    return numbers


def _node_problems(name: str, params: Any) -> list[str]:
    """What is wrong with one node's driver parameters."""
    if not isinstance(params, dict):
        return [f"nodes.{name}: must be a mapping with a 'driver' key"]
    driver = params.get("driver")
    if driver not in DRIVERS:
        return [f"nodes.{name}.driver: {driver!r} is not one of {', '.join(DRIVERS)}"]
    problems = [f"nodes.{name}.{key}: required by the {driver} driver"
                for key in REQUIRED_PARAMS[driver] if not params.get(key)]
    if driver == "oci":
        problems.extend(_oci_problems(name, params))
    if driver == "local" and params.get("mode", POWER_MODES[0]) not in POWER_MODES:
        problems.append(f"nodes.{name}.mode: {params['mode']!r} is not "
                        f"{' or '.join(POWER_MODES)}")
    return problems


def _oci_problems(name: str, params: dict[str, Any]) -> list[str]:
    """An oci node's mode, and the parameters that mode needs."""
    mode = params.get("mode", POWER_MODES[0])
    if mode not in POWER_MODES:
        return [f"nodes.{name}.mode: {mode!r} is not {' or '.join(POWER_MODES)}"]
    need = ("instance_id",) if mode == "start-stop" else (
        "compartment_id", "availability_domain", "shape", "image_id", "subnet_id")
    return [f"nodes.{name}.{key}: required by oci mode {mode}"
            for key in need if not params.get(key)]


def parse_config(raw: Any, source: str = "config") -> PowerConfig:
    problems: list[str] = []
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: must be a mapping, got {type(raw).__name__}")
    log_file = Path(raw.get("log_file") or "/var/log/slurm/metalslurm-power.log")
    state_file = Path(raw.get("state_file") or log_file.with_suffix(".state.json"))
    counts = _counts(raw, problems)
    dry_run = raw.get("dry_run", False)
    if not isinstance(dry_run, bool):
        problems.append(f"dry_run: must be true or false, got {dry_run!r}")
    numbers = _seconds(raw, problems)
    nodes = raw.get("nodes") or {}
    if not isinstance(nodes, dict):
        problems.append("nodes: must be a mapping of node name to driver parameters")
        nodes = {}
    for name, params in nodes.items():
        problems.extend(_node_problems(name, params))
    credentials = raw.get("credentials") or {}
    if not isinstance(credentials, dict) or not all(
            isinstance(v, dict) for v in credentials.values()):
        problems.append("credentials: must map a node name or 'default' to {username, password}")
        credentials = {}
    join = raw.get("join") or {}
    if not isinstance(join, dict) or not str(join.get("requests", "/")).startswith("/"):
        problems.append("join: must be {requests: an absolute directory}")
        join = {}
    if problems:
        raise ConfigError(f"{source}: {len(problems)} problem(s):\n  - " + "\n  - ".join(problems))
    return PowerConfig(
        log_file=log_file, state_file=state_file, batch_size=counts["batch_size"],
        dry_run=bool(dry_run), slurm_bin=str(raw.get("slurm_bin", "/usr/bin") or ""),
        settle_timeout=numbers["settle_timeout"], stuck_after=numbers["stuck_after"],
        orphan_after=numbers["orphan_after"], poll_interval=numbers["poll_interval"],
        power_on_attempts=counts["power_on_attempts"],
        power_on_retry_delay=numbers["power_on_retry_delay"],
        status_batches=counts["status_batches"],
        nodes=dict(nodes),
        credentials={str(k): dict(v) for k, v in credentials.items()},
        join_requests=Path(join["requests"]) if join.get("requests") else None,
    )
