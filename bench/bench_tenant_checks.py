"""What the tenant protections cost a converged configure, measured inside the same runs.

Runs the playbook ``--reruns`` times against a converged cluster's inventory and, in each
run, adds up the seconds of the tasks the protections brought (the admins-only rule on the
service hosts, the PAM module check, the home_block writes into users' homes, the job
containers' files and the namespace-ID program on compute nodes; each task counted at its
slowest host). The ratio is the run's wall time over the wall time without those tasks:
an upper bound, since home_block replaced the blockinfile tasks that wrote the same keys
before. Target: at most 1.05.

    .venv/bin/python -m bench.bench_tenant_checks [--reruns 3]
        [--inventory .metalslurm/e2e-debian13/inventory.yml]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from infra.ops.configure import run_playbook

REPO = Path(__file__).resolve().parents[1]
TARGET = 1.05
# The tasks the tenant protections added (roles/infra_access, slurm_pam_adopt, common,
# enroot_pyxis, slurm_controller, slurm_compute), by their names in the play.
TASKS = (
    "Write who may log in to this service host (root, Ansible's user, the admin group)",
    "Write the line a refused user sees",
    "Put the admins-only rule in sshd's account stack",
    # slurm_pam_adopt's one read of a converged node (its access file, sshd's block, the
    # module's paths, the session stacks); with the pam_systemd check it had before the
    # tenant protections. Its write tasks run only where something differs.
    "Read the access file, sshd's and the session's PAM stacks and the module's paths in one "
    "step",
    "Write each user's keys into their authorized_keys",
    "Remove the managed keys of the users removed from the config",
    "Write the registry credentials into each cluster user's Enroot credentials file",
    "Report the credentials files refused (a link or other unsafe entry in a home)",
    "Write job_container.conf (each job's private /tmp and /dev/shm)",
    # slurm_compute's one read of a converged node covers the jobs' /tmp base directory
    # and the namespace-ID program with its other files (an upper bound, as above); its write
    # tasks run only where something differs.
    "Read slurmd's settings, its drop-in, the program it runs first and the registration mark "
    "in one step",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inventory", type=Path,
                        default=REPO / ".metalslurm/e2e-debian13/inventory.yml")
    parser.add_argument("--reruns", type=int, default=3)
    args = parser.parse_args(argv)
    ratios = []
    for n in range(1, args.reruns + 1):
        result = run_playbook(args.inventory, out=lambda _line: None)
        if not result.ok:
            print(f"run {n} failed: {result.failures[:2]}")
            return 1
        names = {t.split(" : ", 1)[-1] for t in result.task_seconds}
        missing = [t for t in TASKS if t not in names]
        checks = sum(s for t, s in result.task_seconds.items()
                     if t.split(" : ", 1)[-1] in TASKS)
        ratio = result.seconds / (result.seconds - checks)
        ratios.append(ratio)
        print(f"run {n}: {result.seconds:.1f} s, {result.changed} changed; the protections' "
              f"tasks {checks:.2f} s; ratio {ratio:.3f}"
              + (f" (not run here: {len(missing)} of {len(TASKS)})" if missing else ""))
    median = statistics.median(ratios)
    print(f"median ratio {median:.3f} (target <= {TARGET}: "
          f"{'met' if median <= TARGET else 'NOT met'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
