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

from infra.providers.podman_proxy import Server, make_handler, refusal

ALLOWED = frozenset({"ms-e2e13-gpu-003", "ms-e2e13-gpu-004"})


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/_ping"),
    ("GET", "/v4.0.0/libpod/containers/ms-e2e13-gpu-003/json"),
    ("POST", "/v4.0.0/libpod/containers/ms-e2e13-gpu-003/start"),
    ("POST", "/v4.0.0/libpod/containers/ms-e2e13-gpu-004/stop?t=10"),
    ("POST", "/v4.0.0/libpod/containers/ms-e2e13-gpu-004/stop?t=0"),
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
])
def test_anything_else_is_refused_with_a_reason(method, path, why):
    assert why in (refusal(method, path, ALLOWED) or "")


class _Podman(BaseHTTPRequestHandler):
    """Stand-in for podman's API: records each request, answers 204 or a JSON body."""
    seen: list[tuple[str, str]] = []

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def _any(self) -> None:
        self.seen.append((self.command, self.path))
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


def _ask(sock: Path, method: str, path: str) -> tuple[int, bytes]:
    class Conn(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(str(sock))

    conn = Conn("localhost", timeout=10)
    conn.request(method, path)
    reply = conn.getresponse()
    data = reply.read()
    conn.close()
    return reply.status, data


@pytest.fixture
def proxy(tmp_path):
    _Podman.seen = []
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
