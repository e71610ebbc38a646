"""Slurm power saving on the controller: ResumeProgram, SuspendProgram, ResumeFailProgram
and a reconciler, calling one power driver per node (local podman, Redfish, IPMI, OCI).

Standard library only at import time; each driver imports its client library when used.
Programs: the console scripts ``metalslurm-{resume,suspend,resume-fail,reconcile}``
(``pyproject.toml``, entry functions in ``metalslurm_power.cli``).
"""
