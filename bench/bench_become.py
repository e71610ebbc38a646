"""A converged configure as a sudo user (become, Mitogen's strategy), directly and through a
bastion, against the same run as root, on the same cluster, minutes apart.

Makes a deploy user on every live node of a converged cluster (its own home outside the
shared paths, NOPASSWD sudo, the cluster's key, in the admin group so that the compute
nodes' pam_slurm_adopt lets it in before the first run names it Ansible's user), then runs:
root (converged), the sudo user (its first run rewrites the access rules that name
Ansible's user), the sudo user again (converged), the sudo user through the controller as
the bastion (ProxyJump), and root again (which puts the access rules back). Prints each
run's wall time and changed tasks, and the ratios of the converged sudo runs over root's.
Target (rented servers): at most 1.25. The user is removed at the end.

    .venv/bin/python -m bench.bench_become [--stack .metalslurm/e2e-stacks/Pulumi.e2e-debian13.yaml]
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

import yaml

from infra.ops.configure import run_playbook

REPO = Path(__file__).resolve().parents[1]
TARGET = 1.25
USER = "msbench"
NODES = ("ctl", "gpu-001", "gpu-002", "login-001")


def on(stack: Path, node: str, command: str) -> str:
    proc = subprocess.run([str(REPO / ".venv/bin/metalslurm"), "local", "exec", "--stack",
                           str(stack), node, "--", "sh", "-c", command],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{node}: {command}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", type=Path,
                        default=REPO / ".metalslurm/e2e-stacks/Pulumi.e2e-debian13.yaml")
    parser.add_argument("--state", type=Path, default=REPO / ".metalslurm/e2e-debian13")
    args = parser.parse_args(argv)
    inventory = args.state / "inventory.yml"
    doc = yaml.safe_load(inventory.read_text())
    key = (args.state / "ssh" / "id_ed25519.pub").read_text().strip()
    ctl = doc["all"]["hosts"]["ctl"]["ansible_host"]
    for node in NODES:
        on(args.stack, node, f"id {USER} >/dev/null 2>&1 || useradd -m -d /var/lib/{USER} "
                             f"-u 3998 -G hpcadmin -s /bin/bash {USER}; "
                             f"mkdir -p /var/lib/{USER}/.ssh && echo '{key}' > "
                             f"/var/lib/{USER}/.ssh/authorized_keys && chown -R {USER}: "
                             f"/var/lib/{USER}/.ssh && echo '{USER} ALL=(ALL) NOPASSWD: ALL' > "
                             f"/etc/sudoers.d/{USER} && chmod 440 /etc/sudoers.d/{USER}")
    common = doc["all"]["vars"]["ansible_ssh_common_args"]
    with tempfile.TemporaryDirectory() as tmp:
        def variant(name: str, extra: dict) -> Path:
            d = yaml.safe_load(yaml.safe_dump(doc))
            d["all"]["vars"].update(extra)
            path = Path(tmp) / f"{name}.yml"
            path.write_text(yaml.safe_dump(d))
            return path

        sudo = variant("sudo", {"ansible_user": USER, "ansible_become": True})
        jump = variant("jump", {"ansible_user": USER, "ansible_become": True,
                                "ansible_ssh_common_args": common + " -o ProxyCommand=\"ssh "
                                f"-i {doc['all']['vars']['ansible_ssh_private_key_file']} "
                                f"{common} -W %h:%p root@{ctl}\""})
        runs = [("root", inventory), ("sudo, first", sudo), ("sudo", sudo),
                ("sudo via bastion", jump), ("root, back", inventory)]
        seconds = {}
        try:
            for name, path in runs:
                result = run_playbook(path, out=lambda _line: None)
                changed = sorted({t for _h, t in result.changed_tasks})
                print(f"{name:18s} {result.seconds:6.1f} s  {'ok' if result.ok else 'FAILED'}  "
                      f"changed: {len(result.changed_tasks)} {changed[:4]}")
                if not result.ok:
                    print("  " + "\n  ".join(result.failures[:3]))
                    return 1
                seconds[name] = result.seconds
        finally:
            for node in NODES:
                on(args.stack, node, f"rm -f /etc/sudoers.d/{USER}; pkill -u {USER}; "
                                     f"userdel -r {USER} 2>/dev/null; true")
    for name in ("sudo", "sudo via bastion"):
        ratio = seconds[name] / seconds["root"]
        print(f"{name} / root (converged): {ratio:.3f}  (target <= {TARGET})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
