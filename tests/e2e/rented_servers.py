"""Look-alike rented servers for tests/e2e/test_rented_servers.py: machines made the way a
provider's cloud image makes them, not the way the local cluster's nodes are made.

- **The image** (``localhost/metalslurm-rented:trixie-<hash>``): the local provider's Debian 13
  node image (its systemd, sshd, the fake-GPU device files and slurmd's boot clock, which
  every container node needs) with what a cloud image adds: cloud-init (NoCloud),
  nftables, unattended-upgrades with its apt-daily timers, an sshd that refuses root, the
  hostname read from /etc/hostname at boot (not podman's file over it); an empty
  machine-id, as cloud images ship (each machine makes its own at first boot). Cached by a
  hash of the base image and this recipe.
- **Each machine** boots that image with a NoCloud seed of its own: a provider-style
  hostname (``rent-<n>``, not its Slurm name), ``manage_etc_hosts``, a ``debian`` user
  holding the operator's key with passwordless sudo, and an nftables ruleset whose input
  policy is drop, SSH let in from the bastion only. Compute machines also get a STAND-IN
  ``nvidia-smi`` (a script replaying a recorded 8x H100 ``nvidia-smi -q -x``; ``-L`` and
  the persistence-mode query answer from the same recording), as a provider's GPU image
  comes with its driver (the stack says ``gpu.mode: off``: not managed here); the GPUs'
  device files are the local nodes' fake ones.
- **Two networks**: public (``eth0``, the default route) and private (``eth1``, the
  stack's privateCidr). The bastion (sshd only, a ``jump`` user) is on both; this machine
  reaches the hosts only through it.
- **The operator's SSH side**: a key pair, a known_hosts file filled from the hosts' own
  keys (read through podman, as an operator checks them against the provider's console),
  and an ssh_config drop-in for these networks only (/etc/ssh/ssh_config.d/), which is how
  the operator's ssh reaches the bastion (ProxyJump takes its settings from ssh's config).

Everything is named ``ms-rented-*`` and labelled; leftovers of an earlier run are removed by
that name and label before the module starts, and after it.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml

from infra.providers.images import ensure_image as ensure_node_image
from infra.providers.local import ULIMITS
from tests.e2e.cluster import console

REPO = Path(__file__).resolve().parents[2]
IMAGE_REPO = "localhost/metalslurm-rented"
LABEL = "metalslurm.e2e=rented"
PREFIX = "ms-rented-"
NETWORKS = {"public": ("ms-rented-public", "10.79.1.0/24"),
            "private": ("ms-rented-private", "10.79.2.0/24")}
BASTION = "bastion"
BASTION_ADDRESSES = ("10.79.1.5", "10.79.2.5")
SSH_CONFIG = Path("/etc/ssh/ssh_config.d/metalslurm-e2e-rented.conf")
STATE = REPO / ".metalslurm" / "e2e-rented-servers"
GPU_FIXTURE = REPO / "tests" / "fixtures" / "gpu" / "dgx-h100-healthy.xml"
NVIDIA_SMI = "/usr/local/bin/nvidia-smi"

# A machine's hostname comes from its /etc/hostname at boot. Podman bind-mounts a file of
# its own there (so hostnamectl could not replace it: EBUSY), which a real machine has not:
# this unit takes that mount away before anything reads the name, as early as systemd's own
# hostname setup would have.
HOSTNAME_UNIT = """[Unit]
Description=The hostname from /etc/hostname, as on a machine (look-alike rented server)
DefaultDependencies=no
Before=sysinit.target cloud-init-local.service systemd-hostnamed.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'if mountpoint -q /etc/hostname; then umount /etc/hostname; fi; \
if [ -s /etc/hostname ]; then hostname -F /etc/hostname; fi'

[Install]
WantedBy=sysinit.target
"""
# What a provider's cloud image has that the local node image has not; root may not log in.
RECIPE = r"""
COPY machine-hostname.service /etc/systemd/system/machine-hostname.service
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    cloud-init nftables unattended-upgrades \
 && rm -f /etc/ssh/sshd_config.d/metalslurm.conf \
 && printf 'PermitRootLogin no\nPasswordAuthentication no\nUseDNS no\n' \
    > /etc/ssh/sshd_config.d/50-provider.conf \
 && printf 'datasource_list: [ NoCloud, None ]\n' > /etc/cloud/cloud.cfg.d/90-provider.cfg \
 && printf 'network: {config: disabled}\n' > /etc/cloud/cloud.cfg.d/99-provider-network.cfg \
 && printf 'APT::Periodic::Update-Package-Lists "1";\nAPT::Periodic::Unattended-Upgrade "1";\n' \
    > /etc/apt/apt.conf.d/20auto-upgrades \
 && systemctl enable nftables.service machine-hostname.service \
 && rm -rf /var/lib/cloud/* \
 && : > /etc/machine-id && rm -f /var/lib/dbus/machine-id
"""


@dataclass(frozen=True)
class Machine:
    name: str            # the Slurm name it gets (the container is ms-rented-<name>)
    public: str          # eth0
    private: str         # eth1
    compute: bool = False

    @property
    def container(self) -> str:
        return PREFIX + self.name

    @property
    def provider_hostname(self) -> str:
        """What the provider calls it: not its Slurm name."""
        return "rent-" + hashlib.sha256(self.name.encode()).hexdigest()[:6]


def podman(*args: str, check: bool = True,
           timeout: float = 600) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout,
                          check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"podman {' '.join(args[:3])}… failed: {proc.stderr.strip()}")
    return proc


def on(machine: Machine | str, command: str, check: bool = True,
       timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """A shell command run as root on a machine, from outside it (the provider's console)."""
    name = machine if isinstance(machine, str) else machine.container
    proc = console(name, command, timeout=timeout)
    if check:
        assert proc.returncode == 0, (name, command, proc.stdout, proc.stderr)
    return proc


def ensure_rented_image(log=print) -> str:
    base = ensure_node_image("debian13", log=log)
    recipe = "\0".join((base, RECIPE, HOSTNAME_UNIT))
    digest = hashlib.sha256(recipe.encode()).hexdigest()[:12]
    ref = f"{IMAGE_REPO}:trixie-{digest}"
    if podman("image", "exists", ref, check=False).returncode == 0:
        return ref
    with tempfile.TemporaryDirectory(prefix="ms-rented-image-") as ctx:
        (Path(ctx) / "Containerfile").write_text(f"FROM {base}\n{RECIPE}")
        (Path(ctx) / "machine-hostname.service").write_text(HOSTNAME_UNIT)
        podman("build", "--quiet", "--tag", ref, ctx, timeout=1200)
    return ref


def remove_leftovers() -> None:
    names = podman("ps", "-a", "--format", "{{.Names}}", "--filter", f"label={LABEL}",
                   check=False).stdout.split()
    names += [n for n in podman("ps", "-a", "--format", "{{.Names}}",
                                check=False).stdout.split() if n.startswith(PREFIX)]
    if names:
        podman("rm", "-f", "-t", "0", *sorted(set(names)), check=False)
    for net, _cidr in NETWORKS.values():
        podman("network", "rm", "-f", net, check=False)
    SSH_CONFIG.unlink(missing_ok=True)
    if STATE.exists():
        shutil.rmtree(STATE)


def nftables_conf(ssh_from: Sequence[str] | None) -> str:
    """A provider's host firewall: input dropped by default; SSH from ``ssh_from`` only
    (None: from anywhere)."""
    source = f"ip saddr {{ {', '.join(ssh_from)} }} " if ssh_from else ""
    return ("#!/usr/sbin/nft -f\nflush ruleset\ntable inet filter {\n"
            "\tchain input {\n\t\ttype filter hook input priority filter; policy drop;\n"
            "\t\tiif lo accept\n\t\tct state established,related accept\n"
            "\t\tip protocol icmp accept\n"
            f"\t\t{source}tcp dport 22 accept\n\t}}\n}}\n")


def smi_list() -> str:
    """``nvidia-smi -L`` for the recorded GPUs."""
    xml = GPU_FIXTURE.read_text()
    names = re.findall(r"<product_name>([^<]+)</product_name>", xml)
    uuids = re.findall(r"<uuid>([^<]+)</uuid>", xml)
    return "".join(f"GPU {i}: {n} (UUID: {u})\n" for i, (n, u) in enumerate(zip(names, uuids,
                                                                               strict=True)))


def smi_field(field: str) -> str:
    """``nvidia-smi --query-gpu=FIELD --format=csv,noheader`` for the recorded GPUs."""
    values = re.findall(rf"<{field}>([^<]+)</{field}>", GPU_FIXTURE.read_text())
    return "".join(f"{v}\n" for v in values)


def user_data(machine: Machine, key: str) -> str:
    bastion = machine.name == BASTION
    files = [{"path": "/etc/nftables.conf", "permissions": "0755",
              "content": nftables_conf(None if bastion else BASTION_ADDRESSES)}]
    if machine.compute:
        files += [
            {"path": "/usr/local/share/metalslurm-e2e/smi.xml", "content": GPU_FIXTURE.read_text()},
            {"path": "/usr/local/share/metalslurm-e2e/smi-L.txt", "content": smi_list()},
            {"path": "/usr/local/share/metalslurm-e2e/smi-persistence.txt",
             "content": smi_field("persistence_mode")},
            {"path": NVIDIA_SMI, "permissions": "0755", "content": (
                "#!/bin/sh\n# STAND-IN for nvidia-smi (metalslurm's look-alike servers, not "
                "NVIDIA's): replays a recording\ncase \"$*\" in\n"
                "  -L) exec cat /usr/local/share/metalslurm-e2e/smi-L.txt ;;\n"
                "  *-q*-x*) exec cat /usr/local/share/metalslurm-e2e/smi.xml ;;\n"
                "  '--query-gpu=persistence_mode --format=csv,noheader') "
                "exec cat /usr/local/share/metalslurm-e2e/smi-persistence.txt ;;\n"
                "esac\necho \"stand-in nvidia-smi: '$*' not recorded\" >&2\nexit 3\n")}]
    user = ({"name": "jump", "shell": "/bin/bash", "ssh_authorized_keys": [key]} if bastion
            else {"name": "debian", "shell": "/bin/bash", "groups": ["sudo"],
                  "sudo": "ALL=(ALL) NOPASSWD:ALL", "ssh_authorized_keys": [key]})
    doc = {"hostname": machine.provider_hostname, "manage_etc_hosts": True,
           "disable_root": True, "users": [user], "write_files": files,
           # One default route, by the public NIC, on every boot (podman gives each network one).
           "bootcmd": [f"ip route del default via {NETWORKS['private'][1].rsplit('.', 1)[0]}.1 "
                       "dev eth1 || true"],
           "runcmd": [["systemctl", "restart", "nftables.service"]]}
    return "#cloud-config\n" + yaml.safe_dump(doc, sort_keys=False)


def create_networks() -> None:
    for net, cidr in NETWORKS.values():
        gateway = cidr.rsplit(".", 1)[0] + ".1"
        podman("network", "create", "--label", LABEL, "--subnet", cidr, "--gateway", gateway,
               net)


def start(machine: Machine, image: str, key: str) -> None:
    seed = STATE / machine.name / "seed"
    seed.mkdir(parents=True, exist_ok=True)
    (seed / "meta-data").write_text(f"instance-id: i-{machine.provider_hostname}\n"
                                    f"local-hostname: {machine.provider_hostname}\n")
    (seed / "user-data").write_text(user_data(machine, key))
    node = STATE / machine.name / "node"
    node.mkdir(parents=True, exist_ok=True)
    # The fake GPUs' device files (the local node image's unit reads this).
    (node / "node.env").write_text(f"METALSLURM_FAKE_GPUS={8 if machine.compute else 0}\n")
    args = ["--runtime", "runc", "run", "-d", "--privileged", "--systemd=always",
            "--name", machine.container, "--hostname", machine.provider_hostname,
            "--no-hosts", "--label", LABEL,
            "--network", f"{NETWORKS['public'][0]}:ip={machine.public},interface_name=eth0",
            "--network", f"{NETWORKS['private'][0]}:ip={machine.private},interface_name=eth1",
            "-v", f"{seed}:/var/lib/cloud/seed/nocloud:ro",
            "-v", f"{node}:/etc/metalslurm:ro"]
    for limit in ULIMITS:
        args += ["--ulimit", limit]
    if machine.compute:
        args.append("--cgroupns=private")
    podman(*args, image, "/sbin/init")


def wait_booted(machine: Machine, timeout: float = 240) -> None:
    """Until cloud-init has finished (and said so) and sshd answers."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        proc = on(machine, "cloud-init status --format json 2>/dev/null; "
                           "systemctl is-active ssh.service", check=False)
        last = proc.stdout
        if '"status": "done"' in last and last.rstrip().endswith("\nactive"):
            return
        if '"status": "error"' in last:
            raise AssertionError(f"cloud-init failed on {machine.container}: {last}")
        time.sleep(2)
    raise AssertionError(f"{machine.container} did not finish booting in {timeout} s: {last}")


def host_key(machine: Machine) -> tuple[str, str]:
    kind, blob = on(machine, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[:2]
    return kind, blob


def write_ssh_side(machines: Sequence[Machine], key: Path) -> Path:
    """known_hosts for every machine's addresses, and the ssh_config drop-in that names it
    (and the operator's key for the bastion) for these networks only."""
    known = STATE / "known_hosts"
    lines = []
    for m in machines:
        kind, blob = host_key(m)
        lines.append(f"{m.public},{m.private} {kind} {blob}\n")
    known.write_text("".join(lines))
    SSH_CONFIG.write_text(
        "# metalslurm e2e (tests/e2e/rented_servers.py): the look-alike servers' networks "
        "only; removed after the run\n"
        f"Host {BASTION_ADDRESSES[0]}\n    IdentityFile {key}\n    IdentitiesOnly yes\n"
        "Host 10.79.1.* 10.79.2.*\n"
        f"    UserKnownHostsFile {known}\n    StrictHostKeyChecking yes\n")
    return known


def start_all(machines: Sequence[Machine], key: Path) -> None:
    image = ensure_rented_image()
    public_key = key.with_suffix(".pub").read_text().strip()
    create_networks()
    for m in machines:
        start(m, image, public_key)
    with ThreadPoolExecutor(max_workers=len(machines)) as pool:
        list(pool.map(wait_booted, machines))
    write_ssh_side(machines, key)


def operator_key(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "operator@e2e",
                        "-f", str(path)], check=True)
    return path


def interfaces(machine: Machine) -> dict[str, str]:
    out = json.loads(on(machine, "ip -j -4 addr show").stdout)
    return {i["ifname"]: a["local"] for i in out for a in i.get("addr_info", [])
            if i["ifname"] != "lo"}
