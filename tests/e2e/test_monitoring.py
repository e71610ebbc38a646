"""Monitoring on the Debian 13 cluster: real node_exporters, the real Slurm exporter asking
the real slurmctld and slurmdbd, real Prometheus and Alertmanager evaluating the project's
alert rules, and a webhook receiver the tests run on the controller recording what
Alertmanager sends. The stack scrapes and refreshes every 10 s and groups alerts for 5 s
(tests/e2e/stacks/Pulumi.e2e-debian13.yaml).

Faults are made for real: slurmd stopped on a node, a fake GPU's device node removed (the
health checker drains the node). Leaves every node idle and undrained and the recorder
stopped.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shlex
import shutil
import subprocess
import urllib.parse
import xml.etree.ElementTree as ET

import pytest

from tests.e2e.cluster import (
    E2E_SMTP_PASSWORD,
    GPU_FIXTURES,
    HTTP_GET,
    REPO,
    STAND_IN,
    metalslurm,
    stand_in_nvidia_smi,
    wait_for,
)

EXPORTER = "http://10.78.13.10:9341/metrics"
GPU_001_NODE_EXPORTER = "http://10.78.13.11:9100/metrics"
PROMETHEUS = "http://10.78.13.10:9090"
ALERTS = "/run/e2e-alerts.jsonl"
CONSOLE = "10.78.13.10:9090/consoles/metalslurm-overview.html"
# Kept after the run: what the console looked like in a real browser.
SCREENSHOT = REPO / ".metalslurm" / "e2e-artifacts" / "monitoring-overview.png"
RECORDER = "/usr/local/bin/e2e-alert-recorder"
# A rule's `for:` + a scrape + an evaluation + Alertmanager's group_wait, with margin for
# a busy two-core machine.
ALERT_WITHIN = 180

SLACK = "/run/e2e-slack.jsonl"
MAIL = "/run/e2e-mail.jsonl"

# Receivers Alertmanager sends to (test equipment, not part of the product), on the
# controller's loopback: a webhook (/alerts) and a Slack incoming webhook (/slack) on 9099,
# each POST appended as one JSON line to ALERTS or SLACK; and an SMTP server on 2525 that
# takes AUTH PLAIN (Go's client sends it in the clear to 127.0.0.1 only) and appends each
# message, with the login it was sent under, to MAIL.
_RECORDER = f"""#!/usr/bin/python3
import base64, http.server, json, socketserver, threading
class Recorder(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        out = "{SLACK}" if self.path.startswith("/slack") else "{ALERTS}"
        with open(out, "a") as f:
            f.write(json.dumps(json.loads(body)) + "\\n")
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
class Smtp(socketserver.StreamRequestHandler):
    def say(self, line):
        self.wfile.write(line.encode() + b"\\r\\n")
    def handle(self):
        mail = {{"to": []}}
        self.say("220 e2e-smtp")
        while True:
            line = self.rfile.readline().decode().rstrip("\\r\\n")
            verb = line.split(" ")[0].upper()
            if not line or verb == "QUIT":
                self.say("221 bye")
                return
            if verb in ("EHLO", "HELO"):
                self.say("250-e2e-smtp")
                self.say("250 AUTH PLAIN")
            elif verb == "AUTH":
                _, user, password = base64.b64decode(line.split(" ")[2]).decode().split("\\0")
                mail["login"] = [user, password]
                self.say("235 2.7.0 accepted")
            elif verb == "MAIL":
                mail["from"] = line.split(":", 1)[1].strip(" <>")
                self.say("250 ok")
            elif verb == "RCPT":
                mail["to"].append(line.split(":", 1)[1].strip(" <>"))
                self.say("250 ok")
            elif verb == "DATA":
                self.say("354 go on")
                data = []
                while (part := self.rfile.readline().decode()) not in (".\\r\\n", ""):
                    data.append(part)
                mail["data"] = "".join(data)
                with open("{MAIL}", "a") as f:
                    f.write(json.dumps(mail) + "\\n")
                mail = {{"to": []}}
                self.say("250 queued")
            else:
                self.say("250 ok")
socketserver.ThreadingTCPServer.allow_reuse_address = True
smtp = socketserver.ThreadingTCPServer(("127.0.0.1", 2525), Smtp)
threading.Thread(target=smtp.serve_forever, daemon=True).start()
http.server.ThreadingHTTPServer(("127.0.0.1", 9099), Recorder).serve_forever()
"""



@pytest.fixture(scope="module")
def cluster(debian13):
    assert debian13.up.returncode == 0, debian13.up.stdout[-3000:]
    debian13.ctl(f"cat > {RECORDER} <<'EOF'\n{_RECORDER}EOF\nchmod 755 {RECORDER}; "
                 f"rm -f {ALERTS} {SLACK} {MAIL}; systemctl stop e2e-alert-recorder 2>/dev/null; "
                 f"systemctl reset-failed e2e-alert-recorder 2>/dev/null; "
                 f"systemd-run --unit=e2e-alert-recorder {RECORDER}")
    yield debian13
    debian13.on("gpu-002", "systemctl start slurmd", check=False)
    debian13.on("gpu-001", "[ -e /dev/nvidia5 ] || mknod -m 666 /dev/nvidia5 c 195 5",
                check=False)
    debian13.ctl("systemctl stop e2e-alert-recorder", check=False)
    for node in ("gpu-001", "gpu-002"):
        wait_for(f"{node} to be idle again", lambda n=node: debian13.ctl(
            f"sinfo --noheader --Node --partition=train --nodes={n} --format=%T"
        ).stdout.strip() == "idle", timeout=120)


def get(cluster, url: str, login: bool = False) -> str:
    return cluster.ctl(f"python3 -c {shlex.quote(HTTP_GET)} {shlex.quote(url)}"
                       + (" login" if login else "")).stdout


Sample = tuple[str, frozenset, float]  # name, its labels as (name, value) pairs, value


def metrics(cluster) -> list[Sample]:
    """The exporter's samples."""
    return [parse_sample(line) for line in get(cluster, EXPORTER).splitlines()
            if line and not line.startswith("#")]


def parse_sample(line: str) -> Sample:
    series, _, value = line.rpartition(" ")
    name, _, labels = series.partition("{")
    pairs = re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels)
    return name, frozenset(pairs), float(value)


def matching(samples: list[Sample], name: str, **labels: str) -> dict[frozenset, float]:
    """``{labels: value}`` of the samples of ``name`` that have ``labels``."""
    return {lbl: v for n, lbl, v in samples
            if n == name and set(labels.items()) <= set(lbl)}


def value(samples: list[Sample], name: str, **labels: str) -> float | None:
    found = [v for lbl, v in matching(samples, name, **labels).items()
             if dict(lbl) == labels]
    return found[0] if found else None


def received(cluster) -> list[dict]:
    """Every alert Alertmanager has posted to the recorder, oldest first."""
    lines = cluster.ctl(f"cat {ALERTS} 2>/dev/null || true").stdout.splitlines()
    return [a for line in lines if line for a in json.loads(line)["alerts"]]


def wait_for_alert(cluster, alertname: str, status: str, node: str) -> dict:
    def found():
        return next((a for a in reversed(received(cluster))
                     if a["labels"]["alertname"] == alertname and a["status"] == status
                     and a["labels"].get("node") == node), None)
    return wait_for(f"{alertname} {status} for {node} at the webhook", found,
                    timeout=ALERT_WITHIN, every=3)


def test_the_exporter_sees_every_node_and_gpu(cluster):
    """The exporter refreshes on its own interval: its view is compared with sinfo's until
    they agree and the cluster has settled (an earlier module's `scontrol reconfigure` leaves
    nodes flagged for a while), then checked."""
    def views():
        samples = metrics(cluster)
        states = cluster.ctl("sinfo --noheader --Node --partition=train --format='%N %T'").stdout
        slurm_view = dict(line.split() for line in states.splitlines())
        flags = {}
        for lbl, v in matching(samples, "slurm_node_flag").items():
            if v == 1:
                flags.setdefault(dict(lbl)["node"], set()).add(dict(lbl)["flag"])
        exported = {dict(lbl)["node"]: dict(lbl)["state"]
                    for lbl, v in matching(samples, "slurm_node_state").items() if v == 1}
        return samples, slurm_view, flags, exported

    # Flags that make a node's free GPUs unavailable (the metric's help text).
    unusable = {"drain", "not_responding", "powered_down", "powering_up", "powering_down",
                "fail"}

    def settled(view):
        _, slurm_view, flags, exported = view
        # Every node idle on both sides: awake ones with no such flag, sleeping ones (idle~)
        # with powered_down alone.
        return set(exported) == set(slurm_view) and all(
            exported[n] == "idle" and s in ("idle", "idle~")
            and flags.get(n, set()) & unusable == ({"powered_down"} if s == "idle~" else set())
            for n, s in slurm_view.items())

    samples, slurm_view, flags, exported = wait_for(
        "sinfo and the exporter to show every node idle, the same nodes powered down",
        lambda: (lambda v: settled(v) and v)(views()), timeout=120)
    assert value(samples, "slurm_up") == 1
    assert set(exported) == set(slurm_view) == {"gpu-001", "gpu-002", "gpu-003", "gpu-004"}
    # The elastic pair sleeps (idle~): their GPUs count, and are unavailable.
    sleeping = {n for n, f in flags.items() if "powered_down" in f}
    assert sleeping == {n for n, s in slurm_view.items() if s == "idle~"}
    assert value(samples, "slurm_gpus", status="total", type="h100") == 32
    assert value(samples, "slurm_gpus", status="allocated", type="h100") == 0
    assert value(samples, "slurm_gpus", status="unavailable", type="h100") == 8 * len(sleeping)
    assert value(samples, "slurm_gpus", status="idle", type="h100") == 32 - 8 * len(sleeping)


def test_a_stopped_slurmd_is_alerted_and_resolved(cluster):
    """...at every receiver: the webhook, Slack (its URL from the alert secrets) and e-mail
    (sent with the login whose password is in the alert secrets)."""
    cluster.on("gpu-002", "systemctl stop slurmd")
    alert = wait_for_alert(cluster, "SlurmdDown", "firing", "gpu-002")
    assert alert["labels"]["severity"] == "warning"
    assert "gpu-002" in alert["annotations"]["description"]
    cluster.on("gpu-002", "systemctl start slurmd")
    wait_for_alert(cluster, "SlurmdDown", "resolved", "gpu-002")

    def lines(path: str) -> list[dict]:
        out = cluster.ctl(f"cat {path} 2>/dev/null || true").stdout
        return [json.loads(line) for line in out.splitlines() if line]

    slack = wait_for("the Slack message about SlurmdDown", lambda: [
        m for m in lines(SLACK) if m.get("channel") == "#e2e-alerts"
        and any("SlurmdDown" in a.get("title", "") for a in m.get("attachments", []))],
        timeout=60)
    assert slack[0]["attachments"][0]["title"] == "[FIRING:1] SlurmdDown on gpu-002 (ms-e2e13)"
    assert "gpu-002" in slack[0]["attachments"][0]["text"]
    mail = wait_for("the e-mail about SlurmdDown", lambda: [
        m for m in lines(MAIL) if "SlurmdDown" in m.get("data", "")], timeout=60)
    assert "Subject: [FIRING:1] SlurmdDown on gpu-002 (ms-e2e13)" in mail[0]["data"]
    assert (mail[0]["login"], mail[0]["from"], mail[0]["to"]) == (
        ["e2e-alerts", E2E_SMTP_PASSWORD], "alertmanager@ms-e2e13.example",
        ["hpc-ops@ms-e2e13.example"])


def test_a_health_drain_shows_with_its_reason_and_goes(cluster):
    cluster.on("gpu-001", "rm /dev/nvidia5")
    reason = "metalslurm-health: gpu_devices: 7 of 8 GPU devices (missing /dev/nvidia5)"
    drained = wait_for("the exporter to show gpu-001 drained", lambda: matching(
        metrics(cluster), "slurm_node_drain_info", node="gpu-001"), timeout=90)
    assert [(dict(lbl), v) for lbl, v in drained.items()] == [
        ({"node": "gpu-001", "owner": "metalslurm-health", "reason": reason}, 1.0)]
    alert = wait_for_alert(cluster, "SlurmNodeDrainedByHealthCheck", "firing", "gpu-001")
    assert reason in alert["annotations"]["description"]
    cluster.on("gpu-001", "mknod -m 666 /dev/nvidia5 c 195 5")
    wait_for("the drain to leave the exporter", lambda: not matching(
        metrics(cluster), "slurm_node_drain_info", node="gpu-001"), timeout=90)
    wait_for_alert(cluster, "SlurmNodeDrainedByHealthCheck", "resolved", "gpu-001")


def prometheus_query(cluster, query: str, at: float | None = None) -> list[dict]:
    args = {"query": query} | ({"time": f"{at:.3f}"} if at is not None else {})
    out = json.loads(get(cluster, f"{PROMETHEUS}/api/v1/query?{urllib.parse.urlencode(args)}",
                         login=True))
    assert out["status"] == "success", out
    return out["data"]["result"]


def dbd_queue(cluster) -> int:
    """sdiag's DBD Agent queue size: the records slurmctld holds for slurmdbd."""
    out = cluster.ctl("sdiag").stdout
    return int(re.search(r"^DBD Agent queue size:\s+(\d+)$", out, re.M).group(1))


def exported_dbd_queue(cluster) -> float | None:
    return value(metrics(cluster), "slurm_dbd_agent_queue_size")


def test_accounting_records_wait_in_slurmctld_while_slurmdbd_is_away(cluster):
    """slurmdbd stopped while three of alice's jobs run and end: slurmctld holds their records
    (sdiag's DBD Agent queue; the exporter's metric is the same number), keeps them across its
    own restart, Prometheus has SlurmAccountingBacklog pending; slurmdbd back, the queue drains
    and sacct has the three jobs. The limit the exporter reports is Slurm's MaxDBDMsgs, by
    default 2 x MaxJobCount + 4 x nodes."""
    config = cluster.ctl("scontrol show config").stdout
    setting = {k: int(v) for k, v in re.findall(r"^(MaxJobCount|MaxDBDMsgs)\s+=\s+(\d+)$",
                                                config, re.M)}
    nodes = len(cluster.ctl("scontrol --oneliner show nodes").stdout.splitlines())
    assert setting["MaxDBDMsgs"] == max(10000, 2 * setting["MaxJobCount"] + 4 * nodes), setting
    wait_for("the exporter to report an empty accounting queue and its limit",
             lambda: exported_dbd_queue(cluster) == 0 and value(
                 metrics(cluster), "slurm_dbd_agent_queue_limit") == setting["MaxDBDMsgs"],
             timeout=60)
    jobs: list[str] = []
    try:
        cluster.ctl("systemctl stop slurmdbd")
        jobs = [cluster.submit("alice", "--nodelist=gpu-001 --time=2 --wrap=true")
                for _ in range(3)]
        for job in jobs:
            wait_for(f"job {job} to complete", lambda j=job: re.search(
                r"JobState=COMPLETED", cluster.ctl(f"scontrol show job {j}").stdout), timeout=120)
        held = dbd_queue(cluster)
        assert held > 0
        # Read again until the exporter's last refresh saw the same queue (nothing else is
        # being recorded meanwhile).
        wait_for(f"the exporter to report the {held} held records",
                 lambda: exported_dbd_queue(cluster) == dbd_queue(cluster), timeout=60)
        held = dbd_queue(cluster)
        refused = cluster.ctl(f"sacct --noheader --jobs={jobs[0]}", check=False)
        assert refused.returncode != 0, refused.stdout
        # slurmctld saves its queue when it stops and reads it back (dbd.messages in
        # StateSaveLocation).
        cluster.ctl("systemctl restart slurmctld")
        wait_for(f"slurmctld to answer again with at least the {held} records", lambda: cluster.ctl(
            "scontrol ping", check=False).stdout.count("UP") >= 1 and dbd_queue(cluster) >= held,
            timeout=90)
        # Pending, or firing already on a slow machine (5 minutes since the first record).
        active = wait_for("SlurmAccountingBacklog to be active in Prometheus", lambda: [
            a for a in prometheus_query(cluster, 'ALERTS{alertname="SlurmAccountingBacklog"}')
            if a["metric"]["alertstate"] in ("pending", "firing")], timeout=90)
        assert active[0]["metric"]["node"] == "ctl"
    finally:
        cluster.ctl("systemctl start slurmctld slurmdbd")
    wait_for("slurmctld to send slurmdbd every held record", lambda: dbd_queue(cluster) == 0,
             timeout=120)
    rows = wait_for("sacct to list the three jobs", lambda: (lambda r: len(r) == 3 and r)(
        cluster.ctl(f"sacct --allocations --noheader --parsable2 --jobs={','.join(jobs)} "
                    "--format=JobID,User,Account,State,NodeList").stdout.splitlines()),
        timeout=60)
    assert sorted(rows) == sorted(f"{job}|alice|team-a|COMPLETED|gpu-001" for job in jobs)
    wait_for("the exporter to report the queue empty again",
             lambda: exported_dbd_queue(cluster) == 0, timeout=60)


def test_a_gpu_job_labels_exactly_its_two_gpus_with_job_user_and_account(cluster):
    """The prolog/epilog (roles/monitoring_node) on gpu-001's fake GPUs, their UUIDs from a
    STAND-IN nvidia-smi replaying the DGX H100 fixture; the job's series reach Prometheus
    through node_exporter and leave when the job ends."""
    assert re.search(r"^Prolog(\[0\])? *= /usr/local/sbin/metalslurm-prolog$",  # [0]: 24.11
                     cluster.ctl("scontrol show config").stdout, re.M)
    stand_in_nvidia_smi(cluster, "gpu-001", "dgx-h100-healthy.xml")
    cluster.on("gpu-001", "rm -f /run/metalslurm/gpu-jobs/gpus.json")  # read them again
    uuids = {int(g.findtext("minor_number")): g.findtext("uuid") for g in ET.parse(
        GPU_FIXTURES / "dgx-h100-healthy.xml").getroot().findall("gpu")}
    team_a = value(metrics(cluster), "slurm_account_gpu_seconds_total", account="team-a") or 0
    job = None
    try:
        job = cluster.submit("alice", "--nodelist=gpu-001 --gres=gpu:h100:2 --time=2 "
                                      "--wrap='sleep 300'")
        wait_for(f"job {job} to run", lambda: cluster.job_field(job, "%T") == "RUNNING")
        detail = cluster.ctl(f"scontrol show job -d {job}").stdout
        first, last = re.search(r"GRES=gpu:h100:2\(IDX:(\d+)-(\d+)\)", detail).groups()
        held = [int(first), int(last)]
        want = sorted((str(m), uuids[m], str(m), job, "alice", "team-a", "train") for m in held)
        keys = ("gpu", "UUID", "minor", "jobid", "user", "account", "partition")

        def exported():
            return sorted(tuple(dict(lbl).get(k, "") for k in keys) for lbl in matching(
                [parse_sample(line) for line in get(cluster, GPU_001_NODE_EXPORTER).splitlines()
                 if line.startswith("metalslurm_gpu_job_info")], "metalslurm_gpu_job_info"))
        # RUNNING is the allocation: the prolog (PrologFlags=Alloc) may still be writing the
        # job's labels then (seen on a loaded machine: read 0.1 s before the prolog's end).
        wait_for("the prolog to label the job's GPUs", lambda: exported() == want, timeout=60)
        assert exported() == want
        assert cluster.on("gpu-001", "head -q /run/metalslurm/dcgm-job-map/*").stdout.split() \
            == [job, job]
        in_prometheus = wait_for("Prometheus to scrape the job's GPUs", lambda: prometheus_query(
            cluster, f'metalslurm_gpu_job_info{{jobid="{job}"}}'), timeout=60)
        assert sorted((r["metric"]["node"], r["metric"]["minor"], r["metric"]["user"],
                       r["metric"]["account"]) for r in in_prometheus) == [
            ("gpu-001", str(m), "alice", "team-a") for m in held]
        cluster.ctl(f"scancel {job}")
        wait_for("the epilog to release the GPUs", lambda: exported() == [], timeout=60)
        assert cluster.on("gpu-001", "ls /run/metalslurm/dcgm-job-map").stdout.split() == []
        # The tests after this one count GPU-seconds: this job's are counted before it ends.
        assert cluster.wait_until_done(job).startswith("CANCELLED")
        [[elapsed]] = cluster.sacct_rows(job, "ElapsedRaw")
        wait_for("the exporter to count the cancelled job", lambda: value(
            metrics(cluster), "slurm_account_gpu_seconds_total", account="team-a")
            == team_a + 2 * int(elapsed), timeout=60)
    finally:
        if job:  # a failure above leaves it running: the tests after this one count GPU-seconds
            cluster.ctl(f"scancel {job}", check=False)
        cluster.on("gpu-001", f"rm -f {STAND_IN} /run/metalslurm/gpu-jobs/gpus.json")


def test_gpu_seconds_per_account_rise_by_the_jobs_gpu_seconds(cluster):
    def counted(samples, account):
        return value(samples, "slurm_account_gpu_seconds_total", account=account) or 0

    before = metrics(cluster)
    jobs = {"team-a": cluster.submit("alice", "--gres=gpu:h100:2 --time=2 --wrap='sleep 4'"),
            "team-b": cluster.submit("bob", "--gres=gpu:h100:1 --time=2 --wrap='sleep 3'")}
    for job in jobs.values():
        assert cluster.wait_until_done(job) == "COMPLETED"
    expected = {}
    for account, job in jobs.items():
        [[elapsed, tres]] = cluster.sacct_rows(job, "ElapsedRaw,AllocTRES")
        gpus = int(re.search(r"gres/gpu=(\d+)", tres).group(1))
        expected[account] = counted(before, account) + int(elapsed) * gpus
    wait_for("the exporter to count both jobs", lambda: all(
        counted(metrics(cluster), a) >= v for a, v in expected.items()), timeout=60)
    after = metrics(cluster)
    assert {a: counted(after, a) for a in expected} == expected


def test_the_gpu_hours_rule_agrees_with_the_usage_report(cluster):
    """The recording rule's expression (as Prometheus loaded it) evaluated now, against
    `metalslurm report usage` for the same hour: every account within 1 %. The jobs of the
    tests before (and of the other modules on this cluster) are in the window."""
    groups = json.loads(get(cluster, f"{PROMETHEUS}/api/v1/rules", login=True))["data"]["groups"]
    [expr] = [r["query"] for g in groups for r in g["rules"]
              if r.get("name") == "account:slurm_gpu_seconds:increase1h"]
    exported = {dict(lbl)["account"]: v for lbl, v in matching(
        metrics(cluster), "slurm_account_gpu_seconds_total").items()}
    wait_for("Prometheus to scrape the exporter's counters", lambda: {
        r["metric"]["account"]: float(r["value"][1]) for r in prometheus_query(
            cluster, "slurm_account_gpu_seconds_total")} == exported, timeout=60)
    # A whole second after that scrape, so the evaluation sees it.
    scraped = max(float(r["value"][1]) for r in prometheus_query(
        cluster, "timestamp(slurm_account_gpu_seconds_total)"))
    now = max(int(cluster.ctl("date +%s").stdout), int(scraped) + 1)
    start, end = (cluster.ctl(f"date -d @{t} +%Y-%m-%dT%H:%M:%S").stdout.strip()
                  for t in (now - 3600, now))
    from_rule = {r["metric"]["account"]: float(r["value"][1])
                 for r in prometheus_query(cluster, expr, at=now)}
    proc = metalslurm("report", "usage", "--stack", str(cluster.stack), "--start", start,
                      "--end", end, "--csv")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    reported = {r["account"]: int(r["gpu_seconds"]) for r in csv.DictReader(
        io.StringIO(proc.stdout)) if r["scope"] == "account"}
    assert reported["team-a"] > 0 and reported["team-b"] > 0, reported
    for account in set(reported) | set(from_rule):
        assert from_rule.get(account, 0) == pytest.approx(reported.get(account, 0), rel=0.01), \
            (account, from_rule, reported)


def test_prometheus_evaluates_the_rules_and_keeps_the_gpu_totals(cluster):
    query = urllib.parse.quote('sum(slurm_gpus{status="total"})')
    out = json.loads(get(cluster, f"{PROMETHEUS}/api/v1/query?query={query}", login=True))
    assert float(out["data"]["result"][0]["value"][1]) == 32
    groups = json.loads(get(cluster, f"{PROMETHEUS}/api/v1/rules", login=True))["data"]["groups"]
    unhealthy = {r["name"]: r.get("lastError") for g in groups for r in g["rules"]
                 if r.get("health") != "ok"}
    assert unhealthy == {}


def chromium(*args: str) -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.skip("chromium is not installed (Debian package chromium; make deps installs it)")
    proc = subprocess.run([path, "--headless", "--no-sandbox", "--disable-gpu",
                           "--virtual-time-budget=8000", *args], capture_output=True,
                          text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_the_overview_console_shows_the_cluster_in_a_browser(cluster):
    """Headless Chromium loads the console with the login, runs its scripts (the graphs
    query Prometheus from the page) and shows 4 nodes and 32 GPUs; the screenshot is kept."""
    password = (cluster.state / "secrets" / "monitoring.password").read_text().strip()
    url = f"http://metalslurm:{password}@{CONSOLE}"
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    SCREENSHOT.unlink(missing_ok=True)
    # The queue graph draws pending jobs: one held job gives it a series, whatever ran
    # before this test.
    held = cluster.submit("alice", "--hold --time=5 --wrap=true")
    try:
        wait_for("the held job in the queue graph's series",
                 lambda: prometheus_query(cluster, "reason:slurm_jobs_pending:sum > 0"),
                 timeout=120)
        chromium("--window-size=1400,1900", f"--screenshot={SCREENSHOT}", url)
        dom = chromium("--dump-dom", url)
    finally:
        cluster.ctl(f"scancel {held}", check=False)
    assert SCREENSHOT.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    big = dict((label, int(number)) for number, label in re.findall(
        r">\s*(\d+)\s*</div>\s*<div>([A-Za-z ]+)</div>", dom))
    assert (big["nodes"], big["GPUs"]) == (4, 32)
    # The three graphs (nodes by state, GPUs, queue) were drawn from Prometheus' answers.
    assert dom.count("<svg") >= 3
    assert "gpu-003" in dom and "powered_down" in dom
