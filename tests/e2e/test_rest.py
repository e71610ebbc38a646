"""Slurm's REST API on the Debian 13 cluster: the real slurmrestd (roles/slurm_rest) behind
JWT tokens that the real slurmctld and slurmdbd verify, used from this machine over the
cluster's network by the example client users copy (examples/slurm_rest_client.py).

Tokens are made the way users make them ('scontrol token' on a node), and, for the ones
that must be refused, signed here with PyJWT: one expired, one with another key, one made
for another user. The stack bounds a user's token at an hour (metalslurm:rest
maxTokenLifespan 3600). Leaves no job behind and the API on, as the stack says.
"""

from __future__ import annotations

import base64
import json
import re
import time

import jwt
import pytest
import requests

from infra.ops.configure import run_playbook
from tests.e2e.cluster import wait_for
from tests.paths import REPO, load_module

client = load_module(REPO / "examples/slurm_rest_client.py", "slurm_rest_client_e2e")

# The REST host is the login node (login-001, below the top of the subnet).
API = "v0.0.42"  # Slurm 24.11's newest (module_utils/rest.py)


@pytest.fixture(scope="module")
def cluster(debian13):
    debian13.ready_for_configures()
    return debian13


def rest_url(cluster) -> str:
    """slurmrestd on the login node's private address, as this machine reaches it."""
    return f"http://{cluster.address('login-001')}:6820"


def token_for(cluster, user: str, lifespan: int = 600) -> str:
    """A token as root makes one for a user ('scontrol token username=...')."""
    out = cluster.ctl(f"scontrol token username={user} lifespan={lifespan}").stdout.strip()
    return out.removeprefix("SLURM_JWT=")


def rest_as(cluster, user: str) -> client.SlurmRest:
    return client.SlurmRest(rest_url(cluster), user, token_for(cluster, user))


def test_slurmrestd_runs_as_its_own_user_on_the_login_nodes_private_address(cluster):
    out = cluster.login("ps -o user:32=,args= -C slurmrestd").stdout.split()
    assert out == ["slurmrestd", "/usr/sbin/slurmrestd", "-a", "rest_auth/jwt",
                   "-s", "openapi/slurmctld,openapi/slurmdbd",
                   f"{cluster.address('login-001')}:6820"]
    # The controller serves none (and holds the key the login node does not).
    assert cluster.ctl("systemctl is-active slurmrestd", check=False).stdout.strip() == (
        "inactive")
    assert cluster.login("test -e /etc/slurm/jwt_hs256.key", check=False).returncode == 1


def test_alice_submits_a_job_that_runs_as_her_and_reads_it_back(cluster):
    rest = rest_as(cluster, "alice")
    assert rest.api == API
    cluster.ctl("rm -f /home/alice/rest-job.txt")
    job = rest.submit("#!/bin/bash\n{ id -un; id -u; hostname; } > /home/alice/rest-job.txt\n",
                      "rest-e2e", "/home/alice")
    assert rest.wait(job, timeout=120) == "COMPLETED"
    assert cluster.ctl("cat /home/alice/rest-job.txt").stdout.split()[:2] == ["alice", "2001"]
    mine = {j["job_id"]: (j["user_name"], rest.state(j), j["name"]) for j in rest.jobs()}
    assert mine[job] == ("alice", "COMPLETED", "rest-e2e")
    assert all(user == "alice" for user, _state, _name in mine.values())
    [row] = cluster.sacct_rows(str(job), "User,Account,State")
    assert row == ["alice", "team-a", "COMPLETED"]


def test_bob_cannot_cancel_alices_job_and_alice_can(cluster):
    alice, bob = rest_as(cluster, "alice"), rest_as(cluster, "bob")
    job = alice.submit("#!/bin/bash\nsleep 300\n", "rest-long", "/home/alice")
    with pytest.raises(client.RestError, match=f"job {job} was not cancelled: "
                                               "Access/permission denied"):
        bob.cancel(job)
    assert alice.state(alice.job(job)) in ("PENDING", "RUNNING")
    alice.cancel(job)
    assert alice.wait(job, timeout=60) == "CANCELLED"


def test_the_client_commands_take_a_token_on_a_compute_node(cluster):
    """With SLURM_JWT set (after 'export $(scontrol token)') the commands authenticate with
    the token, through the JWT plugin every Slurm node has; one that is not a token of this
    cluster is refused."""
    token = token_for(cluster, "alice")
    good = cluster.on("gpu-001", f"env SLURM_JWT={token} squeue --me --noheader", "alice",
                      check=False)
    assert (good.returncode, good.stderr) == (0, "")
    key = base64.b64decode((cluster.state / "secrets/jwt.key.b64").read_text())
    foreign = _signed(bytes(reversed(key)), "alice", 60)
    bad = cluster.on("gpu-001", f"env SLURM_JWT={foreign} squeue --me", "alice", check=False)
    assert bad.returncode != 0 and "Protocol authentication error" in bad.stderr


def _signed(key: bytes, user: str, exp_in: int) -> str:
    now = int(time.time())
    return jwt.encode({"iat": now - 5, "exp": now + exp_in, "sun": user}, key, "HS256")


def _unsigned(user: str) -> str:
    """A token that says it needs no signature ('alg: none'), as an attacker would try."""
    now = int(time.time())
    return jwt.encode({"iat": now - 5, "exp": now + 60, "sun": user}, None, "none")


def _tampered(token: str, user: str) -> str:
    """A real token with its payload rewritten for ``user`` and its signature kept."""
    head, _payload, signature = token.split(".")
    claims = jwt.decode(token, options={"verify_signature": False})
    payload = base64.urlsafe_b64encode(json.dumps({**claims, "sun": user}).encode())
    return f"{head}.{payload.decode().rstrip('=')}.{signature}"


@pytest.mark.parametrize("case", ["no token", "expired", "another key", "alice's as bob",
                                  "alg none", "tampered"])
def test_a_request_without_a_valid_token_is_refused(cluster, case):
    """slurmrestd itself answers 401 to a request without a token; a token slurmctld
    refuses (it verifies each one) comes back as 511, Slurm's "Protocol authentication
    error". The cluster's own key, from the operator's secrets, signs a token that works,
    so the refusals are for the reasons named."""
    key = base64.b64decode((cluster.state / "secrets/jwt.key.b64").read_text())
    url = f"{rest_url(cluster)}/slurm/{API}/jobs"
    good = requests.get(url, headers={"X-SLURM-USER-NAME": "alice",
                                      "X-SLURM-USER-TOKEN": _signed(key, "alice", 60)},
                        timeout=30)
    assert good.status_code == 200
    headers, expected = {
        "no token": ({}, 401),
        "expired": ({"X-SLURM-USER-NAME": "alice",
                     "X-SLURM-USER-TOKEN": _signed(key, "alice", -60)}, 511),
        "another key": ({"X-SLURM-USER-NAME": "alice",
                         "X-SLURM-USER-TOKEN": _signed(b"k" * 32, "alice", 60)}, 511),
        "alice's as bob": ({"X-SLURM-USER-NAME": "bob",
                            "X-SLURM-USER-TOKEN": token_for(cluster, "alice")}, 511),
        # bob's token made to say alice, and one that claims no signature is needed.
        "tampered": ({"X-SLURM-USER-NAME": "alice",
                      "X-SLURM-USER-TOKEN": _tampered(token_for(cluster, "bob"), "alice")}, 511),
        "alg none": ({"X-SLURM-USER-NAME": "alice", "X-SLURM-USER-TOKEN": _unsigned("alice")},
                     511),
    }[case]
    reply = requests.get(url, headers=headers, timeout=30)
    assert reply.status_code == expected
    assert "rest-e2e" not in reply.text  # no job of alice's comes back


def test_a_users_own_token_is_bounded_and_an_admins_service_token_is_not(cluster):
    """Users make their own tokens ('scontrol token' as themselves), for themselves only and
    for at most the stack's maxTokenLifespan; root mints a longer-lived one for a service."""
    over = cluster.login("scontrol token lifespan=7200", "alice", check=False)
    assert over.returncode != 0
    assert "Requested time limit is invalid" in over.stderr
    other = cluster.login("scontrol token username=bob", "alice", check=False)
    assert other.returncode != 0 and "Invalid user id" in other.stderr
    own = cluster.login("scontrol token lifespan=3600", "alice").stdout.strip()
    claims = jwt.decode(own.removeprefix("SLURM_JWT="), options={"verify_signature": False})
    assert (claims["sun"], claims["exp"] - claims["iat"]) == ("alice", 3600)
    service = token_for(cluster, "alice", lifespan=30 * 86400)
    claims = jwt.decode(service, options={"verify_signature": False})
    assert claims["exp"] - claims["iat"] == 30 * 86400


def _answers(cluster) -> bool:
    try:
        return requests.get(f"{rest_url(cluster)}/slurm/{API}/ping", timeout=10).status_code == 401
    except requests.RequestException:
        return False


def test_turning_the_api_off_and_on_again(cluster):
    """Off: slurmrestd stopped and disabled, slurmctld without auth/jwt, the key gone from
    the controller, 'scontrol token' refused. On again: all back, a token works."""
    # The jobs of the tests above may have resumed an elastic node: one that powers down in
    # the middle of a run is unreachable for the rest of it.
    cluster.wait_for_elastic_nodes_down()
    off = run_playbook(cluster.inventory, out=lambda _line: None,
                       extra_vars={"metalslurm_rest": {"enabled": False}})
    assert off.ok, off.failures
    state = cluster.login("systemctl is-active slurmrestd; systemctl is-enabled slurmrestd",
                          check=False).stdout.split()
    assert state == ["inactive", "disabled"]
    assert cluster.ctl("test -e /etc/slurm/jwt_hs256.key", check=False).returncode == 1
    assert re.search(r"^AuthAltTypes *= \(null\)$", cluster.ctl("scontrol show config").stdout,
                     re.M)
    assert cluster.ctl("scontrol token", check=False).returncode != 0
    back = run_playbook(cluster.inventory, out=lambda _line: None)
    assert back.ok, back.failures
    wait_for("slurmrestd to answer again", lambda: _answers(cluster), timeout=60)
    rest = rest_as(cluster, "alice")
    assert isinstance(rest.jobs(), list)
