#!/bin/bash
# Build the CPU training examples' Python environment (JAX for spot-safe, Ray for
# ray-sweep) once per cluster, on shared storage, so every node runs the same one and no
# node image carries it:
#
#   srun --nodes=1 --ntasks=1 examples/setup-train-env.sh          # on a compute node
#   TRAIN_ENV=/shared/envs/train-cpu examples/setup-train-env.sh   # or where the OS matches
#
# It builds with the node's own python3 (the environment only runs on nodes with the same
# OS release), from python/requirements-train-cpu.txt (every package pinned). Offline, point
# pip at a directory of wheels: PIP_NO_INDEX=1 PIP_FIND_LINKS=/shared/wheelhouse.
#
# Running it again is safe: an environment built from the same requirements and Python is
# left alone; one that is half-built (an interrupted run) or out of date is rebuilt. Jobs
# only use an environment whose stamp file says it is complete.
set -euo pipefail
EXAMPLES=${METALSLURM_EXAMPLES:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
# shellcheck source=lib/preflight.sh
source "$EXAMPLES/lib/preflight.sh"

TRAIN_ENV=${TRAIN_ENV:-/shared/envs/train-cpu}
PYTHON=${PYTHON:-python3}
requirements="$EXAMPLES/python/requirements-train-cpu.txt"

ms_require_command "$PYTHON" "install python3"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 12))' \
    || ms_die "$("$PYTHON" -V 2>&1) on $(hostname -s) is too old for JAX 0.12 (Python >= 3.12:" \
        "Debian 13, Ubuntu 24.04); pin an older jax in ${requirements} for this OS"
"$PYTHON" -c 'import ensurepip, venv' 2>/dev/null \
    || ms_die "$PYTHON on $(hostname -s) cannot create virtual environments: install python3-venv"
parent=$(dirname "$TRAIN_ENV")
mkdir -p "$parent" 2>/dev/null || true
ms_require_shared_dir "$parent" TRAIN_ENV

# The stamp: what the environment was built from. Same stamp, nothing to do.
stamp=$( { "$PYTHON" -VV; grep -v -e '^#' -e '^[[:space:]]*$' "$requirements"; } | sha256sum | cut -c1-16)
stamp_file="$TRAIN_ENV/.metalslurm-env"

# One builder at a time (two users, or two nodes, starting it together).
exec 9>"$TRAIN_ENV.lock"
flock 9
if [[ -r "$stamp_file" && "$(cat "$stamp_file")" == "$stamp" ]]; then
    echo "metalslurm-example: ${TRAIN_ENV} is up to date ($("$TRAIN_ENV/bin/python" -c 'import jax, ray; print("jax", jax.__version__, "ray", ray.__version__)'))"
    exit 0
fi
echo "metalslurm-example: building ${TRAIN_ENV} with $("$PYTHON" -V) on $(hostname -s)"
rm -rf "$TRAIN_ENV"
"$PYTHON" -m venv "$TRAIN_ENV"
"$TRAIN_ENV/bin/python" -m pip install --quiet --disable-pip-version-check --only-binary=:all: \
    --requirement "$requirements"
# Check that it imports and sees its CPU before calling it complete.
"$TRAIN_ENV/bin/python" -c 'import jax, ray; print("jax", jax.__version__, "devices", jax.devices(), "ray", ray.__version__)'
echo "$stamp" > "$stamp_file"
echo "metalslurm-example: ${TRAIN_ENV} is ready"
