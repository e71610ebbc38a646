"""The NVIDIA role's install path on the Debian 13 cluster, against STAND-IN packages.

No GPU and no NVIDIA repository are reachable here. What runs for real: the role itself
(``--tags nvidia_gpu``; whole runs once the stand-in driver "runs") against a local,
signed apt repository of stand-in packages with NVIDIA's names and versions
(tests/e2e/nvidia_standins.py builds it; every package says it is a stand-in), and a
stand-in ``lspci`` (a script printing the PCI fixtures of tests/fixtures/pci: a DGX H100
with NVSwitches on gpu-001, two H100 PCIe on gpu-002). This
proves the key check, the repository, the branch pin, the holds, the NVSwitch gating, the
services' enablement and order and a second run with 0 changed. No kernel module can load
here, so the role says the nodes must be rebooted and starts no service; that is asserted
too.

rebootPolicy drain runs for real too (drain, wait for the node's job, reboot, return, one
node at a time), with three more STAND-INS, each labelled where it is made: the reboot is
the node container's systemd rebooting, which ends the container, and podman's restart
policy starting it again (the local provider's --restart=always: the server's firmware); a
boot unit writing the installed driver's version where the role reads the running one (the
kernel loading the module); and a
stand-in nvidia-smi replaying tests/fixtures/gpu (the GPU facts, read once the driver
"runs"). Leaves the nodes as it found them (packages purged, files removed).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
from datetime import datetime

import pytest
import yaml

from infra.ops.configure import ConfigureResult, run_playbook
from tests.e2e import nvidia_standins
from tests.e2e.cluster import APT_GET, JOB_TIMEOUT, REPO, wait_for

NODES = ("gpu-001", "gpu-002")
LSPCI = {"gpu-001": "dgx-h100-lspci.txt", "gpu-002": "h100-pcie-lspci.txt"}
STAND_IN_LSPCI = "/usr/local/bin/lspci"
DRIVER = ["nvidia-driver-cuda", "nvidia-kernel-open-dkms", "nvidia-persistenced"]
FABRIC = ["nvidia-fabricmanager", "libnvidia-nscq"]
DCGM = ["datacenter-gpu-manager-4-cuda13", "datacenter-gpu-manager-exporter"]
OTHERS = [*DCGM, "nvidia-container-toolkit", "libnvidia-container-tools"]
FILES = ["/etc/apt/sources.list.d/metalslurm-nvidia.sources",
         "/etc/apt/preferences.d/metalslurm-nvidia-driver",
         "/etc/apt/keyrings/metalslurm-nvidia-cuda.asc",
         "/etc/apt/keyrings/metalslurm-nvidia-container-toolkit.asc",
         "/var/lib/metalslurm/nvidia-keys",
         "/etc/systemd/system/slurmd.service.d/metalslurm-nvidia.conf",
         "/etc/systemd/system/nvidia-dcgm.service.d",
         "/etc/systemd/system/nvidia-dcgm-exporter.service.d", "/etc/dcgm-exporter",
         "/etc/systemd/system/nftables.service.d", "/etc/metalslurm-dcgm-guard.nft",
         "/etc/systemd/system/metalslurm-dcgm-guard.service", STAND_IN_LSPCI]
# The reboot test's stand-ins on the nodes (see stand_in_driver_boot).
STAND_IN_SMI = "/usr/local/bin/nvidia-smi"
STAND_IN_BOOT_UNIT = "/etc/systemd/system/metalslurm-e2e-standin-nvidia-module.service"
STAND_IN_MODULE_VERSION = "/run/metalslurm-e2e-standin/nvidia-module-version"
SERVICES = ["nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm", "nvidia-dcgm-exporter",
            "metalslurm-dcgm-guard"]
# What the controller keeps of each compute node's metalslurm_node.gpus (slurm_controller).
FACTS_CACHE = "/var/lib/metalslurm/compute-gpus.json"


@pytest.fixture(scope="module")
def standin(debian13):
    debian13.ready_for_configures()
    shared = debian13.state / "shared" / "shared" / "e2e-nvidia"
    repo = nvidia_standins.build(shared)
    for node, fixture in LSPCI.items():
        shutil.copy(REPO / "tests" / "fixtures" / "pci" / fixture, shared / fixture)
        debian13.on(node, f"printf '#!/bin/sh\\n# STAND-IN lspci (metalslurm e2e): replays a "
                          f"PCI fixture\\nexec cat /shared/e2e-nvidia/{fixture}\\n' "
                          f"> {STAND_IN_LSPCI} && chmod 755 {STAND_IN_LSPCI}")
    yield debian13, repo
    for node in NODES:
        debian13.on(node, f"systemctl disable --now {' '.join(SERVICES)} >/dev/null 2>&1; "
                          f"{APT_GET} purge -y -qq --allow-change-held-packages "
                          f"{' '.join(DRIVER + FABRIC + OTHERS)} nftables >/dev/null 2>&1; "
                          f"systemctl disable {STAND_IN_BOOT_UNIT.rsplit('/', 1)[1]} "
                          f">/dev/null 2>&1; rm -rf {' '.join(FILES)} {STAND_IN_SMI} "
                          f"{STAND_IN_BOOT_UNIT} {STAND_IN_MODULE_VERSION.rsplit('/', 1)[0]}; "
                          f"systemctl daemon-reload; {APT_GET} update -qq", check=False)
        debian13.ctl(f"scontrol update NodeName={node} State=RESUME 2>/dev/null", check=False)
    debian13.ctl(f"rm -f {FACTS_CACHE}", check=False)
    shutil.rmtree(shared, ignore_errors=True)
    # Without a driver or its kept facts, a whole run puts back what the stand-in driver's
    # GPU facts changed (gres.conf) for the modules that follow.
    restored = run_playbook(debian13.inventory, out=lambda _line: None)
    assert restored.ok, restored.failures
    # Nodes that ran without a DCGM exporter lose their scrape targets.
    assert debian13.ctl("cat /etc/prometheus/file_sd/dcgm.yml").stdout.strip() == "[]"


def settings(repo: nvidia_standins.StandinRepository, **over) -> dict:
    base = "file:///shared/e2e-nvidia"
    return {"metalslurm_gpu": {
        "mode": "install", "branch": "580", "version": "", "fabric_manager": "auto",
        "dcgm": True, "gpudirect": "auto", "container_toolkit": True, "mig": False,
        "reboot_policy": "never",
        "repository": {"url": f"{base}/cuda", "key_url": f"{base}/key.asc",
                       "key_fingerprint": repo.fingerprint},
        "container_toolkit_repository": {"url": f"{base}/container-toolkit",
                                         "key_url": f"{base}/key.asc",
                                         "key_fingerprint": repo.fingerprint},
        **over}}


def driver_run(cluster, repo, limit: str = ",".join(NODES), role_vars: dict | None = None,
               **over) -> ConfigureResult:
    return run_playbook(cluster.inventory, tags="nvidia_gpu", limit=limit,
                        extra_vars={**settings(repo, **over), **(role_vars or {})},
                        out=lambda _line: None)


def private_addresses(cluster) -> dict[str, str]:
    hosts = yaml.safe_load(cluster.inventory.read_text())["all"]["hosts"]
    return {node: hosts[node]["metalslurm_address"] for node in NODES}


def versions(cluster, node: str) -> dict[str, str]:
    out = cluster.on(node, "dpkg-query --showformat='${Package}=${Version} ${Status}\\n' --show "
                           f"{' '.join(DRIVER + FABRIC + OTHERS)} 2>/dev/null",
                     check=False).stdout
    return {line.split("=")[0]: line.split("=")[1].split()[0]
            for line in out.splitlines() if line.endswith(" ok installed")}


def test_a_key_that_is_not_the_pinned_one_stops_the_run_before_anything_is_installed(standin):
    cluster, repo = standin
    result = driver_run(cluster, repo, limit="gpu-002", repository={
        "url": "file:///shared/e2e-nvidia/cuda", "key_url": "file:///shared/e2e-nvidia/key.asc",
        "key_fingerprint": "0" * 40})
    assert not result.ok
    assert any(f"the cuda repository's key (file:///shared/e2e-nvidia/key.asc) has fingerprint "
               f"{repo.fingerprint}, not the pinned {'0' * 40}" in f for f in result.failures), \
        result.failures
    assert cluster.on("gpu-002", f"ls {FILES[0]} {FILES[2]}", check=False).returncode != 0
    assert versions(cluster, "gpu-002") == {}


def test_a_branch_the_os_does_not_support_is_refused_naming_the_setting(standin):
    cluster, repo = standin
    result = driver_run(cluster, repo, limit="gpu-002", branch="535")
    assert not result.ok
    assert any("metalslurm_gpu: branch 535 is not supported on debian13: NVIDIA's repository "
               "for it starts with branch 580; set branch 580" in f for f in result.failures), \
        result.failures
    assert cluster.on("gpu-002", f"ls {FILES[0]}", check=False).returncode != 0
    assert versions(cluster, "gpu-002") == {}


def test_the_newest_driver_of_the_branch_is_installed_held_and_the_fabric_manager_only_with_nvswitches(  # noqa: E501
        standin):
    cluster, repo = standin
    result = driver_run(cluster, repo)
    assert result.ok, result.failures
    want = f"{nvidia_standins.NEWEST_OF_BRANCH}-1"  # not 580.65.06, not 590.44.01
    extra = {"datacenter-gpu-manager-4-cuda13": nvidia_standins.DCGM_VERSION,
             "datacenter-gpu-manager-exporter": nvidia_standins.EXPORTER_VERSION,
             "nvidia-container-toolkit": nvidia_standins.TOOLKIT_VERSION,
             "libnvidia-container-tools": nvidia_standins.TOOLKIT_VERSION}
    assert versions(cluster, "gpu-001") == {**dict.fromkeys(DRIVER + FABRIC, want), **extra}
    assert versions(cluster, "gpu-002") == {**dict.fromkeys(DRIVER, want), **extra}
    # DCGM and its exporter are held together (an exporter release is built for one DCGM).
    assert cluster.on("gpu-001", "apt-mark showhold").stdout.split() == \
        sorted(DRIVER + FABRIC + DCGM)
    assert cluster.on("gpu-002", "apt-mark showhold").stdout.split() == sorted(DRIVER + DCGM)
    # Enabled, in order, not started: no kernel module can load here.
    assert cluster.on("gpu-001", f"systemctl is-enabled {' '.join(SERVICES)}").stdout.split() == \
        ["enabled"] * 5
    # The exporter: after DCGM, on the private address, reading DCGM's host engine and the
    # prolog's GPU-to-job files, with the fields the alert rules need; slurmd does not wait
    # for it.
    exporter = cluster.on("gpu-002", "systemctl show --property=After --property=ExecStart "
                                     "nvidia-dcgm-exporter").stdout
    assert "nvidia-dcgm.service" in exporter
    address = private_addresses(cluster)["gpu-002"]
    assert ("argv[]=/usr/bin/dcgm-exporter --collectors "
            f"/etc/dcgm-exporter/metalslurm-counters.csv --address {address}:9400 "
            "--remote-hostengine-info 127.0.0.1:5555 "
            "--hpc-job-mapping-dir /run/metalslurm/dcgm-job-map ;") in exporter, exporter
    counters = cluster.on("gpu-002", "cat /etc/dcgm-exporter/metalslurm-counters.csv").stdout
    assert {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ROW_REMAP_PENDING"} <= {
        line.split(",")[0] for line in counters.splitlines() if not line.startswith("#")}
    assert cluster.on("gpu-002", "systemctl is-enabled nvidia-fabricmanager",
                      check=False).stdout.strip() in ("", "not-found")
    after = cluster.on("gpu-001", "systemctl show --property=After slurmd").stdout
    assert {"nvidia-persistenced.service", "nvidia-fabricmanager.service",
            "nvidia-dcgm.service"} <= set(after.strip().removeprefix("After=").split())
    dcgm_after = cluster.on("gpu-002", "systemctl show --property=After nvidia-dcgm").stdout
    assert {"nvidia-persistenced.service", "metalslurm-dcgm-guard.service"} <= set(
        dcgm_after.split("=", 1)[1].split())
    assert "nvidia-fabricmanager.service" not in dcgm_after
    # DCGM's host engine never runs without its guard (the test after the reboot's tries it).
    assert "metalslurm-dcgm-guard.service" in cluster.on(
        "gpu-002", "systemctl show --property=Requires nvidia-dcgm").stdout.split("=", 1)[1].split()
    assert cluster.on("gpu-001", "systemctl is-active nvidia-persistenced",
                      check=False).stdout.strip() == "inactive"
    for node in NODES:
        assert (f"{node}: NVIDIA driver {nvidia_standins.NEWEST_OF_BRANCH} is installed but the "
                f"running kernel cannot load it yet: its services are enabled, not started."
                ) in " ".join(" ".join(w.split()) for w in result.warnings), result.warnings

    again = driver_run(cluster, repo)
    assert again.ok, again.failures
    assert again.changed == 0, again.changed_tasks


def test_an_exact_version_moves_the_held_driver_to_it_and_keeps_it_held(standin):
    """The driver, DCGM and its exporter pinned to older versions than those installed:
    each is moved down to exactly its version, past the holds, and stays held."""
    cluster, repo = standin
    result = driver_run(cluster, repo, limit="gpu-002", version="580.65.06",
                        dcgm_version=nvidia_standins.DCGM_OLDER,
                        dcgm_exporter_version=nvidia_standins.EXPORTER_OLDER)
    assert result.ok, result.failures
    assert {k: v for k, v in versions(cluster, "gpu-002").items() if k in DRIVER + DCGM} == {
        **dict.fromkeys(DRIVER, "580.65.06-1"),
        "datacenter-gpu-manager-4-cuda13": nvidia_standins.DCGM_OLDER,
        "datacenter-gpu-manager-exporter": nvidia_standins.EXPORTER_OLDER}
    assert cluster.on("gpu-002", "apt-mark showhold").stdout.split() == sorted(DRIVER + DCGM)
    assert "580.65.06-*" in cluster.on("gpu-002", f"cat {FILES[1]}").stdout


class StandInPowerCycle(threading.Thread):
    """Watches the STAND-IN for a server's firmware: a node container whose systemd was told
    to reboot exits, and podman's restart policy starts it again (the local provider's
    --restart=always). Records when each node went off and came on, from the container's
    own times; starts a container left exited (a restart policy that did not fire)."""

    def __init__(self, cluster, nodes) -> None:
        super().__init__(daemon=True)
        self.cluster, self.nodes = cluster, nodes
        self.events: list[tuple[float, str, str]] = []  # (time.time(), node, off|on)
        self.done = threading.Event()
        self.started = {node: self.times(node)[0] for node in nodes}

    def times(self, node: str) -> tuple[str, str, str]:
        """The container's (StartedAt, FinishedAt, Status)."""
        out = subprocess.run(["podman", "inspect", "--format", "{{.State.StartedAt}}|"
                              "{{.State.FinishedAt}}|{{.State.Status}}",
                              f"{self.cluster.name}-{node}"], capture_output=True, text=True,
                             check=False).stdout.strip()
        started, finished, status = (out.split("|") + ["", "", ""])[:3]
        return started, finished, status

    @staticmethod
    def epoch(podman_time: str) -> float:
        """podman's '2026-12-02 21:47:12.379868681 +0000 UTC' as seconds since the epoch."""
        day, clock, zone = podman_time.split()[:3]
        whole, _, fraction = clock.partition(".")
        return datetime.strptime(f"{day} {whole}.{fraction[:6] or '0'} {zone}",
                                 "%Y-%m-%d %H:%M:%S.%f %z").timestamp()

    def run(self) -> None:
        while not self.done.is_set():
            for node in self.nodes:
                started, finished, status = self.times(node)
                if status in ("exited", "stopped"):
                    subprocess.run(["podman", "start", f"{self.cluster.name}-{node}"],
                                   check=True, capture_output=True)
                    started, finished, status = self.times(node)
                if started and started != self.started[node] and status == "running":
                    self.started[node] = started
                    self.events.append((self.epoch(finished), node, "off"))
                    self.events.append((self.epoch(started), node, "on"))
            self.done.wait(1)


def stand_in_driver_boot(cluster, shared, node: str) -> None:
    """Two STAND-INS on ``node``: a boot unit that writes the installed driver's version
    to a file on /run (a tmpfs, empty until the next boot) that the role reads as the
    running driver's (nvidia_gpu_module_version_file), as the kernel would show it once
    it loaded the module; and an nvidia-smi replaying the DGX H100 fixtures, with topo
    -m's CPU affinity moved onto this machine's two CPUs (GPUs 0-3 on CPU 0, 4-7 on 1)."""
    module_dir = STAND_IN_MODULE_VERSION.rsplit("/", 1)[0]
    (shared / "standin-module.service").write_text(
        "[Unit]\nDescription=STAND-IN (metalslurm e2e): the nvidia kernel module loaded at "
        "boot\nBefore=nvidia-persistenced.service\n\n[Service]\nType=oneshot\n"
        f"ExecStart=/bin/sh -c 'mkdir -p {module_dir} && dpkg-query --show "
        f"nvidia-kernel-open-dkms | cut -f2 | sed s/-.*// > {STAND_IN_MODULE_VERSION}'\n\n"
        "[Install]\nWantedBy=multi-user.target\n")
    topo = (REPO / "tests" / "fixtures" / "gpu" / "dgx-h100-topo.txt").read_text()
    (shared / "standin-topo.txt").write_text(
        topo.replace("0-55,112-167", "0").replace("56-111,168-223", "1"))
    shutil.copy(REPO / "tests" / "fixtures" / "gpu" / "dgx-h100-healthy.xml",
                shared / "standin-smi.xml")
    (shared / "standin-nvidia-smi").write_text(
        "#!/bin/sh\n# STAND-IN nvidia-smi (metalslurm e2e): replays tests/fixtures/gpu\n"
        'case "$*" in\n  "-q -x") exec cat /shared/e2e-nvidia/standin-smi.xml ;;\n'
        '  "topo -m") exec cat /shared/e2e-nvidia/standin-topo.txt ;;\nesac\n')
    cluster.on(node, f"install -m 0644 /shared/e2e-nvidia/standin-module.service "
                     f"{STAND_IN_BOOT_UNIT} && install -m 0755 /shared/e2e-nvidia/"
                     f"standin-nvidia-smi {STAND_IN_SMI} && systemctl daemon-reload && "
                     f"systemctl enable {STAND_IN_BOOT_UNIT.rsplit('/', 1)[1]}")


def node_view(cluster, node: str) -> tuple[str, str]:
    state, _, reason = cluster.ctl(f"sinfo --noheader --Node --partition=train --nodes={node} "
                                   "--format='%T|%E'").stdout.strip().partition("|")
    return state, reason


def test_drain_policy_reboots_one_node_at_a_time_after_its_job_and_gates_only_its_own_drain(
        standin):
    """Reboot, module loading and nvidia-smi are STAND-INS (see the module's docstring)."""
    cluster, repo = standin
    shared = cluster.state / "shared" / "shared" / "e2e-nvidia"
    for node in NODES:
        stand_in_driver_boot(cluster, shared, node)
    job = cluster.submit("alice", "--nodelist=gpu-001 --time=5 --wrap='sleep 30'")
    wait_for(f"job {job} to run", lambda: cluster.job_field(job, "%T") == "RUNNING",
             timeout=JOB_TIMEOUT)
    cluster.ctl("scontrol update NodeName=gpu-002 State=DRAIN Reason=maintenance")
    power = StandInPowerCycle(cluster, NODES)
    power.start()
    try:
        reboot_test_body(cluster, repo, shared, job, power)
    finally:
        power.done.set()
        power.join()


def reboot_test_body(cluster, repo, shared, job: str, power: StandInPowerCycle) -> None:
    role_vars = {
        # The container's PID 1 start time tells its boots apart (the kernel's boot ID is
        # the host's); the stand-in boot unit's file is the running driver's.
        "nvidia_gpu_boot_id_command": "awk '{print $22}' /proc/1/stat",
        "nvidia_gpu_module_version_file": STAND_IN_MODULE_VERSION,
        "nvidia_gpu_drain_poll": 5, "nvidia_gpu_reboot_timeout": 300}

    def run() -> ConfigureResult:
        # With the acceptance gate on: the rebooted node waits for 'metalslurm accept'.
        return driver_run(cluster, repo, reboot_policy="drain",
                          role_vars={**role_vars, "metalslurm_accept": {"gate": True}})

    def full_run() -> ConfigureResult:
        """The whole playbook, as 'metalslurm configure' runs it, with these settings."""
        return run_playbook(cluster.inventory, out=lambda _line: None, extra_vars={
            **settings(repo, reboot_policy="drain"), **role_vars})

    result = run()
    assert result.ok, result.failures
    # One node at a time, in host-name order: gpu-002 went off once gpu-001 was back.
    assert [(node, what) for _t, node, what in power.events] == [
        ("gpu-001", "off"), ("gpu-001", "on"), ("gpu-002", "off"), ("gpu-002", "on")]
    # The job on gpu-001 ran to its end before its node was rebooted.
    assert cluster.wait_until_done(job) == "COMPLETED"
    ended = cluster.ctl(f"SLURM_TIME_FORMAT=%s sacct --allocations --noheader --parsable2 "
                        f"--jobs={job} --format=End").stdout.strip()
    assert int(ended) <= power.events[0][0], (ended, power.events)
    # Each came back on its installed driver, its services running.
    # gpu-002 keeps the version of the branch the last test moved it to (a branch alone
    # never upgrades).
    driver = {"gpu-001": nvidia_standins.NEWEST_OF_BRANCH, "gpu-002": "580.65.06"}
    for node in NODES:
        assert cluster.on(node, f"cat {STAND_IN_MODULE_VERSION}").stdout.strip() == driver[node]
        services = SERVICES if node == "gpu-001" else [SERVICES[0], *SERVICES[2:]]
        assert cluster.on(node, f"systemctl is-active {' '.join(services)} slurmd"
                          ).stdout.split() == ["active"] * (len(services) + 1)
    # gpu-001's drain was handed to the acceptance gate (metalslurm_accept.gate), which
    # alone returns it; gpu-002 keeps the drain someone else set.
    assert node_view(cluster, "gpu-001") == (
        "drained", f"metalslurm-accept: rebooted onto NVIDIA driver "
                   f"{nvidia_standins.NEWEST_OF_BRANCH}")
    assert node_view(cluster, "gpu-002") == ("drained", "maintenance")
    cluster.ctl("scontrol update NodeName=gpu-001 State=RESUME")  # as a passing gate run
    for node in NODES:
        assert (f"{node}: NVIDIA driver {driver[node]} is installed but the "
                "running kernel cannot load it yet: its services are enabled, not started. "
                "Reboot the node, which the next play does (rebootPolicy drain)."
                ) in [" ".join(w.split()) for w in result.warnings], result.warnings

    # The driver now "runs": the next whole run reads the GPU facts on the nodes (stand-in
    # nvidia-smi; nvidia_gpu publishes them as metalslurm_node.gpus), and the controller
    # (slurm_controller) writes gres.conf from them, the GPUs of one affinity on a line
    # with their Cores=, and keeps them for a run where a node is down; it reboots
    # nothing. The one after changes nothing. The stand-in puts GPUs 0-3 on CPU 0 and 4-7
    # on CPU 1 of this machine's one socket: their cores are that whole socket's, 0-1,
    # since Slurm sets a node INVALID whose Cores= split a socket.
    facts_run = full_run()
    assert facts_run.ok, facts_run.failures
    assert len(power.events) == 4, power.events
    uuids = re.findall(r"<uuid>([^<]+)</uuid>", (shared / "standin-smi.xml").read_text())
    kept = json.loads(cluster.ctl(f"cat {FACTS_CACHE}").stdout)
    for node in NODES:
        assert [(g["minor"], g["uuid"], g["cpus"], g["cores"]) for g in kept[node]] == [
            (i, uuids[i], "0" if i < 4 else "1", "0-1") for i in range(8)]
    gres = [dict(word.split("=", 1) for word in line.split())
            for line in cluster.ctl("cat /etc/slurm/gres.conf").stdout.splitlines()
            if line.startswith("NodeName=")]
    assert gres == [
        {"NodeName": "gpu-[001-002]", "Cores": "0-1", "File": "/dev/nvidia[0-7]", "Name": "gpu",
         "Type": "h100"},
        # the elastic nodes, powered down and never seen with a driver: the inventory's count
        {"NodeName": "gpu-[003-004]", "File": "/dev/nvidia[0-7]", "Name": "gpu", "Type": "h100"}]
    # Slurm took it: both nodes registered with their GPUs (the run waits for that too).
    assert node_view(cluster, "gpu-001") == ("idle", "none")
    # Where the driver runs, the DCGM exporter (a STAND-IN answering HTTP with the flags it
    # got) is a scrape target of the monitoring host, which reaches it on the private address.
    targets = yaml.safe_load(cluster.ctl("cat /etc/prometheus/file_sd/dcgm.yml").stdout)
    addresses = private_addresses(cluster)
    assert targets == [{"targets": [f"{addresses[node]}:9400"],
                        "labels": {"node": node, "role": "compute", "elastic": "false"}}
                       for node in NODES]
    for node in NODES:
        metrics = cluster.ctl(f"curl -sS --max-time 5 http://{addresses[node]}:9400/metrics").stdout
        assert ('metalslurm_standin_dcgm_exporter{collectors="/etc/dcgm-exporter/'
                'metalslurm-counters.csv",hostengine="127.0.0.1:5555",'
                'hpc_job_mapping_dir="/run/metalslurm/dcgm-job-map"} 1') in metrics, metrics
    again = full_run()
    assert again.ok, again.failures
    assert again.changed == 0, again.changed_tasks


HOSTENGINE_PROBE = ("python3 -c \"import socket; "
                    "s = socket.create_connection(('127.0.0.1', 5555), 5); "
                    "print(s.recv(64).decode().strip())\"")


def test_only_root_reaches_dcgms_host_engine_whatever_the_nodes_firewall_does(standin):
    """After the reboot above DCGM's host engine runs (a STAND-IN answering one line on
    127.0.0.1:5555, where nv-hostengine listens, without authentication). A step of alice's
    on the node is refused; root (DCGM's exporter, the health checker, the gate) is answered.
    The node's own firewall restarted, reloaded or stopped (its ruleset begins with 'flush
    ruleset') does not lift the guard."""
    cluster, _repo = standin
    assert cluster.on("gpu-001", "systemctl is-active nvidia-dcgm metalslurm-dcgm-guard"
                      ).stdout.split() == ["active", "active"]
    for action in ("", "restart", "reload", "stop"):
        if action:
            cluster.on("gpu-001", f"systemctl {action} nftables")
        step = cluster.on("login-001", f"srun -w gpu-001 -n1 --time=1 {HOSTENGINE_PROBE}",
                          user="alice", check=False)
        assert step.returncode != 0 and step.stdout == "", (action, step.stdout)
        assert "ConnectionRefusedError: [Errno 111] Connection refused" in step.stderr, (
            action, step.stderr)
        assert cluster.on("gpu-001", HOSTENGINE_PROBE).stdout.strip() == "STAND-IN nv-hostengine"
