"""The scale lab: the real slurmctld of Debian 13 (Slurm 24.11) with hundreds to thousands of
simulated 8-GPU nodes, each a real slurmd, in one container, configured with the slurm.conf,
gres.conf and topology.conf this project renders. See docs/lab/scale-lab.md.

    .venv/bin/python -m bench.scale --nodes 128,512,1024 --jobs 10000
"""
