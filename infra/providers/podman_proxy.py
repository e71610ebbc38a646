"""The local cluster's power driver reaches podman through this proxy, never podman itself.

The controller's power programs (``roles/slurm_elastic``, driver ``local``) start, stop and
inspect the elastic nodes' containers through podman's REST API. Podman runs as root on the
host; its socket mounted into the controller would let anyone who can open it (root on the
controller, SlurmUser) run any container with any host path: the host. The proxy listens on
the socket the controller sees and passes on only the calls the driver makes, for the
containers named in an allow-list file on the host (the cluster's elastic nodes, rewritten by
every ``local up``), plus ``/_ping``; anything else gets 403 and a one-line reason. Podman's
own socket stays in a root-only directory the nodes do not mount.

A node in ``launch-terminate`` mode has no container while it is powered down: the driver
asks for it to be created (``POST .../containers/create?name=NAME``) and removed
(``DELETE .../containers/NAME?force=true``). What is created is the allow file's spec for
that name, never anything the caller sends: the controller names a node, the host decides
its image, network, address and mounts.

The allow file is JSON, ``{"containers": {NAME: {"mode": "start-stop"} | {"mode":
"launch-terminate", "create": SPEC}}}`` (SPEC: podman's libpod create body); a file of one
name a line (an older ``local up``'s) allows those names in ``start-stop`` mode.

Run as ``python -m infra.providers.podman_proxy --listen SOCK --upstream SOCK --allow FILE``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import socket
import socketserver
import sys
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.elastic import (
    LAUNCH_TERMINATE,
    START_STOP,
)

# The calls LocalPodmanDriver makes (roles/slurm_elastic/.../drivers/local.py).
_CALL = re.compile(r"^/v[0-9.]+/libpod/containers/(?P<name>[^/?]+)/(?P<verb>json|start|stop)"
                   r"(?:\?t=\d{1,3})?$")
_VERBS = {"json": "GET", "start": "POST", "stop": "POST"}
_CREATE = re.compile(r"^/v[0-9.]+/libpod/containers/create\?name=(?P<name>[^/&]+)$")
_REMOVE = re.compile(r"^/v[0-9.]+/libpod/containers/(?P<name>[^/?]+)\?force=true$")
MAX_BODY = 1 << 16
API = "/v4.0.0/libpod"


@dataclass(frozen=True)
class Allowed:
    """One elastic node's container: how it is powered, and what is created for it."""
    mode: str = START_STOP
    create: Mapping[str, Any] | None = None


def refusal(method: str, path: str, allowed: Mapping[str, Allowed]) -> str | None:
    """Why the request may not pass (None: it may)."""
    if method == "GET" and path in ("/_ping", "/v4.0.0/libpod/_ping"):
        return None
    for pattern, verb, want in ((_CREATE, "create", "POST"), (_REMOVE, "remove", "DELETE")):
        m = pattern.match(path)
        if m:
            if method != want:
                return f"{method} is not how the power driver calls {verb}"
            name = urllib.parse.unquote(m["name"])
            node = allowed.get(name)
            if node is None:
                return f"container {name[:100]} is not an elastic node of this cluster"
            if node.mode != LAUNCH_TERMINATE or node.create is None:
                return (f"container {name[:100]} is powered by start and stop, never created "
                        "or removed")
            return None
    m = _CALL.match(path)
    if not m:
        return f"{method} {path[:200]} is not a call the power driver makes"
    if _VERBS[m["verb"]] != method:
        return f"{method} is not how the power driver calls {m['verb']}"
    name = urllib.parse.unquote(m["name"])
    if name not in allowed:
        return f"container {name[:100]} is not an elastic node of this cluster"
    return None


def read_allowed(path: Path) -> dict[str, Allowed]:
    """The allow file (JSON, or an older file's one name a line); nothing when unreadable."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    if not text.lstrip().startswith("{"):
        return {line.strip(): Allowed() for line in text.splitlines() if line.strip()}
    try:
        doc = json.loads(text)
        return {str(name): Allowed(str(entry.get("mode", START_STOP)), entry.get("create"))
                for name, entry in doc["containers"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}


def allow_file_text(containers: Mapping[str, Allowed]) -> str:
    """What ``local up`` writes: the allow file for ``containers``."""
    doc = {"containers": {name: ({"mode": a.mode} | ({"create": dict(a.create)}
                                                     if a.create is not None else {}))
                          for name, a in sorted(containers.items())}}
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def body_refusal(length: str | None, transfer_encoding: str | None) -> str | None:
    """Why a request's body may not be read (None: it may): a length of digits up to
    MAX_BODY, never a chunked one (read until the caller stops: a root daemon held)."""
    if transfer_encoding:
        return "Transfer-Encoding is not accepted"
    if length is not None and not (length.isdigit() and int(length) <= MAX_BODY):
        return "request body too large or its length not a number"
    return None


def upstream_request(path: str, allowed: Mapping[str, Allowed]) -> tuple[str, bytes | None]:
    """The request podman gets for an allowed one: a create carries the allow file's spec for
    the name (named so, whatever the spec says), never a body of the caller's."""
    m = _CREATE.match(path)
    if m:
        name = urllib.parse.unquote(m["name"])
        return f"{API}/containers/create", json.dumps(
            {**(allowed[name].create or {}), "name": name}).encode()
    return path, None


class _Upstream(http.client.HTTPConnection):
    def __init__(self, sock_path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.sock_path = sock_path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.sock_path)


def make_handler(upstream: str, allow_file: Path) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"
        timeout = 30  # a caller that sends its request slowly, or never, holds no thread

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            sys.stderr.write("podman-proxy: " + (format % args) + "\n")

        def _reply(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body:  # a client that read an empty reply's headers may have gone already
                self.wfile.write(body)

        def _handle(self) -> None:
            allowed = read_allowed(allow_file)
            why = refusal(self.command, self.path, allowed)
            if why is None:
                why = body_refusal(self.headers.get("Content-Length"),
                                   self.headers.get("Transfer-Encoding"))
            if why is not None:
                self.log_message("refused %s %s: %s", self.command, self.path[:200], why)
                self._reply(403, json.dumps({"message": f"metalslurm podman proxy: {why}"})
                            .encode(), "application/json")
                return
            # No call the driver makes needs a body of its own: what it sent is read off and
            # dropped (a create gets the allow file's spec).
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            path, body = upstream_request(self.path, allowed)
            stop = re.search(r"[?&]t=(\d+)", self.path)
            conn = _Upstream(upstream, timeout=float(stop[1]) + 60 if stop else 60)
            try:
                conn.request(self.command, path, body=body,
                             headers={"Content-Type": "application/json"} if body else {})
                reply = conn.getresponse()
                data = reply.read()
            except OSError as exc:
                self._reply(502, json.dumps({"message": f"podman: {exc}"}).encode(),
                            "application/json")
                return
            finally:
                conn.close()
            self._reply(reply.status, data,
                        reply.getheader("Content-Type") or "application/json")

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _handle  # noqa: N815

    return Handler


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self) -> tuple[socket.socket, tuple[str, int]]:
        conn, _addr = super().get_request()
        return conn, ("unix", 0)  # BaseHTTPRequestHandler logs client_address[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", required=True, type=Path, help="socket to serve")
    parser.add_argument("--upstream", required=True, help="podman's own socket")
    parser.add_argument("--allow", required=True, type=Path,
                        help="file naming the containers the driver may act on, and how")
    args = parser.parse_args(argv)
    args.listen.unlink(missing_ok=True)
    with Server(str(args.listen), make_handler(args.upstream, args.allow)) as server:
        server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
