"""Defaults that several roles, and the stack parser, must agree on.

Each is written once here (as kubespray keeps the defaults many roles share in one role,
``kubespray_defaults``): the roles read them through the ``cluster_defaults`` filter
(``(none | metalslurm.cluster.cluster_defaults).slurmdbd_port``), ``infra/`` imports them.
A role that installs a program and the role that names it in slurm.conf thus take the
same path, and slurmdbd listens on the port slurmctld talks to, without either role
reading the other's variables.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DEFAULTS", "DEFAULT_JOB_TIME", "PROGRAMS_DIR", "SLURMDBD_PORT", "SLURM_GID",
           "cluster_defaults"]

# slurmdbd's port: DbdPort (slurmdbd role) and AccountingStoragePort (slurm_controller role);
# Slurm's own default.
SLURMDBD_PORT = 6819
# Where the programs Slurm runs are installed or linked (HealthCheckProgram, Prolog,
# Epilog, ResumeProgram and friends).
PROGRAMS_DIR = "/usr/local/sbin"
# DefaultTime of a partition that gives none (capped at its MaxTime): jobs without --time
# get a bounded limit that GPU-minute budgets can cover.
DEFAULT_JOB_TIME = "1-00:00:00"
# The slurm user and group, with the same IDs on every node (64030 is Debian's own): the
# common role creates them, slurm_common runs Slurm as them, the local provider gives the
# podman socket's directory to the group.
SLURM_USER = "slurm"
SLURM_UID = 64030
SLURM_GID = 64030

DEFAULTS: dict[str, Any] = {
    "slurmdbd_port": SLURMDBD_PORT,
    "programs_dir": PROGRAMS_DIR,
    # The node health checker (slurm_health installs it, slurm.conf's HealthCheckProgram).
    "health_program": f"{PROGRAMS_DIR}/metalslurm-health",
    # Slurm's Prolog and Epilog (monitoring_node installs them, slurm.conf names them).
    "job_prolog": f"{PROGRAMS_DIR}/metalslurm-prolog",
    "job_epilog": f"{PROGRAMS_DIR}/metalslurm-epilog",
    "default_job_time": DEFAULT_JOB_TIME,
    "slurm_user": SLURM_USER,
    "slurm_uid": SLURM_UID,
    "slurm_gid": SLURM_GID,
}


def cluster_defaults(_: Any = None) -> dict[str, Any]:
    """The shared defaults, a copy (a filter's input is ignored: ``none | cluster_defaults``)."""
    return dict(DEFAULTS)
