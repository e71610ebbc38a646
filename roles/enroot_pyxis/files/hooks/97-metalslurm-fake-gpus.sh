#! /usr/bin/env bash
# metalslurm local cluster only - a STAND-IN for Enroot's NVIDIA hook (98-nvidia.sh),
# which needs the NVIDIA container toolkit and real GPUs. The node's fake GPUs
# (/dev/nvidia0..N, character devices 195:N) are bound into the container; the job's
# device cgroup, set by Slurm, decides which of them the job may open, as it does for
# the device nodes nvidia-container-cli binds on real hardware.
set -eu
shopt -s nullglob

for dev in /dev/nvidia[0-9]*; do
    printf "%s %s none x-create=file,bind,rw,nosuid,noexec,private\n" "${dev}" "${dev}"
done | enroot-mount --root "${ENROOT_ROOTFS}" -
