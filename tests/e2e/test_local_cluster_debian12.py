"""Debian 12 nodes (Slurm 22.05): configure, every node with the operator's munge key (and
a configure that names no key file refused before munge is touched), a multi-node srun,
an MPI job and a container step from the login node (the controller's configuration copied
there: 22.05 has no sackd), the REST API (slurmrestd 22.05 with JWT, on the login node),
the verify suite, a second configure with nothing to change, a configure refused before it
changes anything while apt sources offer Debian 13's Slurm, Prometheus moved to another
node and monitoring turned off and on, scaling down (refused while a job runs on the node
that leaves, then waited for), a lost state directory, and 'down' removing everything.
This module brings up and removes its own cluster, on the cold path (from the bare Debian
12 image): its one cold configure follows the lost state directory's recovery, which
recreates every node from that image."""

from __future__ import annotations

import base64
import hashlib
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from ansible_collections.metalslurm.cluster.plugins.module_utils.slurm_leaving import (
    LEAVING_REASON,
)

from infra.ops.configure import run_playbook
from tests.e2e.cluster import (
    APT_GET,
    BUILD_IMAGE,
    IMAGE,
    MARKER,
    PROBE,
    REPO,
    LocalStack,
    cluster_containers,
    e2e_stack,
    metalslurm,
    network_exists,
    quoted,
    vendor_dir,
    wait_for,
)
from tests.paths import load_module

STACK = e2e_stack("Pulumi.e2e-debian12.yaml")
CLUSTER = "ms-e2e12"
STATE = REPO / ".metalslurm" / "e2e-debian12"
INVENTORY = STATE / "inventory.yml"
NODES = ["ctl", "gpu-001", "gpu-002", "login-001"]
# An inventory that names no key file: the munge role refuses it (nodes never make a key).
NO_KEY_FILE = {"munge_key_b64_file": ""}
# The login node: the submit host, and the REST host.
LOGIN = "login-001"
# Commands on the nodes (LocalStack.on: over one SSH connection per node).
CLUSTER_NODES = LocalStack(STACK, CLUSTER, STATE.name,
                           subprocess.CompletedProcess(["local", "up"], 0, "", ""))
REST_URL = "http://10.78.12.253:6820"


@pytest.fixture(scope="module")
def nodes():
    """The nodes, made twice: 'up', then the state directory lost (secrets and node files
    gone: a fresh checkout, an 'rm -rf .metalslurm') and 'up' again, whose output is
    yielded. The recovery recreates every container from the bare image, so the module's
    one cold configure (configured) is also the configure that converges a recovered
    cluster: a second cold configure of a cluster recovered after its first would test
    the same path again."""
    metalslurm("local", "down", "--stack", str(STACK))
    first = metalslurm("local", "up", "--stack", str(STACK), "--no-configure")
    assert first.returncode == 0, first.stdout[-3000:]
    made = {name: _container_id(name) for name in cluster_containers(CLUSTER)}
    shutil.rmtree(STATE)
    recovered = metalslurm("local", "up", "--stack", str(STACK), "--no-configure")
    assert recovered.returncode == 0, recovered.stdout[-3000:]
    yield recovered, made
    metalslurm("local", "down", "--stack", str(STACK))
    assert cluster_containers(CLUSTER) == []


def _container_id(name: str) -> str:
    return subprocess.run(["podman", "inspect", "--format", "{{.Id}}", name],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def configured(nodes):
    return run_playbook(INVENTORY, out=lambda _line: None)


def node_key_hashes() -> dict[str, str]:
    return {n: node_sh(n, "sha256sum /etc/munge/munge.key").split()[0] for n in NODES}


def node_sh(node: str, command: str) -> str:
    return CLUSTER_NODES.on(node, command).stdout.strip()


def test_configure_succeeds(configured):
    assert configured.ok, configured.failures
    assert configured.changed > 0


def test_up_recovers_when_the_state_directory_was_lost(nodes, configured):
    """Secrets and node files gone: 'up' recreated every node container (their files name
    the new key), and the configure after it converged them: a 2-node srun runs."""
    recovered, made = nodes
    assert sorted(made) == [f"{CLUSTER}-{n}" for n in sorted(NODES)]
    for name in made:
        assert f"recreating {name}: its node files changed" in recovered.stdout
    assert all(_container_id(name) != made[name] for name in made)
    assert configured.ok, configured.failures
    out = node_sh("ctl", "timeout 120 srun --nodes=2 --ntasks-per-node=1 hostname")
    assert sorted(out.split()) == ["gpu-001", "gpu-002"]


def test_slurm_is_22_05(configured):
    assert node_sh("ctl", "sinfo --version").startswith("slurm-wlm 22.05")


def test_every_node_has_the_operators_munge_key(configured):
    """The key 'local up' made once in the state directory, not the one each node's munge
    package made when it was installed."""
    operator_key = base64.b64decode((STATE / "secrets" / "munge.key.b64").read_text())
    assert node_key_hashes() == dict.fromkeys(NODES, hashlib.sha256(operator_key).hexdigest())


def test_a_configure_without_a_key_file_is_refused_and_changes_no_key(configured):
    before = node_key_hashes()
    result = run_playbook(INVENTORY, extra_vars=NO_KEY_FILE, out=lambda _line: None)
    assert not result.ok
    assert any("munge_key_b64_file is not set" in f for f in result.failures), result.failures
    assert node_key_hashes() == before


def test_multi_node_srun_from_the_login_node(configured):
    """Slurm 22.05 has no sackd: the login node's client commands read the controller's
    files, copied by the configure (the verify suite compares them)."""
    assert node_sh(LOGIN, "test -e /usr/sbin/sackd || echo none") == "none"
    conf = "cat /etc/slurm/slurm.conf"
    assert node_sh(LOGIN, conf) == node_sh("ctl", conf)
    out = node_sh(LOGIN, "timeout 120 srun --nodes=2 --ntasks-per-node=1 hostname")
    assert sorted(out.split()) == ["gpu-001", "gpu-002"]


def test_a_slurmd_restart_stops_slurmd_at_once_and_keeps_the_running_job(configured):
    """slurmd 22.05's unit (Type=simple, KillMode=process) under the local image's time
    namespace wrapper: a restart, as the roles' handler makes it, stops slurmd by its
    SIGTERM, not by systemd's SIGKILL 90 s later, and the running job's step lives on."""
    job = node_sh("ctl", "sbatch --parsable -w gpu-001 -o /dev/null --wrap='srun sleep 15'")
    wait_for(f"job {job}'s step to run", lambda: f"{job}.0" in node_sh(
        "ctl", f"squeue -h -s -j {job} -o %i").split(), timeout=60)
    cursor = node_sh("gpu-001", "journalctl -u slurmd -n 0 --show-cursor -o cat "
                                "| sed -n 's/^-- cursor: //p'")
    node_sh("gpu-001", "timeout 30 systemctl restart slurmd")
    said = node_sh("gpu-001", f"journalctl -u slurmd --after-cursor {quoted(cursor)} -o cat")
    assert "slurmd.service: Deactivated successfully." in said, said
    assert "timed out" not in said, said
    wait_for(f"job {job} to end", lambda: node_sh(
        "ctl", f"squeue -h -j {job} -o %i") == "", timeout=120)
    assert node_sh("ctl", f"sacct -n -X -P -j {job} -o State,ExitCode") == "COMPLETED|0:0"


def test_an_mpi_allreduce_runs_across_both_nodes_through_pmix(configured):
    """Slurm 22.05's PMIx plugin (slurm-wlm-basic-plugins, with the libpmix the mpi role
    installs) starts 4 OpenMPI 4.1 ranks on 2 nodes; examples/python/mpi_allreduce.py
    checks the reduced sum on every rank."""
    script = (REPO / "examples/python/mpi_allreduce.py").read_text()
    node_sh("ctl", f"mkdir -p /shared/mpi && "
                   f"printf '%s' {quoted(script)} > /shared/mpi/allreduce.py")
    out = node_sh(LOGIN, "timeout 120 srun --mpi=pmix --nodes=2 --ntasks-per-node=2 "
                         "python3 /shared/mpi/allreduce.py")
    assert sorted(line for line in out.splitlines() if line.startswith("rank ")) == [
        f"rank {r}/4 on gpu-00{r // 2 + 1}: sum 10 (want 10), count 4" for r in range(4)]
    assert re.search(r"^allreduce ok: 4 ranks on 2 nodes \(gpu-001,gpu-002\), MPI 3\.1, "
                     r"Open MPI v4\.1\.", out, re.M), out


def test_a_container_step_runs_in_the_image_with_exactly_its_two_gpus(configured):
    if vendor_dir() is None:
        pytest.skip("no mirror of the Enroot/Pyxis artifacts on this machine: the cluster "
                    "was brought up without containers")
    node_sh("gpu-001", BUILD_IMAGE)
    node_sh("ctl", f"printf '%s' {quoted(PROBE)} > /shared/probe.sh && chmod 755 /shared/probe.sh")
    out = node_sh(LOGIN, "cd /home/carol && runuser -u carol -- srun -w gpu-001 "
                         f"--gres=gpu:h100:2 --container-image={IMAGE} "
                         "--container-mounts=/shared:/shared /shared/probe.sh")
    assert out.splitlines() == [
        "nvidia0 No such device or address", "nvidia1 No such device or address",
        "nvidia2 Operation not permitted", "nvidia3 Operation not permitted",
        "CUDA_VISIBLE_DEVICES=0,1", MARKER]


def test_slurm_22_05_schedules_with_the_stacks_switch_tree(configured):
    """topology.conf from the stack's leaves and spine, read by Slurm 22.05's tree plugin;
    a 2-node job must span both leaves, which --switches=1 cannot give."""
    assert node_sh("ctl", "scontrol show topology").splitlines() == [
        "SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=gpu-001",
        "SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=gpu-002",
        "SwitchName=spine1 Level=1 LinkSpeed=1 Nodes=gpu-[001-002] Switches=leaf[1-2]"]
    assert node_sh("ctl", "grep -E '^TopologyPlugin=' /etc/slurm/slurm.conf") == \
        "TopologyPlugin=topology/tree"


def test_the_slurm_exporter_reads_slurm_22_05(configured):
    """The exporter on 22.05 (text forms; sdiag and sshare without --json): every node in
    the state sinfo gives it, every Slurm command answered, the GPUs counted. The exporter
    refreshes on its own interval, so a job that just ended may still show for one refresh:
    the states are compared until they agree (or the wait ends)."""
    address = yaml.safe_load(INVENTORY.read_text())["all"]["hosts"]["ctl"]["metalslurm_address"]

    def views() -> tuple[list[str], dict[str, str], dict[str, str]]:
        metrics = node_sh("ctl", f"curl -sf http://{address}:9341/metrics").splitlines()
        states = dict(re.fullmatch(r'slurm_node_state\{node="([^"]+)",state="([^"]+)"\} 1\.0',
                                   m).groups()
                      for m in metrics if m.startswith("slurm_node_state{"))
        sinfo = dict(line.split() for line in node_sh(
            "ctl", "sinfo --noheader --Node --partition=train --format='%N %T'").splitlines())
        return metrics, states, {n: s.rstrip("*~#%!") for n, s in sinfo.items()}

    wait_for("the exporter to show the nodes as sinfo does",
             lambda: (lambda v: v[1] == v[2])(views()), timeout=90)
    metrics, states, sinfo = views()
    assert states == sinfo == {"gpu-001": "idle", "gpu-002": "idle"}
    assert "slurm_up 1.0" in metrics
    assert [m for m in metrics if m.startswith("slurm_exporter_command_up{")
            and not m.endswith(" 1.0")] == []
    assert 'slurm_gpus{status="total",type="h100"} 8.0' in metrics


def test_slurm_22_05_serves_the_rest_api_with_jwt(configured):
    """slurmrestd 22.05 (openapi/v0.0.38) as its own user: carol's token, made with
    'scontrol token', submits through the example client a job that runs as carol; no
    token is refused with 401."""
    import requests

    client = load_module(REPO / "examples/slurm_rest_client.py", "slurm_rest_client_e2e12")
    assert node_sh(LOGIN, "ps -o user:32= -C slurmrestd") == "slurmrestd"
    token = node_sh(LOGIN, "scontrol token username=carol lifespan=600").removeprefix(
        "SLURM_JWT=")
    rest = client.SlurmRest(REST_URL, "carol", token)
    assert rest.api == "v0.0.38"
    job = rest.submit("#!/bin/bash\nid -un > /home/carol/rest-job.txt\n", "rest-e2e12",
                      "/home/carol")
    assert rest.wait(job, timeout=120) == "COMPLETED"
    assert node_sh("ctl", "cat /home/carol/rest-job.txt") == "carol"
    assert {j["job_id"]: rest.state(j) for j in rest.jobs()}[job] == "COMPLETED"
    assert requests.get(f"{REST_URL}/slurm/v0.0.38/ping", timeout=30).status_code == 401


def test_slurm_22_05_gives_the_prolog_the_jobs_gpus(configured):
    """The GPU-to-job prolog (PrologFlags=Alloc) on 22.05: inside a 2-GPU job, the node's
    textfile for node_exporter has exactly two series with the job's id, on two different
    GPUs (SLURM_JOB_GPUS reached the prolog); the epilog takes them out afterwards."""
    textfile = "/var/lib/prometheus/node-exporter/metalslurm-gpu-jobs.prom"
    out = node_sh("ctl", "timeout 120 srun --nodes=1 --nodelist=gpu-001 --gres=gpu:2 sh -c "
                         f"'echo job=$SLURM_JOB_ID; cat {textfile}'")
    job = re.search(r"^job=(\d+)$", out, re.M).group(1)
    held = [line for line in out.splitlines()
            if line.startswith("metalslurm_gpu_job_info{") and f'jobid="{job}"' in line]
    assert len(held) == 2, out
    assert len({re.search(r'minor="(\d+)"', line).group(1) for line in held}) == 2, held
    assert all('user="root"' in line for line in held), held
    wait_for("the epilog to take the job's GPUs out", lambda: f'jobid="{job}"' not in node_sh(
        "gpu-001", f"cat {textfile} 2>/dev/null || true"), timeout=60)


def test_verify_suite_passes(configured):
    proc = metalslurm("verify", "-i", str(INVENTORY), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_second_configure_changes_nothing(configured):
    result = run_playbook(INVENTORY, out=lambda _line: None)
    assert result.ok, result.failures
    assert result.changed_tasks == []


# The Debian 13 sources the refusal test adds beside a node's own (the same mirror).
TRIXIE_SOURCES = "/etc/apt/sources.list.d/metalslurm-e2e-trixie.list"


def _sources_on(nodes: list[str], suite: str | None) -> None:
    """Add Debian ``suite`` to ``nodes``' apt sources (from the mirror of their own
    sources.list), or with None take it out again, and read the lists anew."""
    def run(node: str) -> None:
        if suite is None:
            command = f"rm -f {TRIXIE_SOURCES}"
        else:
            command = (f"awk 'NR == 1 {{print $1, $2, \"{suite}\", \"main\"}}' "
                       f"/etc/apt/sources.list > {TRIXIE_SOURCES}")
        node_sh(node, f"{command} && {APT_GET} -qq -o Acquire::Languages=none update")
    with ThreadPoolExecutor(len(nodes)) as pool:
        list(pool.map(run, nodes))


def test_sources_pointed_at_debian_13_are_refused_before_anything_changes(configured):
    """The controller's and gpu-001's apt sources offer Debian 13's Slurm 24.11 beside the
    installed 22.05, three releases further than 24.11 reads state from: the configure
    stops at its first step on the Slurm hosts, naming both hosts, the releases skipped
    and the way through, and changes nothing (slurm.conf's hash, no changed task); the same
    with --upgrade-slurm."""
    slurm_conf = node_sh("ctl", "sha256sum /etc/slurm/slurm.conf")
    try:
        _sources_on(["ctl", "gpu-001"], "trixie")
        assert node_sh("ctl", "apt-cache policy slurm-client | sed -n "
                              "'s/^ *Candidate: *//p'").startswith("24.11.")
        refused = run_playbook(INVENTORY, out=lambda _line: None)
        # 'configure --upgrade-slurm' refuses the same jump, before any host changes.
        upgrade = run_playbook(INVENTORY, out=lambda _line: None,
                               extra_vars={"metalslurm_slurm_upgrade": True})
    finally:
        _sources_on(["ctl", "gpu-001"], None)
    assert not upgrade.ok and upgrade.changed_tasks == []
    asked = " ".join(" ".join(upgrade.failures).split())
    assert re.search(
        r"Nothing was changed: ctl, gpu-001: the apt sources offer Slurm 24\.11\.\S+ over the "
        r"installed 22\.05\.\S+, a jump Slurm cannot make: .* upgrade through 23\.11 then "
        r"24\.11\. Point the apt sources at a release inside 22\.05's window first, or run "
        r"without --upgrade-slurm", asked), asked[-2000:]
    assert not refused.ok
    said = " ".join(" ".join(refused.failures).split())
    assert re.search(
        r"Nothing was changed: ctl, gpu-001: the apt sources offer Slurm 24\.11\.\d+ over the "
        r"installed 22\.05\.\d+, a jump Slurm cannot make: Slurm 24\.11 takes the state of "
        r"23\.02, 23\.11 and 24\.05 only \(3 releases back\), so 22\.05 to 24\.11 skips "
        r"23\.02, 23\.11 and 24\.05; upgrade through 23\.11 then 24\.11\.", said), said[-2000:]
    assert refused.changed_tasks == []
    assert node_sh("ctl", "sha256sum /etc/slurm/slurm.conf") == slurm_conf
    assert node_sh("ctl", "apt-cache policy slurm-client | sed -n "
                          "'s/^ *Candidate: *//p'").startswith("22.05.")


def _units(node: str, units: list[str]) -> list[str]:
    """'active enabled' (or 'inactive disabled'...) per unit, as systemctl says."""
    names = " ".join(units)
    return node_sh(node, f"for u in {names}; do echo $(systemctl is-active $u) "
                         f"$(systemctl is-enabled $u); done").splitlines()


def test_moving_prometheus_and_turning_monitoring_off_stop_what_no_longer_runs(configured):
    """Prometheus moved to gpu-001 (metalslurm_monitoring.host): the next configure starts it
    there and stops and disables Prometheus and Alertmanager on the controller (two would
    send every alert twice). Monitoring turned off: every node's node_exporter, the Slurm
    exporter and Prometheus are stopped and disabled, slurm.conf loses the GPU prolog, and a
    second run changes nothing. (The scaling-down test's configure turns it back on.)"""
    inventory = yaml.safe_load(INVENTORY.read_text())
    monitoring = inventory["all"]["vars"]["metalslurm_monitoring"]
    password_file = inventory["all"]["vars"]["monitoring_password_file"]
    password = Path(password_file).read_text().strip()
    gpu1 = inventory["all"]["hosts"]["gpu-001"]["metalslurm_address"]
    prometheus = ["prometheus", "prometheus-alertmanager"]
    exporters = ["prometheus-node-exporter"]

    moved = run_playbook(INVENTORY, out=lambda _line: None,
                         extra_vars={"metalslurm_monitoring": {**monitoring, "host": "gpu-001"}})
    assert moved.ok, moved.failures
    assert ("ctl", "Stop the monitoring services this node no longer runs") in moved.changed_tasks
    assert _units("ctl", prometheus) == ["inactive disabled"] * 2
    assert _units("gpu-001", prometheus) == ["active enabled"] * 2
    assert node_sh("ctl", f"curl -s -o /dev/null -w '%{{http_code}}' "
                          f"http://{gpu1}:9090/-/ready") == "401"
    assert node_sh("ctl", f"curl -s -u metalslurm:{quoted(password)} "
                          f"http://{gpu1}:9090/-/ready").startswith("Prometheus Server is Ready")

    off = {"metalslurm_monitoring": {**monitoring, "enabled": False}}
    result = run_playbook(INVENTORY, out=lambda _line: None, extra_vars=off)
    assert result.ok, result.failures
    assert _units("gpu-001", prometheus + exporters) == ["inactive disabled"] * 3
    assert _units("ctl", exporters + ["metalslurm-slurm-exporter"]) == \
        ["inactive disabled"] * 2
    assert _units("gpu-002", exporters) == ["inactive disabled"]
    assert node_sh("ctl", "grep -cE '^(Prolog|Epilog)=' /etc/slurm/slurm.conf "
                          "|| true") == "0"
    # pam_slurm_adopt's extern step stays.
    assert node_sh("ctl", "grep -E '^PrologFlags=' /etc/slurm/slurm.conf") == "PrologFlags=Contain"
    again = run_playbook(INVENTORY, out=lambda _line: None, extra_vars=off)
    assert again.ok, again.failures
    assert again.changed_tasks == []


def test_scaling_down_removes_the_node_and_slurm_forgets_it(configured, tmp_path):
    """A pool shrunk in the stack config while carol's job runs on the node that leaves:
    'up' drains it and refuses, naming the job, with nothing removed and the inventory
    unchanged; run again with --drain-wait it waits for the job's end, then removes the
    container. The next configure restarts Slurm with the shorter node list, and the job's
    row stays in the accounting. That configure is also the one after the test above
    turned monitoring off (it runs with the stack's settings): all of it runs on the
    controller again, gpu-001's Prometheus stays stopped and its node_exporter runs again,
    and slurm.conf names the GPU prolog again."""
    doc = yaml.safe_load(STACK.read_text())
    doc["config"]["metalslurm:computePools"][0]["count"] = 1
    # gpu-002's leaf goes with it (a leaf naming a node the cluster lacks is refused).
    doc["config"]["metalslurm:topology"]["leaves"].pop()
    smaller = tmp_path / STACK.name  # same stack name, so the same state directory
    smaller.write_text(yaml.safe_dump(doc))
    job = node_sh(LOGIN, "cd /home/carol && runuser -u carol -- sbatch --parsable -w gpu-002 "
                         "-o /dev/null --wrap='sleep 80'").split(";")[0]
    wait_for(f"job {job} to run", lambda: node_sh("ctl", f"squeue -h -j {job} -o %T")
             == "RUNNING", timeout=120)
    inventory = INVENTORY.read_text()
    # A bring-your-own cluster's path (the host dropped from the inventory, its machine
    # left alone): the configure's first step on the controller refuses the same way,
    # before any play has changed a host.
    dropped = tmp_path / "inventory-without-gpu-002.yml"
    dropped.write_text(yaml.safe_dump(_without_host(yaml.safe_load(inventory), "gpu-002")))
    slurm_conf = node_sh("ctl", "sha256sum /etc/slurm/slurm.conf")
    refused = metalslurm("configure", "-i", str(dropped))
    said = " ".join(refused.stdout.split()).replace("\\", "")
    assert refused.returncode == 2, said[-2000:]
    assert (f"gpu-002 is no longer in the inventory but a job still needs it: job {job} "
            "(carol, running on gpu-002); nothing was removed.") in said, said[-2000:]
    assert "Run the configure again once those jobs end, or with --drain-wait SECONDS" in said
    assert node_sh("ctl", "sha256sum /etc/slurm/slurm.conf") == slurm_conf
    refused = metalslurm("local", "up", "--stack", str(smaller), "--no-configure")
    assert refused.returncode == 1, refused.stdout[-2000:]
    assert (f"gpu-002 is no longer in the stack config but a job still needs it: job {job} "
            "(carol, running on gpu-002); nothing was removed.") in " ".join(
                refused.stderr.split())
    assert len(cluster_containers(CLUSTER)) == 4
    assert INVENTORY.read_text() == inventory
    assert node_sh("ctl", "sinfo --noheader --Node --nodes=gpu-002 --format='%t|%E' "
                          "| sort -u") == f"drng|{LEAVING_REASON}"
    proc = metalslurm("local", "up", "--stack", str(smaller), "--no-configure",
                      "--drain-wait", "300")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "waiting for 1 job(s) on leaving nodes gpu-002" in proc.stdout
    assert "removing nodes no longer in the config: ms-e2e12-gpu-002" in proc.stdout
    assert cluster_containers(CLUSTER) == ["ms-e2e12-ctl", "ms-e2e12-gpu-001",
                                           "ms-e2e12-login-001"]
    result = run_playbook(INVENTORY, out=lambda _line: None)
    assert result.ok, result.failures
    assert "Restart slurmctld" in [t for h, t in result.changed_tasks if h == "ctl"]
    # One line per partition the node is in: debug, train and priority.
    # The login node's copy follows (the configure copied the new slurm.conf there).
    for node in ("ctl", LOGIN):
        assert node_sh(node, "sinfo --noheader --Node --format='%N %T' | sort -u") == \
            "gpu-001 idle"
    prometheus = ["prometheus", "prometheus-alertmanager"]
    exporters = ["prometheus-node-exporter"]
    assert _units("ctl", prometheus + exporters + ["metalslurm-slurm-exporter"]) == \
        ["active enabled"] * 4
    assert _units("gpu-001", exporters + prometheus) == ["active enabled"] + \
        ["inactive disabled"] * 2
    assert node_sh("ctl", "grep -E '^Prolog=' /etc/slurm/slurm.conf") == \
        "Prolog=/usr/local/sbin/metalslurm-prolog"
    # The node is gone from Slurm; its job's history is not.
    assert node_sh("ctl", f"sacct --allocations --noheader --parsable2 --jobs={job} "
                          "--format=User,State,NodeList") == "carol|COMPLETED|gpu-002"


def _without_host(inventory: dict, host: str) -> dict:
    """An inventory document with ``host`` taken out of every group and partition, as the
    inventory of a byo stack without that host reads."""
    inventory["all"]["hosts"].pop(host)
    for group in inventory["all"]["children"].values():
        (group.get("hosts") or {}).pop(host, None)
    for partition in inventory["all"]["vars"]["metalslurm_partitions"]:
        partition["nodes"].remove(host)
    return inventory


def test_down_removes_everything(configured):
    proc = metalslurm("local", "down", "--stack", str(STACK))
    assert proc.returncode == 0
    # gpu-002 went with the scaling down.
    assert "removed 3 node container(s) of cluster ms-e2e12" in proc.stdout
    assert cluster_containers(CLUSTER) == []
    assert not network_exists(f"{CLUSTER}-net")
    assert not STATE.exists()
