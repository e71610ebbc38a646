"""The podman proxy between the local controller's power driver and the host's podman: only
the driver's three calls for the allowed containers pass; everything else is refused before
podman sees it. Over real unix sockets, with a recording stand-in for podman."""

from __future__ import annotations

import http.client
import json
import socket
import socketserver
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from infra.providers.podman_proxy import (
    LAUNCH_TERMINATE,
    Allowed,
    Server,
    allow_file_text,
    body_refusal,
    make_handler,
    read_allowed,
    refusal,
)

SPEC = {"name": "ms-e2e13-gpu-005", "image": "localhost/metalslurm-prepared:trixie-compute-x",
        "mounts": [{"destination": "/etc/metalslurm", "source": "/srv/ms/node/gpu-005",
                    "type": "bind", "options": ["ro"]}]}
ALLOWED = {"ms-e2e13-gpu-003": Allowed(), "ms-e2e13-gpu-004": Allowed(),
           "ms-e2e13-gpu-005": Allowed(LAUNCH_TERMINATE, SPEC)}


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/_ping"),
    ("GET", "/v4.0.0/libpod/containers/ms-e2e13-gpu-003/json"),
    ("POST", "/v4.0.0/libpod/containers/ms-e2e13-gpu-003/start"),
    ("POST", "/v4.0.0/libpod/containers/ms-e2e13-gpu-004/stop?t=10"),
    ("POST", "/v4.0.0/libpod/containers/ms-e2e13-gpu-004/stop?t=0"),
    ("POST", "/v4.0.0/libpod/containers/create?name=ms-e2e13-gpu-005"),
    ("DELETE", "/v4.0.0/libpod/containers/ms-e2e13-gpu-005?force=true"),
    ("POST", "/v4.0.0/libpod/containers/ms-e2e13-gpu-005/start"),
])
def test_the_drivers_calls_for_an_elastic_node_pass(method, path):
    assert refusal(method, path, ALLOWED) is None


@pytest.mark.parametrize(("method", "path", "why"), [
    ("GET", "/v4.0.0/libpod/containers/json", "is not a call the power driver makes"),
    ("POST", "/v4.0.0/libpod/containers/create", "is not a call the power driver makes"),
    ("POST", "/v4.0.0/libpod/containers/ms-e2e13-ctl/stop?t=0",
     "container ms-e2e13-ctl is not an elastic node of this cluster"),
    ("POST", "/v4.0.0/libpod/containers/other-cluster-gpu-003/start",
     "container other-cluster-gpu-003 is not an elastic node of this cluster"),
    ("DELETE", "/v4.0.0/libpod/containers/ms-e2e13-gpu-003/json",
     "DELETE is not how the power driver calls json"),
    ("GET", "/v4.0.0/libpod/containers/ms-e2e13-gpu-003/start",
     "GET is not how the power driver calls start"),
    ("POST", "/v4.0.0/libpod/containers/ms-e2e13-gpu-003/exec",
     "is not a call the power driver makes"),
    ("POST", "/v4.0.0/libpod/containers/ms-e2e13-gpu-003%2F..%2Fx/start",
     "is not an elastic node of this cluster"),
    ("POST", "/v4.0.0/libpod/containers/ms-e2e13-gpu-003/stop?t=1&signal=KILL",
     "is not a call the power driver makes"),
    ("POST", "/v4.0.0/libpod/containers/create?name=ms-e2e13-gpu-003",
     "container ms-e2e13-gpu-003 is powered by start and stop, never created or removed"),
    ("DELETE", "/v4.0.0/libpod/containers/ms-e2e13-gpu-004?force=true",
     "container ms-e2e13-gpu-004 is powered by start and stop, never created or removed"),
    ("POST", "/v4.0.0/libpod/containers/create?name=ms-e2e13-ctl",
     "container ms-e2e13-ctl is not an elastic node of this cluster"),
    ("DELETE", "/v4.0.0/libpod/containers/ms-e2e13-ctl?force=true",
     "container ms-e2e13-ctl is not an elastic node of this cluster"),
    ("POST", "/v4.0.0/libpod/containers/create?name=ms-e2e13-gpu-005&image=x",
     "is not a call the power driver makes"),
    ("GET", "/v4.0.0/libpod/containers/create?name=ms-e2e13-gpu-005",
     "GET is not how the power driver calls create"),
    ("DELETE", "/v4.0.0/libpod/containers/ms-e2e13-gpu-005?force=true&volumes=true",
     "is not a call the power driver makes"),
])
def test_anything_else_is_refused_with_a_reason(method, path, why):
    assert why in (refusal(method, path, ALLOWED) or "")


class _Podman(BaseHTTPRequestHandler):
    """Stand-in for podman's API: records each request, answers 204 or a JSON body."""
    seen: list[tuple[str, str]] = []
    bodies: list[bytes] = []

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def _any(self) -> None:
        self.seen.append((self.command, self.path))
        length = int(self.headers.get("Content-Length") or 0)
        self.bodies.append(self.rfile.read(length) if length else b"")
        body = json.dumps({"State": {"Running": True}}).encode() if self.path.endswith(
            "/json") else b""
        self.send_response(200 if body else 204)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = _any  # noqa: N815


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        conn, _ = super().get_request()
        return conn, ("unix", 0)


def _ask(sock: Path, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    class Conn(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(str(sock))

    conn = Conn("localhost", timeout=10)
    conn.request(method, path, body=body)
    reply = conn.getresponse()
    data = reply.read()
    conn.close()
    return reply.status, data


@pytest.fixture
def proxy(tmp_path):
    _Podman.seen = []
    _Podman.bodies = []
    upstream, listen, allow = tmp_path / "podman.sock", tmp_path / "proxy.sock", tmp_path / "allow"
    allow.write_text("ms-e2e13-gpu-003\n")
    servers = [_UnixServer(str(upstream), _Podman),
               Server(str(listen), make_handler(str(upstream), allow))]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield listen, allow
    for server in servers:
        server.shutdown()
        server.server_close()


def test_an_allowed_call_reaches_podman_and_its_answer_comes_back(proxy):
    listen, _allow = proxy
    status, data = _ask(listen, "GET", "/v4.0.0/libpod/containers/ms-e2e13-gpu-003/json")
    assert (status, json.loads(data)) == (200, {"State": {"Running": True}})
    assert _ask(listen, "POST", "/v4.0.0/libpod/containers/ms-e2e13-gpu-003/stop?t=10")[0] == 204
    assert _Podman.seen == [("GET", "/v4.0.0/libpod/containers/ms-e2e13-gpu-003/json"),
                            ("POST", "/v4.0.0/libpod/containers/ms-e2e13-gpu-003/stop?t=10")]


def test_a_refused_call_never_reaches_podman(proxy):
    listen, _allow = proxy
    status, data = _ask(listen, "POST", "/v4.0.0/libpod/containers/create")
    assert status == 403
    assert json.loads(data) == {"message": "metalslurm podman proxy: POST "
                                "/v4.0.0/libpod/containers/create is not a call the power "
                                "driver makes"}
    assert _Podman.seen == []


def test_the_allow_list_is_read_on_every_request(proxy):
    listen, allow = proxy
    path = "/v4.0.0/libpod/containers/ms-e2e13-gpu-004/start"
    assert _ask(listen, "POST", path)[0] == 403
    allow.write_text("ms-e2e13-gpu-003\nms-e2e13-gpu-004\n")  # a pool grew; 'local up' again
    assert _ask(listen, "POST", path)[0] == 204
    assert _Podman.seen == [("POST", path)]


def test_a_create_carries_the_hosts_spec_never_the_callers(proxy):
    """The controller (root there, or SlurmUser) names a node; what podman creates (image,
    mounts, address) is the allow file's spec for it."""
    listen, allow = proxy
    allow.write_text(allow_file_text({"ms-e2e13-gpu-005": Allowed(LAUNCH_TERMINATE, SPEC)}))
    planted = json.dumps({"name": "ms-e2e13-gpu-005", "image": "evil",
                          "mounts": [{"destination": "/host", "source": "/"}]}).encode()
    status, _ = _ask(listen, "POST", "/v4.0.0/libpod/containers/create?name=ms-e2e13-gpu-005",
                     planted)
    assert status == 204
    assert _Podman.seen == [("POST", "/v4.0.0/libpod/containers/create")]
    assert json.loads(_Podman.bodies[0]) == SPEC
    assert _ask(listen, "DELETE", "/v4.0.0/libpod/containers/ms-e2e13-gpu-005?force=true")[0] \
        == 204
    assert _Podman.seen[1] == ("DELETE", "/v4.0.0/libpod/containers/ms-e2e13-gpu-005?force=true")


def test_the_allow_file_reads_back_and_an_older_one_still_reads(tmp_path):
    allow = tmp_path / "allow"
    allow.write_text(allow_file_text(ALLOWED))
    assert read_allowed(allow) == ALLOWED
    allow.write_text("ms-e2e13-gpu-003\n\nms-e2e13-gpu-004\n")
    assert read_allowed(allow) == {"ms-e2e13-gpu-003": Allowed(), "ms-e2e13-gpu-004": Allowed()}
    for broken in ("{", '{"containers": 3}', '{"other": {}}', ""):
        allow.write_text(broken)
        assert read_allowed(allow) == {}
    assert read_allowed(tmp_path / "missing") == {}


@pytest.mark.parametrize(("length", "encoding", "why"), [
    ("-1", None, "request body too large or its length not a number"),
    ("abc", None, "request body too large or its length not a number"),
    (str(1 << 20), None, "request body too large or its length not a number"),
    (None, "chunked", "Transfer-Encoding is not accepted"),
])
def test_a_body_that_could_hold_the_proxy_is_refused(length, encoding, why):
    assert body_refusal(length, encoding) == why


def test_a_body_of_a_known_length_is_read(tmp_path):
    assert body_refusal("12", None) is None
    assert body_refusal(None, None) is None


def test_a_create_makes_the_allowed_name_whatever_its_spec_says(proxy):
    """A spec naming another container (or none) still makes the allowed one: the driver can
    find and remove what it made."""
    listen, allow = proxy
    allow.write_text(allow_file_text({"ms-e2e13-gpu-005": Allowed(
        LAUNCH_TERMINATE, {**SPEC, "name": "ms-e2e13-ctl"})}))
    assert _ask(listen, "POST", "/v4.0.0/libpod/containers/create?name=ms-e2e13-gpu-005")[0] \
        == 204
    assert json.loads(_Podman.bodies[0])["name"] == "ms-e2e13-gpu-005"
