"""local: podman's REST API over its unix socket (the local cluster's "machines" are containers).

Node parameters: ``container`` (name), optional ``network`` (whose IP to report; default: the
first one), ``socket`` (default /run/podman/podman.sock), ``stop_timeout`` (seconds, default 10),
``mode``:

- ``start-stop`` (default): the node's container exists while it is powered down; power on
  starts it, power off stops it.
- ``launch-terminate``: the node has no container while powered down; power on asks for it to
  be created (the host's proxy creates it from the node's spec: the prepared image, its
  address and mounts; infra/providers/podman_proxy.py) and starts it, power off stops and
  removes it. A machine made anew each time, as a cloud's launched instance is.

Standard library only (http.client over AF_UNIX).
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.parse
from typing import Any

from ..config import POWER_MODES
from .base import OFF, ON, NodeResult, PerNodeDriver

DEFAULT_SOCKET = "/run/podman/podman.sock"
API = "/v4.0.0/libpod"
START_STOP, LAUNCH_TERMINATE = POWER_MODES


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.unix_path)
        self.sock = sock


class PodmanError(Exception):
    pass


def podman_request(sock_path: str, method: str, path: str,
                   timeout: float = 120.0) -> tuple[int, Any]:
    conn = _UnixHTTPConnection(sock_path, timeout)
    try:
        conn.request(method, API + path, headers={"Host": "d"})
        resp = conn.getresponse()
        body = resp.read()
    except OSError as exc:
        raise PodmanError(f"podman API at {sock_path}: {exc}") from exc
    finally:
        conn.close()
    data: Any = None
    if body:
        try:
            data = json.loads(body)
        except ValueError:
            data = body.decode(errors="replace")
    return resp.status, data


def _api_error(status: int, data: Any) -> str:
    message = data.get("message") if isinstance(data, dict) else data
    return f"podman API HTTP {status}: {message}"


class LocalPodmanDriver(PerNodeDriver):
    name = "local"

    def _sock(self, node: str) -> str:
        return str(self.params[node].get("socket") or DEFAULT_SOCKET)

    def _container(self, node: str) -> str:
        return urllib.parse.quote(str(self.params[node]["container"]), safe="")

    def _launched(self, node: str) -> bool:
        return self.params[node].get("mode", START_STOP) == LAUNCH_TERMINATE

    def _inspect(self, node: str) -> NodeResult:
        status, data = podman_request(self._sock(node), "GET",
                                      f"/containers/{self._container(node)}/json")
        if status == 404 and self._launched(node):
            return NodeResult(node=node, ok=True, power=OFF)  # terminated: no machine
        if status != 200:
            return NodeResult.failed(node, _api_error(status, data))
        state = data.get("State", {})
        running = bool(state.get("Running")) or state.get("Status") == "running"
        networks = (data.get("NetworkSettings") or {}).get("Networks") or {}
        wanted = self.params[node].get("network")
        address = None
        for net_name, net in networks.items():
            if (wanted is None or net_name == wanted) and net.get("IPAddress"):
                address = net["IPAddress"]
                break
        return NodeResult(node=node, ok=True, power=ON if running else OFF,
                          address=address if running else None)

    def _start(self, node: str) -> NodeResult:
        if self._launched(node):
            made = self._launch(node)
            if made is not None:
                return made
        status, data = podman_request(self._sock(node), "POST",
                                      f"/containers/{self._container(node)}/start")
        if status not in (204, 304):  # 304: already running
            return NodeResult.failed(node, _api_error(status, data))
        result = self._inspect(node)
        if result.ok and result.power != ON:
            return NodeResult.failed(node, "container exited right after start")
        return result

    def _launch(self, node: str) -> NodeResult | None:
        """launch-terminate: make the node's machine anew (None: made, or running already).
        A stopped one left by a failed power off is removed first: a launched machine is
        always the host's current spec, never an older one started again."""
        status, data = podman_request(self._sock(node), "GET",
                                      f"/containers/{self._container(node)}/json")
        if status == 200:
            if (data.get("State") or {}).get("Running"):
                return None
            gone = self._remove(node)
            if gone is not None:
                return gone
        elif status != 404:
            return NodeResult.failed(node, _api_error(status, data))
        status, data = podman_request(self._sock(node), "POST",
                                      f"/containers/create?name={self._container(node)}")
        if status not in (200, 201, 409):  # 409: another power on made it meanwhile
            return NodeResult.failed(node, "create: " + _api_error(status, data))
        return None

    def _remove(self, node: str) -> NodeResult | None:
        status, data = podman_request(self._sock(node), "DELETE",
                                      f"/containers/{self._container(node)}?force=true")
        if status not in (200, 204, 404):  # 404: not there (any more)
            return NodeResult.failed(node, "remove: " + _api_error(status, data))
        return None

    def _stop(self, node: str, force: bool) -> NodeResult:
        timeout = 0 if force else int(self.params[node].get("stop_timeout", 10))
        status, data = podman_request(self._sock(node), "POST",
                                      f"/containers/{self._container(node)}/stop?t={timeout}",
                                      timeout=timeout + 60)
        if self._launched(node):
            # Removed whether or not the stop went well: a forced remove kills what is left.
            gone = self._remove(node)
            return gone or NodeResult(node=node, ok=True, power=OFF)
        if status not in (204, 304):  # 304: already stopped
            return NodeResult.failed(node, _api_error(status, data))
        return NodeResult(node=node, ok=True, power=OFF)

    _on = _start
    _off = _stop
    _status = _inspect
