#!/bin/sh
# Runs inside the node image's root (a debootstrap chroot, or a RUN step of a
# Containerfile) after rootfs/ has been copied in. Arguments: the packages to
# download (not install) so that the roles' apt tasks install them without a network
# round trip per package. Keep this idempotent: a failed build is simply rebuilt.
set -eu
export DEBIAN_FRONTEND=noninteractive
systemctl enable metalslurm-fake-gpus.service metalslurm-ssh-hostkeys.service \
    metalslurm-host-ca.service ssh.service
# Units that cannot work in a container (kernel modules, consoles).
systemctl mask systemd-modules-load.service getty@tty1.service console-getty.service \
    systemd-firstboot.service
rm -f /etc/ssh/ssh_host_*
# Each node makes its own machine-id at first boot: empty here, and no copy of the build's
# under dbus (systemd would take that one, and every node of the image would share it).
: > /etc/machine-id
rm -f /var/lib/dbus/machine-id
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' > /etc/hosts
mkdir -p /etc/metalslurm
# The packaged slurmd goes to /usr/sbin/slurmd.real; /usr/sbin/slurmd (from rootfs/) starts
# it with a container-local boot clock (see that file).
dpkg-divert --local --no-rename --divert /usr/sbin/slurmd.real --add /usr/sbin/slurmd
# /etc/apt/sources.list (the host's mirror) was copied in; a registry image's own
# deb822 file would list the same suites a second time.
rm -f /etc/apt/sources.list.d/debian.sources
apt-get update -qq
if [ "$#" -gt 0 ]; then
    apt-get install -y -qq --download-only "$@"
fi
