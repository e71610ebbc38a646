"""``metalslurm up --stack FILE``: a byo cluster from servers that already exist, without
the Pulumi engine.

The same inventory ``pulumi up`` writes for a byo stack
(:func:`infra.stack.inventory.make_inventory` over :mod:`infra.stack.byo_hosts`), in the same
state directory ``.metalslurm/<stack>/``,
with the cluster's secrets made once and kept there (as ``local up`` keeps them). The order:
every input checked; the pre-flight of every host (nothing written anywhere, nothing changed
on a host, when one is unfit); then the secrets and the inventory; configure; verify. Safe to
run again: the secrets are kept, the configure converges.

The SSH private key stays where the operator keeps it (``--ssh-key``; the inventory names
it); the BMC credentials (``--bmc-credentials``) are checked and copied into the state
directory's secrets/ (0600), where the Pulumi path puts them too.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

from infra.ops.local import state_dir_for
from infra.ops.output import phase, say
from infra.ops.preflight import check, checked_drain_wait, checked_lock_wait, checked_ssh_wait
from infra.stack.byo_hosts import connection_vars, node_specs
from infra.stack.config import SECRETS_AS_FILES, ClusterConfig, load_stack_file
from infra.stack.inputs import InputError, read_text_argument
from infra.stack.inventory import make_inventory
from infra.stack.schema import ConfigError
from infra.stack.state import (
    CLUSTER_SECRETS,
    SecretError,
    StateDir,
    checked_secret,
    ensure_cluster_secrets,
    write_alert_secrets_file,
    write_credentials_file,
)

HEADER = ("# Written by 'metalslurm up' for a byo stack; regenerated on every run: edit the\n"
          "# stack config instead. Secrets are in the files it names, not here.\n")
SSH_KEY_WHAT = "the SSH private key file the hosts accept (e.g. ~/.ssh/id_ed25519)"
BMC_WHAT = ("a JSON file mapping a node name or 'default' to {\"username\": ..., "
            "\"password\": ...}")


def byo_stack(stack_file: Path) -> ClusterConfig:
    cfg = load_stack_file(stack_file, "--stack", check_artifacts=True,
                          secrets_given=SECRETS_AS_FILES)
    if cfg.provider != "byo":
        raise ConfigError([f"metalslurm:provider is {cfg.provider!r}: 'metalslurm up' takes "
                           "byo stacks (existing servers); use 'pulumi up' for oci and "
                           "'metalslurm local up' for local"], "--stack", str(stack_file))
    return cfg


def checked_ssh_key(path: Path) -> Path:
    """--ssh-key: an OpenSSH or PEM private key, readable by its owner only (ssh refuses
    a key others can read)."""
    text = read_text_argument(path, "--ssh-key", SSH_KEY_WHAT)
    if "PRIVATE KEY-----" not in text:
        what = "a public key" if text.lstrip().startswith(("ssh-", "ecdsa-")) else "not a key"
        raise InputError("--ssh-key", f"is {what}; give {SSH_KEY_WHAT}", path)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise InputError("--ssh-key", f"can be read by others (mode {mode:04o}), which ssh "
                         f"refuses: chmod 600 {path}", path)
    return path.resolve()


def read_bmc_credentials(path: Path | None) -> str | None:
    """--bmc-credentials, read and checked as the Pulumi path checks
    metalslurm:bmcCredentials (None when not given)."""
    if path is None:
        return None
    text = read_text_argument(path, "--bmc-credentials", BMC_WHAT)
    try:
        return checked_secret("slurm_elastic_credentials_file", text)
    except SecretError:
        raise InputError("--bmc-credentials", f"is not {BMC_WHAT}", path) from None


def checked_inputs(stack_file: Path, ssh_key: Path | None,
                   bmc_credentials: Path | None) -> tuple[ClusterConfig, Path, str | None]:
    """The stack, the key and the BMC credentials, each file read before any is judged
    against another (so each bad file is named for itself)."""
    key = checked_ssh_key(ssh_key) if ssh_key is not None else None
    bmc = read_bmc_credentials(bmc_credentials)
    cfg = byo_stack(stack_file)
    if key is None:
        raise InputError("--ssh-key", "is missing: with --stack, give the SSH private key "
                         "file the hosts accept")
    if bmc is None and any(h.bmc for h in (cfg.byo.hosts if cfg.byo else ())):
        raise InputError("--bmc-credentials", f"is missing: the stack's elastic hosts are "
                         f"powered through their BMCs; give {BMC_WHAT}")
    return cfg, key, bmc


def byo_inventory(cfg: ClusterConfig, state: StateDir, ssh_key: Path, bmc: str | None, *,
                  write: bool) -> dict[str, Any]:
    """The stack's inventory; with ``write``, also its secret files (made once and kept)
    and the inventory file. Without, nothing is written (the pre-flight's view)."""
    if write:
        files = ensure_cluster_secrets(state)
        if bmc is not None:
            state.write_secret("slurm_elastic_credentials_file", bmc)
        if cfg.containers.enabled and cfg.containers.credentials_file:
            files |= write_credentials_file(state, cfg.containers.credentials_file)
        if cfg.monitoring.enabled and cfg.monitoring.secrets_file:
            files |= write_alert_secrets_file(state, cfg.monitoring.secrets_file)
    else:
        files = state.secret_vars(CLUSTER_SECRETS)
    if bmc is not None:
        files |= state.secret_vars(["slurm_elastic_credentials_file"])
    files["ansible_ssh_private_key_file"] = str(ssh_key)
    inventory = make_inventory(cfg, node_specs(cfg), connection_vars(cfg), {}, files)
    if write:
        state.write_inventory(inventory, HEADER)
    return inventory


def preflight_stack(stack_file: Path, *, ssh_key: Path | None,
                    bmc_credentials: Path | None = None, password: str | None = None,
                    lock_wait: float | None = None, ssh_wait: float | None = None) -> int:
    """``metalslurm preflight --stack FILE --ssh-key KEY``: nothing written."""
    cfg, key, bmc = checked_inputs(stack_file, ssh_key, bmc_credentials)
    wait = checked_lock_wait(lock_wait)
    booting = checked_ssh_wait(ssh_wait)
    document = byo_inventory(cfg, StateDir(state_dir_for(stack_file)), key, bmc, write=False)
    return 0 if check(document, password=password, lock_wait=wait,
                      source=("--stack", stack_file), ssh_wait=booting) else 1


def up(stack_file: Path, *, ssh_key: Path, bmc_credentials: Path | None = None,
       lock_wait: float | None = None, drain_wait: float | None = None,
       configure: bool = True, verify: bool = True, password: str | None = None) -> int:
    """``metalslurm up --stack FILE --ssh-key KEY``: pre-flight, inventory, configure,
    verify; ``password``: sudo's, for the pre-flight and the configure (verify's testinfra
    cannot answer sudo's prompt: it is left to a run as root or a NOPASSWD user).
    ``drain_wait``: how long the configure waits for the jobs on hosts the stack no longer
    has before refusing (module_utils/slurm_leaving.py)."""
    from infra.ops.configure import heartbeat_for, print_summary, run_playbook, stack_run_vars
    from infra.ops.verify import run_verify

    # every input checked before a host is reached
    wait = checked_lock_wait(lock_wait)
    leaving_wait = checked_drain_wait(drain_wait)
    cfg, key, bmc = checked_inputs(stack_file, ssh_key, bmc_credentials)
    state = StateDir(state_dir_for(stack_file))
    timings: dict[str, float] = {}
    with phase("preflight", timings):
        fit = check(byo_inventory(cfg, state, key, bmc, write=False), password=password,
                    lock_wait=wait, source=("--stack", stack_file))
    if not fit:
        say("up stopped before changing anything: fix the hosts above and run it again")
        return 1
    with phase("inventory", timings):
        byo_inventory(cfg, state, key, bmc, write=True)
        say(f"    inventory: {state.inventory}")
    rc = 0
    if configure:
        with phase("configure", timings):
            result = run_playbook(state.inventory, out=None, heartbeat=heartbeat_for(say),
                                  become_password=password,
                                  extra_vars=stack_run_vars(leaving_wait))
            print_summary(result, out=say)
        rc = result.rc
        if rc == 0 and verify and password is not None:
            say("    verify skipped: testinfra cannot answer sudo's password prompt; run "
                f"'metalslurm verify -i {state.inventory}' as root or a NOPASSWD sudo user")
        elif rc == 0 and verify:
            with phase("verify", timings):
                rc = run_verify(state.inventory, out=say)
    say("timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
    if rc != 0:
        say("up did not complete; fix the problem above and run it again (every step is safe "
            "to repeat)")
    return rc
