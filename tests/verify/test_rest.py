"""Slurm's REST API (roles/slurm_rest, slurm_common's JWT key): slurmrestd runs as its own
unprivileged user on the private address only, answers a request that carries a token
'scontrol token' made, refuses one without, and slurmctld and slurmdbd hold the same JWT
key (SlurmUser's, 0400) while no other node holds it.

HTTP is asked from the REST host itself (python3's urllib), so the checks run the same over
SSH on a real cluster and on the local one.
"""

from __future__ import annotations

import json
import re
import shlex

import pytest
import testinfra
from ansible_collections.metalslurm.cluster.plugins.module_utils.inventory_contract import (
    BACKUP_GROUP,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.rest import (
    DEFAULTS,
    rest_release,
)

KEY = "/etc/slurm/jwt_hs256.key"

# GET a URL with optional Slurm JWT headers; prints the HTTP status and the body.
_GET = """
import sys, urllib.request, urllib.error
url, user, token = sys.argv[1:4]
req = urllib.request.Request(url)
if token:
    req.add_header("X-SLURM-USER-NAME", user)
    req.add_header("X-SLURM-USER-TOKEN", token)
try:
    with urllib.request.urlopen(req, timeout=20) as r:
        print(r.status); print(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code); print(e.read().decode(errors="replace"))
"""


def rest_get(host, url: str, user: str = "", token: str = "") -> tuple[int, str]:
    out = host.check_output(f"python3 -c {shlex.quote(_GET)} {shlex.quote(url)} "
                            f"{shlex.quote(user)} {shlex.quote(token)}")
    status, _, body = out.partition("\n")
    return int(status), body


def _settings(cluster) -> dict:
    return {**DEFAULTS, **dict(cluster.var("metalslurm_rest") or {})}


@pytest.fixture(autouse=True)
def _only_when_rest_is_on(cluster) -> None:
    if not _settings(cluster)["enabled"]:
        pytest.skip("metalslurm:rest.enabled is false: no slurmrestd, no JWT")


@pytest.fixture(scope="module")
def rest_host(cluster):
    """The REST host (the first login node, else the controller) and slurmrestd's base
    URL on it."""
    name = (cluster.login_nodes + [cluster.controller])[0]
    host = testinfra.get_host(f"ansible://{name}", ansible_inventory=cluster.inventory)
    settings = _settings(cluster)
    address = settings["listen_address"] or cluster.hostvars[name]["metalslurm_address"]
    version = host.check_output("dpkg-query --showformat='${Version}' --show slurm-client")
    api = rest_release(version).api_version
    return host, f"http://{address}:{settings['port']}", api


def test_slurmrestd_runs_as_its_own_unprivileged_user(rest_host):
    host, _url, _api = rest_host
    users = set(host.check_output("ps -o user:32= -C slurmrestd").split())
    assert users == {"slurmrestd"}
    assert host.user("slurmrestd").shell == "/usr/sbin/nologin"


def test_slurmrestd_listens_on_the_private_address_only(rest_host, cluster):
    host, url, _api = rest_host
    port = _settings(cluster)["port"]
    listening = host.check_output(f"ss --listening --tcp --numeric --no-header 'sport = :{port}'")
    addresses = sorted(line.split()[3] for line in listening.splitlines() if line.strip())
    assert addresses == [url.removeprefix("http://")]


def test_an_authenticated_ping_is_answered(rest_host, controller, cluster):
    host, url, api = rest_host
    token = host.check_output("scontrol token lifespan=60").strip().removeprefix("SLURM_JWT=")
    status, body = rest_get(host, f"{url}/slurm/{api}/ping", "root", token)
    assert status == 200, body
    pings = json.loads(body)["pings"]
    # slurmctld answers, on the controller (the REST host may be a login node), then on the
    # backup controller where there is one (SlurmctldHost's order).
    assert [p["hostname"] for p in pings] == [
        controller.check_output("hostname").strip(), *cluster.hosts_in(BACKUP_GROUP)]


def test_a_request_without_a_token_is_refused(rest_host):
    host, url, api = rest_host
    status, _body = rest_get(host, f"{url}/slurm/{api}/ping")
    assert status == 401


def test_slurmctld_and_slurmdbd_take_jwt_tokens(controller):
    config = controller.check_output("scontrol show config")
    assert re.search(r"^AuthAltTypes *= auth/jwt$", config, re.M)


def test_the_jwt_key_is_slurms_alone_on_the_slurmctld_and_slurmdbd_hosts(host, host_name,
                                                                          cluster):
    key = host.file(KEY)
    holders = set(cluster.hosts_in("slurm_controller")) | set(cluster.hosts_in("slurmdbd")) \
        | set(cluster.hosts_in(BACKUP_GROUP))
    if host_name not in holders:
        assert not key.exists
        return
    assert (key.user, key.group, key.mode, key.size) == ("slurm", "slurm", 0o400, 32)


def test_slurmctld_and_slurmdbd_hold_the_same_key(cluster):
    holders = sorted(set(cluster.hosts_in("slurm_controller")) | set(cluster.hosts_in("slurmdbd"))
                     | set(cluster.hosts_in(BACKUP_GROUP)))
    digests = {name: testinfra.get_host(f"ansible://{name}", ansible_inventory=cluster.inventory)
               .check_output(f"sha256sum {KEY}").split()[0] for name in holders}
    assert len(set(digests.values())) == 1, digests
