"""The Debian 13 cluster from nothing to verified, then idempotence, check mode, handlers
and repair.

Runs on the session's shared Debian 13 cluster; every setting changed here is set back to
the stack config's before the module ends, and the repaired node is whole again.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infra.ops.configure import run_playbook
from infra.providers.host_ca import (
    NODE_HOST_CA_DIR,
    certificates,
    host_bundles,
    host_extra_certificates,
)
from tests.e2e.cluster import (
    FAST_PATH_WRITES,
    REPO,
    cluster_containers,
    metalslurm,
    network_exists,
    wait_for,
)

CLUSTER = "ms-e2e13"
# The drop-in slurm_controller gives slurmctld's unit (KillMode=process).
SLURMCTLD_DROPIN = "/etc/systemd/system/slurmctld.service.d/metalslurm.conf"
NODES = ["ctl", "gpu-001", "gpu-002", "gpu-003", "gpu-004",  # gpu-003, gpu-004: elastic
         "login-001"]
# The verify suite's skips here: per-host checks of the powered-down elastic nodes, the
# compute-node checks on the controller and the login node, the login-node checks elsewhere,
# the InfiniBand port checks, which need an HCA, and the NVIDIA driver's view of the GPUs,
# which needs a driver (real hardware, both).
EXPECTED_SKIP = re.compile(r"^SKIPPED \[\d+\] \S+: (gpu-00[34] is an elastic node and is "
                           r"powered down|(ctl|login-001) runs no jobs|"
                           r"(ctl|gpu-00[12]) is not a login node|gpu-00[12] has no HCA\b.*|"
                           r"gpu-00[12] has no NVIDIA driver \(nvidia-smi\): fake GPUs only)$")


# slurmd as systemd supervises it: the unit's main PID, every slurmd process ("PID PPID"),
# the PIDs listening on slurmd's port, and whether the main PID's time namespace is the one
# the local image's wrapper made (templates/local/rootfs/usr/sbin/slurmd), not the node's.
SLURMD_PROCESSES = (
    "main=$(systemctl show --property=MainPID --value slurmd); echo $main; echo '|'; "
    "ps -C slurmd --no-headers -o pid=,ppid=; echo '|'; "
    "ss -Hltnp 'sport = :6818' | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u; echo '|'; "
    "[ \"$(stat -L -c %i /proc/$main/ns/time)\" = \"$(stat -L -c %i "
    "/run/metalslurm/slurmd-time)\" ] && [ \"$(readlink /proc/$main/ns/time)\" != "
    "\"$(readlink /proc/1/ns/time)\" ] 2>/dev/null && echo own-clock; true")


def slurmd_supervised(up, node: str) -> str | None:
    """slurmd's main PID on ``node`` when systemd supervises the one slurmd there: a single
    slurmd process, the unit's main PID, a child of the node's PID 1 (systemd), the one
    listening on port 6818, and in the wrapper's time namespace; None otherwise (also for a
    moment while slurmd forks a child that has not yet run its program: callers wait)."""
    main, processes, listeners, clock = (part.split() for part in
                                         up.on(node, SLURMD_PROCESSES).stdout.split("|"))
    if len(main) == 1 and processes == [main[0], "1"] and listeners == main \
            and clock == ["own-clock"]:
        return main[0]
    return None


def wait_for_new_slurmd(up, node: str, old: str | None, why: str) -> str:
    """Until ``node``'s slurmd is supervised (slurmd_supervised) and is not ``old``."""
    return wait_for(f"{node}'s slurmd to be {why}, under systemd",
                    lambda: (pid := slurmd_supervised(up, node)) and pid != old and pid,
                    timeout=60)


@pytest.fixture(scope="module")
def up(debian13):
    # Configure runs against a cluster whose elastic nodes are all down: an elastic node
    # that Slurm powers down in the middle of a run would be unreachable for the rest of it.
    debian13.wait_for_elastic_nodes_down()
    return debian13


def test_bad_config_stops_before_anything_is_created(tmp_path):
    stack = tmp_path / "Pulumi.bad.yaml"
    stack.write_text(yaml.safe_dump({"config": {
        "metalslurm:clusterName": "ms-e2e-bad", "metalslurm:privateCidr": "10.78.99.0/24",
        "metalslurm:os": "centos7",
        "metalslurm:computePools": [{"name": "gpu", "count": -2}]}}))
    proc = metalslurm("local", "up", "--stack", str(stack))
    assert proc.returncode == 2
    assert ("metalslurm:os: 'centos7' is not one of the allowed values: debian12, debian13, "
            "ubuntu22.04, ubuntu24.04") in proc.stderr
    assert "metalslurm:computePools[0].count: must be at least 0, got -2" in proc.stderr
    assert cluster_containers("ms-e2e-bad") == []
    assert not network_exists("ms-e2e-bad-net")


def test_a_clone_without_the_artifact_mirror_is_refused_before_any_work(tmp_path):
    """What a fresh clone meets without ../shared/vendor beside it: refused before an image
    is built or a container started (no image phase, no container, no network), naming the
    missing directory and its files."""
    stack = tmp_path / "Pulumi.nomirror.yaml"
    stack.write_text(yaml.safe_dump({"config": {
        "metalslurm:clusterName": "ms-e2e-nomirror", "metalslurm:privateCidr": "10.78.98.0/24",
        "metalslurm:containers": {"mirror": "../shared/vendor", "pinnedOnly": True,
                                  "artifacts": {n: {"sha256": "0" * 64} for n in
                                                ("enroot", "enrootCaps", "pyxis")}}}}))
    proc = metalslurm("local", "up", "--stack", str(stack))
    assert proc.returncode == 2
    assert (f"metalslurm:containers.mirror: {tmp_path.parent}/shared/vendor does not exist on "
            "this machine; it should hold enroot_4.1.2-1_amd64.deb, "
            "enroot+caps_4.1.2-1_amd64.deb and pyxis-0.24.0.tar.gz") in proc.stderr
    assert "==> image" not in proc.stdout
    assert cluster_containers("ms-e2e-nomirror") == []
    assert not network_exists("ms-e2e-nomirror-net")


def test_up_provisions_configures_and_verifies(up):
    out = up.up.stdout
    assert up.up.returncode == 0, out[-3000:]
    for phase in ("image", "nodes", "configure", "verify"):
        assert f"<== {phase}: " in out
    assert "configure successful" in out
    summary = [line for line in out.splitlines()
               if re.match(r"^\d+ passed(, \d+ skipped)?$", line)]
    assert summary, out[-3000:]
    assert cluster_containers(CLUSTER) == [f"{CLUSTER}-{n}" for n in NODES]


def test_the_first_configure_powers_off_the_elastic_machines_it_configured(up):
    """The two elastic nodes' machines ran only to be configured: the playbook's last play
    powers them off through the reconciler (--orphan-after 0, the nodes it configured), and
    'up' says so."""
    invoked = [e for e in up.power_events("invoked") if "--orphan-after" in e.get("argv", [])]
    assert invoked, "the playbook never ran the reconciler"
    assert invoked[0]["argv"] == ["--foreground", "--orphan-after", "0", "gpu-[003-004]"]
    [summary] = [e for e in up.power_events("reconcile_summary")
                 if e["run"] == invoked[0]["run"]]
    assert (summary["powered_off"], summary["power_off_failed"]) == (
        ["gpu-003", "gpu-004"], [])
    assert "elastic nodes powered down until Slurm needs them: gpu-003, gpu-004" in (
        up.up.stdout)


def test_a_fresh_clusters_first_run_warns_of_nothing_and_says_each_note_once(up):
    """What a newcomer sees on a first 'make up': no warning at all (homes, keys and
    credentials are written without Ansible's access warnings), and each NOTE once, the nodes
    it concerns folded into one hostlist."""
    lines = up.up.stdout.splitlines()
    assert up.up.returncode == 0, up.up.stdout[-3000:]
    assert [line for line in lines if "WARNING" in line] == []
    notes = [line for line in lines if line.startswith("NOTE: ")]
    assert len(notes) == len(set(notes)), notes
    assert ("NOTE: gpu-[001-004]: no NVIDIA GPU on the PCI bus (lspci): the NVIDIA driver "
            "stack is skipped there") in notes, notes
    assert [note for note in notes if "/sys/class/infiniband is empty" in note] == [
        "NOTE: no InfiniBand or RoCE device (/sys/class/infiniband is empty) on gpu-[001-004]: "
        "RDMA kernel modules are not loaded there, and nccl.conf gives NCCL only its socket "
        "interface."], notes


# Packages enable these; the image leaves them to the configure (ansible/image.yml).
CLUSTER_DAEMONS = ("slurmd", "slurmctld", "slurmdbd", "sackd", "slurmrestd", "munge")
# What the install phase put in each kind's image (a sample of each role's packages).
# (This stack's REST API runs on its login node.)
IMAGE_PACKAGES = {"controller": ("slurmctld", "slurmdbd", "mariadb-server", "munge",
                                 "prometheus"),
                  "compute": ("slurmd", "munge", "enroot", "libpmix2t64"),
                  "login": ("sackd", "slurm-client", "munge", "enroot", "slurmrestd")}


def test_the_nodes_start_from_prepared_images_that_hold_nothing_of_one_machine(up):
    """Each kind's node runs its kind's prepared image; in the image, no key, host key,
    machine ID, timer stamp, builder name or enabled cluster daemon (docs/how-to/images.md)."""
    refs = {}
    for node, kind in (("ctl", "controller"), ("gpu-001", "compute"), ("login-001", "login")):
        ref = subprocess.run(["podman", "inspect", "--format", "{{.ImageName}}",
                              f"{CLUSTER}-{node}"], capture_output=True, text=True,
                             check=True).stdout.strip()
        assert ref.startswith(f"localhost/metalslurm-prepared:trixie-{kind}-"), (node, ref)
        refs[kind] = ref
    for kind, ref in refs.items():
        made = subprocess.run(["podman", "create", ref], capture_output=True, text=True,
                              check=True).stdout.strip()
        try:
            root = Path(subprocess.run(["podman", "mount", made], capture_output=True,
                                       text=True, check=True).stdout.strip())
            status = (root / "var/lib/dpkg/status").read_text()
            installed = {m for m in re.findall(r"^Package: (\S+)\nStatus: install ok installed",
                                               status, re.M)}
            assert set(IMAGE_PACKAGES[kind]) <= installed, (kind, IMAGE_PACKAGES[kind])
            assert not (root / "etc/munge/munge.key").exists(), kind
            assert not list((root / "etc/ssh").glob("ssh_host_*")), kind
            assert (root / "etc/machine-id").read_text() == "", kind
            assert not (root / "usr/sbin/policy-rc.d").exists(), kind
            # No timer's last run: the builder's made every node catch up apt-daily at boot.
            assert sorted(s.name for s in (root / "var/lib/systemd/timers").glob("*")) == [], kind
            wants = root / "etc/systemd/system/multi-user.target.wants"
            assert [d for d in CLUSTER_DAEMONS if (wants / f"{d}.service").exists()] == [], kind
            found = subprocess.run(["grep", "-rlI", "msimg-", str(root / "etc"),
                                    str(root / "var/lib"), str(root / "opt")],
                                   capture_output=True, text=True, check=False)
            assert found.stdout == "", (kind, found.stdout[:500])
        finally:
            subprocess.run(["podman", "rm", "-f", made], capture_output=True, check=False)


def test_inventory_keeps_the_munge_key_out(up):
    text = up.inventory.read_text()
    key_file = up.state / "secrets" / "munge.key.b64"
    assert key_file.read_text().strip() not in text
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"


def test_check_mode_predicts_only_the_nfs_roles_changes_on_the_converged_cluster(up,
                                                                                 tmp_path):
    """Check mode on the converged cluster, with shared storage switched to NFS: every
    other role predicts no change, and the NFS roles, which this cluster cannot run (the
    kernel has no NFS, so /home and /shared are bind mounts), predict theirs against real
    nodes (ctl as the server, the compute and login nodes as clients), render their files from the
    real nodes' facts, and leave every node untouched. The NFS server's firewall openings
    gain NFS's port (roles/host_firewall)."""
    inventory = yaml.safe_load(up.inventory.read_text())
    inventory["all"]["vars"]["metalslurm_shared_storage"] = "nfs"
    inventory["all"]["children"]["nfs_server"]["hosts"] = {"ctl": None}
    variant = tmp_path / "inventory-nfs.yml"
    variant.write_text(yaml.safe_dump(inventory))
    result = run_playbook(variant, check=True, diff=True, out=lambda _line: None)
    assert result.ok, result.failures
    client = ["Install the NFS client", "Write a mount unit per shared path"]
    assert changed_by_host(result) == {
        "ctl": ["Write the cluster's openings for this host (module_utils/firewall.py)",
                "Install the kernel NFS server", "Write the cluster's exports",
                "Set nfsd threads and protocol versions"],
        "gpu-001": client, "gpu-002": client, "login-001": client}
    exports = [after for host, task, after in result.diffs
               if (host, task) == ("ctl", "Write the cluster's exports")]
    assert [line for line in exports[0].splitlines() if not line.startswith("#")] == [
        "/home 10.78.13.0/24(rw,sync,no_subtree_check,root_squash,sec=sys)",
        "/shared 10.78.13.0/24(rw,sync,no_subtree_check,root_squash,sec=sys)"]
    openings = [after for host, task, after in result.diffs
                if (host, task) == ("ctl", "Write the cluster's openings for this host "
                                           "(module_utils/firewall.py)")]
    assert "tcp dport { 22, 2049, 6817, 6819, 9090, 9093, 61001-64000 }" in openings[0]
    units = [after for host, task, after in result.diffs
             if (host, task) == ("gpu-001", "Write a mount unit per shared path")]
    assert sorted(line for unit in units for line in unit.splitlines()
                  if line.startswith("What=")) == ["What=10.78.13.10:/home",
                                                   "What=10.78.13.10:/shared"]
    for node in ("ctl", "gpu-001"):
        probe = up.on(node, "dpkg -s nfs-kernel-server nfs-common 2>/dev/null | grep -c "
                      "'^Status: install ok'; ls /etc/exports.d /etc/systemd/system/"
                      "home.mount 2>&1 | grep -c 'No such file'", check=False)
        assert probe.stdout.split() == ["0", "2"], (node, probe.stdout)


def scontrol_config(cluster, key: str) -> str:
    return cluster.ctl(f"scontrol show config | grep -E '^{key} '").stdout.split("=", 1)[1].strip()


def changed_by_host(result) -> dict[str, list[str]]:
    hosts: dict[str, list[str]] = {}
    for host, task in result.changed_tasks:
        hosts.setdefault(host, []).append(task)
    return hosts


def test_a_run_that_fails_midway_is_repaired_by_the_next_which_only_reconfigures(up):
    """A bad setting fails the controller play after the node plays ran; slurm.conf is
    left as it was. The next run, with a good value for the same reconfigurable setting,
    completes and changes exactly slurm.conf and 'scontrol reconfigure': the failed run left
    nothing half-applied, and a reconfigurable change restarts nothing. (This module's
    idempotence check ends the test of changes made by hand.)"""
    slurmds = {node: wait_for_new_slurmd(up, node, None, "running")
               for node in ("gpu-001", "gpu-002")}
    before = up.ctl("sha256sum /etc/slurm/slurm.conf").stdout
    failed = run_playbook(up.inventory, out=lambda _line: None, extra_vars={
        "slurm_controller_config": {"SchedulerParameters": "bf_interval=30 bf_window=60"}})
    assert not failed.ok
    assert any("setting SchedulerParameters: value 'bf_interval=30 bf_window=60' cannot be "
               "written unquoted" in f for f in failed.failures), failed.failures
    assert failed.changed_tasks == []
    after = up.ctl("sha256sum /etc/slurm/slurm.conf").stdout
    assert after == before
    result = run_playbook(up.inventory, out=lambda _line: None, extra_vars={
        "slurm_controller_config": {"SchedulerParameters": "bf_interval=45"}})
    assert result.ok, result.failures
    assert changed_by_host(result) == {"ctl": ["Write slurm.conf", "Reconfigure Slurm"]}
    assert scontrol_config(up, "SchedulerParameters") == "bf_interval=45"
    # The reconfigure made each slurmd exec a new one (Slurm 24.11) and hand it to systemd:
    # the new slurmd is the unit's main process (the next test restarts it).
    for node, old in slurmds.items():
        wait_for_new_slurmd(up, node, old, "the one the reconfigure started")


def test_another_munge_key_is_refused_on_every_host_before_any_key_changes(up, tmp_path):
    """An operator's file with another key than the controller's (a Pulumi stack made again,
    a teammate's checkout before the old key was adopted): the controller is asked first,
    every host of the play is refused with the same sentence, and no node's key or munged
    changes (roles/munge/tasks/validate.yml)."""
    other = tmp_path / "munge.key.b64"
    other.write_text(base64.b64encode(os.urandom(1024)).decode() + "\n")
    other.chmod(0o600)
    nodes = ("ctl", "gpu-001", "gpu-002", "login-001")
    probe = "sha256sum /etc/munge/munge.key; systemctl show -p ExecMainStartTimestamp munge"
    before = {node: up.on(node, probe).stdout for node in nodes}
    failed = run_playbook(up.inventory, out=lambda _line: None,
                          extra_vars={"munge_key_b64_file": str(other)})
    assert not failed.ok
    refused = [f.split(":", 1)[0] for f in failed.failures
               if f"ctl, which serves a Slurm cluster, holds another munge key than {other}; "
               "nothing was changed." in
               " ".join(f.split())]
    assert sorted(refused) == list(nodes), failed.failures
    assert failed.changed_tasks == []
    assert {node: up.on(node, probe).stdout for node in nodes} == before


def test_a_start_only_change_restarts_slurmctld_then_slurmd(up):
    slurmds = {node: wait_for_new_slurmd(up, node, None, "running")
               for node in ("gpu-001", "gpu-002")}
    result = run_playbook(up.inventory, out=lambda _line: None, extra_vars={
        "slurm_controller_config": {"MpiDefault": "pmi2"}})
    assert result.ok, result.failures
    changed = changed_by_host(result)
    assert changed["ctl"] == ["Write slurm.conf", "Record the settings that need a restart "
                              "to change", "Restart slurmctld"]
    for node in ("gpu-001", "gpu-002"):
        assert "Restart slurmd" in changed[node], changed
        # The restart after the reconfigure stopped the slurmd systemd had been handed and
        # started one (a lost one would have kept the port: "Unable to bind listen port").
        wait_for_new_slurmd(up, node, slurmds[node], "the one the restart started")
    assert scontrol_config(up, "MpiDefault") == "pmi2"


def test_going_back_to_the_stack_config_restarts_again_then_settles(up):
    """Also: what the monitoring roles manage, changed by hand, is put back by the same run
    (the monitoring role reads its files in one step on a converged run: anything that
    differs sends it through its write tasks). The next test's last run shows that the
    cluster settles: it changes nothing but what that test put out of date."""
    up.ctl("chmod 600 /etc/prometheus/prometheus.yml && echo '<!-- by hand -->' >> "
           "/etc/prometheus/consoles/metalslurm-node.html && "
           "systemctl stop prometheus-alertmanager metalslurm-slurm-exporter")
    up.on("gpu-001", "rm /usr/local/sbin/metalslurm-epilog && "
                     "systemctl stop prometheus-node-exporter")
    back = run_playbook(up.inventory, out=lambda _line: None)
    assert back.ok, back.failures
    changed = changed_by_host(back)
    assert "Restart slurmctld" in changed["ctl"]
    assert {"Write Prometheus' configuration", "Keep Alertmanager running",
            "Write the scrape targets (every node, the Slurm exporter, DCGM's) and the consoles"
            , "Keep the Slurm exporter running"} <= set(changed["ctl"]), changed
    assert {"Name it as the prolog and the epilog", "Keep node_exporter running"} <= \
        set(changed["gpu-001"]), changed
    assert up.ctl("stat -c %a /etc/prometheus/prometheus.yml && systemctl is-active "
                  "prometheus-alertmanager metalslurm-slurm-exporter").stdout.split() == \
        ["644", "active", "active"]
    assert "by hand" not in up.ctl("cat /etc/prometheus/consoles/metalslurm-node.html").stdout
    assert up.on("gpu-001", "readlink /usr/local/sbin/metalslurm-epilog && systemctl is-active "
                            "prometheus-node-exporter").stdout.split() == \
        ["/usr/local/sbin/metalslurm-gpu-jobs", "active"]
    # Slurm 24.11 shows MpiDefault=none as "(null)".
    assert scontrol_config(up, "MpiDefault") in ("none", "(null)")


def test_status_and_exec(up):
    status = metalslurm("local", "status", "--stack", str(up.stack))
    assert status.returncode == 0
    for node in NODES:
        assert f"{CLUSTER}-{node}" in status.stdout
    proc = metalslurm("local", "exec", "--stack", str(up.stack), "gpu-002", "--", "hostname")
    assert (proc.returncode, proc.stdout.strip()) == (0, "gpu-002")
    # No NODE: the submit host, the login node.
    proc = metalslurm("local", "exec", "--stack", str(up.stack), "--", "hostname")
    assert (proc.returncode, proc.stdout.strip()) == (0, "login-001")


HOST_CAS = host_extra_certificates(host_bundles())


@pytest.mark.skipif(not HOST_CAS, reason="this host trusts no CA beyond its distribution's "
                    "own set (no TLS-inspecting proxy, no company CA): nothing to hand the nodes")
@pytest.mark.parametrize("node", ["ctl", "gpu-001"])
def test_the_nodes_trust_the_hosts_extra_cas_through_their_own_bundle(up, node):
    """The host's extra CAs are in the bundle the node's ca-certificates package builds,
    and stay there when update-ca-certificates runs again (as a package upgrade runs it);
    the bundle is the node's own file, not a mount; the mounted copy is read-only."""
    bundle = up.on(node, "update-ca-certificates >/dev/null 2>&1 && "
                         "cat /etc/ssl/certs/ca-certificates.crt").stdout
    trusted = certificates(bundle)
    assert [der in trusted for der in HOST_CAS] == [True] * len(HOST_CAS)
    mounts = up.on(node, "cut -d' ' -f5 /proc/self/mountinfo").stdout.split()
    assert [m for m in mounts if m.startswith("/etc/ssl")] == []
    assert NODE_HOST_CA_DIR in mounts
    write = up.on(node, f"touch {NODE_HOST_CA_DIR}/x", check=False)
    assert write.returncode != 0 and "Read-only file system" in write.stderr


def test_pip_on_the_nodes_uses_the_system_bundle(up):
    """Every pip, a virtual environment's too (python3-venv is on compute nodes)."""
    out = up.on("gpu-001", "d=$(mktemp -d) && python3 -m venv $d/venv && "
                           "$d/venv/bin/pip config list; rm -rf $d").stdout
    assert "global.cert='/etc/ssl/certs/ca-certificates.crt'" in out.splitlines()


def test_configure_repairs_a_broken_compute_node(up):
    broken = up.on("gpu-002", "systemctl stop slurmd && rm /etc/default/slurmd "
                   "/etc/systemd/system/slurmd.service.d/metalslurm.conf", check=False)
    assert broken.returncode == 0
    # Limited to the broken node, as an operator repairing one node would run it.
    result = run_playbook(up.inventory, limit="gpu-002", out=lambda _line: None)
    assert result.ok, result.failures
    assert sorted(result.changed_tasks) == [
        ("gpu-002", "Let slurmd start without a local slurm.conf (configless)"),
        ("gpu-002", "Point slurmd at the controller for its configuration"),
        ("gpu-002", "Restart slurmd"),
    ]
    sinfo = up.ctl("sinfo --noheader --Node --partition=train --format='%N %T'")
    assert sinfo.stdout.split("\n")[:2] == ["gpu-001 idle", "gpu-002 idle"]


def test_what_the_slurm_roles_find_changed_by_hand_is_repaired_on_that_node_alone(up):
    """slurm_controller, slurm_pam_adopt and slurm_login read a converged node once and
    include their write tasks only where something differs (slurm_compute's repair is the
    test above): each change below is put back by the next run, and nothing else runs."""
    up.ctl("echo '# changed by hand' >> /etc/slurm/slurm.conf && chmod 0600 /etc/slurm/mpi.conf "
           f"&& rm {SLURMCTLD_DROPIN} && systemctl daemon-reload")
    up.on("gpu-001", "sed -i '/BEGIN metalslurm: pam_access/,/END metalslurm: pam_access/d' "
                     "/etc/pam.d/sshd")
    result = run_playbook(up.inventory, out=lambda _line: None)
    assert result.ok, result.failures
    assert changed_by_host(result) == {
        "ctl": ["Write slurm.conf", "Write mpi.conf (the PMIx plugin's settings)",
                "Let what slurmctld's scripts started outlive its restarts (KillMode=process)",
                "Reconfigure Slurm"],
        "gpu-001": ["Put pam_access and pam_slurm_adopt in sshd's account stack"]}
    assert "by hand" not in up.ctl("cat /etc/slurm/slurm.conf").stdout
    assert up.ctl("stat -c %a /etc/slurm/mpi.conf").stdout.strip() == "644"
    # systemd reports the drop-in's setting once its handler reloaded the units (a reload
    # reports no change: systemd_service's daemon_reload alone never does).
    assert up.ctl("systemctl show --property=KillMode --value slurmctld").stdout == "process\n"
    assert up.on("gpu-001", "grep -c '^account *required *pam_slurm_adopt.so' "
                            "/etc/pam.d/sshd").stdout.strip() == "1"
    # sackd's copy on the login node, stale (as after a slurmctld restart forgot the node).
    up.on("login-001", "echo '# stale' >> /run/slurm/conf/slurm.conf")
    # The run after changes that alone (this module's idempotence check) and reaches none of
    # the write tasks of the roles that read a converged node once, but the login node's
    # sackd ones, which its stale copy sends it through.
    again = run_playbook(up.inventory, out=lambda _line: None)
    assert again.ok, again.failures
    assert again.changed_tasks == [("login-001", "Have sackd fetch the configuration again "
                                                 "where its copy is older than the controller's")]
    assert [task for task in FAST_PATH_WRITES if task in again.task_seconds] == [
        "Point sackd at slurmctld (before the package starts it)"]
    assert up.on("login-001", "sha1sum < /run/slurm/conf/slurm.conf").stdout == \
        up.ctl("sha1sum < /etc/slurm/slurm.conf").stdout


def test_plain_pytest_runs_the_verify_suite_on_the_inventory(up):
    """The documented plain-tools command, after the repair above: the repaired node is
    whole, and so are the cluster-wide checks (the whole suite ran on every node at 'up').
    Run as from the activated virtualenv the README names (testinfra runs its
    ansible-inventory)."""
    venv_path = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/verify",
         "--hosts=ansible://gpu-002", f"--ansible-inventory={up.inventory}"],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=600,
        env={**os.environ, "PATH": venv_path})
    assert proc.returncode == 0, proc.stdout[-3000:]
    # Every check passed; the only ones skipped are per-host checks of the two elastic
    # nodes, which are powered down, and the HCA port checks (no HCA on these nodes).
    lines = proc.stdout.strip().splitlines()
    assert re.match(r"^\d+ passed(, \d+ skipped)? in ", lines[-1]), proc.stdout
    skipped = [line for line in lines if line.startswith("SKIPPED")]
    assert all(EXPECTED_SKIP.match(line) for line in skipped), skipped
