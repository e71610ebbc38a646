"""The Pulumi program under mocks, for every provider: invariants, with URNs in failures."""

from __future__ import annotations

import base64
import functools
import ipaddress
import json
import re

import pulumi
import pytest
import yaml

from infra.pulumi.oci import join_key_outputs, join_key_pair
from infra.stack.inventory import inventory_problems, inventory_view
from infra.stack.join_kit import kit_inputs_digest
from tests.paths import REPO
from tests.pulumi.mocks import (
    PROJECT,
    STACK,
    RecordingMocks,
    Run,
    example,
    is_secret_value,
    run_program,
    unsecret,
)

SECRET_EXPORTS = {"mungeKey", "slurmdbdPassword", "slurmJwtKey"}
INSTANCE = "oci:Core/instance:Instance"


@functools.cache
def program_run(provider: str) -> Run:
    plain, secrets = example(provider)
    return run_program(plain, secrets)


@pytest.fixture(params=["local", "byo", "oci"])
def run(request) -> tuple[str, Run]:
    return request.param, program_run(request.param)


@pytest.fixture
def oci_run() -> Run:
    return program_run("oci")


def _cluster_urn(run: Run) -> str:
    return next(r.urn for r in run.mocks.resources if r.typ == "metalslurm:index:Cluster")


def test_inventory_validates_against_the_schema(run):
    provider, r = run
    inv = r.exports["inventory"]
    problems = inventory_problems(inventory_view(inv))
    assert not problems, f"{_cluster_urn(r)}: inventory output: {problems}"
    assert inv["all"]["vars"]["metalslurm_provider"] == provider


def test_node_counts_match_the_config(run):
    provider, r = run
    plain, _ = example(provider)
    inv = r.exports["inventory"]["all"]
    pools = plain["metalslurm:computePools"]
    compute = inv["children"]["slurm_compute"]["hosts"]
    want = sum(p["count"] + p.get("elasticCount", 0) for p in pools)
    assert len(compute) == want, f"{_cluster_urn(r)}: {len(compute)} compute hosts, want {want}"
    cloud = [h for h in compute if inv["hosts"][h]["metalslurm_node_state"] == "cloud"]
    assert len(cloud) == sum(p.get("elasticCount", 0) for p in pools), _cluster_urn(r)
    assert len(inv["children"]["slurm_controller"]["hosts"]) == 1, _cluster_urn(r)
    for h in compute:
        assert inv["hosts"][h]["metalslurm_gpu_count"] == pools[0]["gpuCount"], h
        if inv["hosts"][h]["metalslurm_node_state"] == "cloud":
            assert inv["hosts"][h]["metalslurm_power"]["driver"], f"{h}: no power driver"


def test_every_node_sits_in_the_private_subnet(run):
    _, r = run
    inv = r.exports["inventory"]["all"]
    net = ipaddress.ip_network(inv["vars"]["metalslurm_private_cidr"])
    for name, hv in inv["hosts"].items():
        assert ipaddress.ip_address(hv["metalslurm_address"]) in net, (
            f"{_cluster_urn(r)}: host {name} {hv['metalslurm_address']} outside {net}")


def test_secrets_are_secret_outputs_and_not_in_the_inventory(run):
    _, r = run
    assert r.secret_exports >= SECRET_EXPORTS, f"{_cluster_urn(r)}: {r.secret_exports}"
    assert not ({"inventory", "sshHint", "controllerAddress"} & r.secret_exports)
    text = yaml.safe_dump(r.exports["inventory"])
    for key in SECRET_EXPORTS:
        assert r.exports[key] and r.exports[key] not in text, f"{key} leaked into the inventory"
    for value in ("mock", "pw"):
        assert f": {value}\n" not in text
    assert len(base64.b64decode(r.exports["mungeKey"], validate=True)) == 1024
    assert len(base64.b64decode(r.exports["slurmJwtKey"], validate=True)) == 32
    files = r.exports["inventory"]["all"]["vars"]
    for var in ("munge_key_b64_file", "slurmdbd_password_file", "slurm_jwt_key_b64_file"):
        assert files[var].startswith("/"), f"{var} is not set"


def test_no_key_is_a_random_bytes_whose_id_is_its_value(run, monkeypatch):
    """pulumi-random makes a RandomBytes' value its resource ID, which Pulumi keeps in plain
    text; the keys are RandomPasswords (ID "none") over base64's alphabet, whose settings an
    imported older key (its import sets length = len(ID) and no overrideSpecial: the
    provider's ImportState) may not replace."""
    import pulumi_random

    provider, _ = run
    options: dict[str, pulumi.ResourceOptions | None] = {}

    class Recorded(pulumi_random.RandomPassword):
        def __init__(self, resource_name: str, opts=None, **kwargs) -> None:
            options[resource_name] = opts
            super().__init__(resource_name, opts=opts, **kwargs)

    monkeypatch.setattr(pulumi_random, "RandomPassword", Recorded)
    r = run_program(*example(provider))
    assert not r.mocks.of_type("random:index/randomBytes:RandomBytes"), _cluster_urn(r)
    keys = {x.name: x for x in r.mocks.of_type("random:index/randomPassword:RandomPassword")
            if x.name.endswith("-key-b64")}
    assert {(n.split("-")[-3], x.inputs["length"], x.inputs["special"],
             x.inputs["overrideSpecial"]) for n, x in keys.items()} == {
        ("munge", 1366, True, "+/"), ("jwt", 43, True, "+/")}, _cluster_urn(r)
    args = set(vars(pulumi_random.RandomPasswordArgs))
    for name in keys:
        ignored = options[name].ignore_changes
        assert {"length", "overrideSpecial"} <= set(ignored), name
        assert all(re.sub("([A-Z])", r"_\1", f).lower() in args for f in ignored), ignored


def test_the_operator_files_command_gets_secrets_only_by_environment(run):
    provider, r = run
    cmd = next(x for x in r.mocks.resources if x.name.endswith(("-configure", "-operator-files")))
    assert cmd.name.endswith("-configure"), f"{cmd.urn}: configure: true in the example"
    assert "infra.pulumi.configure" in cmd.inputs["create"], cmd.urn
    assert "--playbook" in cmd.inputs["create"], cmd.urn
    assert is_secret_value(cmd.inputs["environment"]), f"{cmd.urn}: environment is not secret"
    env = unsecret(cmd.inputs["environment"])
    assert env["METALSLURM_MUNGE_KEY_B64"] == r.exports["mungeKey"], cmd.urn
    assert cmd.inputs["triggers"][0] == env["METALSLURM_INVENTORY"], (
        f"{cmd.urn}: must be re-run when the inventory changes")
    # oci's launch-terminate nodes: also when the roles the join kit carries change.
    assert cmd.inputs["triggers"][1:] == (
        [kit_inputs_digest(REPO)] if provider == "oci" else []), cmd.urn
    if provider == "byo":
        assert "METALSLURM_BMC_CREDENTIALS" in env, cmd.urn
        assert r.exports["inventory"]["all"]["vars"]["slurm_elastic_credentials_file"]


def test_no_compute_node_has_a_public_address(run):
    provider, r = run
    inv = r.exports["inventory"]["all"]
    for name in inv["children"]["slurm_compute"]["hosts"]:
        host = inv["hosts"][name]["ansible_host"]
        assert ipaddress.ip_address(host).is_private, f"{_cluster_urn(r)}: {name} at {host}"
    for res in r.mocks.of_type(INSTANCE):
        role = res.inputs["freeformTags"]["metalslurm-role"]
        vnic = res.inputs["createVnicDetails"]
        if role != "bastion":
            assert vnic["assignPublicIp"] == "false", f"{res.urn}: {role} has a public address"


# ---- provider specific ------------------------------------------------------------------

def test_oci_ssh_ingress_only_on_the_bastion_from_the_admin_cidr(oci_run):
    r = oci_run
    plain, _ = example("oci")
    o = plain["metalslurm:oci"]
    vcn = ipaddress.ip_network(o["vcnCidr"])
    lists = {x.name: x for x in r.mocks.of_type("oci:Core/securityList:SecurityList")}
    subnets = {x.name: x for x in r.mocks.of_type("oci:Core/subnet:Subnet")}
    bastion_sl = next(n for n in lists if n.endswith("-bastion-sl"))
    for sl in lists.values():
        for rule in sl.inputs.get("ingressSecurityRules", []):
            source = ipaddress.ip_network(rule["source"])
            if source.subnet_of(vcn):
                continue
            assert sl.name == bastion_sl, f"{sl.urn}: ingress from outside the VCN: {rule}"
            assert rule["protocol"] == "6" and rule["tcpOptions"] == {"min": 22, "max": 22}, (
                f"{sl.urn}: only SSH may enter the bastion: {rule}")
            assert rule["source"] == o["adminCidr"], f"{sl.urn}: SSH from {rule['source']}"
    users = [s for s in subnets.values() if f"{bastion_sl}-id" in s.inputs["securityListIds"]]
    assert [s.name for s in users] == [n for n in subnets if n.endswith("-bastion-subnet")]
    bastions = [x for x in r.mocks.of_type(INSTANCE)
                if x.inputs["freeformTags"]["metalslurm-role"] == "bastion"]
    assert len(bastions) == 1
    assert bastions[0].inputs["createVnicDetails"]["subnetId"] == f"{users[0].name}-id", (
        bastions[0].urn)


def test_oci_nodes_in_the_private_subnet_with_planned_addresses(oci_run):
    r = oci_run
    plain, _ = example("oci")
    net = ipaddress.ip_network(plain["metalslurm:privateCidr"])
    private = next(x for x in r.mocks.of_type("oci:Core/subnet:Subnet")
                   if x.name.endswith("-private"))
    assert private.inputs["cidrBlock"] == str(net), private.urn
    assert private.inputs["prohibitPublicIpOnVnic"] is True, private.urn
    hosts = r.exports["inventory"]["all"]["hosts"]
    for res in r.mocks.of_type(INSTANCE):
        if res.inputs["freeformTags"]["metalslurm-role"] == "bastion":
            continue
        vnic = res.inputs["createVnicDetails"]
        node = res.inputs["freeformTags"]["metalslurm-node"]
        assert vnic["subnetId"] == f"{private.name}-id", f"{res.urn}: not in the private subnet"
        assert ipaddress.ip_address(vnic["privateIp"]) in net, res.urn
        assert vnic["privateIp"] == hosts[node]["metalslurm_address"], res.urn


def test_oci_shapes_and_rdma_cluster_match_the_config(oci_run):
    r = oci_run
    plain, _ = example("oci")
    pool = plain["metalslurm:computePools"][0]
    gpu = [x for x in r.mocks.of_type(INSTANCE)
           if x.inputs["freeformTags"]["metalslurm-role"] == "compute"]
    assert len(gpu) == pool["count"], "static GPU instances"
    cluster = r.mocks.of_type("oci:Core/computeCluster:ComputeCluster")
    assert len(cluster) == 1
    for res in gpu:
        assert res.inputs["shape"] == "BM.GPU.H100.8", res.urn
        assert res.inputs["computeClusterId"] == f"{cluster[0].name}-id", (
            f"{res.urn}: not in the RDMA compute cluster")
    inv = r.exports["inventory"]["all"]["hosts"]
    elastic = [h for h, hv in inv.items() if hv.get("metalslurm_node_state") == "cloud"]
    assert len(elastic) == pool["elasticCount"]
    for h in elastic:
        power = inv[h]["metalslurm_power"]
        assert power["driver"] == "oci" and power["mode"] == "launch-terminate", h
        for key in ("compartment_id", "availability_domain", "shape", "image_id", "subnet_id",
                    "region"):
            assert power.get(key), f"{h}: power mapping lacks {key}"
        # Launched into the RDMA cluster at its planned address and name.
        assert power["compute_cluster_id"] == f"{cluster[0].name}-id", h
        assert (power["private_ip"], power["hostname_label"]) == (
            inv[h]["metalslurm_address"], h)
        # Named and tagged as the static instances: the driver finds only this cluster's.
        assert power["display_name"] == f"{plain['metalslurm:clusterName']}-{h}"
        assert power["freeform_tags"] == {"metalslurm-cluster": plain["metalslurm:clusterName"],
                                          "metalslurm-role": "compute-elastic",
                                          "metalslurm-node": h}
        boot = gpu[0].inputs["sourceDetails"]["bootVolumeSizeInGbs"]
        assert power["boot_volume_gbs"] == int(boot)
        assert "shape_config" not in power  # a bare-metal shape


def test_oci_launched_nodes_let_in_the_operator_and_the_clusters_join_key(oci_run):
    """The launch metadata puts the operator's key and the join key into the login user's
    authorized_keys; the join key's private half goes only to the operator-files command,
    as a secret, and is the key of that public half."""
    plain, _ = example("oci")
    hosts = oci_run.exports["inventory"]["all"]["hosts"]
    elastic = [h for h, hv in hosts.items() if hv.get("metalslurm_node_state") == "cloud"]
    seed = next(x for x in oci_run.mocks.resources if x.name.endswith("-join-key"))
    # A password: pulumi-random makes a RandomBytes' value its (never secret) resource ID.
    assert seed.typ == "random:index/randomPassword:RandomPassword", seed.urn
    assert (seed.inputs["length"], seed.inputs["special"]) == (64, False), seed.urn
    cmd = next(x for x in oci_run.mocks.resources if x.name.endswith("-configure"))
    private = unsecret(cmd.inputs["environment"])["METALSLURM_JOIN_SSH_KEY"]
    keys = {hosts[h]["metalslurm_power"]["metadata"]["ssh_authorized_keys"] for h in elastic}
    assert len(keys) == 1
    operator, join = keys.pop().split("\n")
    assert operator == plain["metalslurm:oci"]["sshPublicKey"]
    name = plain["metalslurm:clusterName"]
    assert join.endswith(f" metalslurm-join-{name}")
    assert join_key_pair(seed.outputs["result"], name) == (private, join)
    assert private.startswith("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    assert "OPENSSH PRIVATE" not in json.dumps(oci_run.exports["inventory"])


def test_oci_login_nodes_are_cpu_instances_in_the_private_subnet(oci_run):
    plain, _ = example("oci")
    login = [x for x in oci_run.mocks.of_type(INSTANCE)
             if x.inputs["freeformTags"]["metalslurm-role"] == "login"]
    assert sorted(x.inputs["freeformTags"]["metalslurm-node"] for x in login) == [
        "login-001", "login-002"]
    for res in login:
        assert res.inputs["shape"] == plain["metalslurm:login"]["shape"], res.urn
        assert res.inputs.get("computeClusterId") is None, f"{res.urn}: in the RDMA cluster"
        assert res.inputs["createVnicDetails"]["assignPublicIp"] == "false", res.urn
    groups = oci_run.exports["inventory"]["all"]["children"]
    assert list(groups["login"]["hosts"]) == ["login-001", "login-002"]


def test_oci_machines_are_checked_by_the_preflight_once_they_have_booted(oci_run):
    # The same pre-flight as byo's, waiting for the new machines' sshd and cloud-init's first
    # apt run before it judges them.
    cmd = next(x for x in oci_run.mocks.resources
               if x.name.endswith(("-configure", "-operator-files")))
    assert "--preflight --preflight-wait 900" in cmd.inputs["create"], cmd.urn


def test_oci_bastion_address_and_ssh_hint(oci_run):
    r = oci_run
    assert r.exports["bastionAddress"] == "203.0.113.7"
    assert "-J ubuntu@203.0.113.7" in r.exports["sshHint"]
    assert "ProxyJump=ubuntu@203.0.113.7" in (
        r.exports["inventory"]["all"]["vars"]["ansible_ssh_common_args"])


def test_byo_hosts_are_checked_by_the_preflight_before_the_playbook():
    r = program_run("byo")
    # One implementation: the operator-files command runs 'metalslurm preflight' on the
    # inventory it writes, before the playbook; no check of its own per host.
    assert r.mocks.of_type("command:remote:Command") == []
    cmd = next(x for x in r.mocks.resources if x.name.endswith(("-configure", "-operator-files")))
    assert "--preflight" in cmd.inputs["create"], cmd.urn
    inventory = r.exports["inventory"]["all"]
    # Through the bastion, except the login node, which has a public address.
    assert inventory["vars"]["ansible_ssh_common_args"] == "-o ProxyJump=jump@198.51.100.20"
    assert inventory["hosts"]["login-001"]["ansible_ssh_common_args"] == ""
    assert inventory["hosts"]["login-001"]["ansible_host"] == "198.51.100.21"
    assert inventory["hosts"]["gpu-004"]["metalslurm_node_state"] == "cloud"
    plain, secrets = example("byo")
    plain = {**plain, "metalslurm:byo": {**plain["metalslurm:byo"], "checkHosts": False}}
    unchecked = run_program(plain, secrets)
    cmd = next(x for x in unchecked.mocks.resources
               if x.name.endswith(("-configure", "-operator-files")))
    assert "--preflight" not in cmd.inputs["create"], cmd.urn
    power = r.exports["inventory"]["all"]["hosts"]["gpu-004"]["metalslurm_power"]
    assert power == {"driver": "redfish", "endpoint": "https://10.20.1.24",
                     "system_id": "/redfish/v1/Systems/1", "verify_tls": True}
    ipmi = r.exports["inventory"]["all"]["hosts"]["gpu-003"]["metalslurm_power"]
    assert ipmi == {"driver": "ipmi", "address": "10.20.1.23", "port": 623}


def test_local_nodes_are_commands_of_the_local_provider_module():
    r = program_run("local")
    nodes = [x for x in r.mocks.of_type("command:local:Command") if "-node-" in x.name]
    inv = r.exports["inventory"]["all"]["hosts"]
    assert sorted(x.name.split("-node-")[1] for x in nodes) == sorted(inv)
    for res in nodes:
        assert "-m infra.providers.local_resources" in res.inputs["create"], res.urn
        assert " node " in res.inputs["create"] and "--image" in res.inputs["create"], res.urn
        node = res.name.split("-node-")[1]
        # Deleting needs only names, not the plan an older update passed in its environment.
        assert res.inputs["delete"].endswith(f"remove-node --cluster mslocal {node}"), res.urn
    network = next(x for x in r.mocks.of_type("command:local:Command")
                   if x.name.endswith("-network"))
    assert network.inputs["delete"].endswith("destroy --cluster mslocal"), network.urn


def test_a_webhook_url_reaches_the_operator_files_only_as_a_secret():
    """A webhook's URL (often with a token) is an alert secret: never in the inventory
    output, only in the secret environment of the command that writes the 0600 file."""
    plain, secrets = example("byo")
    hook = "https://hooks.example.org/alerts?token=mock-hook-token"
    plain = {**plain, "metalslurm:monitoring": {"receivers": [{"name": "ops-hook"}]}}
    r = run_program(plain, {**secrets, "metalslurm:alertSecrets": {"ops-hook": {"url": hook}}})
    assert "mock-hook-token" not in yaml.safe_dump(r.exports["inventory"]), _cluster_urn(r)
    assert r.exports["inventory"]["all"]["vars"]["metalslurm_monitoring"]["receivers"] == [
        {"name": "ops-hook"}], _cluster_urn(r)
    assert r.exports["inventory"]["all"]["vars"]["monitoring_alert_secrets_file"].endswith(
        "/secrets/alert-secrets.json"), _cluster_urn(r)
    cmd = next(x for x in r.mocks.resources if x.name.endswith(("-configure", "-operator-files")))
    assert is_secret_value(cmd.inputs["environment"]), f"{cmd.urn}: environment is not secret"
    assert unsecret(cmd.inputs["environment"])["METALSLURM_ALERT_SECRETS"] == (
        '{"ops-hook": {"url": "' + hook + '"}}'), cmd.urn


def test_oci_start_stop_nodes_are_created_stopped_and_then_left_to_the_driver(monkeypatch):
    """A start-stop elastic node is created STOPPED; its state is then the power driver's:
    the instance ignores changes to it, so 'pulumi up --refresh' (which reads a node Slurm
    resumed as RUNNING) never stops a node under a job. Other instances manage their state."""
    import pulumi_oci

    options: dict[str, pulumi.ResourceOptions | None] = {}

    class Recorded(pulumi_oci.core.Instance):
        def __init__(self, resource_name: str, opts=None, **kwargs) -> None:
            options[resource_name] = opts
            super().__init__(resource_name, opts=opts, **kwargs)

    monkeypatch.setattr(pulumi_oci.core, "Instance", Recorded)
    plain, secrets = example("oci")
    plain = {**plain, "metalslurm:oci": {**plain["metalslurm:oci"], "elasticMode": "start-stop"}}
    r = run_program(plain, secrets)
    stopped = {x.name for x in r.mocks.of_type(INSTANCE) if x.inputs.get("state") == "STOPPED"}
    assert len(stopped) == plain["metalslurm:computePools"][0]["elasticCount"]
    assert {n for n, o in options.items() if o is not None and o.ignore_changes} == stopped
    assert all(o.ignore_changes == ["state"] for n, o in options.items() if n in stopped)
    assert not [x for x in r.mocks.resources if x.name.endswith("-join-key")]


def test_the_join_keys_public_half_is_plain_and_its_private_half_secret():
    """Made from a secret (the password's result is one), the public half must come out
    plain, or the whole inventory output would turn secret; the private half stays one."""
    pulumi.runtime.set_mocks(RecordingMocks(), project=PROJECT, stack=STACK, preview=False)

    @pulumi.runtime.test
    def check() -> pulumi.Output[None]:
        private, public = join_key_outputs(pulumi.Output.secret("s" * 64), "c1")

        async def probe() -> None:
            assert await private.is_secret()
            assert not await public.is_secret()
            assert (await private.future(), await public.future()) == join_key_pair(
                "s" * 64, "c1")

        return pulumi.Output.from_input(probe())

    check()
