"""Slurm power saving on the controller: ResumeProgram, SuspendProgram, ResumeFailProgram
and a reconciler, calling one power driver per node (local podman, Redfish, IPMI, OCI).

Standard library only at import time; each driver imports its client library when used.
Programs: ``python3 -m metalslurm_power.{resume,suspend,resume_fail,reconcile}``.
"""

__version__ = "0.1.0"
