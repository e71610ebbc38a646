"""The power drivers against real protocol servers on loopback whose power actions start and
stop real (tiny) podman containers:

- local: podman's own REST API (``podman system service`` on a socket in tmp);
- redfish: the sushy-tools emulator (unmodified Flask app) with a podman-backed systems driver;
- ipmi: a pyghmi BMC (``pyghmi.ipmi.bmc.Bmc`` subclass) backed by podman.

The same drivers against the same BMC stand-ins with machines that are flags in a file, and
against a stand-in of podman's API, are the unit tests
(roles/slurm_elastic/tests/unit/test_power_drivers.py): these prove that the machines
really start and stop. They use their own containers, not the e2e clusters: named
ms-bmc-test-*, created here after any leftover of an earlier run with that name is removed,
and removed by name at the end, whatever happened.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest
from metalslurm_power.drivers import make_driver
from metalslurm_power.drivers.base import OFF, ON
from metalslurm_power.drivers.local import _UnixHTTPConnection
from power_helpers.servers import free_port, stop_process, tcp_port_answers, wait_until

from infra.providers.local import ULIMITS
from infra.providers.node_container import Mount, NodeContainer
from infra.providers.podman_proxy import LAUNCH_TERMINATE, Allowed, allow_file_text, make_handler
from infra.providers.podman_proxy import Server as ProxyServer
from infra.providers.prepared import (
    HELD_REPO,
    LINE_LABEL,
    PREPARED_REPO,
    hold,
    prune_older,
    release,
)
from tests.e2e import podman_machines
from tests.e2e.cluster import REPO

NAMES = ["ms-bmc-test-1", "ms-bmc-test-2", "ms-bmc-test-3"]
USER, PASSWORD = "admin", "bmc-pass-1"
# The stand-in BMCs run as `python -m tests.e2e.power_bmcs` from the repository root; their
# machines code (power_helpers) lives with the role's unit tests.
BMC_PYTHONPATH = os.pathsep.join([str(REPO / "roles/slurm_elastic/tests/unit"), str(REPO)])


@pytest.fixture(scope="module")
def machines() -> Iterator[list[str]]:
    podman_machines.remove_leftovers()
    podman_machines.ensure_image()
    try:
        for name in NAMES:
            podman_machines.create(name)
        yield NAMES
    finally:
        for name in NAMES:
            podman_machines.remove(name)


@pytest.fixture()
def all_off(machines: list[str]) -> list[str]:
    for name in machines:
        if podman_machines.running(name):
            podman_machines.stop(name)
    return machines


def start_bmc(kind: str, args: list[str], log_path) -> tuple[subprocess.Popen, Any]:
    log = open(log_path, "w")  # noqa: SIM115 (closed by stop_process)
    # The environment as the test runs (the PATH it sees), not as it was at collection.
    env = {**os.environ, "PYTHONPATH": BMC_PYTHONPATH}
    proc = subprocess.Popen([sys.executable, "-m", "tests.e2e.power_bmcs", kind, *args],
                            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, log


# --- local: podman REST API ----------------------------------------------------------------

@pytest.fixture(scope="module")
def podman_socket(machines: list[str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    sock = tmp_path_factory.mktemp("podman") / "podman.sock"
    proc = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{sock}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(sock.exists, what="podman system service")
        yield str(sock)
    finally:
        stop_process(proc)


def test_local_power_on_reports_address(podman_socket: str, all_off: list[str]) -> None:
    params = {f"n{i}": {"driver": "local", "container": name, "socket": podman_socket}
              for i, name in enumerate(all_off[:2], start=1)}
    driver = make_driver("local", params, {})
    results = driver.power_on(["n1", "n2"])
    assert {n: (r.ok, r.power) for n, r in results.items()} == {"n1": (True, ON),
                                                               "n2": (True, ON)}
    assert all(r.address and r.address.count(".") == 3 for r in results.values()), results
    assert podman_machines.running(all_off[0]) and podman_machines.running(all_off[1])


def test_local_power_off_and_status(podman_socket: str, all_off: list[str]) -> None:
    params = {"n1": {"driver": "local", "container": all_off[0], "socket": podman_socket,
                     "stop_timeout": 1}}
    driver = make_driver("local", params, {})
    podman_machines.start(all_off[0])
    assert driver.status(["n1"])["n1"].power == ON
    assert driver.power_off(["n1"])["n1"].ok
    assert not podman_machines.running(all_off[0])
    assert driver.status(["n1"])["n1"].power == OFF
    assert driver.power_off(["n1"])["n1"].ok  # already off: still ok (HTTP 304)


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
    tmp = tmp_path_factory.mktemp("redfish")
    htpasswd = tmp / "htpasswd"
    digest = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    htpasswd.write_text(f"{USER}:{digest}\n")
    port = free_port()
    proc, log = start_bmc("redfish", ["--port", str(port), "--htpasswd", str(htpasswd),
                                      *machines[:2]], tmp / "emulator.log")
    try:
        wait_until(tcp_port_answers(port), what="sushy-emulator")
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc, log)


def redfish_params(endpoint: str, name: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {"driver": "redfish", "endpoint": endpoint, "verify_tls": False}
    if name:
        params["system_id"] = system_path(name)
    return params


def test_redfish_power_cycle_starts_and_stops_the_machine(redfish_bmc: str,
                                                         all_off: list[str]) -> None:
    driver = make_driver("redfish", {"n1": redfish_params(redfish_bmc, all_off[0]),
                                     "n2": redfish_params(redfish_bmc, all_off[1])},
                         {"default": {"username": USER, "password": PASSWORD}})
    assert {n: r.power for n, r in driver.status(["n1", "n2"]).items()} == {"n1": OFF, "n2": OFF}
    on = driver.power_on(["n1", "n2"])
    assert all(r.ok for r in on.values()), on
    assert podman_machines.running(all_off[0]) and podman_machines.running(all_off[1])
    assert driver.status(["n1"])["n1"].power == ON
    off = driver.power_off(["n1", "n2"], force=True)
    assert all(r.ok for r in off.values()), off
    assert not podman_machines.running(all_off[0]) and not podman_machines.running(all_off[1])


def test_redfish_graceful_shutdown(redfish_bmc: str, all_off: list[str]) -> None:
    driver = make_driver("redfish", {"n1": redfish_params(redfish_bmc, all_off[0])},
                         {"n1": {"username": USER, "password": PASSWORD}})
    podman_machines.start(all_off[0])
    assert driver.power_off(["n1"])["n1"].ok
    assert not podman_machines.running(all_off[0])


def test_redfish_wrong_password_is_an_error(redfish_bmc: str, all_off: list[str]) -> None:
    driver = make_driver("redfish", {"n1": redfish_params(redfish_bmc, all_off[0])},
                         {"default": {"username": USER, "password": "wrong"}})
    result = driver.power_on(["n1"])["n1"]
    assert not result.ok and "401" in (result.error or ""), result
    assert not podman_machines.running(all_off[0])


# --- ipmi: pyghmi BMC ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def ipmi_bmc(machines: list[str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    tmp = tmp_path_factory.mktemp("ipmi")
    port = free_port(socket.SOCK_DGRAM)
    proc, log = start_bmc("ipmi", ["--port", str(port), "--user", USER, "--password", PASSWORD,
                                   machines[2]], tmp / "bmc.log")
    try:
        time.sleep(0.5)  # UDP: nothing to connect to; the first request retries anyway
        assert proc.poll() is None, (tmp / "bmc.log").read_text()
        yield port
    finally:
        stop_process(proc, log)


def ipmi_driver(port: int, password: str = PASSWORD):
    return make_driver("ipmi", {"n3": {"driver": "ipmi", "address": "127.0.0.1", "port": port}},
                       {"n3": {"username": USER, "password": password}})


def test_ipmi_power_cycle_starts_and_stops_the_machine(ipmi_bmc: int,
                                                      all_off: list[str]) -> None:
    driver = ipmi_driver(ipmi_bmc)
    assert driver.status(["n3"])["n3"].power == OFF
    result = driver.power_on(["n3"])["n3"]
    assert result.ok, result
    assert podman_machines.running(all_off[2])
    assert driver.status(["n3"])["n3"].power == ON
    assert driver.power_off(["n3"])["n3"].ok
    assert not podman_machines.running(all_off[2])


def test_ipmi_wrong_password_is_an_error(ipmi_bmc: int, all_off: list[str]) -> None:
    result = ipmi_driver(ipmi_bmc, password="wrong").power_on(["n3"])["n3"]
    assert not result.ok, result
    assert not podman_machines.running(all_off[2])


# --- local, launch-terminate: a node's container made from the host's spec -----------------

def _api(sock: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    conn = _UnixHTTPConnection(sock, 60)
    try:
        conn.request(method, "/v4.0.0/libpod" + path,
                     body=json.dumps(body).encode() if body is not None else None,
                     headers={"Content-Type": "application/json", "Host": "d"})
        reply = conn.getresponse()
        data = reply.read()
    finally:
        conn.close()
    return reply.status, json.loads(data) if data else None


def _inspect(name: str) -> dict[str, Any]:
    """What makes a container the one it is (podman inspect, without what names this one)."""
    found = json.loads(podman_machines.podman("inspect", name).stdout)[0]
    config, host = dict(found["Config"]), dict(found["HostConfig"])
    config.pop("CreateCommand", None)  # how it was made: the CLI records its arguments
    config["Env"] = sorted(config.get("Env") or [])  # podman lists them in any order
    # The CLI notes that it gave no terminal; the API leaves it out.
    config["Annotations"] = {k: v for k, v in (config.get("Annotations") or {}).items()
                             if k != "io.kubernetes.cri-o.TTY"}
    # The same options, in another order.
    host["Binds"] = sorted((src, dst, sorted(opts.split(",")))
                           for src, dst, opts in (b.split(":") for b in host["Binds"] or []))
    host.pop("LogConfig", None)
    return {"Config": config, "HostConfig": host, "Image": found["ImageName"],
            "Runtime": found["OCIRuntime"],
            "Networks": sorted(found["NetworkSettings"]["Networks"])}


@pytest.fixture(scope="module")
def node_network() -> Iterator[str]:
    net = "ms-bmc-test-net"
    podman_machines.podman("network", "rm", "-f", net, check=False)
    podman_machines.podman("network", "create", "--subnet", "10.79.251.0/24", net)
    try:
        yield net
    finally:
        podman_machines.podman("network", "rm", "-f", net, check=False)


def _node(name: str, network: str, tmp_path: Path, address: str,
          compute: bool = True) -> NodeContainer:
    for sub in ("node", "shared"):
        (tmp_path / sub).mkdir(exist_ok=True)
    return NodeContainer(
        name=name, image=podman_machines.IMAGE, hostname="gpu-009", network=network,
        address=address, labels={"metalslurm.node": "gpu-009", "metalslurm.cluster": "ms-t"},
        mounts=(Mount(tmp_path / "node", "/etc/metalslurm", ("ro",)),
                Mount(tmp_path / "shared", "/shared", ("nosuid", "nodev"))),
        ulimits=ULIMITS, private_cgroupns=compute, command=("/bin/sleep", "infinity"))


@pytest.mark.parametrize("compute", [True, False], ids=["compute", "controller"])
def test_a_node_created_through_the_api_is_the_one_podman_run_makes(
        podman_socket: str, node_network: str, tmp_path: Path, compute: bool) -> None:
    """infra/providers/node_container.py: the create body the proxy sends and the arguments
    'local up' gives podman make the same container, at its own address."""
    names = ["ms-bmc-test-cli", "ms-bmc-test-api"]
    podman_machines.podman("rm", "-f", "-t", "0", *names, check=False)
    try:
        podman_machines.podman(*_node(names[0], node_network, tmp_path, "10.79.251.5",
                                      compute).run_args("create"))
        status, data = _api(podman_socket, "POST", "/containers/create",
                            _node(names[1], node_network, tmp_path, "10.79.251.6",
                                  compute).create_body())
        assert status == 201, data
        cli, api = _inspect(names[0]), _inspect(names[1])
        assert cli == api
        for name in names:
            podman_machines.start(name)
        # Each at its own address, with the hardware address that address fixes.
        form = (f"{{{{with (index .NetworkSettings.Networks \"{node_network}\")}}}}"
                "{{.IPAddress}} {{.MacAddress}}{{end}}")
        assert [podman_machines.podman("inspect", "--format", form, name).stdout.strip()
                for name in names] == [
                "10.79.251.5 02:6d:0a:4f:fb:05", "10.79.251.6 02:6d:0a:4f:fb:06"]
    finally:
        podman_machines.podman("rm", "-f", "-t", "0", *names, check=False)


def test_local_launch_terminate_through_the_proxy_makes_and_removes_the_machine(
        podman_socket: str, node_network: str, tmp_path: Path) -> None:
    """The driver names a node; the proxy (infra/providers/podman_proxy.py) creates it from
    the host's spec, and removes it on power off: no container is left while it is off."""
    name = "ms-bmc-test-launched"
    podman_machines.podman("rm", "-f", "-t", "0", name, check=False)
    allow, listen = tmp_path / "allow", tmp_path / "proxy.sock"
    node = _node(name, node_network, tmp_path, "10.79.251.9")
    allow.write_text(allow_file_text({name: Allowed(LAUNCH_TERMINATE, node.create_body())}))
    server = ProxyServer(str(listen), make_handler(podman_socket, allow))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    driver = make_driver("local", {"n1": {"driver": "local", "container": name,
                                          "socket": str(listen), "network": node_network,
                                          "mode": "launch-terminate", "stop_timeout": 1}}, {})
    try:
        assert (driver.status(["n1"])["n1"].ok, driver.status(["n1"])["n1"].power) == (True, OFF)
        on = driver.power_on(["n1"])["n1"]
        assert (on.ok, on.power, on.address) == (True, ON, "10.79.251.9"), on.error
        assert podman_machines.running(name)
        off = driver.power_off(["n1"])["n1"]
        assert (off.ok, off.power) == (True, OFF), off.error
        assert podman_machines.podman("container", "exists", name, check=False).returncode == 1
        on = driver.power_on(["n1"])["n1"]  # made anew
        assert (on.ok, on.power) == (True, ON), on.error
    finally:
        server.shutdown()
        server.server_close()
        podman_machines.podman("rm", "-f", "-t", "0", name, check=False)


def test_the_image_of_a_powered_down_launched_node_outlives_another_builds_prune() -> None:
    """A launch-terminate node has no container while powered down: its image is held for
    its cluster (prepared.hold) so that another cluster's image build, which removes the
    older images of a kind nothing uses (prepared.prune_older), leaves it to the next
    resume; the cluster's down lets it go (prepared.release). All on the same image as
    several names: podman's rmi of one of them removes only that name, used or not. A
    build prunes its own line only: another stack's image of the kind (other install
    settings) stays; one made before lines were labelled counts as the same line."""
    base = podman_machines.ensure_image()
    older, newer, unlabelled, other_line = (f"{PREPARED_REPO}:testos-compute-{h}" for h in (
        "0ld0ld0ld0ld", "11e111e111e1", "0a0a0a0a0a0a", "0b0b0b0b0b0b"))
    line = "000000000001"
    cluster = "ms-hold-test"
    release(cluster)
    podman_machines.podman("rm", "-f", "-t", "0", "ms-hold-test-user", check=False)
    podman_machines.podman("create", "--name", "ms-hold-test-user", base)
    for ref, its_line in ((older, line), (newer, line), (unlabelled, None),
                          (other_line, "000000000002")):  # each its own image
        labels = ["--change", f"LABEL {LINE_LABEL}={its_line}"] if its_line else []
        podman_machines.podman("commit", "--quiet", "--change", f"LABEL metalslurm.test={ref}",
                               *labels, "ms-hold-test-user", ref)
    podman_machines.podman("rm", "-f", "-t", "0", "ms-hold-test-user")
    try:
        held = hold(cluster, [older])
        assert held == {older: f"{HELD_REPO}:{cluster}_metalslurm-prepared_testos-compute-"
                               "0ld0ld0ld0ld"}
        # Held: a build of the newer one leaves it, under both names; the unlabelled one
        # goes, the other line's stays.
        assert prune_older(newer, line) == [unlabelled]
        assert all(podman_machines.podman("image", "exists", name, check=False).returncode == 0
                   for name in (older, held[older], other_line))
        # Holding the newer one lets go of the older, as a second 'up' after a rebuild does.
        newer_held = f"{HELD_REPO}:{cluster}_metalslurm-prepared_testos-compute-11e111e111e1"
        assert hold(cluster, [newer]) == {newer: newer_held}
        assert podman_machines.podman("image", "exists", held[older],
                                      check=False).returncode != 0
        assert release(cluster) == [newer_held]
        # Only the held names went: the image under its own name stays.
        assert podman_machines.podman("image", "exists", newer, check=False).returncode == 0
        # Held by nobody now and used by no container, the older one is pruned; one a
        # container uses is not, though its name alone could be removed; the other line's
        # goes with a build of its own line.
        podman_machines.podman("create", "--name", "ms-hold-test-user", newer)
        assert prune_older(f"{PREPARED_REPO}:testos-compute-fffffffffff0", line) == [older]
        assert podman_machines.podman("image", "exists", newer, check=False).returncode == 0
        assert podman_machines.podman("image", "exists", base, check=False).returncode == 0
        assert prune_older(f"{PREPARED_REPO}:testos-compute-fffffffffff1",
                           "000000000002") == [other_line]
    finally:
        podman_machines.podman("rm", "-f", "-t", "0", "ms-hold-test-user", check=False)
        release(cluster)
        for ref in (older, newer, unlabelled, other_line):
            podman_machines.podman("rmi", ref, check=False)
