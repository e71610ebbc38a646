"""The power drivers against real protocol servers on loopback, with stand-in machines (no
container: a machine is a power flag in a JSON file, power_helpers/machines.py):

- local: the driver's HTTP calls over a unix socket, answered by a stand-in of podman's REST
  API (the few libpod calls the driver makes, in this process);
- redfish: the sushy-tools emulator (unmodified Flask app) with a systems driver over the
  stand-in machines;
- ipmi: a pyghmi BMC (``pyghmi.ipmi.bmc.Bmc`` subclass) over a stand-in machine;
- oci: the oci SDK against a small local HTTP server standing in for the Compute API
  (``service_endpoint``), asserting the requests the SDK sends.

The same drivers starting and stopping real podman containers (podman's own API, the same
BMC stand-ins) are e2e tests: tests/e2e/test_power_drivers.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import socketserver
import subprocess
import sys
import threading
import time
import tomllib
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from metalslurm_power.drivers import make_driver
from metalslurm_power.drivers.base import OFF, ON
from power_helpers.env import HELPERS, REPO
from power_helpers.machines import FileMachines
from power_helpers.servers import free_port, stop_process, tcp_port_answers, wait_until

NAMES = ["machine-1", "machine-2", "machine-3"]
USER, PASSWORD = "admin", "bmc-pass-1"


@pytest.fixture()
def machines(tmp_path: Path) -> FileMachines:
    """Three machines, all off."""
    return FileMachines(tmp_path / "machines.json", NAMES)


def start_bmc(module: str, args: list[str], log_path: Path) -> subprocess.Popen:
    log = open(log_path, "w")  # noqa: SIM115 (the child keeps it; closed with the process)
    proc = subprocess.Popen([sys.executable, "-m", f"power_helpers.{module}", *args],
                            cwd=HELPERS.parent, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    return proc


# --- local: podman's REST API (a stand-in answering the driver's libpod calls) -------------

class PodmanApi(BaseHTTPRequestHandler):
    """GET /containers/NAME/json, POST .../start and .../stop?t=N, as podman 4 answers them,
    over the stand-in machines; a container in ``dies`` exits as soon as it starts."""

    machines: FileMachines
    dies: set[str] = set()
    requests: list[tuple[str, str]] = []
    # Containers that do not exist (launch-terminate: made by create, gone after remove).
    absent: set[str] = set()
    failing_stop: set[str] = set()  # answer 500 to their stop

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def address_string(self) -> str:  # a unix socket has no peer address
        return "unix"

    def _reply(self, status: int, body: Any = None) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data:  # 204 and 304 have no body (the client may be gone already)
            self.wfile.write(data)

    def _container(self) -> tuple[str | None, str]:
        self.requests.append((self.command, self.path))
        prefix = "/v4.0.0/libpod/containers/"
        if not self.path.startswith(prefix):
            return None, ""
        rest = self.path[len(prefix):]
        name, _, action = rest.partition("?" if self.command == "DELETE" else "/")
        state = json.loads(self.machines.path.read_text())
        return (name if name in state and name not in self.absent else None), action

    def do_GET(self) -> None:
        name, action = self._container()
        if name is None or action != "json":
            return self._reply(404, {"message": "no such container", "response": 404})
        running = self.machines.running(name)
        networks = {"other-net": {"IPAddress": "10.88.0.7"},
                    "ms-net": {"IPAddress": f"10.77.0.{21 + NAMES.index(name)}"}}
        self._reply(200, {"State": {"Running": running,
                                    "Status": "running" if running else "exited"},
                          "NetworkSettings": {"Networks": networks if running else {}}})

    def do_POST(self) -> None:
        if self.path.startswith("/v4.0.0/libpod/containers/create?name="):
            self.requests.append((self.command, self.path))
            made = self.path.rsplit("=", 1)[1]
            if made not in self.absent:
                return self._reply(409, {"message": "name in use", "response": 409})
            self.absent.discard(made)
            return self._reply(201, {"Id": "c0ffee", "Warnings": []})
        name, action = self._container()
        if name is None:
            return self._reply(404, {"message": "no such container", "response": 404})
        if action == "start":
            if self.machines.running(name):
                return self._reply(304)
            if name not in self.dies:
                self.machines.start(name)
            return self._reply(204)
        if action.startswith("stop"):
            if name in self.failing_stop:
                return self._reply(500, {"message": "stop timed out", "response": 500})
            if not self.machines.running(name):
                return self._reply(304)
            self.machines.stop(name)
            return self._reply(204)
        return self._reply(404, {"message": f"no action {action}", "response": 404})

    def do_DELETE(self) -> None:
        name, action = self._container()
        if name is None or action != "force=true":
            return self._reply(404, {"message": "no such container", "response": 404})
        if self.machines.running(name):
            self.machines.stop(name)
        self.absent.add(name)
        return self._reply(200, [{"Id": "c0ffee", "Err": None}])


@pytest.fixture()
def podman_api(tmp_path: Path, machines: FileMachines) -> Iterator[str]:
    sock = tmp_path / "podman.sock"
    PodmanApi.machines, PodmanApi.dies, PodmanApi.requests = machines, set(), []
    PodmanApi.absent, PodmanApi.failing_stop = set(), set()
    server = socketserver.ThreadingUnixStreamServer(str(sock), PodmanApi)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield str(sock)
    finally:
        server.shutdown()
        server.server_close()


def local_params(sock: str, *names: str, **extra: Any) -> dict[str, dict[str, Any]]:
    return {f"n{i}": {"driver": "local", "container": name, "socket": sock, **extra}
            for i, name in enumerate(names, start=1)}


def test_local_power_on_reports_the_address_on_the_clusters_network(
        podman_api: str, machines: FileMachines) -> None:
    driver = make_driver("local", local_params(podman_api, *NAMES[:2], network="ms-net"), {})
    results = driver.power_on(["n1", "n2"])
    assert {n: (r.ok, r.power, r.address) for n, r in results.items()} == {
        "n1": (True, ON, "10.77.0.21"), "n2": (True, ON, "10.77.0.22")}
    assert machines.running(NAMES[0]) and machines.running(NAMES[1])
    assert not machines.running(NAMES[2])


def test_local_power_off_and_status(podman_api: str, machines: FileMachines) -> None:
    driver = make_driver("local", local_params(podman_api, NAMES[0], stop_timeout=1), {})
    machines.start(NAMES[0])
    assert driver.status(["n1"])["n1"].power == ON
    assert driver.power_off(["n1"])["n1"].ok
    assert not machines.running(NAMES[0])
    assert driver.status(["n1"])["n1"].power == OFF
    assert driver.power_off(["n1"])["n1"].ok  # already off: still ok (HTTP 304)
    assert driver.power_off(["n1"], force=True)["n1"].ok
    stops = [path for method, path in PodmanApi.requests if path.endswith(("?t=1", "?t=0"))]
    assert [s.rsplit("=", 1)[1] for s in stops] == ["1", "1", "0"]  # force: no grace time


def test_local_unknown_container_is_an_error(podman_api: str) -> None:
    driver = make_driver("local", local_params(podman_api, "machine-none"), {})
    result = driver.power_on(["n1"])["n1"]
    assert not result.ok and "HTTP 404" in (result.error or "")


def test_local_container_that_exits_at_once_is_an_error(podman_api: str) -> None:
    PodmanApi.dies = {NAMES[0]}
    result = make_driver("local", local_params(podman_api, NAMES[0]), {}).power_on(["n1"])["n1"]
    assert not result.ok and "exited right after start" in (result.error or "")


def test_local_launch_terminate_creates_the_container_and_removes_it(
        podman_api: str, machines: FileMachines) -> None:
    """launch-terminate: no container while powered down; power on creates and starts it
    (the host's proxy decides what is created), power off stops and removes it."""
    PodmanApi.absent = {NAMES[0]}
    driver = make_driver("local", local_params(podman_api, NAMES[0], network="ms-net",
                                               mode="launch-terminate", stop_timeout=1), {})
    assert (driver.status(["n1"])["n1"].ok, driver.status(["n1"])["n1"].power) == (True, OFF)
    on = driver.power_on(["n1"])["n1"]
    assert (on.ok, on.power, on.address) == (True, ON, "10.77.0.21")
    assert PodmanApi.absent == set() and machines.running(NAMES[0])
    off = driver.power_off(["n1"])["n1"]
    assert (off.ok, off.power) == (True, OFF)
    assert PodmanApi.absent == {NAMES[0]} and not machines.running(NAMES[0])
    assert driver.power_off(["n1"], force=True)["n1"].ok  # gone already: still ok
    assert driver.status(["n1"])["n1"].power == OFF
    calls = [(m, p.removeprefix("/v4.0.0/libpod/containers/")) for m, p in PodmanApi.requests]
    assert calls == [("GET", f"{NAMES[0]}/json")] * 2 + [
        ("GET", f"{NAMES[0]}/json"), ("POST", f"create?name={NAMES[0]}"),
        ("POST", f"{NAMES[0]}/start"), ("GET", f"{NAMES[0]}/json"),
        ("POST", f"{NAMES[0]}/stop?t=1"), ("DELETE", f"{NAMES[0]}?force=true"),
        ("POST", f"{NAMES[0]}/stop?t=0"), ("DELETE", f"{NAMES[0]}?force=true"),
        ("GET", f"{NAMES[0]}/json")]


def test_local_launch_terminate_makes_anew_a_container_left_from_a_failed_run(
        podman_api: str, machines: FileMachines) -> None:
    """A container that exists but is stopped (a power off whose remove failed) is removed
    and made again from the host's current spec, never started as it was."""
    driver = make_driver("local", local_params(podman_api, NAMES[1], mode="launch-terminate"),
                         {})
    assert driver.power_on(["n1"])["n1"].ok and machines.running(NAMES[1])
    calls = [(m, p.removeprefix("/v4.0.0/libpod/containers/")) for m, p in PodmanApi.requests]
    assert calls == [("GET", f"{NAMES[1]}/json"), ("DELETE", f"{NAMES[1]}?force=true"),
                     ("POST", f"create?name={NAMES[1]}"), ("POST", f"{NAMES[1]}/start"),
                     ("GET", f"{NAMES[1]}/json")]


def test_local_launch_terminate_removes_even_when_the_stop_fails(
        podman_api: str, machines: FileMachines) -> None:
    PodmanApi.dies = set()
    machines.start(NAMES[2])
    PodmanApi.failing_stop = {NAMES[2]}
    driver = make_driver("local", local_params(podman_api, NAMES[2], mode="launch-terminate"),
                         {})
    off = driver.power_off(["n1"])["n1"]
    assert (off.ok, off.power) == (True, OFF)
    assert NAMES[2] in PodmanApi.absent and not machines.running(NAMES[2])


def test_local_without_podmans_api_is_an_error(tmp_path: Path) -> None:
    driver = make_driver("local", local_params(str(tmp_path / "absent.sock"), NAMES[0]), {})
    result = driver.status(["n1"])["n1"]
    assert not result.ok and "podman API at" in (result.error or "")


# --- redfish: sushy-tools emulator ---------------------------------------------------------

def system_path(name: str) -> str:
    return f"/redfish/v1/Systems/{uuid.uuid5(uuid.NAMESPACE_DNS, name)}"


@pytest.fixture(scope="module")
def redfish_bmc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, FileMachines]]:
    import bcrypt

    tmp = tmp_path_factory.mktemp("redfish")
    machines = FileMachines(tmp / "machines.json", NAMES[:2])
    htpasswd = tmp / "htpasswd"
    digest = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    htpasswd.write_text(f"{USER}:{digest}\n")
    port = free_port()
    proc = start_bmc("redfish_bmc", ["--port", str(port), "--htpasswd", str(htpasswd),
                                     "--state", str(machines.path), *NAMES[:2]],
                     tmp / "emulator.log")
    try:
        wait_until(tcp_port_answers(port), what="sushy-emulator")
        yield f"http://127.0.0.1:{port}", machines
    finally:
        stop_process(proc)


@pytest.fixture()
def redfish(redfish_bmc: tuple[str, FileMachines]) -> tuple[str, FileMachines]:
    """The emulator, with both its machines off."""
    endpoint, machines = redfish_bmc
    for name in NAMES[:2]:
        machines.stop(name)
    return endpoint, machines


def redfish_params(endpoint: str, name: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {"driver": "redfish", "endpoint": endpoint, "verify_tls": False}
    if name:
        params["system_id"] = system_path(name)
    return params


def test_redfish_power_cycle_starts_and_stops_the_machine(
        redfish: tuple[str, FileMachines]) -> None:
    endpoint, machines = redfish
    driver = make_driver("redfish", {"n1": redfish_params(endpoint, NAMES[0]),
                                     "n2": redfish_params(endpoint, NAMES[1])},
                         {"default": {"username": USER, "password": PASSWORD}})
    assert {n: r.power for n, r in driver.status(["n1", "n2"]).items()} == {"n1": OFF, "n2": OFF}
    on = driver.power_on(["n1", "n2"])
    assert all(r.ok for r in on.values()), on
    assert machines.running(NAMES[0]) and machines.running(NAMES[1])
    assert driver.status(["n1"])["n1"].power == ON
    off = driver.power_off(["n1", "n2"], force=True)
    assert all(r.ok for r in off.values()), off
    assert not machines.running(NAMES[0]) and not machines.running(NAMES[1])


def test_redfish_graceful_shutdown(redfish: tuple[str, FileMachines]) -> None:
    endpoint, machines = redfish
    driver = make_driver("redfish", {"n1": redfish_params(endpoint, NAMES[0])},
                         {"n1": {"username": USER, "password": PASSWORD}})
    machines.start(NAMES[0])
    assert driver.power_off(["n1"])["n1"].ok
    assert not machines.running(NAMES[0])


def test_redfish_wrong_password_is_an_error(redfish: tuple[str, FileMachines]) -> None:
    endpoint, machines = redfish
    driver = make_driver("redfish", {"n1": redfish_params(endpoint, NAMES[0])},
                         {"default": {"username": USER, "password": "wrong"}})
    result = driver.power_on(["n1"])["n1"]
    assert not result.ok and "401" in (result.error or ""), result
    assert not machines.running(NAMES[0])


def test_redfish_needs_system_id_when_the_bmc_has_several(
        redfish: tuple[str, FileMachines]) -> None:
    endpoint, _machines = redfish
    driver = make_driver("redfish", {"n1": redfish_params(endpoint, None)},
                         {"default": {"username": USER, "password": PASSWORD}})
    result = driver.status(["n1"])["n1"]
    assert not result.ok and "set system_id" in (result.error or "")


# --- ipmi: pyghmi BMC ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def ipmi_bmc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, FileMachines]]:
    tmp = tmp_path_factory.mktemp("ipmi")
    machines = FileMachines(tmp / "machines.json", NAMES[2:])
    port = free_port(socket.SOCK_DGRAM)
    proc = start_bmc("ipmi_bmc", ["--port", str(port), "--user", USER, "--password", PASSWORD,
                                  "--state", str(machines.path), NAMES[2]], tmp / "bmc.log")
    try:
        time.sleep(0.5)  # UDP: nothing to connect to; the first request retries anyway
        assert proc.poll() is None, (tmp / "bmc.log").read_text()
        yield port, machines
    finally:
        stop_process(proc)


def ipmi_driver(port: int, password: str = PASSWORD):
    return make_driver("ipmi", {"n3": {"driver": "ipmi", "address": "127.0.0.1", "port": port}},
                       {"n3": {"username": USER, "password": password}})


def test_ipmi_power_cycle_starts_and_stops_the_machine(
        ipmi_bmc: tuple[int, FileMachines]) -> None:
    port, machines = ipmi_bmc
    machines.stop(NAMES[2])
    driver = ipmi_driver(port)
    assert driver.status(["n3"])["n3"].power == OFF
    result = driver.power_on(["n3"])["n3"]
    assert result.ok, result
    assert machines.running(NAMES[2])
    assert driver.status(["n3"])["n3"].power == ON
    assert driver.power_off(["n3"])["n3"].ok
    assert not machines.running(NAMES[2])


def test_ipmi_wrong_password_is_an_error(ipmi_bmc: tuple[int, FileMachines]) -> None:
    port, machines = ipmi_bmc
    machines.stop(NAMES[2])
    result = ipmi_driver(port, password="wrong").power_on(["n3"])["n3"]
    assert not result.ok, result
    assert not machines.running(NAMES[2])


# --- oci: SDK against a local stand-in for the Compute API ---------------------------------

def test_controllers_get_the_oci_sdk_these_tests_use() -> None:
    """The slurm_elastic role pins the SDK it installs; pyproject.toml's dev extra pins the
    SDK these tests run against: one version, or the tests prove a different SDK."""
    dev = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["dev"]
    tested = [req for req in dev if req.startswith("oci==")]
    defaults = yaml.safe_load((REPO / "roles/slurm_elastic/defaults/main.yml").read_text())
    assert tested == [defaults["slurm_elastic_oci_sdk"]], (
        f"roles/slurm_elastic/defaults/main.yml pins {defaults['slurm_elastic_oci_sdk']}, "
        f"pyproject.toml's dev extra {tested}")


class ComputeApi(BaseHTTPRequestHandler):
    """Answers the few Compute API calls the driver makes; records every request."""

    requests: list[dict[str, Any]] = []
    instances: dict[str, dict[str, Any]] = {}

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _reply(self, status: int, body: Any = None) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("opc-request-id", "test")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _record(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        entry = {"method": self.command, "path": self.path, "body": body,
                 "signed": self.headers.get("Authorization", "").startswith("Signature ")}
        self.requests.append(entry)
        return entry

    def do_GET(self) -> None:
        self._record()
        path, _, query = self.path.partition("?")
        if path.startswith("/20160918/instances/"):
            iid = path.rsplit("/", 1)[1]
            if iid in self.instances:
                return self._reply(200, self.instances[iid])
            return self._reply(404, {"code": "NotAuthorizedOrNotFound", "message": "no"})
        if path == "/20160918/instances":
            name = dict(p.split("=", 1) for p in query.split("&")).get("displayName")
            listed = [dict(i) for i in self.instances.values() if i["displayName"] == name]
            # A terminating instance is gone after it has been listed twice.
            for i in self.instances.values():
                if i["lifecycleState"] == "TERMINATING":
                    i["listed"] = i.get("listed", 0) + 1
                    if i["listed"] >= 2:
                        i["lifecycleState"] = "TERMINATED"
            return self._reply(200, [{k: v for k, v in i.items() if k != "listed"}
                                     for i in listed])
        return self._reply(404, {"code": "NotFound", "message": self.path})

    def do_POST(self) -> None:
        entry = self._record()
        path, _, query = self.path.partition("?")
        if path == "/20160918/instances" or path == "/20160918/instances/":
            body = entry["body"]
            iid = f"ocid1.instance.oc1..launched{len(self.instances)}"
            self.instances[iid] = {"id": iid, "displayName": body["displayName"],
                                   "lifecycleState": "PROVISIONING",
                                   "compartmentId": body["compartmentId"],
                                   "freeformTags": body.get("freeformTags") or {}}
            return self._reply(200, self.instances[iid])
        iid = path.rsplit("/", 1)[1]
        action = dict(p.split("=", 1) for p in query.split("&")).get("action")
        self.instances[iid]["lifecycleState"] = {"START": "STARTING", "SOFTSTOP": "STOPPING",
                                                 "STOP": "STOPPING"}[action]
        return self._reply(200, self.instances[iid])

    def do_DELETE(self) -> None:
        self._record()
        iid = self.path.partition("?")[0].rsplit("/", 1)[1]
        self.instances[iid]["lifecycleState"] = "TERMINATING"
        return self._reply(204)


@pytest.fixture()
def compute_api(tmp_path: Path) -> Iterator[tuple[str, str]]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key_file = tmp_path / "oci_api_key.pem"
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.TraditionalOpenSSL,
                                           serialization.NoEncryption()))
    der = key.public_key().public_bytes(serialization.Encoding.DER,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    digest = hashlib.md5(der).hexdigest()  # noqa: S324 (OCI's key fingerprint format)
    fingerprint = ":".join(digest[i:i + 2] for i in range(0, 32, 2))
    config = tmp_path / "oci_config"
    config.write_text(f"[DEFAULT]\nuser=ocid1.user.oc1..test\nfingerprint={fingerprint}\n"
                      "tenancy=ocid1.tenancy.oc1..test\nregion=eu-frankfurt-1\n"
                      f"key_file={key_file}\n")
    ComputeApi.requests = []
    ComputeApi.instances = {"ocid1.instance.oc1..node1": {
        "id": "ocid1.instance.oc1..node1", "displayName": "gpu-001",
        "lifecycleState": "STOPPED", "compartmentId": "ocid1.compartment.oc1..c"}}
    server = ThreadingHTTPServer(("127.0.0.1", 0), ComputeApi)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", str(config)
    finally:
        server.shutdown()
        server.server_close()


def oci_params(endpoint: str, config: str, **params: Any) -> dict[str, Any]:
    return {"driver": "oci", "auth": "config_file", "config_file": config,
            "service_endpoint": endpoint, **params}


def test_oci_start_stop(compute_api: tuple[str, str]) -> None:
    endpoint, config = compute_api
    driver = make_driver("oci", {"gpu-001": oci_params(
        endpoint, config, mode="start-stop", instance_id="ocid1.instance.oc1..node1")}, {})
    assert driver.status(["gpu-001"])["gpu-001"].power == OFF
    assert driver.power_on(["gpu-001"])["gpu-001"].ok
    assert driver.power_off(["gpu-001"])["gpu-001"].ok
    calls = [(r["method"], r["path"]) for r in ComputeApi.requests]
    assert calls == [
        ("GET", "/20160918/instances/ocid1.instance.oc1..node1"),
        ("GET", "/20160918/instances/ocid1.instance.oc1..node1"),
        ("POST", "/20160918/instances/ocid1.instance.oc1..node1?action=START"),
        ("GET", "/20160918/instances/ocid1.instance.oc1..node1"),
        ("POST", "/20160918/instances/ocid1.instance.oc1..node1?action=SOFTSTOP"),
    ]
    assert all(r["signed"] for r in ComputeApi.requests)


def test_oci_launch_terminate(compute_api: tuple[str, str]) -> None:
    endpoint, config = compute_api
    tags = {"metalslurm-cluster": "c1", "metalslurm-node": "gpu-002"}
    params = oci_params(endpoint, config, mode="launch-terminate",
                        compartment_id="ocid1.compartment.oc1..c", availability_domain="AD-1",
                        shape="BM.GPU.H100.8", image_id="ocid1.image.oc1..img",
                        subnet_id="ocid1.subnet.oc1..sub", private_ip="10.0.2.21",
                        display_name="c1-gpu-002", freeform_tags=tags, boot_volume_gbs=200,
                        compute_cluster_id="ocid1.computecluster.oc1..rdma", poll_interval=0.01,
                        metadata={"ssh_authorized_keys": "ssh-ed25519 AAAAop op\n"
                                                         "ssh-ed25519 AAAAjoin join"})
    # Another cluster's instance of the same name in the compartment is not this node's.
    ComputeApi.instances["ocid1.instance.oc1..other"] = {
        "id": "ocid1.instance.oc1..other", "displayName": "c1-gpu-002",
        "lifecycleState": "RUNNING", "compartmentId": "ocid1.compartment.oc1..c",
        "freeformTags": {"metalslurm-cluster": "c2"}}
    driver = make_driver("oci", {"gpu-002": params}, {})
    assert driver.status(["gpu-002"])["gpu-002"].power == OFF
    result = driver.power_on(["gpu-002"])["gpu-002"]
    assert (result.ok, result.address) == (True, "10.0.2.21"), result
    launch = [r for r in ComputeApi.requests if r["method"] == "POST"][0]
    assert launch["body"] == {
        "availabilityDomain": "AD-1", "compartmentId": "ocid1.compartment.oc1..c",
        "displayName": "c1-gpu-002", "shape": "BM.GPU.H100.8", "freeformTags": tags,
        "createVnicDetails": {"assignPublicIp": False, "hostnameLabel": "gpu-002",
                              "privateIp": "10.0.2.21", "subnetId": "ocid1.subnet.oc1..sub"},
        "sourceDetails": {"sourceType": "image", "imageId": "ocid1.image.oc1..img",
                          "bootVolumeSizeInGBs": 200},
        "computeClusterId": "ocid1.computecluster.oc1..rdma",
        "metadata": {"ssh_authorized_keys": "ssh-ed25519 AAAAop op\nssh-ed25519 AAAAjoin join"},
    }
    assert driver.power_on(["gpu-002"])["gpu-002"].ok  # found by name: no second launch
    assert len([r for r in ComputeApi.requests if r["method"] == "POST"]) == 1
    assert driver.power_off(["gpu-002"])["gpu-002"].ok
    delete = [r for r in ComputeApi.requests if r["method"] == "DELETE"]
    assert [d["path"] for d in delete] == [
        "/20160918/instances/ocid1.instance.oc1..launched2?preserveBootVolume=false"]
    # A resume while the old instance terminates (it holds the address): the launch waits
    # until it is gone, then launches.
    ComputeApi.requests = []
    assert driver.power_on(["gpu-002"])["gpu-002"].ok
    calls = [(r["method"], r["path"].split("?")[0]) for r in ComputeApi.requests]
    assert calls == [("GET", "/20160918/instances")] * 3 + [("POST", "/20160918/instances")]
    assert ComputeApi.instances["ocid1.instance.oc1..launched2"]["lifecycleState"] == \
        "TERMINATED"
    assert ComputeApi.instances["ocid1.instance.oc1..other"]["lifecycleState"] == "RUNNING"


def test_oci_api_error_is_a_node_error(compute_api: tuple[str, str]) -> None:
    endpoint, config = compute_api
    driver = make_driver("oci", {"gpu-009": oci_params(
        endpoint, config, instance_id="ocid1.instance.oc1..missing")}, {})
    result = driver.power_on(["gpu-009"])["gpu-009"]
    assert not result.ok and "404" in (result.error or "")


def test_drivers_import_their_library_lazily() -> None:
    code = ("import sys, metalslurm_power.cli, metalslurm_power.drivers; "
            "print(sorted(m for m in ('sushy', 'pyghmi', 'oci', "
            "'yaml') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ}).stdout.strip()
    assert out == "[]"
