"""``python3 -m metalslurm_power.reconcile``: see metalslurm_power.cli."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main("reconcile"))
