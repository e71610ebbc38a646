# shellcheck shell=bash
# Checks the example job scripts run before they start anything: each stops the job with
# a sentence saying what is missing, so a half-configured run never starts.
#
#   source "$(dirname "$0")/lib/preflight.sh"   (from a batch script: see ms_examples_dir)
#
# Every function prints "metalslurm-example: ..." to stderr and exits 2 when its need is
# not met; nothing is changed on the nodes.

ms_die() {
    echo "metalslurm-example: $*" >&2
    exit 2
}

# Inside a Slurm job (sbatch or salloc), not on a login shell.
ms_require_job() {
    [[ -n "${SLURM_JOB_ID:-}" ]] || ms_die "not inside a Slurm job: submit this script with sbatch"
}

# At least $1 GPUs on this node for this job (what Slurm put in CUDA_VISIBLE_DEVICES from
# the job's --gres/--gpus), each with its device file.
ms_require_gpus() {
    local want=$1 have=0 dev
    local -a gpus=()
    if [[ -n "${CUDA_VISIBLE_DEVICES:-}" && "${CUDA_VISIBLE_DEVICES}" != "NoDevFiles" ]]; then
        IFS=, read -r -a gpus <<< "${CUDA_VISIBLE_DEVICES}"
        have=${#gpus[@]}
    fi
    (( have >= want )) || ms_die "this job has ${have} GPU(s) on $(hostname -s), it needs ${want}:" \
        "submit it with --gres=gpu:${want} to a partition with GPU nodes"
    for dev in /dev/nvidia0 /dev/nvidiactl; do
        [[ -e "$dev" ]] || ms_die "$(hostname -s) has no ${dev}: the NVIDIA driver is not loaded" \
            "(metalslurm verify names the node's GPU problem)"
    done
}

# srun can start containers: Pyxis is loaded (it adds --container-image to srun).
ms_require_pyxis() {
    srun --help 2>&1 | grep -q -- '--container-image' \
        || ms_die "srun has no --container-image on this cluster: Pyxis is not installed" \
            "(metalslurm:containers) or plugstack.conf does not load it"
}

# $1 is a directory every node of the job sees: it exists, this user can write it, and it
# is under one of the paths the cluster shares (metalslurm lists them on every node in
# /etc/metalslurm-shared-paths) or on a network file system; not on one node's local disk,
# where a checkpoint is lost to the node that resumes the job. $2 names the setting.
ms_require_shared_dir() {
    local dir=$1 setting=${2:-the path} list=${METALSLURM_SHARED_PATHS_FILE:-/etc/metalslurm-shared-paths}
    local real shared fstype
    local -a paths=()
    [[ -d "$dir" ]] || ms_die "${dir} (${setting}) does not exist on $(hostname -s):" \
        "create it on shared storage or point ${setting} at a shared path"
    [[ -w "$dir" ]] || ms_die "${dir} (${setting}) is not writable by $(id -un)"
    real=$(realpath "$dir")
    [[ -r "$list" ]] && mapfile -t paths < <(grep -v -e '^#' -e '^[[:space:]]*$' "$list")
    for shared in "${paths[@]}"; do
        [[ "$real" == "$shared" || "$real" == "${shared%/}"/* ]] && return 0
    done
    fstype=$(findmnt --noheadings --output FSTYPE --target "$real" 2>/dev/null | head -n1)
    case "$fstype" in
        nfs | nfs4 | lustre | gpfs | beegfs | wekafs | cifs | smb3 | ceph | fuse.*) return 0 ;;
    esac
    ms_die "${dir} (${setting}) is on $(hostname -s)'s local ${fstype:-unknown} file system," \
        "not shared storage: every node of the job must see the same files; point ${setting}" \
        "at a shared path (${paths[*]:-ask your administrator which paths are shared})"
}

# A program the job starts is on PATH ($2: how to get it).
ms_require_command() {
    command -v "$1" >/dev/null 2>&1 || ms_die "$1 is not on PATH on $(hostname -s): $2"
}

# The node's NCCL settings (written by metalslurm from its HCAs), when there are any.
ms_source_nccl_env() {
    local file=${NCCL_ENV_FILE:-/etc/nccl.env}
    if [[ -r "$file" ]]; then
        # shellcheck disable=SC1090
        source "$file"
    else
        echo "metalslurm-example: no ${file} on $(hostname -s): NCCL uses its own defaults" >&2
    fi
}

# The rendezvous host and port of a multi-node job: the allocation's first node, and a
# port derived from the job id so two jobs sharing a node do not collide.
ms_set_master() {
    MASTER_ADDR=$(scontrol show hostnames "${SLURM_JOB_NODELIST}" | head -n1)
    MASTER_PORT=${MASTER_PORT:-$((20000 + SLURM_JOB_ID % 20000))}
    export MASTER_ADDR MASTER_PORT
}
