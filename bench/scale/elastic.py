"""Elastic nodes at scale in the scale lab: a thousand CLOUD nodes, the real power programs,
and a stand-in for the machines.

slurm.conf is the controller role's own render for that many elastic nodes (State=CLOUD,
ResumeProgram and the others, ResumeRate/SuspendRate from the provider's row of
module_utils/elastic.py, SuspendTime shortened so a run ends). The power programs are this
project's: the wheel the slurm_elastic role installs, built by the same module_utils/wheel.py
(run from the wheel itself, a pure-Python zip, rather than from a virtualenv: the lab's image
stays the one the CI smoke uses), with the config file the role would write for these nodes
(their ``metalslurm_power``: the ``local`` driver, and the role's defaults). Only the
machines are stood in for: ``podman_standin.py`` answers the ``local`` driver's podman API
calls after a set delay, records them, starts and stops the node's slurmd, and fails a
tenth of the nodes' starts.

One run: a job for ``--job-nodes`` powered-down nodes; from its submission, every second, the
nodes' states; the ResumeProgram and SuspendProgram calls from the programs' event log and
the slurmctld log; the reconciler's run over every node; the states at the end (no node may
be left DOWN, drained or powering up).

    .venv/bin/python -m bench.scale.elastic [--nodes 1000] [--job-nodes 512] [--delay 2]
        [--fail-every 10] [--fail-mode once|always] [--out DIR] [--plot PNG] [--keep]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.elastic import (
    elastic_settings,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.wheel import build_wheel

from bench.out_dir import default_out
from bench.scale import lab as scale_lab
from bench.scale.__main__ import MAX_NODES, synthetic_topologies

REPO = Path(__file__).resolve().parents[2]
POWER_PROJECT = REPO / "roles/slurm_elastic/files/metalslurm-power"
STANDIN = Path(__file__).with_name("podman_standin.py")
PROVIDER = "local"   # the lab inventory's metalslurm_provider: its row of elastic.py
# Over the provider's row: SuspendTime short enough that a run sees its nodes power down,
# and longer than the wait of a requeued job (slurmctld sets its BeginTime about 120 s
# ahead): below it, the nodes a requeued job had powered up are powered down before it may
# start again, and powered up once more. ResumeTimeout 300 s rather than the row's 120 s
# (made for a local cluster of four): here a "boot" is a slurmd starting on 2 cores shared
# with hundreds of others. The rates are the row's (the figure under test).
TIMES = {"suspend_time": 150, "resume_timeout": 300}
POWER_LOG = "/var/log/slurm/metalslurm-power.log"
CALLS = "/var/log/lab/calls.jsonl"
SOCKET = "/run/podman/podman.sock"
PROGRAMS = ("resume", "suspend", "resume-fail", "reconcile")
PARTITION = "train"

# Runs in the lab container before slurmctld starts (lab.Lab.start's elastic_setup).
_SETUP = """\
install -d /var/log/lab /run/podman
install -m 0755 /lab/power/bin/* /usr/local/sbin/
install -m 0600 -o slurm -g slurm /lab/power/metalslurm-power.json /etc/slurm/metalslurm-power.yaml
setsid -f python3 /lab/power/podman_standin.py --socket {socket} --record {calls} \\
    --nodes-file /lab/all-nodes.txt --delay {delay} --fail-every {fail_every} \\
    --fail-mode {fail_mode} >/var/log/lab/standin.log 2>&1 </dev/null
for i in $(seq 100); do [ -S {socket} ] && break; sleep 0.1; done
[ -S {socket} ]
"""


def program_wrapper(program: str, wheel: str) -> str:
    """/usr/local/sbin/metalslurm-PROGRAM: the wheel's console script, run from the wheel."""
    main = program.replace("-", "_") + "_main"
    return ("#!/bin/sh\n"
            f"PYTHONPATH=/lab/power/{wheel} exec /usr/bin/python3 -c "
            f"'import sys; from metalslurm_power.cli import {main}; sys.exit({main}())' \"$@\"\n")


def power_config(inventory: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """The config the slurm_elastic role writes (templates/etc/slurm/metalslurm-power.yaml.j2,
    with the role's defaults): the elastic nodes' ``metalslurm_power`` and the timings."""
    hosts = inventory["all"]["hosts"]
    nodes = {name: dict(hosts[name]["metalslurm_power"]) for name in sorted(hosts)
             if hosts[name].get("metalslurm_node_state") == "cloud"}
    return {"log_file": POWER_LOG, "batch_size": 50, "dry_run": False, "slurm_bin": "/usr/bin",
            "stuck_after": int(settings["resume_timeout"]),
            "orphan_after": int(settings["orphan_after"]), "nodes": nodes, "credentials": {}}


# --------------------------------------------------------------------------- analysis


def read_lines(text: str) -> list[dict[str, Any]]:
    """JSON lines; a line cut short (a log read while written) is skipped."""
    out = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


@dataclass(frozen=True, order=True)
class Call:
    t: float            # when slurmctld ran the program (epoch seconds)
    nodes: int          # how many nodes its hostlist named
    hostlist: str


def program_calls(events: Iterable[Mapping[str, Any]], program: str) -> list[Call]:
    """The program's invocations by slurmctld, from the event log's ``invoked`` lines (a
    program's worker then logs ``worker_start`` with the expanded node count)."""
    invoked: dict[str, Mapping[str, Any]] = {}
    counts: dict[str, int] = {}
    for e in events:
        if e.get("program") != program:
            continue
        if e.get("event") == "invoked":
            invoked[str(e["run"])] = e
        elif e.get("event") == "worker_start":
            counts[str(e["run"])] = int(e.get("count", 0))
    return sorted(Call(float(e.get("invoked_t") or e["t"]), counts.get(run, 0),
                       str(e.get("hostlist", ""))) for run, e in invoked.items())


def max_in_window(times: Sequence[float], weights: Sequence[int], window: float = 60.0) -> int:
    """The most ``weights`` summed over any ``window`` seconds (ResumeRate and SuspendRate
    are nodes per minute)."""
    pairs = sorted(zip(times, weights, strict=True))
    best = total = 0
    start = 0
    for t, w in pairs:
        total += w
        while pairs[start][0] < t - window + 1e-9:
            total -= pairs[start][1]
            start += 1
        best = max(best, total)
    return best


@dataclass
class Driver:
    batches: int = 0            # driver calls (batches of batch_size nodes)
    batch_seconds: list[float] = field(default_factory=list)
    nodes_ok: int = 0
    nodes_failed: int = 0


def driver_calls(events: Iterable[Mapping[str, Any]], action: str) -> Driver:
    d = Driver()
    for e in events:
        if e.get("phase") != "driver":
            continue
        if e.get("event") == "driver_end" and e.get("action") == action:
            d.batches += 1
            d.batch_seconds.append(float(e.get("duration_s", 0)))
        elif e.get("event") == action and "node" in e:
            if e.get("ok"):
                d.nodes_ok += 1
            else:
                d.nodes_failed += 1
    return d


SETTLED = {"idle~"}  # powered down, in the pool


def state_counts(sinfo: str) -> Counter[str]:
    """``sinfo -h -N -o '%N %t'`` (one line per node and partition) as short state -> nodes."""
    seen: dict[str, str] = {}
    for line in sinfo.splitlines():
        parts = line.split()
        if len(parts) == 2:
            seen[parts[0]] = parts[1]
    return Counter(seen.values())


def stuck(counts: Mapping[str, int]) -> dict[str, int]:
    """States that are not where an elastic node should come to rest (idle~): DOWN, drained,
    failing, still powering up (``#``) or down (``%``), or allocated."""
    return {s: n for s, n in counts.items() if s not in SETTLED and n}


# --------------------------------------------------------------------------- the run


@dataclass
class Sample:
    t: float                    # seconds since the submission
    counts: Counter[str]
    job_state: str


def job_field(text: str, key: str) -> str:
    for token in text.split():
        k, _, v = token.partition("=")
        if k == key:
            return v
    return ""


def sample(lab: scale_lab.Lab, job: str, began: float) -> Sample:
    out = lab.sh(f"sinfo -h -N -o '%N %t'; echo ===; scontrol -o show job {job} || true")
    nodes, _, job_text = out.partition("===")
    return Sample(round(time.time() - began, 2), state_counts(nodes),
                  job_field(job_text, "JobState") or "GONE")


def run(work: Path, count: int, job_nodes: int, delay: float, fail_every: int,
        fail_mode: str, log: scale_lab.Log = print, keep: bool = False) -> dict[str, Any]:
    nodes, topos = synthetic_topologies(count)
    settings = elastic_settings(TIMES, PROVIDER)
    rendered = scale_lab.render(work, nodes, topos["tree"], "tree", tuning=True, static=0,
                                elastic=TIMES)
    conf = scale_lab.settings_of(rendered.slurm_conf)
    power = work / "lab" / "power"
    power.mkdir(parents=True, exist_ok=True)
    for old in power.glob("*.whl"):
        old.unlink()
    wheel = build_wheel(POWER_PROJECT, power)
    inventory = scale_lab.lab_inventory(nodes, "tree", 0, TIMES)
    (power / "metalslurm-power.json").write_text(
        json.dumps(power_config(inventory, settings), indent=1, sort_keys=True))
    (power / "podman_standin.py").write_text(STANDIN.read_text())
    bin_dir = power / "bin"
    bin_dir.mkdir(exist_ok=True)
    for program in PROGRAMS:
        (bin_dir / f"metalslurm-{program}").write_text(program_wrapper(program, wheel.name))
    setup = _SETUP.format(socket=SOCKET, calls=CALLS, delay=delay, fail_every=fail_every,
                          fail_mode=fail_mode)
    lab = scale_lab.Lab(work, log=log)
    result: dict[str, Any] = {
        "nodes": count, "job_nodes": job_nodes, "delay_s": delay, "fail_every": fail_every,
        "fail_mode": fail_mode, "render_s": round(rendered.seconds, 1),
        "settings": {k: conf.get(k) for k in ("ResumeRate", "SuspendRate", "SuspendTime",
                                              "ResumeTimeout", "SuspendTimeout", "TreeWidth",
                                              "SlurmctldParameters")}}
    try:
        result["up_s"] = round(lab.start(rendered, elastic_setup=setup), 1)
        log(f"{count} CLOUD nodes powered down and idle after {result['up_s']} s")
        result.update(measure(lab, job_nodes, settings, log))
    finally:
        if not keep:
            lab.stop()
    return result


def measure(lab: scale_lab.Lab, job_nodes: int, settings: Mapping[str, Any],
            log: scale_lab.Log) -> dict[str, Any]:
    suspend_time = float(settings["suspend_time"])
    began = time.time()
    job = lab.sh(f"sbatch --parsable -p {PARTITION} -N {job_nodes} --exclusive -t 10 "
                 "-o /dev/null -e /dev/null --wrap 'sleep 10'", user=scale_lab.USERS[0]).strip()
    samples: list[Sample] = []
    started = ended = 0.0
    # Resume, run, then SuspendTime idle and the power downs at SuspendRate.
    limit = (job_nodes / max(int(settings["resume_rate"]), 1) * 60 * 3 + 600
             + suspend_time + job_nodes / max(int(settings["suspend_rate"]), 1) * 60 * 2)
    while True:
        s = sample(lab, job, began)
        samples.append(s)
        if not started and s.job_state == "RUNNING":
            started = s.t
            log(f"  job {job} running {started:.0f} s after its submission")
        if started and not ended and s.job_state in ("COMPLETED", "GONE"):
            ended = s.t
            log(f"  job {job} done at {ended:.0f} s; waiting for the power downs")
        if ended and s.counts.get("idle~", 0) == sum(s.counts.values()):
            break
        if s.t > limit:
            log(f"  gave up after {limit:.0f} s: {dict(s.counts)}")
            break
        time.sleep(1)
    job_text = lab.sh(f"scontrol -o show job {job} || true")
    events = read_lines(lab.sh(f"cat {POWER_LOG}"))
    calls = read_lines(lab.sh(f"cat {CALLS}"))
    reconcile = timed_reconcile(lab)
    resumes = program_calls(events, "resume")
    suspends = program_calls(events, "suspend")
    final = samples[-1].counts
    return {
        "job": {"id": job, "running_after_s": started, "done_after_s": ended,
                "requeues": int(job_field(job_text, "Restarts") or 0)},
        "resume": summarize_calls(resumes, began),
        "resume_nodes_max_60s": max_in_window([c.t for c in resumes], [c.nodes for c in resumes]),
        "suspend": summarize_calls(suspends, began),
        "suspend_nodes_max_60s": max_in_window([c.t for c in suspends],
                                               [c.nodes for c in suspends]),
        "resume_fail_calls": len(program_calls(events, "resume-fail")),
        "driver_power_on": vars(driver_calls(events, "power_on")),
        "driver_power_off": vars(driver_calls(events, "power_off")),
        "machine_calls": dict(Counter(f"{c['action']} {'ok' if c['ok'] else 'failed'}"
                                      for c in calls)),
        "returned_to_pool": sum(1 for e in events if e.get("event") == "back_in_pool"
                                and e.get("ok")),
        "not_returned": sum(1 for e in events if e.get("event") == "back_in_pool"
                            and not e.get("ok")),
        "reconcile": reconcile,
        "final_states": dict(final),
        "stuck": stuck(final),
        "timeline": [{"t": s.t, "job": s.job_state, **dict(s.counts)} for s in samples],
        "crashes": [e.get("error") for e in events if e.get("event") == "crash"],
    }


def summarize_calls(calls: Sequence[Call], began: float) -> dict[str, Any]:
    if not calls:
        return {"calls": 0}
    return {"calls": len(calls), "nodes": sum(c.nodes for c in calls),
            "first_s": round(calls[0].t - began, 1), "last_s": round(calls[-1].t - began, 1),
            "sizes": [c.nodes for c in calls],
            "at_s": [round(c.t - began, 1) for c in calls]}


def timed_reconcile(lab: scale_lab.Lab) -> dict[str, Any]:
    """One reconciler run over every node in the config, as its timer runs it."""
    before = time.monotonic()
    lab.sh("runuser -u slurm -- /usr/local/sbin/metalslurm-reconcile --foreground")
    wall = time.monotonic() - before
    events = read_lines(lab.sh(f"grep '\"program\": \"reconcile\"' {POWER_LOG} || true"))
    summary = [e for e in events if e.get("event") == "reconcile_summary"]
    status = driver_calls(events, "status")
    return {"wall_s": round(wall, 1), "checked": summary[-1].get("checked") if summary else None,
            "status_batches": status.batches,
            "status_batch_mean_s": round(sum(status.batch_seconds) / max(status.batches, 1), 2),
            "actions": {k: len(summary[-1].get(k) or []) for k in ("orphans", "returned",
                                                                  "resumed")} if summary else {}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scale.elastic",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--job-nodes", type=int, default=512)
    p.add_argument("--delay", type=float, default=2.0,
                   help="seconds the stand-in takes to answer each call")
    p.add_argument("--fail-every", type=int, default=10,
                   help="every Nth node's start fails (0: none)")
    p.add_argument("--fail-mode", choices=("once", "always"), default="once")
    p.add_argument("--out", type=Path, default=default_out("scale-elastic"))
    p.add_argument("--plot", type=Path, default=REPO / "docs/lab/img/scale-elastic.png")
    p.add_argument("--keep", action="store_true")
    args = p.parse_args(argv)
    problems = []
    if not 32 <= args.nodes <= MAX_NODES:
        problems.append(f"--nodes: between 32 and {MAX_NODES}, not {args.nodes}")
    if not 1 <= args.job_nodes <= args.nodes:
        problems.append(f"--job-nodes: between 1 and --nodes ({args.nodes}), not {args.job_nodes}")
    if not 0 <= args.delay <= 60:
        problems.append(f"--delay: seconds between 0 and 60, not {args.delay}")
    if args.fail_every < 0:
        problems.append(f"--fail-every: 0 (no failures) or more, not {args.fail_every}")
    if problems:
        print("error: " + "; ".join(problems), file=sys.stderr)
        return 2
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"error: --out: {exc.strerror}: {exc.filename}; name a writable directory",
              file=sys.stderr)
        return 2
    try:
        result = run(args.out, args.nodes, args.job_nodes, args.delay, args.fail_every,
                     args.fail_mode, keep=args.keep)
    except scale_lab.LabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    (args.out / "elastic.json").write_text(json.dumps(result, indent=1))
    print(report(result))
    from bench.scale.plots import draw_elastic
    print(f"plot: {draw_elastic(result, args.plot)}")
    return 0 if not result["stuck"] and not result["crashes"] else 1


def report(r: Mapping[str, Any]) -> str:
    res, sus, rec = r["resume"], r["suspend"], r["reconcile"]
    on = r["driver_power_on"]
    lines = [
        f"{r['nodes']} CLOUD nodes, a {r['job_nodes']}-node job; stand-in delay {r['delay_s']} s, "
        f"every {r['fail_every']}th start fails ({r['fail_mode']}); settings {r['settings']}",
        f"resume: {res.get('calls')} ResumeProgram calls for {res.get('nodes')} nodes "
        f"(sizes {res.get('sizes')}), first at {res.get('first_s')} s, last at "
        f"{res.get('last_s')} s; most nodes in 60 s: {r['resume_nodes_max_60s']} "
        f"(ResumeRate {r['settings']['ResumeRate']})",
        f"driver power_on: {on['batches']} batch calls, {on['nodes_ok']} nodes ok, "
        f"{on['nodes_failed']} failed; returned to the pool {r['returned_to_pool']}, "
        f"not returned {r['not_returned']}",
        f"job: running after {r['job']['running_after_s']} s, done after "
        f"{r['job']['done_after_s']} s, requeued {r['job']['requeues']} times",
        f"suspend: {sus.get('calls')} SuspendProgram calls for {sus.get('nodes')} nodes, "
        f"first at {sus.get('first_s')} s, last at {sus.get('last_s')} s; most nodes in 60 s: "
        f"{r['suspend_nodes_max_60s']} (SuspendRate {r['settings']['SuspendRate']})",
        f"reconcile over {rec['checked']} nodes: {rec['wall_s']} s ({rec['status_batches']} "
        f"status batches, {rec['status_batch_mean_s']} s each)",
        f"at the end: {r['final_states']}; stuck: {r['stuck'] or 'none'}; "
        f"crashes: {r['crashes'] or 'none'}",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
