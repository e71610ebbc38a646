"""Cluster users' SSH public keys, the names no user or group may take, and the admin
group: the rules the stack parser (infra/stack/users.py) and the inventory contract share,
so a hand-written inventory is held to the same ones.

A key is one OpenSSH public key line (``authorized_keys`` format without options): a key
type, the base64 key blob and an optional comment. The blob is decoded and must start with
the same key type (the wire format: a length-prefixed type name), which catches a private
key, a fingerprint, a truncated paste or a key with its type edited.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.cluster_defaults import SLURM_USER

KEY_TYPES = ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
             "ecdsa-sha2-nistp521", "sk-ssh-ed25519@openssh.com",
             "sk-ecdsa-sha2-nistp256@openssh.com")
_LINE_RE = re.compile(r"^(\S+) ([A-Za-z0-9+/]+={0,2})(?: ([^\r\n]*))?$")
# The admin group when the stack names none: its members may SSH to compute nodes without a
# job there (pam_access before pam_slurm_adopt).
DEFAULT_ADMIN_GROUP = "hpcadmin"
DEFAULT_ADMIN_GID = 2999
# ``metalslurm_access`` (the stack config's ``metalslurm:access``) for what it leaves out:
# infra/stack/users.py fills the stack's keys from here, the common, infra_access,
# slurm_pam_adopt and slurm_controller roles merge a hand-written inventory's value over it
# (filter ``access_settings``). pam_slurm_adopt: SSH to a compute node only with a job there.
ACCESS_DEFAULTS: dict[str, Any] = {"admin_group": DEFAULT_ADMIN_GROUP,
                                   "admin_gid": DEFAULT_ADMIN_GID, "pam_slurm_adopt": True}


def access_settings(value: Any) -> dict[str, Any]:
    """``metalslurm_access`` over :data:`ACCESS_DEFAULTS`; an empty admin group or GID is
    the default one."""
    merged = {**ACCESS_DEFAULTS, **(value or {})}
    for name in ("admin_group", "admin_gid"):
        merged[name] = merged[name] or ACCESS_DEFAULTS[name]
    return merged

# Names no cluster user, group or admin group may take: Ansible's user and group modules
# would modify the account or group of that name that a node already has (its groups, shell,
# home, GID) instead of making a new one; 'sudo' or 'users' renumbered, or 'root' given a
# user's groups. A user's private group has the user's name, so users and groups are held
# to the one set.
#
# Debian's static system users and groups, as base-passwd 3.6.1 writes them
# (/usr/share/base-passwd/passwd.master and group.master; Ubuntu ships the same package):
# written out here because the nodes may run Ubuntu and the operator's machine anything.
BASE_PASSWD_USERS = ("root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail",
                     "news", "uucp", "proxy", "www-data", "backup", "list", "irc", "_apt",
                     "nobody")
BASE_PASSWD_GROUPS = ("root", "daemon", "bin", "sys", "adm", "tty", "disk", "lp", "mail",
                      "news", "uucp", "man", "proxy", "kmem", "dialout", "fax", "voice",
                      "cdrom", "floppy", "tape", "sudo", "audio", "dip", "www-data", "backup",
                      "operator", "list", "irc", "src", "shadow", "utmp", "video", "sasl",
                      "plugdev", "staff", "games", "users", "nogroup")
# Made with dynamic IDs by the packages of a Debian 12/13 or Ubuntu 22.04/24.04 node
# (systemd, OpenSSH, D-Bus, chrony, udev's device groups, Ubuntu's own), and the groups that
# give sudo on other systems (admin on older Ubuntu, also the login of Debian's AWS images;
# wheel).
DISTRIBUTION_NAMES = ("systemd-network", "systemd-resolve", "systemd-timesync",
                      "systemd-coredump", "systemd-journal", "systemd-oom", "messagebus",
                      "sshd", "ssh", "_ssh", "_chrony", "polkitd", "tss", "uuidd", "tcpdump",
                      "syslog", "crontab", "netdev", "input", "kvm", "render", "sgx", "rdma",
                      "lxd", "docker", "lpadmin", "landscape", "pollinate", "usbmux",
                      "dnsmasq", "fwupd-refresh", "dhcpcd", "admin", "wheel")
# Made by metalslurm's roles (roles/common's common_slurm_user, slurm_rest's slurm_rest_user,
# slurm_exporter's slurm_exporter_user) or by the packages they install: munge, Prometheus
# and Alertmanager (prometheus), MariaDB (mysql), NFS (statd, _rpc), the NVIDIA persistence
# daemon (nvidia-persistenced on Ubuntu, nvpd on Debian).
ROLE_ACCOUNTS = (SLURM_USER, "slurmrestd", "metalslurm-exporter", "munge", "prometheus", "mysql",
                 "statd", "_rpc", "nvidia-persistenced", "nvpd")
# The login users of cloud images (Ubuntu's, also OCI's; Debian's; Oracle Linux on OCI; AWS
# and RHEL-like images): the account Ansible logs in with, which must keep its groups.
IMAGE_LOGINS = ("ubuntu", "debian", "opc", "ec2-user", "cloud-user")
_RESERVED_SOURCES = (
    (BASE_PASSWD_USERS + BASE_PASSWD_GROUPS, "a system user or group of Debian and Ubuntu"),
    (DISTRIBUTION_NAMES, "a system user or group the nodes' packages make"),
    (ROLE_ACCOUNTS, "a system user or group metalslurm's roles or their packages make"),
    (IMAGE_LOGINS, "the login user of a cloud image"),
)
# Each reserved name -> what it is on a node (the first source that has it).
RESERVED_NAMES = {name: what for names, what in reversed(_RESERVED_SOURCES) for name in names}


def reserved_name_problem(name: Any, admin_group: bool = False) -> str | None:
    """Why ``name`` may not be a cluster user's or group's name (``admin_group``: the admin
    group's), or None."""
    if not isinstance(name, str) or name not in RESERVED_NAMES:
        return None
    hint = f" (the default is {DEFAULT_ADMIN_GROUP})" if admin_group else ""
    return (f"{name!r} is {RESERVED_NAMES[name]}: Ansible would modify the one every node "
            f"already has instead of making a new one; choose another name{hint}")


def ssh_key_problem(line: Any) -> str | None:
    """Why ``line`` is not an OpenSSH public key line, or None."""
    if not isinstance(line, str):
        return f"{line!r} is not a string (an OpenSSH public key line)"
    text = line.strip()
    shown = text if len(text) <= 40 else text[:37] + "..."
    if text.startswith("-----BEGIN"):
        return "is a private key: give the public one (the .pub file, one line)"
    match = _LINE_RE.match(text)
    if match is None:
        return (f"{shown!r} is not an OpenSSH public key line: '<type> <base64 key> "
                "[comment]', as in ~/.ssh/id_ed25519.pub")
    key_type, blob = match[1], match[2]
    if key_type not in KEY_TYPES:
        return f"{shown!r}: key type {key_type!r} is not one of {', '.join(KEY_TYPES)}"
    try:
        raw = base64.b64decode(blob, validate=True)
        (length,) = struct.unpack(">I", raw[:4])
        inner = raw[4:4 + length].decode("ascii")
    except (binascii.Error, struct.error, UnicodeDecodeError, ValueError):
        return f"{shown!r}: the key is not valid base64 of an SSH key (a truncated paste?)"
    if inner != key_type or len(raw) < 4 + length + 16:
        return (f"{shown!r}: the key data is not a {key_type} key (a truncated paste, or the "
                "type edited?)")
    return None


def admin_lockout_problem(users: Any, access: Any) -> str | None:
    """With pam_slurm_adopt on, compute nodes let in only a user with a job there, and the
    admin group's members: cluster users of whom none is an admin would leave nobody but
    root to look at a node without a job (the reason admins lock themselves out)."""
    if not isinstance(access, dict) or not access.get("pam_slurm_adopt", True):
        return None
    users = users if isinstance(users, list) else []
    if not users or any(isinstance(u, dict) and u.get("admin") for u in users):
        return None
    group = access.get("admin_group") or DEFAULT_ADMIN_GROUP
    return (f"is on (the default) but no user is in the admin group {group}: compute nodes "
            "would let in only users with a job there, and no admin; give one user "
            "'admin: true', or set pamSlurmAdopt: false")
