"""What the e2e modules share: the local clusters they run (LocalStack, the stack files as run
here), the metalslurm CLI as a user runs it, waiting, the test image, the stand-in
nvidia-smi, the training examples' wheels, and the timings the modules agree on. Imported
by the modules (conftest.py keeps only fixtures and hooks); no test module imports another.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infra.ops.verify import close_shared_connections
from infra.ops.wheelhouse import fill_wheelhouse
from infra.stack.state import StateDir

REPO = Path(__file__).resolve().parents[2]
STACKS = Path(__file__).resolve().parent / "stacks"
# The offline mirror of the container artifacts (Enroot .deb files, Pyxis source): never
# in the repository; found next to the checkout, or named by METALSLURM_VENDOR_DIR.
VENDOR_CANDIDATES = (REPO.parent / "shared" / "vendor", Path("/work/shared/vendor"))
# Registry logins the e2e clusters get (a registry no test reaches: only the file matters).
E2E_REGISTRY = "registry.e2e.invalid"
# The e-mail receiver's SMTP password (test data, not a credential: the server it logs in to
# is the test's own, on the controller's loopback).
E2E_SMTP_PASSWORD = "e2e-not-a-real-smtp-password"
# The receivers of the stacks with monitoring test equipment (E2E_RECEIVER_STACKS): the
# test's own servers on the controller's loopback (tests/e2e/test_monitoring.py), their URLs
# and password in the alert secrets file (E2E_ALERT_SECRETS).
E2E_RECEIVER_STACKS = ("Pulumi.e2e-debian13.yaml",)
E2E_RECEIVERS = [
    {"name": "e2e-recorder"},
    {"name": "e2e-slack", "type": "slack", "channel": "#e2e-alerts"},
    {"name": "e2e-mail", "type": "email", "to": "hpc-ops@ms-e2e13.example",
     "from": "alertmanager@ms-e2e13.example", "smarthost": "127.0.0.1:2525",
     "username": "e2e-alerts", "requireTls": False}]
E2E_ALERT_SECRETS = {"e2e-recorder": {"url": "http://127.0.0.1:9099/alerts"},
                     "e2e-slack": {"url": "http://127.0.0.1:9099/slack"},
                     "e2e-mail": {"password": E2E_SMTP_PASSWORD}}


def vendor_dir() -> Path | None:
    env = os.environ.get("METALSLURM_VENDOR_DIR")
    for candidate in ([Path(env)] if env else []) + list(VENDOR_CANDIDATES):
        if (candidate / "pyxis-0.24.0.tar.gz").is_file():
            return candidate.resolve()
    return None


def _publish(path: Path, text: str, private: bool = False) -> None:
    """Write ``text`` to ``path`` whole or not at all (a temporary file renamed over it):
    the two pytest processes of 'make e2e' (the Debian 12 module beside the others) write
    these files at once when they collect."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


# The users of the e2e stacks who log in with an SSH key made for the run (mallory has none).
E2E_KEY_USERS = ("alice", "bob", "dave")


def user_key(name: str) -> Path:
    """A cluster user's SSH private key for the e2e tests (made once, 0600; its .pub goes
    into the stack where the stack file says '<e2e key>'). Made under a lock: both pytest
    processes of 'make e2e' collect at once, and two key pairs renamed over each other
    half by half would leave a private key that does not match the published .pub."""
    keys = REPO / ".metalslurm" / "e2e-stacks" / "user-keys"
    keys.mkdir(parents=True, exist_ok=True)
    key = keys / name
    with open(keys / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not key.with_suffix(".pub").exists():
            tmp = keys / f".{name}-{os.getpid()}"
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C",
                            f"{name}@e2e", "-f", str(tmp)], check=True)
            os.replace(tmp, key)
            os.replace(f"{tmp}.pub", key.with_suffix(".pub"))
    return key


# The Debian 13 modules run in two lanes at once (tests/schedule.sh says which module runs
# where), each on its own cluster made from the one stack file (Pulumi.e2e-debian13.yaml):
# lane a is that file's cluster; lane b the same cluster under another name, on another
# network, with its own state directory. They share the prepared images (names and
# addresses are not in their hash). A module that names lane a's addresses runs in lane a.
DEBIAN13_STACK = "Pulumi.e2e-debian13.yaml"
DEBIAN13_LANES = {"a": {}, "b": {"file": "Pulumi.e2e-debian13b.yaml",
                                 "metalslurm:clusterName": "ms-e2e13b",
                                 "metalslurm:privateCidr": "10.78.14.0/24"}}


# The small cluster with a backup controller and a launch-terminate node, brought up once for
# the backup controller's module and the module of machines made anew (conftest.py
# ha_cluster); its name (the stack file's, which its containers' names begin with), and
# LocalStack's elastic and submit_host of it.
HA_STACK = "Pulumi.e2e-ha.yaml"
HA_CLUSTER = str(yaml.safe_load((STACKS / HA_STACK).read_text())["config"][
    "metalslurm:clusterName"])
HA_ELASTIC = ("gpu-002",)
HA_SUBMIT_HOST = "login-001"


def debian13_lane() -> str:
    """The lane this pytest run's Debian 13 modules use (METALSLURM_E2E_LANE, a or b)."""
    lane = os.environ.get("METALSLURM_E2E_LANE", "a")
    if lane not in DEBIAN13_LANES:
        raise SystemExit(f"METALSLURM_E2E_LANE={lane!r}: use one of "
                         f"{', '.join(sorted(DEBIAN13_LANES))}")
    return lane


def e2e_stack(file_name: str, lane: str = "a") -> Path:
    """The e2e stack file as run here: its containers mirror pointed at the mirror this
    machine has (containers off where it has none; their tests then skip, saying why),
    and registry credentials from a 0600 file; for the Debian 13 stack's lane b its own
    name and network (DEBIAN13_LANES). Written under .metalslurm/e2e-stacks."""
    doc = yaml.safe_load((STACKS / file_name).read_text())
    config = doc["config"]
    lane_settings = dict(DEBIAN13_LANES[lane]) if file_name == DEBIAN13_STACK else {}
    out_name = lane_settings.pop("file", file_name)
    config.update(lane_settings)
    out_dir = REPO / ".metalslurm" / "e2e-stacks"
    out_dir.mkdir(parents=True, exist_ok=True)
    containers = config.get("metalslurm:containers")
    if containers is not None and containers.get("enabled", True):
        vendor = vendor_dir()
        if vendor is None:
            config["metalslurm:containers"] = {"enabled": False}
        else:
            containers["mirror"] = str(vendor)
            creds = out_dir / "registry-credentials.yaml"
            _publish(creds, yaml.safe_dump([{"host": E2E_REGISTRY, "login": "e2e-robot",
                                             "password": "e2e-not-a-real-password"}]),
                     private=True)
            containers["credentialsFile"] = str(creds)
    if file_name in E2E_RECEIVER_STACKS:
        monitoring = config.setdefault("metalslurm:monitoring", {})
        monitoring["receivers"] = [*monitoring.get("receivers", []), *E2E_RECEIVERS]
        secrets = out_dir / "alert-secrets.yaml"
        _publish(secrets, yaml.safe_dump(E2E_ALERT_SECRETS), private=True)
        monitoring["secretsFile"] = str(secrets)
    for user in config.get("metalslurm:users") or []:
        if user["name"] in E2E_KEY_USERS:
            user["sshKeys"] = [user_key(user["name"]).with_suffix(".pub").read_text().strip()]
    discovery = (config.get("metalslurm:topology") or {}).get("discovery") or {}
    if discovery.get("simulator"):
        discovery["simulator"] = str((STACKS / discovery["simulator"]).resolve())
    out = out_dir / out_name
    _publish(out, yaml.safe_dump(doc, sort_keys=False))
    return out


# ---- a container image without a registry (the container tests of both clusters) -----
# A small root file system copied from a node's own programs (bash and a few coreutils
# with their libraries), with no device nodes under /dev (as 'enroot import' makes
# images), a marker file, and PYTORCH_VERSION in its environment (which turns Enroot's
# PyTorch hook on); squashed onto shared storage by a compute node.
# Write tasks of the roles that read a converged node once (managed_state) and include
# their writes only where something differs: a converged run reaches none of them.
FAST_PATH_WRITES = (
    # common
    "Make every cluster node resolvable by name",
    "Put the cluster's nodes into cloud-init's /etc/hosts template too",
    "List the cluster's shared paths for jobs",
    "Create the cluster users with the same UID on every node",
    "Record the users metalslurm made here (a user left out later is locked)",
    # host_firewall
    "Install the program that opens the cluster's traffic in the host's firewall",
    "Enable the openings' unit",
    # enroot_pyxis
    "Write Enroot's settings (a drop-in; the package's enroot.conf stays as shipped)",
    "Compile spank_pyxis.so against the installed Slurm headers",
    # monitoring
    "Write Prometheus' configuration",
    # slurm_controller, slurm_compute, slurm_pam_adopt, slurm_login
    "Write slurm.conf",
    "Point slurmd at the controller for its configuration",
    "Write who may log in without a job (root, Ansible's user, the admin group)",
    "Point sackd at slurmctld (before the package starts it)",
)
IMAGE = "/shared/images/e2e.sqsh"
MARKER = "metalslurm e2e image"
BUILD_IMAGE = r"""set -e
r=$(mktemp -d)
mkdir -p $r/etc $r/usr/bin $r/tmp $r/dev $r/proc $r/sys $r/run $r/var/run
ln -s usr/bin $r/bin
for b in bash sh cat printenv hostname touch ls; do
    p=/usr/bin/$b; [ -e $p ] || p=/bin/$b; cp -L $p $r/usr/bin/
    for lib in $(ldd $p | grep -o '/[^ ]*'); do mkdir -p $r$(dirname $lib); cp -L $lib $r$lib; done
done
echo '""" + MARKER + r"""' > $r/etc/metalslurm-e2e-image
echo PYTORCH_VERSION=2.5.0 > $r/etc/environment
mkdir -p /shared/images
mksquashfs $r """ + IMAGE + r""" -noappend -all-root -quiet >/dev/null
rm -rf $r
find $(dirname """ + IMAGE + r""") -name e2e.sqsh -size +100k
"""
# Opens each fake GPU: "No such device or address" is the device cgroup letting the open
# through to a driver that is not there; "Operation not permitted" is the cgroup refusing.
PROBE = r"""#!/bin/bash
for dev in /dev/nvidia[0-9]*; do
    err=$( (exec 3<$dev) 2>&1 ); echo "${dev#/dev/} ${err##*: }"
done
echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
cat /etc/metalslurm-e2e-image
"""


# The CPU training examples' environment (examples/setup-train-env.sh) on the cluster.
TRAIN_ENV = "/shared/envs/train-cpu"
WHEELHOUSE = "/shared/wheelhouse"
TRAIN_REQUIREMENTS = REPO / "examples/python/requirements-train-cpu.txt"


def train_wheels(python: str) -> Path:
    """The pinned wheels of the CPU training examples (JAX, Ray) for the nodes' CPython
    ``python`` ("3.13"), downloaded on this host once (cached under .metalslurm/cache) by
    what 'metalslurm wheelhouse' runs: the nodes install from them offline, as a site
    without internet access would from its own mirror."""
    cache = REPO / ".metalslurm/cache/wheels" / f"train-cpu-py{python}"
    fill_wheelhouse(cache, python, TRAIN_REQUIREMENTS)
    return cache


def quoted(text: str) -> str:
    """``text`` as one single-quoted shell word."""
    return "'" + text.replace("'", "'\\''") + "'"


CONSOLE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def console(container: str, command: str,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """A shell command run as root in a node container's namespaces, as a provider's console
    would: by nsenter, not 'podman exec'. A compute node's systemd (private cgroup
    namespace, infra/providers/local.py's CONTAINER_SPEC) leaves the name=systemd cgroup
    podman made for it, and any such systemd that shuts down (a node rebooted, a cluster
    taken down, in any module) removes the other nodes' emptied ones: 'podman exec' into
    them fails from then on ("error adding pid ... cgroup.procs: no such file")."""
    inspect = subprocess.run(["podman", "inspect", "--format", "{{.State.Pid}}", container],
                             capture_output=True, text=True, check=False, timeout=60)
    pid = inspect.stdout.strip()
    if inspect.returncode != 0 or not pid.isdigit() or pid == "0":
        return subprocess.CompletedProcess(inspect.args, 125, "",
                                           f"{container} is not running: {inspect.stderr}")
    return subprocess.run(["nsenter", "--target", pid, "--all", "--", "/usr/bin/env", "-i",
                           f"PATH={CONSOLE_PATH}", "HOME=/root", "LANG=C.UTF-8", "/bin/sh",
                           "-c", command],
                          capture_output=True, text=True, check=False, timeout=timeout)


# A GET run on a node (python3 -c HTTP_GET URL [login]): with "login", as the monitoring
# host's web login (Prometheus and Alertmanager); prints the body.
HTTP_GET = """
import base64, sys, urllib.request
req = urllib.request.Request(sys.argv[1])
if len(sys.argv) > 2:
    password = open("/etc/prometheus/metalslurm-web.password").read().strip()
    req.add_header("Authorization", "Basic " + base64.b64encode(
        ("metalslurm:" + password).encode()).decode())
print(urllib.request.urlopen(req, timeout=10).read().decode())
"""

JOB_TIMEOUT = 240
# A process that holds apt's lock for {seconds} s, as unattended-upgrades or cloud-init's
# first apt run would (python3 is the holder the pre-flight names); prints its pid.
# apt-get as the tests run it on a node: it waits up to 5 minutes for the dpkg lock, which the
# node's own apt-daily and apt-daily-upgrade, unattended-upgrades or a configure may hold (without
# the wait it fails at once: "Could not get lock /var/lib/dpkg/lock-frontend", seen here).
APT_GET = "DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300"
HOLD_APT_LOCK = ("nohup python3 -c \"import fcntl, time; f = open('/var/lib/dpkg/lock-frontend', "
                 "'w'); fcntl.lockf(f, fcntl.LOCK_EX); time.sleep({seconds})\" "
                 ">/dev/null 2>&1 & echo $!")
POWER_LOG = "/var/log/slurm/metalslurm-power.log"
# SuspendTime + SuspendTimeout of the Debian 13 stack + the power-saving pass, with margin.
POWER_DOWN_WITHIN = 15 + 10 + 60


# ---- a stand-in nvidia-smi (the health checker and the GPU-to-job mapping) ---------------
GPU_FIXTURES = REPO / "tests" / "fixtures" / "gpu"
STAND_IN = "/usr/local/bin/nvidia-smi"


def stand_in_nvidia_smi(cluster, node: str, fixture: str) -> None:
    """A stand-in nvidia-smi (a script, not NVIDIA's) replaying a fixture through /shared."""
    target = cluster.state / "shared" / "shared" / "e2e-gpu" / fixture
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(GPU_FIXTURES / fixture, target)
    cluster.on(node, f"printf '#!/bin/sh\\n# metalslurm e2e stand-in for nvidia-smi: replays "
                     f"a fixture\\nexec cat /shared/e2e-gpu/{fixture}\\n' > {STAND_IN}.new && "
                     f"chmod 755 {STAND_IN}.new && mv {STAND_IN}.new {STAND_IN}")


@dataclass
class AnsibleRun:
    """One run of Ansible a test made (run_playbook, or the metalslurm CLI's configure or
    up, which run it): what it was, its seconds and the host's CPU-seconds of it (the
    command and what it ran; the nodes' share is not in it). tests/e2e/conftest.py fills
    RUNS and prints them per module."""

    test: str
    what: str
    seconds: float
    cpu: float
    # Its three longest task steps (task, seconds), where its events were read.
    slowest: list[tuple[str, float]] = field(default_factory=list)


RUNS: list[AnsibleRun] = []
# The test running now (tests/e2e/conftest.py sets it), which RUNS names.
CURRENT_TEST: list[str] = [""]


def children_cpu() -> float:
    """CPU-seconds of this process's children it has waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def metalslurm(*args: str, timeout: int = 1500) -> subprocess.CompletedProcess[str]:
    """Run the metalslurm CLI as a user would, from the repository root."""
    start, cpu = time.monotonic(), children_cpu()
    proc = subprocess.run([sys.executable, "-m", "infra.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, check=False)
    if args[:1] == ("configure",) or (args[:2] == ("local", "up")
                                      and "--no-configure" not in args):
        RUNS.append(AnsibleRun(CURRENT_TEST[0], "metalslurm " + " ".join(
            a if len(a) < 40 else "…" + a[-30:] for a in args),
            time.monotonic() - start, children_cpu() - cpu))
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    return proc


# LocalStack.on's SSH connections: one master per node, shared by the commands of this
# process (ssh's ControlMaster; the sockets in a directory of this process's own, 0700,
# made on first use and removed at exit with the masters). 'metalslurm local exec' per
# command cost a Python start and an SSH login on both ends: 0.26 s and 0.22 CPU-s each.
_SSH_SOCKETS: list[Path] = []
# ssh's own failures of a shared connection (a master whose node was rebooted or made
# anew): the command is sent once more over a connection of its own.
_MUX_FAILURES = ("mux_client", "Control socket", "ControlSocket", "master")


def _ssh_sockets() -> Path:
    if not _SSH_SOCKETS:
        _SSH_SOCKETS.append(Path(tempfile.mkdtemp(prefix="ms-e2e-ssh-")))
        atexit.register(_close_ssh_masters)
    return _SSH_SOCKETS[0]


def _close_ssh_masters() -> None:
    for directory in _SSH_SOCKETS:
        close_shared_connections(directory)
        shutil.rmtree(directory, ignore_errors=True)


def ssh_user(cluster: LocalStack, user: str, address: str,
             command: str) -> subprocess.CompletedProcess[str]:
    """``command`` as ``user`` over SSH with her own key (user_key), as she would log in."""
    return subprocess.run(
        ["ssh", "-i", str(user_key(user)), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
         "-o", f"UserKnownHostsFile={cluster.state}/ssh/known_hosts",
         "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=10",
         f"{user}@{address}", "--", command],
        capture_output=True, text=True, timeout=120, check=False)


def ssh_root(state: Path, address: str, command: str, timeout: float = 1500,
             shared: bool = True) -> subprocess.CompletedProcess[str]:
    """``sh -c command`` as root on the node at ``address``, as 'metalslurm local exec'
    runs it (the state directory's key and known_hosts, host keys checked), over the
    node's shared connection unless ``shared`` is false."""
    state_dir = StateDir(state)
    mux = (["-o", "ControlMaster=auto", "-o", f"ControlPath={_ssh_sockets()}/%C",
            "-o", "ControlPersist=60", "-o", "ServerAliveInterval=5",
            "-o", "ServerAliveCountMax=3"] if shared else ["-o", "ControlPath=none"])
    args = ["ssh", "-i", str(state_dir.ssh_key), "-o", "BatchMode=yes",
            "-o", f"UserKnownHostsFile={state_dir.known_hosts}",
            "-o", "StrictHostKeyChecking=yes", "-o", "LogLevel=ERROR",
            "-o", "ConnectTimeout=20", *mux, "-T", f"root@{address}", "--",
            shlex.join(["sh", "-c", command])]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    if shared and proc.returncode == 255 and any(f in proc.stderr for f in _MUX_FAILURES):
        return ssh_root(state, address, command, timeout, shared=False)
    return proc


def cluster_containers(cluster_name: str) -> list[str]:
    out = subprocess.run(["podman", "ps", "-a", "--format", "json", "--filter",
                          f"label=metalslurm.cluster={cluster_name}"],
                         capture_output=True, text=True, check=True).stdout
    return sorted(c["Names"][0] for c in json.loads(out or "[]"))


def network_exists(name: str) -> bool:
    return subprocess.run(["podman", "network", "exists", name], check=False).returncode == 0


def wait_for(description: str, probe: Callable[[], Any], timeout: float = JOB_TIMEOUT,
             every: float = 2.0) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {description} (last: {last!r})")


@dataclass
class LocalStack:
    """One local cluster of the e2e run: its stack file, names, and ways to use it."""

    stack: Path
    name: str
    state_name: str
    up: subprocess.CompletedProcess[str]
    elastic: tuple[str, ...] = ()
    # Where users submit: the stack's first login node (the controller without one).
    submit_host: str = "ctl"
    # The inventory's modification time and each node's SSH address (_addresses).
    _hosts_read: list[Any] = field(default_factory=list, repr=False, compare=False)

    @property
    def state(self) -> Path:
        return REPO / ".metalslurm" / self.state_name

    @property
    def inventory(self) -> Path:
        return self.state / "inventory.yml"

    def _addresses(self) -> dict[str, str]:
        """Each node's address to SSH to, from the inventory (read again when 'up' wrote
        it again)."""
        stamp = self.inventory.stat().st_mtime_ns
        if self._hosts_read[:1] != [stamp]:
            hosts = yaml.safe_load(self.inventory.read_text())["all"]["hosts"]
            self._hosts_read[:] = [stamp, {name: str(h.get("ansible_host", name))
                                           for name, h in hosts.items()}]
        return self._hosts_read[1]

    def address(self, node: str) -> str:
        """``node``'s private address (the inventory's metalslurm_address): a module that
        reads it runs in either Debian 13 lane (DEBIAN13_LANES)."""
        hosts = yaml.safe_load(self.inventory.read_text())["all"]["hosts"]
        return str(hosts[node]["metalslurm_address"])

    def on(self, node: str, command: str, user: str | None = None,
           check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a shell command on a node (as ``user`` from their home directory)."""
        if user:
            command = f"cd /home/{user} && runuser -u {user} -- {command}"
        proc = ssh_root(self.state, self._addresses()[node], command)
        sys.stdout.write(proc.stdout)
        sys.stderr.write(proc.stderr)
        if check:
            assert proc.returncode == 0, (command, proc.stdout, proc.stderr)
        return proc

    def ctl(self, command: str, user: str | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.on("ctl", command, user, check)

    def login(self, command: str, user: str | None = None,
              check: bool = True) -> subprocess.CompletedProcess[str]:
        """On the submit host (the login node), as users run commands."""
        return self.on(self.submit_host, command, user, check)

    # ---- jobs ----------------------------------------------------------------------

    def submit(self, user: str, args: str) -> str:
        """sbatch as ``user`` on the submit host, as users submit."""
        return self.login(f"sbatch --parsable --chdir=/home/{user} -o /dev/null {args}",
                          user).stdout.strip().split(";")[0]

    def job_field(self, job: str, fmt: str) -> str:
        return self.ctl(f"squeue --noheader --jobs={job} --format='{fmt}'",
                        check=False).stdout.strip()

    def sacct_rows(self, job: str, fields: str, duplicates: bool = False) -> list[list[str]]:
        dup = "--duplicates " if duplicates else ""
        out = self.ctl(f"sacct {dup}--allocations --noheader --parsable2 --jobs={job} "
                       f"--format={fields}").stdout
        return [line.split("|") for line in out.splitlines() if line]

    def final_state(self, job: str) -> str | None:
        rows = self.sacct_rows(job, "State")
        state = rows[-1][0] if rows else ""
        return state if state and state not in ("PENDING", "RUNNING", "REQUEUED") else None

    def release_requeued(self, job: str, within: float = 60) -> None:
        """Slurm holds a requeued batch job about 2 minutes (squeue reason BeginTime) before
        it may start again; let it go now, as an administrator can. Waits up to ``within``
        seconds for the hold (a job that is running or finished needs nothing; one pending
        for another reason is let go all the same, which changes nothing for it)."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            state = self.job_field(job, "%T %r")
            if state == "PENDING BeginTime" or not state.startswith("PENDING"):
                break
            time.sleep(0.5)
        # The previous run ended (and slurmd revoked its credential, stamped with that
        # second) before the job read PENDING here. slurmd refuses a credential issued in
        # the second it revoked one for the same job (ctime <= revoked): a release in that
        # second makes the next run fail at once, FAILED 1:0 (seen in CI). Slurm's own
        # hold exists for this; letting it go early must wait for the next second.
        time.sleep(max(0.0, int(time.time()) + 1.05 - time.time()))
        self.ctl(f"scontrol update jobid={job} StartTime=now", check=False)

    def wait_until_done(self, job: str, timeout: float = JOB_TIMEOUT) -> str:
        return wait_for(f"job {job} to finish", lambda: self.final_state(job), timeout=timeout)

    # ---- elastic nodes ---------------------------------------------------------------

    def container_state(self, node: str) -> str:
        out = subprocess.run(["podman", "inspect", "--format", "{{.State.Status}}",
                              f"{self.name}-{node}"], capture_output=True, text=True,
                             check=False)
        return out.stdout.strip() or "absent"

    def slurm_state(self, node: str) -> str:
        return self.ctl(f"sinfo --noheader --Node --partition=train --nodes={node} "
                        "--format=%T").stdout.strip()

    def all_powered_down(self) -> bool:
        return all(self.container_state(n) != "running" and self.slurm_state(n) == "idle~"
                   for n in self.elastic)

    def wait_for_elastic_nodes_down(self, timeout: float = 400) -> None:
        """Until every elastic node is powered down (Slurm's SuspendTime, or a resume that
        runs into ResumeTimeout, then a requeued job's run and SuspendTime again)."""
        wait_for("the elastic nodes to be powered down", self.all_powered_down,
                 timeout=timeout)

    def ready_for_configures(self) -> None:
        """For a module that runs configures: the cluster came up, and every elastic node
        is powered down, whichever module ran before (a node that powers down in the
        middle of a run is unreachable for the rest of it)."""
        assert self.up.returncode == 0, self.up.stdout[-3000:]
        self.wait_for_elastic_nodes_down()

    def power_events(self, event: str, node: str | None = None,
                     ok: bool | None = None) -> list[dict]:
        lines = self.ctl(f"cat {POWER_LOG}").stdout.splitlines()
        events = [json.loads(line) for line in lines if line.startswith("{")]
        return [e for e in events if e.get("event") == event
                and (node is None or e.get("node") == node or node in e.get("nodes", []))
                and (ok is None or e.get("ok") is ok)]


def mark_up(lane: str, seconds: float) -> None:
    """Tell tests/schedule.sh that a lane's shared cluster's bring-up has ended (up or not),
    in .metalslurm/e2e-debian13-<lane>-up: it starts the work it runs beside these modules
    then."""
    marker = REPO / ".metalslurm" / f"e2e-debian13-{lane}-up"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(f"{seconds:.1f}\n")
