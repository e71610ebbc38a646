"""Run by the Pulumi program's ``<cluster>-configure`` / ``-operator-files`` command.

Writes the exported inventory and the secret files it names into the stack's state
directory through :class:`infra.stack.state.StateDir` (the secrets arrive in this process's
environment from Pulumi secret outputs and are never written into the inventory); when the
stack has launch-terminate nodes, also the join key (``METALSLURM_JOIN_SSH_KEY``) and the
join kit, which the inventory's ``metalslurm_join`` names (infra/stack/join_kit.py); then,
with ``--preflight``, checks every host with ``metalslurm preflight -i INVENTORY`` (a
failure fails the command, and so ``pulumi up``, before any host is changed), then, with
``--playbook``, runs ``ansible-playbook -i INVENTORY ansible/site.yml`` exactly as an operator
would.

    python -m infra.pulumi.configure --state-dir .metalslurm/<stack> [--preflight] [--playbook]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from infra.stack.join_kit import launched_nodes, with_join
from infra.stack.state import SecretError, StateDir

REPO_ROOT = Path(__file__).resolve().parents[2]
HEADER = ("# Written by the metalslurm Pulumi program ('pulumi up'); it is the stack output\n"
          "# 'inventory' (with the join kit's metalslurm_join when the stack has launch-terminate\n"
          "# nodes). Secrets are in the files it names, not here.\n")
JOIN_KEY_ENV = "METALSLURM_JOIN_SSH_KEY"
_OPENSSH_KEY = ("-----BEGIN OPENSSH PRIVATE KEY-----\n", "-----END OPENSSH PRIVATE KEY-----\n")

# inventory var naming a secret file -> the environment variable that carries its value
SECRET_ENV = {
    "munge_key_b64_file": "METALSLURM_MUNGE_KEY_B64",
    "slurmdbd_password_file": "METALSLURM_SLURMDBD_PASSWORD",
    "slurm_jwt_key_b64_file": "METALSLURM_JWT_KEY_B64",
    "ansible_ssh_private_key_file": "METALSLURM_SSH_PRIVATE_KEY",
    "slurm_elastic_credentials_file": "METALSLURM_BMC_CREDENTIALS",
    "registry_credentials_file": "METALSLURM_REGISTRY_CREDENTIALS",
    "monitoring_password_file": "METALSLURM_MONITORING_PASSWORD",
    "monitoring_alert_secrets_file": "METALSLURM_ALERT_SECRETS",
}


class OperatorFilesError(RuntimeError):
    pass


def write_operator_files(state: StateDir, env: Mapping[str, str]) -> list[Path]:
    """Every secret file the inventory names (0600), then the inventory; returns the paths.

    All values are checked before the first file is written, so a bad value leaves the
    previous files as they were.
    """
    names: list[str] = json.loads(env.get("METALSLURM_SECRET_VARS", "[]"))
    values = {}
    for var in sorted(names):
        value = env.get(SECRET_ENV.get(var, ""))
        if value is None:
            raise OperatorFilesError(f"{var}: no value was passed in {SECRET_ENV.get(var)}")
        values[var] = value
    inventory = json.loads(env.get("METALSLURM_INVENTORY") or "null")
    if not inventory:
        raise OperatorFilesError("METALSLURM_INVENTORY is empty")
    join_key = env.get(JOIN_KEY_ENV)
    launched = bool(launched_nodes(inventory))
    if launched and not (
            join_key and join_key.startswith(_OPENSSH_KEY[0]) and join_key.endswith(
                _OPENSSH_KEY[1])):
        raise OperatorFilesError(f"{JOIN_KEY_ENV}: the inventory has launch-terminate nodes, "
                                 "and no OpenSSH private key was passed for the controller to "
                                 "configure them with")
    try:
        for var, value in values.items():
            state.checked_secret(var, value)
        written = [state.write_secret(var, value) for var, value in values.items()]
    except SecretError as exc:
        raise OperatorFilesError(str(exc)) from None
    if launched:
        written.append(state.write_join_key(str(join_key)))
        inventory = with_join(inventory, REPO_ROOT, state.join_kit, state.join_key)
    written.append(state.write_inventory(inventory, HEADER))
    return written


def playbook_command(inventory: Path) -> list[str]:
    exe = shutil.which("ansible-playbook") or str(Path(sys.executable).with_name(
        "ansible-playbook"))
    return [exe, "-i", str(inventory), str(REPO_ROOT / "ansible" / "site.yml")]


def preflight_command(inventory: Path, waits: list[str] | None = None) -> list[str]:
    """The pre-flight as an operator runs it (the CLI's process: this layer does not import
    the operator commands); ``waits``: its --ssh-wait and --lock-wait, for machines just
    created."""
    return [sys.executable, "-m", "infra.cli", "preflight", "-i", str(inventory), *(waits or [])]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.pulumi.configure")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--preflight", action="store_true",
                        help="check every host first (metalslurm preflight)")
    parser.add_argument("--preflight-wait", type=float, default=None, metavar="SECONDS",
                        help="machines just created: the pre-flight waits this long for each "
                        "host's sshd and apt's lock (cloud-init's first boot)")
    parser.add_argument("--playbook", action="store_true", help="also run ansible/site.yml")
    args = parser.parse_args(argv)
    state = StateDir(args.state_dir)
    try:
        write_operator_files(state, os.environ)
    except (OperatorFilesError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {state.inventory} and its secret files (mode 0600)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("METALSLURM_")}
    if args.preflight:
        waits = ([] if args.preflight_wait is None else
                 ["--ssh-wait", str(args.preflight_wait), "--lock-wait", str(args.preflight_wait)])
        checked = subprocess.run(preflight_command(state.inventory, waits), cwd=REPO_ROOT,
                                 env=env, check=False).returncode
        if checked != 0:
            return checked
    if not args.playbook:
        return 0
    env.setdefault("ANSIBLE_CONFIG", str(REPO_ROOT / "ansible" / "ansible.cfg"))
    return subprocess.run(playbook_command(state.inventory), cwd=REPO_ROOT, env=env,
                          check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
