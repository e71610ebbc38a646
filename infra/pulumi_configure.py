"""Run by the Pulumi program's ``<cluster>-configure`` / ``-operator-files`` command.

Writes the exported inventory and the secret files it names (mode 0600, in a 0700
directory; the secrets arrive in this process's environment from Pulumi secret
outputs and are never written into the inventory), then, with ``--playbook``, runs
``ansible-playbook -i INVENTORY ansible/site.yml`` exactly as an operator would.

    python -m infra.pulumi_configure --inventory .metalslurm/<stack>/inventory.yml [--playbook]
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
HEADER = ("# Written by the metalslurm Pulumi program ('pulumi up'); it is the stack output\n"
          "# 'inventory'. Secrets are in the files it names, not here.\n")

# inventory var -> (environment variable, how to check it)
SECRET_ENV = {
    "munge_key_b64_file": "METALSLURM_MUNGE_KEY_B64",
    "slurmdbd_password_file": "METALSLURM_SLURMDBD_PASSWORD",
    "slurm_jwt_key_b64_file": "METALSLURM_JWT_KEY_B64",
    "ansible_ssh_private_key_file": "METALSLURM_SSH_PRIVATE_KEY",
    "slurm_elastic_credentials_file": "METALSLURM_BMC_CREDENTIALS",
}


class OperatorFilesError(RuntimeError):
    pass


def write_private(path: Path, content: str) -> None:
    """Write ``content`` so that no other user can read it at any moment (0600 from the start)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(content)
    os.replace(tmp, path)


def _check(var: str, value: str) -> str:
    if var in ("munge_key_b64_file", "slurm_jwt_key_b64_file"):
        try:
            raw = base64.b64decode(value, validate=True)
        except binascii.Error:
            raise OperatorFilesError(f"{var}: the key is not valid base64") from None
        if var == "munge_key_b64_file" and len(raw) < 32:
            raise OperatorFilesError(f"{var}: a munge key needs at least 32 bytes")
        return value.strip() + "\n"
    if var == "slurm_elastic_credentials_file":
        creds = json.loads(value)
        if not isinstance(creds, Mapping) or not all(
                isinstance(v, Mapping) and {"username", "password"} <= set(v)
                for v in creds.values()):
            raise OperatorFilesError(
                "metalslurm:bmcCredentials: must map a node name or 'default' to "
                "{username, password}")
        return json.dumps(creds, sort_keys=True) + "\n"
    if var == "ansible_ssh_private_key_file":
        return value.rstrip("\n") + "\n"  # OpenSSH refuses a key without a final newline
    return value


def write_operator_files(inventory_path: Path, env: Mapping[str, str]) -> list[Path]:
    """The inventory (0644) and every secret file it names (0600); returns the paths."""
    files: dict[str, str] = json.loads(env.get("METALSLURM_FILES", "{}"))
    written = []
    for var, path in sorted(files.items()):
        value = env.get(SECRET_ENV.get(var, ""))
        if value is None:
            raise OperatorFilesError(f"{var}: no value was passed in {SECRET_ENV.get(var)}")
        write_private(Path(path), _check(var, value))
        written.append(Path(path))
    inventory = env.get("METALSLURM_INVENTORY")
    if not inventory:
        raise OperatorFilesError("METALSLURM_INVENTORY is empty")
    inventory_path.parent.mkdir(parents=True, exist_ok=True)
    inventory_path.write_text(HEADER + inventory)
    written.append(inventory_path)
    return written


def playbook_command(inventory: Path) -> list[str]:
    exe = shutil.which("ansible-playbook") or str(Path(sys.executable).with_name(
        "ansible-playbook"))
    return [exe, "-i", str(inventory), str(REPO_ROOT / "ansible" / "site.yml")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.pulumi_configure")
    parser.add_argument("--inventory", type=Path, required=True)
    parser.add_argument("--playbook", action="store_true", help="also run ansible/site.yml")
    args = parser.parse_args(argv)
    try:
        write_operator_files(args.inventory, os.environ)
    except (OperatorFilesError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.inventory} and its secret files (mode 0600)")
    if not args.playbook:
        return 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("METALSLURM_")}
    env.setdefault("ANSIBLE_CONFIG", str(REPO_ROOT / "ansible" / "ansible.cfg"))
    return subprocess.run(playbook_command(args.inventory), cwd=REPO_ROOT, env=env,
                          check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
