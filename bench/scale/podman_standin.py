"""A stand-in for podman's REST API, for the scale lab's elastic nodes (runs in the lab's
container, standard library only): the power programs' own ``local`` driver talks to it as it
talks to podman on the local cluster, and a "container" here is one simulated node's slurmd.

    python3 podman_standin.py --socket /run/podman/podman.sock --record calls.jsonl \\
        --delay 2 --fail-every 10 --fail-mode once --prefix metalslurm- \\
        --slurmd /opt/lab/bin/slurmd

What it answers (the calls metalslurm_power/drivers/local.py makes, podman's v4 API shapes):

- ``POST /v4.0.0/libpod/containers/NAME/start``: starts ``slurmd -b -N NODE`` (NODE is NAME
  without ``--prefix``); 204, or 304 when it runs already;
- ``POST .../NAME/stop?t=N``: stops that slurmd (SIGTERM, then SIGKILL after ``t`` seconds);
- ``GET .../NAME/json``: ``State.Running`` from the slurmd's pid file, and 127.0.0.1 as the
  address on the network ``lab``.

Every call first waits ``--delay`` seconds (a BMC or cloud API's answer time), then is
recorded as one JSON line (time, action, node, ok). A start fails with HTTP 500 for every
``--fail-every``-th node of the sorted node list (``--fail-mode once``: its first start only,
a BMC that times out once; ``always``: every start, a machine that never comes up).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socketserver
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

PATH = re.compile(r"^/v[\d.]+/libpod/containers/([^/?]+)/(start|stop|json)(?:\?(.*))?$")


def failing_nodes(nodes: list[str], every: int) -> set[str]:
    """Every ``every``-th node of ``nodes`` in sorted order (the 10th, 20th, ...); none if 0."""
    if every <= 0:
        return set()
    return {name for i, name in enumerate(sorted(nodes), start=1) if i % every == 0}


class Machines:
    """The simulated nodes' slurmds, started and stopped like containers."""

    def __init__(self, args: argparse.Namespace, nodes: list[str]) -> None:
        self.args = args
        self.nodes = set(nodes)
        self.failing = failing_nodes(nodes, args.fail_every)
        self.failed_once: set[str] = set()
        # The machines' power: on from a start until a stop, as a BMC reports it while the
        # OS boots (the slurmd's pid file comes later, and goes with a crash).
        self.on: set[str] = set()
        self.lock = threading.Lock()
        self.record = open(args.record, "a", buffering=1)  # noqa: SIM115 (lives as long as the server)

    def note(self, action: str, node: str, ok: bool, began: float, **extra: object) -> None:
        line = json.dumps({"t": round(time.time(), 4), "began": round(began, 4),
                           "action": action, "node": node, "ok": ok, **extra})
        with self.lock:
            self.record.write(line + "\n")

    def pid(self, node: str) -> int | None:
        try:
            pid = int(Path(self.args.pid_dir, f"{node}.pid").read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if Path(f"/proc/{pid}").exists() else None

    def should_fail(self, node: str) -> bool:
        if node not in self.failing:
            return False
        with self.lock:
            if self.args.fail_mode == "once" and node in self.failed_once:
                return False
            self.failed_once.add(node)
        return True

    def start(self, node: str) -> tuple[int, dict[str, object] | None]:
        if self.should_fail(node):
            return 500, {"message": f"scale lab: injected failure starting {node}"}
        if node in self.on:
            return 304, None
        os.makedirs(f"{self.args.spool}/{node}", exist_ok=True)
        # slurmd forks into the background; its pid file says when it is up.
        # -b: slurmd reports the node as booted now. slurmctld takes a powering-up node's
        # registration only from a node booted after the resume request; a machine that
        # really powers on does, a slurmd started on a long-running host would not. (SchedMD's
        # own power-saving tests start their cloud nodes' slurmds the same way.)
        # No pipes: the daemon would hold them open; its errors are in its own log.
        proc = subprocess.run([self.args.slurmd, "-b", "-N", node], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        if proc.returncode != 0:
            return 500, {"message": f"slurmd -N {node}: exit {proc.returncode} (its log: "
                                    f"/var/log/slurm/slurmd-{node}.log)"}
        with self.lock:
            self.on.add(node)
        return 204, None

    def stop(self, node: str, wait: float) -> tuple[int, dict[str, object] | None]:
        with self.lock:
            was_on = node in self.on
            self.on.discard(node)
        pid = self.pid(node)
        for _ in range(50):  # a slurmd started a moment ago writes its pid file soon
            if pid is not None or not was_on:
                break
            time.sleep(0.1)
            pid = self.pid(node)
        if pid is None:
            return (204 if was_on else 304), None
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + max(wait, 1.0)
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        if Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)
        return 204, None

    def inspect(self, node: str) -> tuple[int, dict[str, object] | None]:
        running = node in self.on
        return 200, {"State": {"Running": running, "Status": "running" if running else "exited"},
                     "NetworkSettings": {"Networks": {"lab": {"IPAddress": "127.0.0.1"}}}}


def handler(machines: Machines) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base's name)
            pass

        def answer(self, method: str) -> None:
            began = time.time()
            m = PATH.match(self.path)
            name = m.group(1) if m else ""
            node = name[len(machines.args.prefix):] if name.startswith(machines.args.prefix) \
                else ""
            if not m or node not in machines.nodes:
                self.reply(404, {"message": f"no such container: {name or self.path}"})
                return
            action = m.group(2)
            time.sleep(machines.args.delay)
            if method == "GET" and action == "json":
                status, body = machines.inspect(node)
            elif method == "POST" and action == "start":
                status, body = machines.start(node)
            elif method == "POST" and action == "stop":
                query = dict(p.partition("=")[::2] for p in (m.group(3) or "").split("&") if p)
                status, body = machines.stop(node, float(query.get("t") or 10))
            else:
                status, body = 405, {"message": f"{method} {action} not supported"}
            machines.note(action, node, status < 400, began, status=status)
            self.reply(status, body)

        def reply(self, status: int, body: dict[str, object] | None) -> None:
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if data:
                self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.answer("GET")

        def do_POST(self) -> None:  # noqa: N802
            self.answer("POST")

    return Handler


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    request_queue_size = 256

    def get_request(self):  # type: ignore[no-untyped-def]
        request, _ = super().get_request()
        return request, ("local", 0)  # http.server wants a (host, port) client address


def arguments() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--socket", required=True)
    p.add_argument("--record", required=True)
    p.add_argument("--nodes-file", required=True, help="the simulated nodes, one per line")
    p.add_argument("--prefix", default="metalslurm-")
    p.add_argument("--delay", type=float, default=0.0)
    p.add_argument("--fail-every", type=int, default=0)
    p.add_argument("--fail-mode", choices=("once", "always"), default="once")
    p.add_argument("--slurmd", default="/opt/lab/bin/slurmd")
    p.add_argument("--spool", default="/var/lib/slurm/slurmd")
    p.add_argument("--pid-dir", default="/run/slurmd")
    return p


def main() -> None:
    args = arguments().parse_args()
    nodes = [n for n in Path(args.nodes_file).read_text().split() if n]
    machines = Machines(args, nodes)
    sock = Path(args.socket)
    sock.parent.mkdir(parents=True, exist_ok=True)
    if sock.exists():
        sock.unlink()
    server = Server(str(sock), handler(machines))
    os.chmod(sock, 0o666)  # the power programs run as SlurmUser
    server.serve_forever()


if __name__ == "__main__":
    main()
