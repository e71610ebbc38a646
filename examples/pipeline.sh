#!/bin/bash
# A 2-stage pipeline linked by a dependency: stage 1 (prepare.sbatch) cleans a raw text
# file into a corpus; stage 2 (array-embed.sbatch) embeds the corpus in SHARDS array
# tasks, and starts only when stage 1 has succeeded. If stage 1 fails, Slurm cancels
# stage 2 (--kill-on-invalid-dep) instead of leaving it pending forever.
#
#   examples/pipeline.sh /shared/raw.txt /shared/run1 [SHARDS]
#
# Run it on a login node (it submits, it does not run anything itself). Both stages read
# and write under WORKDIR, which must be on shared storage. Prints the two job ids.
set -euo pipefail
EXAMPLES=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/preflight.sh
source "$EXAMPLES/lib/preflight.sh"

(( $# >= 2 )) || ms_die "usage: $0 SOURCE WORKDIR [SHARDS]"
source_file=$(realpath "$1")
workdir=$(realpath -m "$2")
shards=${3:-16}
[[ "$source_file$workdir" != *,* ]] || ms_die "SOURCE and WORKDIR cannot contain a comma (sbatch --export splits on it)"
[[ -r "$source_file" ]] || ms_die "SOURCE ${source_file} is not a readable file"
[[ "$shards" =~ ^[1-9][0-9]*$ ]] || ms_die "SHARDS must be a positive number, not ${shards}"
mkdir -p "$workdir"
ms_require_shared_dir "$workdir" WORKDIR
ms_require_shared_dir "$(dirname "$source_file")" SOURCE

stage1=$(sbatch --parsable --chdir="$workdir" \
    --export="ALL,SOURCE=$source_file,CORPUS=$workdir/corpus.txt" "$EXAMPLES/prepare.sbatch")
stage1=${stage1%%;*}
stage2=$(sbatch --parsable --chdir="$workdir" --array="0-$((shards - 1))" \
    --dependency="afterok:${stage1}" --kill-on-invalid-dep=yes \
    --export="ALL,INPUT=$workdir/corpus.txt,OUT_DIR=$workdir/embeddings,NUM_SHARDS=$shards" \
    "$EXAMPLES/array-embed.sbatch")
stage2=${stage2%%;*}
echo "stage 1 (prepare): job ${stage1}"
echo "stage 2 (embed, ${shards} tasks): job ${stage2}, after ${stage1} succeeds"
