"""Defaults that several roles, and the stack parser, must agree on.

Each is written once here (as kubespray keeps the defaults many roles share in one role,
``kubespray_defaults``): the roles read them through this file's filters
(plugins/filter/cluster_defaults.py: ``(none | metalslurm.cluster.cluster_defaults).slurmdbd_port``,
``metalslurm_accounting | metalslurm.cluster.accounting_settings``), ``infra/`` imports them.
A role that installs a program and the role that names it in slurm.conf thus take the
same path, and slurmdbd listens on the port slurmctld talks to, without either role
reading the other's variables.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.elastic import JOIN_DIR

__all__ = ["ACCEPT_DEFAULTS", "ACCEPT_REASON_PREFIX", "ACCOUNTING_DEFAULTS", "DEFAULTS",
           "DEFAULT_JOB_TIME", "HA_STATE_MOUNT", "MUNGE_MIN_KEY_BYTES", "PROGRAMS_DIR",
           "SLURMCTLD_PORT", "SLURMDBD_PORT", "SLURMD_PORT", "SLURM_GID", "SRUN_PORT_RANGE",
           "accept_gate", "accept_settings", "accounting_settings", "cluster_defaults"]

# slurmctld's and slurmd's ports (SlurmctldPort, SlurmdPort: slurm_common; the host
# firewall's openings: module_utils/firewall.py); Slurm's own defaults.
SLURMCTLD_PORT = 6817
SLURMD_PORT = 6818
# The ports srun listens on for slurmctld's and the steps' messages (SrunPortRange), fixed
# so a host firewall can let them in: 3,000 ports (each srun takes a few), above Linux's
# ephemeral range (32768-60999), so no outgoing connection holds one srun wants.
SRUN_PORT_RANGE = "61001-64000"
# slurmdbd's port: DbdPort (slurmdbd role) and AccountingStoragePort (slurm_controller role);
# Slurm's own default.
SLURMDBD_PORT = 6819
# Where the programs Slurm runs are installed or linked (HealthCheckProgram, Prolog,
# Epilog, ResumeProgram and friends).
PROGRAMS_DIR = "/usr/local/sbin"
# DefaultTime of a partition that gives none (capped at its MaxTime): jobs without --time
# get a bounded limit that GPU-minute budgets can cover.
DEFAULT_JOB_TIME = "1-00:00:00"
# Slurm's log directory on every Slurm node (slurm_common; slurm_elastic's power log).
LOG_DIR = "/var/log/slurm"
# The slurm user and group, with the same IDs on every node (64030 is Debian's own): the
# common role creates them, slurm_common runs Slurm as them, the local provider gives the
# podman socket's directory to the group.
SLURM_USER = "slurm"
SLURM_UID = 64030
SLURM_GID = 64030
# munged refuses shorter keys (the key_file module on the node, infra/stack/state.py before it
# writes a key file); Slurm's JWT keys are as long.
MUNGE_MIN_KEY_BYTES = 32
# Where both controllers mount the storage that holds slurmctld's state when the inventory
# has a backup controller (an NFS export of the nfs_server host; the local provider's host
# directory): StateSaveLocation is a directory inside it (slurm_controller), never the mount
# point itself, as a restore renames the state directory within its parent.
HA_STATE_MOUNT = "/var/lib/slurm/ha"

DEFAULTS: dict[str, Any] = {
    "slurmctld_port": SLURMCTLD_PORT,
    "slurmd_port": SLURMD_PORT,
    "srun_port_range": SRUN_PORT_RANGE,
    "slurmdbd_port": SLURMDBD_PORT,
    "programs_dir": PROGRAMS_DIR,
    # The node health checker (slurm_health installs it, slurm.conf's HealthCheckProgram).
    "health_program": f"{PROGRAMS_DIR}/metalslurm-health",
    # Slurm's Prolog and Epilog (monitoring_node installs them, slurm.conf names them).
    "job_prolog": f"{PROGRAMS_DIR}/metalslurm-prolog",
    "job_epilog": f"{PROGRAMS_DIR}/metalslurm-epilog",
    "default_job_time": DEFAULT_JOB_TIME,
    "log_dir": LOG_DIR,
    "slurm_user": SLURM_USER,
    "slurm_uid": SLURM_UID,
    "slurm_gid": SLURM_GID,
    # The join kit's directory on the controller (launch-terminate nodes): slurm_elastic
    # removes it when the stack has none.
    "join_dir": JOIN_DIR,
    "ha_state_mount": HA_STATE_MOUNT,
}

# slurmdbd accounting (``metalslurm_accounting``, the stack config's
# ``metalslurm:accounting``) for what an inventory leaves out: infra/stack/accounting.py
# fills the stack's keys from here; the slurmdbd and slurm_accounting roles merge a
# hand-written inventory's value over it (filter ``accounting_settings``).
ACCOUNTING_DEFAULTS: dict[str, Any] = {
    "database_host": "",  # empty: MariaDB on the slurmdbd host, on 127.0.0.1 only
    "database_port": 3306,
    "database_name": "slurm_acct_db",
    "database_user": "slurm",
    "accounts": [],
    "qos": [],
    # Remove what metalslurm made earlier and the config no longer lists.
    "prune": True,
}

# The acceptance gate's key the roles read (``metalslurm_accept.gate``): a node that
# registers for the first time (slurm_compute), or that was rebooted onto a new NVIDIA driver
# (nvidia_gpu), is drained with the gate's prefix and waits for a run of 'metalslurm accept'.
# infra/stack/accept.py fills the stack's key from here; the roles merge over it (filter
# ``accept_settings``).
ACCEPT_DEFAULTS: dict[str, Any] = {"gate": False}
# The drain reason's first word on a node the gate holds: 'metalslurm accept' takes (and
# alone returns) the nodes drained with it (infra/accept/verdicts.py).
ACCEPT_REASON_PREFIX = "metalslurm-accept:"


def cluster_defaults(_: Any = None) -> dict[str, Any]:
    """The shared defaults, a copy (a filter's input is ignored: ``none | cluster_defaults``)."""
    return dict(DEFAULTS)


def accounting_settings(value: Mapping[str, Any] | None) -> dict[str, Any]:
    """``metalslurm_accounting`` over :data:`ACCOUNTING_DEFAULTS` (a key it gives stays its
    own)."""
    merged = {k: (list(v) if isinstance(v, list) else v) for k, v in ACCOUNTING_DEFAULTS.items()}
    merged.update(value or {})
    return merged


def accept_settings(value: Mapping[str, Any] | None) -> dict[str, Any]:
    """``metalslurm_accept`` over :data:`ACCEPT_DEFAULTS` (a key it gives stays its own)."""
    return {**ACCEPT_DEFAULTS, **(value or {})}


def accept_gate(_: Any = None) -> dict[str, str]:
    """What the roles need of the gate itself (a filter's input is ignored)."""
    return {"reason_prefix": ACCEPT_REASON_PREFIX}
