"""Monitoring (roles/monitoring_node, roles/slurm_exporter, roles/monitoring): every node's
node_exporter answers on its private address only, the Slurm exporter answers and reaches
Slurm, Prometheus has every expected target up (an elastic node Slurm holds powered down
excepted: it is expected to be gone), Alertmanager is reachable, and both web UIs refuse
a request without the login.

HTTP is asked from the nodes themselves (python3's urllib: every node has it), so the
checks run the same over SSH on a real cluster and on the local one.
"""

from __future__ import annotations

import json
import re
import shlex
import time

import pytest
from ansible_collections.metalslurm.cluster.plugins.module_utils.monitoring import (
    monitoring_settings,
)

PORTS = {"prometheus": 9090, "alertmanager": 9093, "node_exporter": 9100, "slurm_exporter": 9341}
PASSWORD_FILE = "/etc/prometheus/metalslurm-web.password"
WEB_USER = "metalslurm"

# GET a URL; prints the HTTP status and the body (basic auth from a file when given).
_GET = """
import base64, sys, urllib.request, urllib.error
url, password_file = sys.argv[1], sys.argv[2]
req = urllib.request.Request(url)
if password_file:
    token = base64.b64encode(("{user}:" + open(password_file).read().strip()).encode()).decode()
    req.add_header("Authorization", "Basic " + token)
try:
    with urllib.request.urlopen(req, timeout=10) as r:
        print(r.status); print(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code)
""".replace("{user}", WEB_USER)


def http_get(host, url: str, password_file: str = "") -> tuple[int, str]:
    out = host.check_output(f"python3 -c {shlex.quote(_GET)} {shlex.quote(url)} "
                            f"{shlex.quote(password_file)}")
    status, _, body = out.partition("\n")
    return int(status), body


def _settings(cluster) -> dict:
    return dict(cluster.var("metalslurm_monitoring") or {})


@pytest.fixture(autouse=True)
def _only_when_monitoring_is_on(cluster) -> None:
    if not _settings(cluster).get("enabled", True):
        pytest.skip("metalslurm:monitoring.enabled is false: no Prometheus, no exporters")


@pytest.fixture(scope="module")
def monitoring_host(cluster):
    import testinfra

    name = _settings(cluster).get("host") or cluster.controller
    return name, testinfra.get_host(f"ansible://{name}", ansible_inventory=cluster.inventory)


def _address(cluster, name: str) -> str:
    return str(cluster.hostvars[name]["metalslurm_address"])


def test_node_exporter_listens_on_the_private_address_only(host, host_name, cluster):
    listening = host.check_output(f"ss --listening --tcp --numeric --no-header "
                                  f"'sport = :{PORTS['node_exporter']}'")
    addresses = sorted(line.split()[3] for line in listening.splitlines() if line.strip())
    assert addresses == [f"{_address(cluster, host_name)}:{PORTS['node_exporter']}"]


def test_node_exporter_reports_the_nodes_daemons(host, host_name, cluster):
    status, body = http_get(host, f"http://{_address(cluster, host_name)}:"
                                  f"{PORTS['node_exporter']}/metrics")
    assert status == 200
    active = sorted(line.split('name="')[1].split('"')[0].removesuffix(".service")
                    for line in body.splitlines()
                    if line.startswith("node_systemd_unit_state{") and 'state="active"' in line
                    and line.endswith(" 1"))
    expected = sorted(s for s in cluster.services_of(host_name)
                      if s in ("slurmctld", "slurmd", "slurmdbd", "munge", "mariadb",
                               "slurmrestd", "metalslurm-slurm-exporter", "prometheus",
                               "prometheus-alertmanager"))
    assert active == expected


def test_compute_nodes_have_the_gpu_job_prolog_that_slurm_conf_names(host, host_name, cluster):
    """Slurm runs the prolog/epilog of roles/monitoring_node on every compute node (a Prolog a
    node lacks would drain it); it never fails, even for a job that does not exist."""
    if host_name not in cluster.compute:
        pytest.skip(f"{host_name} runs no jobs")
    conf = host.check_output("scontrol show config")
    assert "/usr/local/sbin/metalslurm-prolog" in conf
    # Alloc (Contain too with pam_slurm_adopt: it implies Alloc).
    flags = re.search(r"^PrologFlags *= (\S+)$", conf, re.M)
    assert flags and "Alloc" in flags[1].split(","), flags
    for name in ("metalslurm-prolog", "metalslurm-epilog"):
        link = host.file(f"/usr/local/sbin/{name}")
        assert link.is_symlink and link.linked_to == "/usr/local/sbin/metalslurm-gpu-jobs"
    program = host.file("/usr/local/sbin/metalslurm-gpu-jobs")
    assert (program.user, program.group, program.mode) == ("root", "root", 0o755)
    run = host.run("SLURM_JOB_ID=0 /usr/local/sbin/metalslurm-epilog")
    assert (run.rc, run.stdout) == (0, "")


def test_the_slurm_exporter_answers_and_reaches_slurm(controller, cluster):
    status, body = http_get(controller, f"http://{_address(cluster, cluster.controller)}:"
                                        f"{PORTS['slurm_exporter']}/metrics")
    assert status == 200
    assert "slurm_up 1.0" in body.splitlines()
    nodes = sorted({line.split('node="')[1].split('"')[0] for line in body.splitlines()
                    if line.startswith("slurm_node_state{")})
    assert nodes == cluster.compute


def test_prometheus_has_every_expected_target_up(monitoring_host, cluster):
    name, host = monitoring_host
    url = f"http://{_address(cluster, name)}:{PORTS['prometheus']}/api/v1/targets?state=active"
    expected = {("prometheus", name), ("alertmanager", name), ("slurm", cluster.controller)}
    expected |= {("node", h) for h in cluster.hostvars if h not in cluster.powered_down
                 and set(cluster.groups_of(h)) & {"slurm_controller", "slurmdbd", "nfs_server",
                                                  "slurm_compute", "login"}}
    # A target Prometheus found a moment ago (right after a configure) is "unknown" until
    # its first scrape: asked again until none is, for at most one scrape interval and a
    # margin. A target that is "down" fails at once.
    deadline = time.monotonic() + monitoring_settings(_settings(cluster))["scrape_interval"] + 15
    while True:
        status, body = http_get(host, url, PASSWORD_FILE)
        assert status == 200
        targets = json.loads(body)["data"]["activeTargets"]
        health = {(t["labels"]["job"], t["labels"].get("node", "")): t["health"]
                  for t in targets}
        not_up = {t: h for t, h in health.items() if t in expected and h != "up"}
        if "unknown" not in not_up.values() or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert not_up == {}
    assert expected <= set(health)


@pytest.mark.parametrize("part", ["prometheus", "alertmanager"])
def test_the_web_ui_answers_with_the_login_and_refuses_without(monitoring_host, cluster, part):
    name, host = monitoring_host
    url = f"http://{_address(cluster, name)}:{PORTS[part]}/-/ready"
    assert http_get(host, url, PASSWORD_FILE)[0] == 200
    assert http_get(host, url)[0] == 401
