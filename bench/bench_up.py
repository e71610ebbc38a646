"""'local up' of the default stack from nothing (node image cached), then converged re-runs
of configure, each measured in the same run, so machine noise hits them alike.

The stack is the default one, Pulumi.local.yaml (1 controller, 2 static and 2 elastic
8 x H100 nodes, accounting), under its own name and network so it never meets a
developer's 'make up' cluster. The cold 'up' is provision, configure (elastic nodes powered
up for their first configure, then powered down) and verify. The re-runs start, like a
second 'make up', with the elastic nodes powered down; each is the plain playbook
(`ansible-playbook -i INVENTORY ansible/site.yml`, what 'metalslurm configure' runs).

With ``--compare-with REF`` the same is done for another commit of this repository (a
worktree with its own virtualenv under .metalslurm/bench-ref, a second cluster on its own
network), and the two clusters' re-runs alternate: a before/after measured in one run.

The cluster of this checkout starts from prepared images (docs/how-to/images.md; its
'image' phase is their build when they are missing). With ``--bare`` a second cluster of
this checkout starts from the bare node image (metalslurm:local.preparedImages false), so
the cold configure from prepared images, from the bare image and the converged re-runs are
measured in one run.

Targets on a 2-core machine: a converged configure in 25 s or less and at most 0.20 of the
cold configure, with 0 changed tasks; a cold configure under 140 s.

    python -m bench.bench_up [--os debian12] [--reruns 5] [--compare-with b5e6b39] [--bare]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from ipaddress import IPv4Network
from pathlib import Path

import yaml
from ansible_collections.metalslurm.cluster.plugins.module_utils.operating_systems import (
    LOCAL_OS_IDS,
)

from infra.ops.local import local_up
from infra.providers.local import LocalCluster, LocalPlan
from infra.stack.config import load_stack_file
from infra.stack.state import StateDir

REPO = Path(__file__).resolve().parents[1]
BENCH_NAME = "ms-bench"
BENCH_NETWORK = IPv4Network("10.78.20.0/24")
REF_NAME = "ms-bref"
REF_NETWORK = "10.78.21.0/24"
REF_DIR = REPO / ".metalslurm" / "bench-ref"
BARE_NAME = "ms-bbare"
BARE_NETWORK = IPv4Network("10.78.22.0/24")
RERUN_TARGET_S = 25.0
RERUN_TARGET_FRACTION = 0.20
COLD_CONFIGURE_TARGET_S = 140.0
RECAP_RE = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+"
                      r"failed=(\d+)", re.MULTILINE)


@dataclass
class Cluster:
    """One cluster the bench measures: its checkout, virtualenv and inventory."""

    label: str
    checkout: Path
    venv: Path
    inventory: Path
    cold: dict[str, float] = field(default_factory=dict)
    reruns: list[tuple[float, int, int]] = field(default_factory=list)  # seconds, changed, tasks

    def rerun(self) -> None:
        """The playbook once, as a user runs it; seconds, changed and ok tasks recorded."""
        env = {**os.environ, "ANSIBLE_CONFIG": str(self.checkout / "ansible" / "ansible.cfg"),
               "PATH": f"{self.venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
               "ANSIBLE_NOCOLOR": "1"}
        start = time.monotonic()
        proc = subprocess.run([str(self.venv / "bin" / "ansible-playbook"), "-i",
                               str(self.inventory), "ansible/site.yml"], cwd=self.checkout,
                              env=env, capture_output=True, text=True, check=False)
        seconds = time.monotonic() - start
        recap = RECAP_RE.findall(proc.stdout)
        if proc.returncode != 0 or not recap:
            raise SystemExit(f"{self.label}: configure failed ({proc.returncode}): "
                             f"{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
        self.reruns.append((seconds, sum(int(r[2]) for r in recap),
                            sum(int(r[1]) for r in recap)))


def wait_until_elastic_nodes_are_down(cluster: LocalCluster, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while any(cluster.running(n) for n in cluster.plan.elastic_nodes):
        if time.monotonic() > deadline:
            raise SystemExit("elastic nodes did not power down")
        time.sleep(2)


def bring_up_current(stack: Path, os_name: str | None,
                     bare: bool = False) -> tuple[LocalCluster, Cluster]:
    """This checkout's cluster from prepared images (``bare``: from the bare node image)."""
    name, network = (BARE_NAME, BARE_NETWORK) if bare else (BENCH_NAME, BENCH_NETWORK)
    cfg = replace(load_stack_file(stack), cluster_name=name, private_cidr=network)
    if os_name:
        cfg = replace(cfg, os=os_name)
    if bare:
        cfg = replace(cfg, local=replace(cfg.local, prepared_images=False))
    cluster = LocalCluster(plan=LocalPlan.from_config(cfg),
                           state=StateDir(REPO / ".metalslurm" / ("bench-bare" if bare
                                                                   else "bench")),
                           log=lambda _m: None)
    cluster.destroy()
    rc, timings = local_up(cfg, cluster)
    if rc != 0:
        raise SystemExit(f"local up failed ({rc})")
    wait_until_elastic_nodes_are_down(cluster)
    label = "this checkout, bare image" if bare else "this checkout"
    return cluster, Cluster(label, REPO, Path(sys.prefix), cluster.state.inventory,
                            cold=timings)


def ref_stack(stack: Path, os_name: str | None) -> Path:
    """The stack file for the reference cluster: its own name and network, the mirror as
    an absolute path (the worktree is not next to ../shared)."""
    doc = yaml.safe_load(stack.read_text())
    config = doc["config"]
    config["metalslurm:clusterName"] = REF_NAME
    config["metalslurm:privateCidr"] = REF_NETWORK
    if os_name:
        config["metalslurm:os"] = os_name
    mirror = (config.get("metalslurm:containers") or {}).get("mirror")
    if mirror and not mirror.startswith(("/", "http")):
        config["metalslurm:containers"]["mirror"] = str((stack.parent / mirror).resolve())
    out = REF_DIR / "Pulumi.bench-ref.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def run_in(checkout: Path, *argv: str, python: Path | None = None) -> str:
    proc = subprocess.run([str(python or sys.executable), *argv], cwd=checkout,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} in {checkout} failed: "
                         f"{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    return proc.stdout


def bring_up_ref(ref: str, stack: Path, os_name: str | None) -> Cluster:
    """The reference commit in a worktree with its own virtualenv ('make deps'), its
    cluster brought up by its own 'local up'."""
    subprocess.run(["git", "worktree", "remove", "--force", str(REF_DIR)], cwd=REPO,
                   capture_output=True, check=False)
    subprocess.run(["git", "worktree", "prune"], cwd=REPO, check=True)
    subprocess.run(["git", "worktree", "add", "--detach", str(REF_DIR), ref], cwd=REPO,
                   check=True, capture_output=True)
    subprocess.run(["make", "deps"], cwd=REF_DIR, check=True, capture_output=True)
    python = REF_DIR / ".venv" / "bin" / "python"
    stack_file = ref_stack(stack, os_name)
    run_in(REF_DIR, "-m", "infra.cli", "local", "down", "--stack", stack_file.name,
           python=python)
    out = run_in(REF_DIR, "-m", "infra.cli", "local", "up", "--stack", stack_file.name,
                 python=python)
    found = re.search(r"timings: (.*), total", out)
    cold = {k: float(v) for k, v in re.findall(r"(\w+) ([0-9.]+) s", found.group(1))} \
        if found else {}
    state = REF_DIR / ".metalslurm" / "bench-ref"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # elastic nodes powered down, as in a second 'up'
        listing = subprocess.run(["podman", "ps", "--format", "{{.Names}}", "--filter",
                                  f"label=metalslurm.cluster={REF_NAME}"],
                                 capture_output=True, text=True, check=False).stdout
        if not any(name.endswith(("gpu-003", "gpu-004")) for name in listing.split()):
            break
        time.sleep(2)
    return Cluster(f"{ref[:12]} (before)", REF_DIR, REF_DIR / ".venv", state / "inventory.yml",
                   cold=cold)


def tear_down_ref() -> None:
    if (REF_DIR / ".venv").exists():
        subprocess.run([str(REF_DIR / ".venv" / "bin" / "python"), "-m", "infra.cli", "local",
                        "down", "--stack", "Pulumi.bench-ref.yaml"], cwd=REF_DIR,
                       capture_output=True, check=False)
    subprocess.run(["git", "worktree", "remove", "--force", str(REF_DIR)], cwd=REPO,
                   capture_output=True, check=False)


def report(clusters: list[Cluster], os_name: str) -> bool:
    print(f"default stack ({os_name}); re-runs alternate between the clusters")
    ok = True
    for c in clusters:
        times = [s for s, _c, _t in c.reruns]
        median = statistics.median(times)
        cold = c.cold.get("configure", float("nan"))
        print(f"\n{c.label}: cold configure {cold:.1f} s, verify {c.cold.get('verify', 0):.1f} s")
        for i, (seconds, changed, tasks) in enumerate(c.reruns, 1):
            print(f"  re-run {i}: {seconds:6.1f} s  {changed} changed, {tasks} ok")
        print(f"  median {median:.1f} s (min {min(times):.1f}, max {max(times):.1f}); "
              f"median / cold configure = {median / cold:.2f}")
        ok = ok and all(changed == 0 for _s, changed, _t in c.reruns)
    current = next(c for c in clusters if c.label == "this checkout")
    median = statistics.median(s for s, _c, _t in current.reruns)
    cold = current.cold["configure"]
    print(f"\nprepared images: 'image' phase {current.cold.get('image', 0):.1f} s (their build "
          f"when they were missing); cold configure from them / converged median = "
          f"{cold / median:.2f} (target <= 1.5)")
    bare = next((c for c in clusters if c.label.endswith("bare image")), None)
    if bare is not None:
        print(f"cold configure from the bare image / from prepared images = "
              f"{bare.cold['configure'] / cold:.2f} ({bare.cold['configure']:.1f} s vs "
              f"{cold:.1f} s, same run)")
    print(f"\nthis checkout: re-run median {median:.1f} s, target <= {RERUN_TARGET_S:.0f} s: "
          f"{'met' if median <= RERUN_TARGET_S else 'NOT met'}; "
          f"ratio {median / cold:.2f}, target <= {RERUN_TARGET_FRACTION:.2f}: "
          f"{'met' if median / cold <= RERUN_TARGET_FRACTION else 'NOT met'}; "
          f"cold configure {cold:.1f} s, target < {COLD_CONFIGURE_TARGET_S:.0f} s: "
          f"{'met' if cold < COLD_CONFIGURE_TARGET_S else 'NOT met'}")
    if clusters[0].label.endswith("(before)"):
        before = statistics.median(s for s, _c, _t in clusters[0].reruns)
        print(f"re-run median after / before = {median / before:.2f}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", type=Path, default=REPO / "Pulumi.local.yaml")
    parser.add_argument("--os", choices=LOCAL_OS_IDS)
    parser.add_argument("--reruns", type=int, default=5)
    parser.add_argument("--compare-with", metavar="REF",
                        help="a commit to measure alongside this checkout (before/after)")
    parser.add_argument("--bare", action="store_true",
                        help="also a cluster of this checkout from the bare node image")
    args = parser.parse_args()
    clusters: list[Cluster] = []
    made: list[LocalCluster] = []
    try:
        if args.compare_with:
            clusters.append(bring_up_ref(args.compare_with, args.stack, args.os))
        for bare in ([True] if args.bare else []) + [False]:
            local, current = bring_up_current(args.stack, args.os, bare=bare)
            made.append(local)
            clusters.append(current)
        for _ in range(args.reruns):
            for c in clusters:
                c.rerun()
    finally:
        for local in made:
            local.destroy()
        if args.compare_with:
            tear_down_ref()
    return 0 if report(clusters, args.os or load_stack_file(args.stack).os) else 1


if __name__ == "__main__":
    sys.exit(main())
