"""Monitoring: the settings over their defaults (module_utils/monitoring.py), and the scrape
targets Prometheus reads from files (file-based service discovery) for the monitoring role."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Any

import bcrypt
from ansible.utils.unsafe_proxy import wrap_var
from ansible_collections.metalslurm.cluster.plugins.module_utils import monitoring
from ansible_collections.metalslurm.cluster.plugins.plugin_utils.filters import (
    filter_errors,
    hostvar,
)

# The role label of a host in several groups: the first of these it is in.
ROLE_OF_GROUP = (("slurm_controller", "controller"), ("slurmdbd", "slurmdbd"),
                 ("slurm_controller_backup", "backup-controller"),
                 ("nfs_server", "nfs"), ("login", "login"), ("slurm_compute", "compute"))


def node_targets(groups: Mapping[str, Any], hostvars: Any, port: int) -> list[dict[str, Any]]:
    """One file_sd entry per node of the cluster: its private address and port, and the
    labels the alert rules join on (``node``: the inventory and Slurm name; ``role``;
    ``elastic``: "true" for a cloud node Slurm powers down when idle)."""
    targets = []
    seen: set[str] = set()
    for group, role in ROLE_OF_GROUP:
        for host in groups.get(group) or []:
            if host in seen:
                continue
            seen.add(host)
            address = hostvar(hostvars, host, "metalslurm_address") or host
            elastic = hostvar(hostvars, host, "metalslurm_node_state", "static") == "cloud"
            targets.append({"targets": [f"{address}:{port}"],
                            "labels": {"node": host, "role": role,
                                       "elastic": "true" if elastic else "false"}})
    return sorted(targets, key=lambda t: t["labels"]["node"])


def slurm_targets(groups: Mapping[str, Any], hostvars: Any, port: int) -> list[dict[str, Any]]:
    """The Slurm exporters to scrape: the controller's, and the backup controller's (which
    runs with --standby), labelled as node_targets labels those hosts."""
    hosts = [*(groups.get("slurm_controller") or [])[:1],
             *(groups.get("slurm_controller_backup") or [])]
    return [entry for entry in node_targets(groups, hostvars, port)
            if entry["labels"]["node"] in hosts]


def dcgm_targets(groups: Mapping[str, Any], hostvars: Any, previous: Any) -> list[dict[str, Any]]:
    """The DCGM exporters to scrape: each compute node's that published one in this run
    (``metalslurm_node.dcgm_exporter``, its private address and port: nvidia_gpu), and for a
    node not in this run (an elastic node asleep, a ``--limit``), its entry in ``previous``
    (the targets file as it is on the monitoring host), so a sleeping node keeps its target.
    A node that ran without one (no NVIDIA GPU, DCGM off) or left the inventory has none."""
    kept = {}
    for entry in previous if isinstance(previous, list) else []:
        node = (entry.get("labels") or {}).get("node") if isinstance(entry, Mapping) else None
        if node:
            kept[node] = entry
    targets = []
    for host in groups.get("slurm_compute") or []:
        facts = hostvar(hostvars, host, "metalslurm_node")
        if not isinstance(facts, Mapping):
            if host in kept:
                targets.append(kept[host])
            continue
        if facts.get("dcgm_exporter"):
            elastic = hostvar(hostvars, host, "metalslurm_node_state", "static") == "cloud"
            targets.append({"targets": [facts["dcgm_exporter"]],
                            "labels": {"node": host, "role": "compute",
                                       "elastic": "true" if elastic else "false"}})
    return sorted(targets, key=lambda t: t["labels"]["node"])


def alertmanager_receiver(settings: Mapping[str, Any], secrets: Any) -> Any:
    """module_utils' receiver, marked unsafe: its Go templates ({{ .Status }}) and the
    credentials are text for Alertmanager, never Jinja for Ansible to evaluate."""
    return wrap_var(monitoring.alertmanager_receiver(settings, secrets))


def monitoring_ports(_: Any = None) -> dict[str, int]:
    """The ports each part listens on (module_utils/monitoring.py owns them)."""
    return dict(monitoring.PORTS)


_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_BCRYPT_B64 = "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def web_password_hash(password: str, cost: int = 10) -> str:
    """The bcrypt hash Prometheus' and Alertmanager's web config (basic_auth_users) holds.

    The salt is derived from the password, so the same password gives the same hash and a
    converged run changes nothing; the password is 32 random characters (the secrets
    directory's), so a derived salt gives an attacker holding the hash nothing a random one
    would not. Cost 10: Prometheus checks it on every request it has not cached."""
    digest = hashlib.sha256(b"metalslurm-web:" + password.encode()).digest()[:16]
    salt = base64.b64encode(digest).decode().rstrip("=").translate(
        str.maketrans(_B64, _BCRYPT_B64))[:22]
    return bcrypt.hashpw(password.encode(), f"$2b${cost:02d}${salt}".encode()).decode()


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "monitoring_settings": filter_errors(monitoring.MonitoringSettingsError)(
                monitoring.monitoring_settings),
            "monitoring_alertmanager_receiver": filter_errors(
                monitoring.MonitoringSettingsError)(alertmanager_receiver),
            "monitoring_node_targets": node_targets,
            "monitoring_slurm_targets": slurm_targets,
            "monitoring_dcgm_targets": dcgm_targets,
            "monitoring_ports": monitoring_ports,
            "monitoring_rule_values": monitoring.rule_values,
            "web_password_hash": web_password_hash,
        }
