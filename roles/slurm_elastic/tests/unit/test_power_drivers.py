"""The power drivers against real protocol servers on loopback whose power actions start and
stop real (tiny) podman containers:

- local: podman's own REST API (``podman system service`` on a socket in tmp);
- redfish: the sushy-tools emulator (unmodified Flask app) with a podman-backed systems driver;
- ipmi: a pyghmi BMC (``pyghmi.ipmi.bmc.Bmc`` subclass) backed by podman;
- oci: the oci SDK against a small local HTTP server standing in for the Compute API
  (``service_endpoint``), asserting the requests the SDK sends.

Containers are named ms-bmc-test-*, created and removed here (leftovers of earlier runs too).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
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
from power_helpers import podman_nodes
from power_helpers.env import HELPERS, REPO

SKIP = podman_nodes.available()
needs_podman = pytest.mark.skipif(SKIP is not None, reason=SKIP or "")
NAMES = ["ms-bmc-test-1", "ms-bmc-test-2", "ms-bmc-test-3"]
USER, PASSWORD = "admin", "bmc-pass-1"


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check, timeout: float = 30.0, what: str = "server") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{what} did not come up in {timeout:.0f}s")


def stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def machines() -> Iterator[list[str]]:
    if SKIP:
        pytest.skip(SKIP)
    podman_nodes.remove_leftovers()
    podman_nodes.ensure_image()
    for name in NAMES:
        podman_nodes.create(name)
    yield NAMES
    for name in NAMES:
        podman_nodes.remove(name)


@pytest.fixture()
def all_off(machines: list[str]) -> list[str]:
    for name in machines:
        if podman_nodes.running(name):
            podman_nodes.stop(name)
    return machines


# --- local: podman REST API ----------------------------------------------------------------

@pytest.fixture(scope="module")
def podman_socket(machines: list[str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    sock = tmp_path_factory.mktemp("podman") / "podman.sock"
    proc = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{sock}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(sock.exists, what="podman system service")
        yield str(sock)
    finally:
        stop_process(proc)


@needs_podman
def test_local_power_on_reports_address(podman_socket: str, all_off: list[str]) -> None:
    params = {f"n{i}": {"driver": "local", "container": name, "socket": podman_socket}
              for i, name in enumerate(all_off[:2], start=1)}
    driver = make_driver("local", params, {})
    results = driver.power_on(["n1", "n2"])
    assert {n: (r.ok, r.power) for n, r in results.items()} == {"n1": (True, ON),
                                                               "n2": (True, ON)}
    assert all(r.address and r.address.count(".") == 3 for r in results.values()), results
    assert podman_nodes.running(all_off[0]) and podman_nodes.running(all_off[1])


@needs_podman
def test_local_power_off_and_status(podman_socket: str, all_off: list[str]) -> None:
    params = {"n1": {"driver": "local", "container": all_off[0], "socket": podman_socket,
                     "stop_timeout": 1}}
    driver = make_driver("local", params, {})
    podman_nodes.start(all_off[0])
    assert driver.status(["n1"])["n1"].power == ON
    assert driver.power_off(["n1"])["n1"].ok
    assert not podman_nodes.running(all_off[0])
    assert driver.status(["n1"])["n1"].power == OFF
    assert driver.power_off(["n1"])["n1"].ok  # already off: still ok (HTTP 304)


@needs_podman
def test_local_unknown_container_is_an_error(podman_socket: str, machines: list[str]) -> None:
    driver = make_driver("local", {"n9": {"driver": "local", "container": "ms-bmc-test-none",
                                          "socket": podman_socket}}, {})
    result = driver.power_on(["n9"])["n9"]
    assert not result.ok and "HTTP 404" in (result.error or "")


# --- redfish: sushy-tools emulator ---------------------------------------------------------

def system_path(name: str) -> str:
    return f"/redfish/v1/Systems/{uuid.uuid5(uuid.NAMESPACE_DNS, name)}"


@pytest.fixture(scope="module")
def redfish_bmc(machines: list[str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    import bcrypt

    tmp = tmp_path_factory.mktemp("redfish")
    htpasswd = tmp / "htpasswd"
    digest = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    htpasswd.write_text(f"{USER}:{digest}\n")
    port = free_port()
    log = open(tmp / "emulator.log", "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen([sys.executable, "-m", "power_helpers.redfish_podman_bmc",
                             "--port", str(port), "--htpasswd", str(htpasswd), *machines[:2]],
                            cwd=HELPERS.parent, stdout=log, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"

    def up() -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True

    try:
        wait_for(up, what="sushy-emulator")
        yield endpoint
    finally:
        stop_process(proc)
        log.close()


def redfish_params(endpoint: str, name: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {"driver": "redfish", "endpoint": endpoint, "verify_tls": False}
    if name:
        params["system_id"] = system_path(name)
    return params


@needs_podman
def test_redfish_power_cycle_starts_and_stops_the_machine(redfish_bmc: str,
                                                         all_off: list[str]) -> None:
    driver = make_driver("redfish", {"n1": redfish_params(redfish_bmc, all_off[0]),
                                     "n2": redfish_params(redfish_bmc, all_off[1])},
                         {"default": {"username": USER, "password": PASSWORD}})
    assert {n: r.power for n, r in driver.status(["n1", "n2"]).items()} == {"n1": OFF, "n2": OFF}
    on = driver.power_on(["n1", "n2"])
    assert all(r.ok for r in on.values()), on
    assert podman_nodes.running(all_off[0]) and podman_nodes.running(all_off[1])
    assert driver.status(["n1"])["n1"].power == ON
    off = driver.power_off(["n1", "n2"], force=True)
    assert all(r.ok for r in off.values()), off
    assert not podman_nodes.running(all_off[0]) and not podman_nodes.running(all_off[1])


@needs_podman
def test_redfish_graceful_shutdown(redfish_bmc: str, all_off: list[str]) -> None:
    driver = make_driver("redfish", {"n1": redfish_params(redfish_bmc, all_off[0])},
                         {"n1": {"username": USER, "password": PASSWORD}})
    podman_nodes.start(all_off[0])
    assert driver.power_off(["n1"])["n1"].ok
    assert not podman_nodes.running(all_off[0])


@needs_podman
def test_redfish_wrong_password_is_an_error(redfish_bmc: str, all_off: list[str]) -> None:
    driver = make_driver("redfish", {"n1": redfish_params(redfish_bmc, all_off[0])},
                         {"default": {"username": USER, "password": "wrong"}})
    result = driver.power_on(["n1"])["n1"]
    assert not result.ok and "401" in (result.error or ""), result
    assert not podman_nodes.running(all_off[0])


@needs_podman
def test_redfish_needs_system_id_when_the_bmc_has_several(redfish_bmc: str,
                                                          machines: list[str]) -> None:
    driver = make_driver("redfish", {"n1": redfish_params(redfish_bmc, None)},
                         {"default": {"username": USER, "password": PASSWORD}})
    result = driver.status(["n1"])["n1"]
    assert not result.ok and "set system_id" in (result.error or "")


# --- ipmi: pyghmi BMC ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def ipmi_bmc(machines: list[str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    tmp = tmp_path_factory.mktemp("ipmi")
    port = free_port(socket.SOCK_DGRAM)
    log = open(tmp / "bmc.log", "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen([sys.executable, "-m", "power_helpers.ipmi_podman_bmc", "--port",
                             str(port), "--user", USER, "--password", PASSWORD, machines[2]],
                            cwd=HELPERS.parent, stdout=log, stderr=subprocess.STDOUT)
    try:
        time.sleep(0.5)  # UDP: nothing to connect to; the first request retries anyway
        assert proc.poll() is None, (tmp / "bmc.log").read_text()
        yield port
    finally:
        stop_process(proc)
        log.close()


def ipmi_driver(port: int, password: str = PASSWORD):
    return make_driver("ipmi", {"n3": {"driver": "ipmi", "address": "127.0.0.1", "port": port}},
                       {"n3": {"username": USER, "password": password}})


@needs_podman
def test_ipmi_power_cycle_starts_and_stops_the_machine(ipmi_bmc: int,
                                                      all_off: list[str]) -> None:
    driver = ipmi_driver(ipmi_bmc)
    assert driver.status(["n3"])["n3"].power == OFF
    result = driver.power_on(["n3"])["n3"]
    assert result.ok, result
    assert podman_nodes.running(all_off[2])
    assert driver.status(["n3"])["n3"].power == ON
    assert driver.power_off(["n3"])["n3"].ok
    assert not podman_nodes.running(all_off[2])


@needs_podman
def test_ipmi_wrong_password_is_an_error(ipmi_bmc: int, all_off: list[str]) -> None:
    result = ipmi_driver(ipmi_bmc, password="wrong").power_on(["n3"])["n3"]
    assert not result.ok, result
    assert not podman_nodes.running(all_off[2])


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
            return self._reply(200, [i for i in self.instances.values()
                                     if i["displayName"] == name])
        return self._reply(404, {"code": "NotFound", "message": self.path})

    def do_POST(self) -> None:
        entry = self._record()
        path, _, query = self.path.partition("?")
        if path == "/20160918/instances" or path == "/20160918/instances/":
            body = entry["body"]
            iid = f"ocid1.instance.oc1..launched{len(self.instances)}"
            self.instances[iid] = {"id": iid, "displayName": body["displayName"],
                                   "lifecycleState": "PROVISIONING",
                                   "compartmentId": body["compartmentId"]}
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
    thread = threading.Thread(target=server.serve_forever, daemon=True)
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
    params = oci_params(endpoint, config, mode="launch-terminate",
                        compartment_id="ocid1.compartment.oc1..c", availability_domain="AD-1",
                        shape="BM.GPU.H100.8", image_id="ocid1.image.oc1..img",
                        subnet_id="ocid1.subnet.oc1..sub", private_ip="10.0.2.21")
    driver = make_driver("oci", {"gpu-002": params}, {})
    result = driver.power_on(["gpu-002"])["gpu-002"]
    assert (result.ok, result.address) == (True, "10.0.2.21"), result
    launch = [r for r in ComputeApi.requests if r["method"] == "POST"][0]
    assert launch["body"] == {
        "availabilityDomain": "AD-1", "compartmentId": "ocid1.compartment.oc1..c",
        "displayName": "gpu-002", "shape": "BM.GPU.H100.8",
        "createVnicDetails": {"assignPublicIp": False, "hostnameLabel": "gpu-002",
                              "privateIp": "10.0.2.21", "subnetId": "ocid1.subnet.oc1..sub"},
        "sourceDetails": {"sourceType": "image", "imageId": "ocid1.image.oc1..img"},
    }
    assert driver.power_on(["gpu-002"])["gpu-002"].ok  # found by name: no second launch
    assert len([r for r in ComputeApi.requests if r["method"] == "POST"]) == 1
    assert driver.power_off(["gpu-002"])["gpu-002"].ok
    delete = [r for r in ComputeApi.requests if r["method"] == "DELETE"]
    assert [d["path"] for d in delete] == [
        "/20160918/instances/ocid1.instance.oc1..launched1?preserveBootVolume=false"]
    assert driver.status(["gpu-002"])["gpu-002"].power == OFF


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
