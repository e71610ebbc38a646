"""``metalslurm backup`` / ``metalslurm restore``: the cluster's state, to bring back onto a
controller made anew.

A backup is a directory (0700, its files 0600) of:

- ``accounting.sql.gz``: the accounting database (``mysqldump --single-transaction``), from
  slurmdbd's host, when the database runs there (an external one is its operator's to back
  up, and the manifest says it is not included);
- ``slurmctld-state.tar.gz``: slurmctld's ``StateSaveLocation`` (the queue, held jobs and
  their scripts, node states, the job-id counter, QOS and association usage);
- ``inventory.yml``: a copy of the inventory given;
- ``metalslurm-backup.json``: the manifest (cluster, Slurm release, when, each file's size
  and SHA-256, how long slurmctld was stopped, the queue by state) with a listing of the
  secret files on those hosts (path, owner, mode, size): never their contents. The munge
  and JWT keys come from the operator's own secret files (the inventory names them) and
  ``up`` writes them onto a controller made anew; the database password and the
  monitoring's are made again there.

**Consistency.** slurmctld is stopped for the copy: it writes its whole state when it stops
and keeps what it has not yet sent slurmdbd in that state (``dbd.messages``), so the database
dumped while it is stopped and the state copied next agree: every record is either in the
database or queued in the state, once. Running jobs go on (slurmd and slurmstepd do not need
slurmctld); commands and submissions in that window fail and may be tried again. A timer on
the controller (``metalslurm-backup-restart``) starts slurmctld again should this command
die with it stopped.

``restore`` checks the directory first (every file's SHA-256; the archive holds only plain
files and directories under its root), then the controller (the same cluster name; a
Slurm release not older than the backup's; an empty queue unless ``force``); then it stops
slurmctld (and slurmdbd), loads the database, puts the state in place (the one it replaces
kept beside it, ``<StateSaveLocation>.replaced-<time>``), and starts them again.
"""

from __future__ import annotations

import contextlib
import getpass
import gzip
import hashlib
import json
import os
import re
import shlex
import shutil
import socket
import stat
import tarfile
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from infra.accept.remote import FileShell, Remote, RemoteError, Shell
from infra.ops.maintain import controller_lock
from infra.stack.inputs import InputError

MANIFEST = "metalslurm-backup.json"
MANIFEST_MAX_BYTES = 1 << 20
STATE_FILE = "slurmctld-state.tar.gz"
DATABASE_FILE = "accounting.sql.gz"
INVENTORY_COPY = "inventory.yml"
BACKUP_FILES = (DATABASE_FILE, STATE_FILE, INVENTORY_COPY)
FORMAT = 1
# The unit that starts slurmctld again should a backup die with it stopped, and when.
RESTART_UNIT = "metalslurm-backup-restart"
RESTART_AFTER_SECONDS = 600
PING_WAIT_SECONDS = 180
# slurmdbd's first start on a dump of an older release converts its tables (hours on a
# large history, SchedMD says).
DBD_WAIT_SECONDS = 4 * 3600
# Where secret files live on the controller and slurmdbd's host: those of them that others
# cannot read are listed in the manifest (never copied).
SECRET_DIRS = ("/etc/munge", "/etc/slurm", "/etc/prometheus", "/etc/alertmanager")
_LOCAL_DATABASE = ("", "localhost", "127.0.0.1", "::1")


class BackupError(RuntimeError):
    """A backup or restore step failed or was refused (the message says which, and what to
    do)."""


def parse_config(text: str) -> dict[str, str]:
    """``scontrol show config``'s ``Key = value`` lines as a mapping."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            found.setdefault(key.strip(), value.strip())
    return found


def release_of(version: str) -> tuple[int, int]:
    """A Slurm version's release (``24.11.5`` -> (24, 11)); ValueError when it is none."""
    match = re.match(r"^(\d+)\.(\d+)", version.strip())
    if not match:
        raise ValueError(f"{version!r} is not a Slurm version")
    return int(match.group(1)), int(match.group(2))


@dataclass(frozen=True)
class Controller:
    """What a backup or restore reads from slurmctld's configuration."""

    cluster: str
    version: str
    state_dir: str
    slurm_user: str
    conf_dir: str
    accounting: bool

    @classmethod
    def read(cls, shell: Shell) -> Controller:
        config = parse_config(shell.run("scontrol show config").stdout)
        missing = [k for k in ("ClusterName", "SLURM_VERSION", "StateSaveLocation", "SlurmUser",
                               "SLURM_CONF") if not config.get(k)]
        if missing:
            raise BackupError(f"slurmctld's configuration ('scontrol show config' on "
                              f"{shell_name(shell)}) does not say {', '.join(missing)}")
        return cls(cluster=config["ClusterName"], version=config["SLURM_VERSION"],
                   state_dir=config["StateSaveLocation"],
                   slurm_user=config["SlurmUser"].split("(")[0],
                   conf_dir=str(PurePosixPath(config["SLURM_CONF"]).parent),
                   accounting=config.get("AccountingStorageType", "")
                   == "accounting_storage/slurmdbd")


@dataclass(frozen=True)
class Database:
    """The accounting database as slurmdbd.conf on its host names it."""

    name: str
    host: str
    port: int

    @property
    def local(self) -> bool:
        return self.host in _LOCAL_DATABASE

    @classmethod
    def read(cls, shell: Shell, conf_dir: str) -> Database:
        # Read whole (a file that cannot be read fails here: no database is guessed at).
        text = shell.run(f"cat {shlex.quote(f'{conf_dir}/slurmdbd.conf')}").stdout
        values: dict[str, str] = {}
        for line in text.splitlines():
            key, sep, value = line.split("#", 1)[0].partition("=")
            if sep:
                values.setdefault(key.strip().lower(), value.strip())
        port = values.get("dbdport", "6819")
        return cls(name=values.get("storageloc") or "slurm_acct_db",
                   host=values.get("storagehost") or "localhost",
                   port=int(port) if port.isdigit() else 6819)


def shell_name(shell: Shell) -> str:
    return str(getattr(shell, "host", "the controller"))


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def wait_for_ping(shell: Shell, seconds: float = PING_WAIT_SECONDS) -> None:
    """Until slurmctld answers ``scontrol ping`` UP; BackupError past ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        proc = shell.run("scontrol ping", check=False)
        if proc.returncode == 0 and " is UP" in proc.stdout:
            return
        if time.monotonic() > deadline:
            raise BackupError(f"slurmctld on {shell_name(shell)} did not answer 'scontrol ping' "
                              f"within {seconds:.0f} s: see 'journalctl -u slurmctld' there")
        time.sleep(2)


def wait_for_slurmdbd(shell: Shell, port: int, seconds: float = PING_WAIT_SECONDS) -> None:
    """Until slurmdbd's port answers on its host; BackupError when it failed or past
    ``seconds``."""
    deadline = time.monotonic() + seconds
    probe = (f"bash -c 'state=$(systemctl show --property=ActiveState --value slurmdbd); "
             f"[ \"$state\" = failed ] && exit 3; exec 3<>/dev/tcp/127.0.0.1/{int(port)}'")
    while True:
        code = shell.run(probe, check=False).returncode
        if code == 0:
            return
        if code == 3 or time.monotonic() > deadline:
            raise BackupError(f"slurmdbd on {shell_name(shell)} did not start: see "
                              "'journalctl -u slurmdbd' there")
        time.sleep(2)


def secret_listing(shell: Shell) -> list[dict[str, Any]]:
    """The files under SECRET_DIRS on a host that others cannot read: path, owner, group,
    mode and size (never their contents)."""
    dirs = " ".join(shlex.quote(d) for d in SECRET_DIRS)
    text = shell.run(f"for d in {dirs}; do [ -d \"$d\" ] && find \"$d\" -xdev -type f "
                     "! -perm -0004 -printf '%p|%u|%g|%m|%s\\n'; done; true").stdout
    listing = []
    for line in sorted(text.splitlines()):
        path, owner, group, mode, size = line.rsplit("|", 4)
        listing.append({"host": shell_name(shell), "path": path, "owner": owner,
                        "group": group, "mode": mode.zfill(4), "size": int(size)})
    return listing


def queue_by_state(shell: Shell) -> dict[str, int]:
    counts: dict[str, int] = {}
    for state in shell.run("squeue -h -o %T").stdout.split():
        counts[state] = counts.get(state, 0) + 1
    return dict(sorted(counts.items()))


@contextlib.contextmanager
def slurmctld_stopped(shell: Shell, restart_timer: bool) -> Iterator[dict[str, float]]:
    """slurmctld stopped for the block and started again after it, whatever happens; with
    ``restart_timer`` a timer on the host starts it too should this process die meanwhile.
    Yields a mapping that holds ``stopped`` (seconds, from the stop until slurmctld answers
    again) once the block has ended."""
    if restart_timer:
        shell.run(f"systemctl stop {RESTART_UNIT}.timer 2>/dev/null; "
                  f"systemctl reset-failed {RESTART_UNIT}.timer {RESTART_UNIT}.service "
                  f"2>/dev/null; systemd-run --quiet --unit={RESTART_UNIT} "
                  f"--on-active={RESTART_AFTER_SECONDS} /bin/systemctl start slurmctld")
    timing: dict[str, float] = {}
    shell.run("systemctl stop slurmctld")
    stopped_at = time.monotonic()
    try:
        yield timing
    finally:
        shell.run("systemctl start slurmctld" + (f"; systemctl stop {RESTART_UNIT}.timer"
                                                  if restart_timer else ""))
        wait_for_ping(shell)
        timing["stopped"] = time.monotonic() - stopped_at


def _who(command: str) -> str:
    return (f"'metalslurm {command}' {getpass.getuser()}@{socket.gethostname()} pid "
            f"{os.getpid()}, started {datetime.now().astimezone():%Y-%m-%d %H:%M:%S %Z}")


def checked_destination(dest: Path) -> None:
    """The backup's directory: new, or an empty directory, under a directory that exists."""
    try:
        _checked_destination(dest)
    except OSError as exc:
        raise InputError("DIR", f"cannot be used ({exc.strerror}): give a new directory this "
                         "user can write", dest) from None


def _checked_destination(dest: Path) -> None:
    if dest.is_symlink() or dest.absolute().resolve() != dest.absolute() or dest.name in ("",
                                                                                      ".", ".."):
        raise InputError("DIR", "is a link or names a directory through one (or . or ..): "
                         "give the directory's own path", dest)
    if dest.exists() and not dest.is_dir():
        raise InputError("DIR", "is not a directory: give a new or empty directory for the "
                         "backup", dest)
    if dest.is_dir() and any(dest.iterdir()):
        raise InputError("DIR", "is not empty: give a new or empty directory (a backup never "
                         "writes over another)", dest)
    parent = dest.absolute().parent
    if not parent.is_dir():
        raise InputError("DIR", f"is under {parent}, which does not exist: make it first", dest)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError("DIR", f"is under {parent}, which this user cannot write to: give "
                         "another directory", dest)


# Connection passwords Ansible reads from an inventory (a hand-written one may hold them):
# never carried into a backup.
_PASSWORD_VARS = re.compile(r"^ansible(_become|_ssh|_sudo|_su)?_pass(word)?$")


def write_inventory_copy(inventory: Path, dest: Path) -> list[str]:
    """The inventory, without the connection passwords it may hold, into ``dest`` (0600);
    where each removed one was (``all.hosts.ctl.ansible_become_password``)."""
    from infra.ops.inventory_file import load_inventory

    removed: list[str] = []

    def clean(value: Any, where: str) -> Any:
        if isinstance(value, dict):
            kept = {}
            for key, item in value.items():
                if isinstance(key, str) and _PASSWORD_VARS.match(key):
                    removed.append(f"{where}.{key}".lstrip("."))
                else:
                    kept[key] = clean(item, f"{where}.{key}")
            return kept
        if isinstance(value, list):
            return [clean(item, f"{where}[{i}]") for i, item in enumerate(value)]
        return value

    document = clean(load_inventory(inventory, "--inventory"), "")
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        yaml.safe_dump(document, handle, sort_keys=False)
    return removed


def take_backup(controller: FileShell, dbd: FileShell | None, dest: Path, inventory: Path,
                log: Callable[[str], None]) -> dict[str, Any]:
    """The backup into ``dest`` (written in a directory beside it, renamed at the end: a
    failure leaves no half backup); its manifest."""
    started = time.monotonic()
    ctl = Controller.read(controller)
    database = Database.read(dbd, ctl.conf_dir) if (dbd and ctl.accounting) else None
    queue = queue_by_state(controller)
    part = dest.absolute().parent / f".{dest.name}.part-{os.getpid()}"
    part.mkdir(mode=0o700)
    try:
        with (controller_lock(controller, _who("backup")),
              slurmctld_stopped(controller, restart_timer=True) as timing):
            if database and database.local and dbd:
                dump = ("set -o pipefail; mysqldump --single-transaction --routines "
                        f"--events --databases {shlex.quote(database.name)} | gzip -c")
                dbd.to_file(f"bash -c {shlex.quote(dump)}", part / DATABASE_FILE)
            controller.to_file(f"tar -C {shlex.quote(ctl.state_dir)} -czf - .",
                               part / STATE_FILE)
            running = controller.run("systemctl is-active --quiet slurmctld", check=False)
            if running.returncode == 0:
                raise BackupError(f"slurmctld started during the copy (the restart timer "
                                  f"{RESTART_UNIT} fires after {RESTART_AFTER_SECONDS} s): the "
                                  "backup would not be consistent, and was not written")
        removed = write_inventory_copy(inventory, part / INVENTORY_COPY)
        secrets = secret_listing(controller)
        if dbd and shell_name(dbd) != shell_name(controller):
            secrets += secret_listing(dbd)
        files: dict[str, dict[str, Any]] = {}
        for path in sorted(part.iterdir()):
            path.chmod(0o600)
            files[path.name] = {"bytes": path.stat().st_size, "sha256": sha256_of(path)}
        manifest = {
            "format": FORMAT, "cluster": ctl.cluster, "slurm_version": ctl.version,
            "taken_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "controller": shell_name(controller), "state_save_location": ctl.state_dir,
            "database": (None if database is None else
                         {"name": database.name, "host": shell_name(dbd) if dbd else None,
                          "included": database.local}),
            "slurmctld_stopped_seconds": round(timing["stopped"], 1),
            "queue": queue, "files": files,
            "inventory_secrets_removed": removed,
            "secrets_not_copied": secrets,
        }
        (part / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        (part / MANIFEST).chmod(0o600)
        if dest.is_dir():
            dest.rmdir()
        part.rename(dest)
    except BaseException:
        shutil.rmtree(part, ignore_errors=True)
        raise
    size = sum(f["bytes"] for f in files.values())
    log(f"backup of cluster {ctl.cluster} (Slurm {ctl.version}) in {dest}: "
        + (f"the accounting database {database.name}, " if database and database.local else
           "no accounting database (" + ("it is external: back it up where it runs"
                                         if database else "no slurmdbd") + "), ")
        + f"slurmctld's state ({sum(queue.values())} jobs in the queue), the inventory"
        + (f" (without its {len(removed)} connection passwords)" if removed else "") + "; "
        f"{len(secrets)} secret files listed, not copied; {size / 1024:.0f} KiB; slurmctld "
        f"stopped {timing['stopped']:.1f} s; {time.monotonic() - started:.1f} s in all")
    return manifest


def _manifest_problem(manifest: Any) -> str | None:
    if not isinstance(manifest, dict):
        return "is not a JSON object"
    expected: dict[str, type | tuple[type, ...]] = {
        "format": int, "cluster": str, "slurm_version": str, "taken_at": str,
        "files": dict, "database": (dict, type(None))}
    for key, kind in expected.items():
        if not isinstance(manifest.get(key), kind) or isinstance(manifest.get(key), bool):
            return f"has no valid {key!r}"
    if manifest["format"] != FORMAT:
        return f"is of format {manifest['format']}, this metalslurm reads format {FORMAT}"
    unknown = sorted(set(manifest["files"]) - set(BACKUP_FILES))
    if unknown:
        return f"names files a backup does not hold ({', '.join(unknown)[:200]})"
    if not all(isinstance(e, dict) and isinstance(e.get("sha256"), str)
               for e in manifest["files"].values()):
        return "has a file entry without a SHA-256"
    database = manifest["database"]
    if database is not None and not (isinstance(database.get("included"), bool)
                                      and isinstance(database.get("name"), str)):
        return "has no valid 'database' (included, name)"
    included = bool(database and database["included"])
    if included != (DATABASE_FILE in manifest["files"]):
        return (f"says the database is {'' if included else 'not '}included, and "
                f"{'names' if not included else 'does not name'} {DATABASE_FILE}")
    return None


def _read_manifest(path: Path) -> Any:
    """The manifest's JSON: a regular file (not a link, a FIFO, a device) of at most
    MANIFEST_MAX_BYTES."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_size > MANIFEST_MAX_BYTES:
            raise ValueError(f"larger than {MANIFEST_MAX_BYTES} bytes")
        return json.loads(handle.read(MANIFEST_MAX_BYTES + 1).decode())


def checked_backup(source: Path) -> dict[str, Any]:
    """The manifest of the backup directory ``source``, once every file it names is there
    with its SHA-256 and the state archive holds only plain files and directories inside
    it; an InputError naming the problem otherwise."""
    if not source.is_dir():
        raise InputError("DIR", "is not a directory: give a directory 'metalslurm backup' "
                         "wrote", source)
    try:
        manifest = _read_manifest(source / MANIFEST)
    except FileNotFoundError:
        raise InputError("DIR", f"has no {MANIFEST}: give a directory 'metalslurm backup' "
                         "wrote", source) from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InputError("DIR", f"{MANIFEST} cannot be read as JSON ({exc.__class__.__name__}"
                         "): give a directory 'metalslurm backup' wrote", source) from None
    problem = _manifest_problem(manifest)
    if problem:
        raise InputError("DIR", f"{MANIFEST} {problem}: give a directory 'metalslurm backup' "
                         "wrote", source)
    if STATE_FILE not in manifest["files"]:
        raise InputError("DIR", f"{MANIFEST} names no {STATE_FILE}: the backup is not whole",
                         source)
    for name, entry in manifest["files"].items():
        path = source / str(name)
        if path.is_symlink() or not path.is_file():
            raise InputError("DIR", f"lacks {name}, which its manifest names: the backup is not "
                             "whole", source)
        try:
            digest = sha256_of(path)
        except OSError as exc:
            raise InputError("DIR", f"{name} cannot be read ({exc.strerror}): give a readable "
                             "backup", source) from None
        if digest != entry["sha256"]:
            raise InputError("DIR", f"{name} is not the file the backup wrote (its SHA-256 "
                             "differs): the backup is damaged; give another", source)
    problem = trust_problem(source, manifest["files"])
    if problem:
        raise InputError("DIR", f"{problem}: a backup is unpacked and loaded as root on the "
                         "controller; keep it where only its owner can write", source)
    problem = state_archive_problem(source / STATE_FILE)
    if problem:
        raise InputError("DIR", f"{STATE_FILE} {problem}: restore only what 'metalslurm "
                         "backup' wrote", source)
    if DATABASE_FILE in manifest["files"]:
        problem = dump_problem(source / DATABASE_FILE)
        if problem:
            raise InputError("DIR", f"{DATABASE_FILE} {problem}: restore only what "
                             "'metalslurm backup' wrote", source)
    return manifest


def trust_problem(source: Path, files: Mapping[str, Any]) -> str | None:
    """Why the backup's directory or a file in it could have been changed by someone else
    than its owner (this user or root), or None."""
    me = os.geteuid()
    for path in [source, *(source / name for name in files), source / MANIFEST]:
        info = path.stat()
        if info.st_uid not in (me, 0) or info.st_mode & 0o022:
            return (f"{path.name if path != source else 'it'} can be written by others than "
                    f"its owner (mode {stat.S_IMODE(info.st_mode):04o}, uid {info.st_uid})")
    return None


def dump_problem(path: Path) -> str | None:
    """Why the dump must not be fed to mysql as root: a line that is a mysql client command
    (``\\!``, ``system``: a shell command on slurmdbd's host), or None."""
    client_command = re.compile(rb"^\s*(\\!|system\s|\\\.|source\s)", re.IGNORECASE)
    try:
        with gzip.open(path, "rb") as dump:
            for number, line in enumerate(dump, 1):
                if client_command.match(line):
                    return f"line {number} is a mysql client command, not SQL"
    except (OSError, EOFError, zlib.error) as exc:
        return f"is not readable gzip ({exc})"
    return None


def state_archive_problem(path: Path) -> str | None:
    """Why the state archive must not be unpacked as root (a link, a device, a path outside
    it), or None."""
    try:
        with tarfile.open(path, "r:gz") as archive:
            for member in archive:
                name = PurePosixPath(member.name)
                if name.is_absolute() or ".." in name.parts:
                    return f"holds {member.name!r}, a path outside its directory"
                if not (member.isreg() or member.isdir()):
                    return f"holds {member.name!r}, which is not a plain file or directory"
    except (OSError, tarfile.TarError, EOFError) as exc:
        return f"is not a readable gzip tar archive ({exc})"
    return None


# Unpacked as SlurmUser (what it could not write, it cannot reach; it makes no device), and
# refused when anything but files and directories came out (GNU tar reads on past a header
# Python's tarfile stops at).
RESTORE_STATE = """set -eu
state={state}; user={user}
rm -rf "$state".restore.??????
new=$(mktemp -d "$state.restore.XXXXXX")
chown "$user:" "$new"
chmod 0700 "$new"
runuser -u "$user" -- tar -C "$new" --no-same-owner --no-same-permissions -xzf -
odd=$(find "$new" ! -type f ! -type d -print -quit)
if [ -n "$odd" ]; then
    rm -rf "$new"; echo "the archive holds ${{odd#"$new"/}}: not a file or directory" >&2; exit 3
fi
chmod --reference="$state" "$new" 2>/dev/null || true
if [ -e "$state" ]; then mv -T "$state" "$state.replaced-{stamp}"; fi
mv -T "$new" "$state"
"""


@contextlib.contextmanager
def standby_stopped(standby: Shell | None) -> Iterator[None]:
    """The backup controller's slurmctld (if the cluster has one) stopped for the block and
    started again after it: it must not take over, on the state being replaced, while the
    controller's slurmctld is stopped longer than SlurmctldTimeout (a long database load)."""
    if standby is None:
        yield
        return
    standby.run("systemctl stop slurmctld")
    try:
        yield
    finally:
        standby.run("systemctl start slurmctld")


def _restore_steps(controller: FileShell, dbd: FileShell | None, database: Database | None,
                   source: Path, ctl: Controller, stamp: str,
                   standby: Shell | None = None) -> dict[str, float]:
    # The state first (seconds; one rename), then the database: should this command die
    # during a long load, the restart timer starts slurmctld on the restored state, and it
    # keeps what it sends slurmdbd until slurmdbd is back.
    with standby_stopped(standby), slurmctld_stopped(controller, restart_timer=True) as timing:
        controller.from_file(
            "bash -c " + shlex.quote(RESTORE_STATE.format(
                state=shlex.quote(ctl.state_dir), user=shlex.quote(ctl.slurm_user),
                stamp=stamp)), source / STATE_FILE)
        if database and dbd:
            name = database.name.replace("`", "``")
            dbd.run("systemctl stop slurmdbd")
            try:
                dbd.run(f"mysql -e {shlex.quote(f'DROP DATABASE IF EXISTS `{name}`')}")
                dbd.from_file("bash -c 'set -o pipefail; gunzip -c | mysql --binary-mode'",
                              source / DATABASE_FILE)
            finally:
                dbd.run("systemctl start slurmdbd")
            wait_for_slurmdbd(dbd, database.port, DBD_WAIT_SECONDS)
    return timing


def restore_backup(controller: FileShell, dbd: FileShell | None, source: Path,
                   manifest: Mapping[str, Any], log: Callable[[str], None],
                   force: bool = False, standby: Shell | None = None) -> None:
    """The backup ``source`` (checked: :func:`checked_backup`) onto the cluster's controller
    (and slurmdbd's host)."""
    started = time.monotonic()
    ctl = Controller.read(controller)
    if ctl.cluster != manifest["cluster"]:
        raise InputError("DIR", f"is a backup of cluster {manifest['cluster']}, and this "
                         f"inventory's controller runs cluster {ctl.cluster}: give a backup "
                         f"of {ctl.cluster}", source)
    try:
        newer = release_of(manifest["slurm_version"]) > release_of(ctl.version)
    except ValueError as exc:
        raise InputError("DIR", f"names no Slurm release this command can compare ({exc})",
                         source) from None
    if newer:
        raise InputError("DIR", f"was taken on Slurm {manifest['slurm_version']}, newer than "
                         f"the controller's {ctl.version}, which cannot read its state: "
                         "install that release on the controller first", source)
    database_entry = manifest["database"]
    with_database = bool(database_entry and database_entry.get("included"))
    database = None
    if with_database:
        if dbd is None or not ctl.accounting:
            raise BackupError("the backup holds an accounting database, and this cluster has "
                              "no slurmdbd to load it into: give an inventory with slurmdbd")
        database = Database.read(dbd, ctl.conf_dir)
        if not database.local:
            raise BackupError(f"restore loads a database only on slurmdbd's host, and this "
                              f"cluster's is external ({database.host}): load "
                              f"{DATABASE_FILE} there (gunzip -c | mysql)")
        if database.name != database_entry.get("name"):
            raise BackupError(f"the backup's accounting database is "
                              f"{database_entry.get('name')}, this slurmdbd's is "
                              f"{database.name}: set the same StorageLoc")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    with controller_lock(controller, _who("restore")):
        queue = queue_by_state(controller)
        if queue and not force:
            raise BackupError(f"the controller's queue holds {sum(queue.values())} jobs ("
                              + ", ".join(f"{n} {s}" for s, n in queue.items())
                              + "), which a restore replaces: cancel them (scancel) or give "
                              "--force")
        timing = _restore_steps(controller, dbd, database, source, ctl, stamp, standby)
    restored = queue_by_state(controller)
    log(f"restored cluster {ctl.cluster} from {source} (taken {manifest['taken_at']} on Slurm "
        f"{manifest['slurm_version']}): "
        + ("the accounting database, " if database else "no accounting database, ")
        + f"slurmctld's state ({sum(restored.values())} jobs in the queue; the state it "
        f"replaced is in {ctl.state_dir}.replaced-{stamp}); slurmctld stopped "
        f"{timing['stopped']:.1f} s; {time.monotonic() - started:.1f} s in all")


def _shells(inventory: Path) -> tuple[Remote, Remote | None, Remote | None]:
    """The controller's, slurmdbd host's and backup controller's shells (None: no such
    host)."""
    from infra.ops.inventory_file import INVENTORY_FILE, group_hosts, load_inventory

    document = load_inventory(inventory, "--inventory")
    root = document.get("all") or {}
    all_vars, hosts = root.get("vars") or {}, root.get("hosts") or {}
    controllers = group_hosts(document, "slurm_controller")
    if not controllers:
        raise InputError("--inventory", f"has no host in group slurm_controller; give "
                         f"{INVENTORY_FILE}", inventory)
    dbd_hosts = group_hosts(document, "slurmdbd")

    def remote(name: str) -> Remote:
        return Remote(name, {**all_vars, **(hosts.get(name) or {})})

    controller = remote(controllers[0])
    backups = group_hosts(document, "slurm_controller_backup")
    standby = remote(backups[0]) if backups else None
    if not dbd_hosts:
        return controller, None, standby
    return (controller, controller if dbd_hosts[0] == controllers[0] else remote(dbd_hosts[0]),
            standby)


def _closing(*shells: Remote | None) -> None:
    for shell in {id(s): s for s in shells if s is not None}.values():
        shell.close()


def _checked_inventory(inventory: Path | None) -> Path:
    from infra.ops.inventory_file import INVENTORY_FILE, load_inventory

    if inventory is None:
        raise InputError("--inventory", f"is required: give {INVENTORY_FILE}")
    load_inventory(inventory, "--inventory")
    return inventory


def run_backup(inventory: Path | None, dest: Path, log: Callable[[str], None]) -> int:
    # Each argument checked in the order given on the command line, -i first when it is.
    if inventory is not None:
        _checked_inventory(inventory)
    checked_destination(dest)
    inventory = _checked_inventory(inventory)
    # The backup controller's slurmctld stays up: slurmctld is stopped here for about a
    # second, far below SlurmctldTimeout, after which the backup would take over.
    controller, dbd, standby = _shells(inventory)
    try:
        take_backup(controller, dbd, dest, inventory, log)
    except RemoteError as exc:
        raise BackupError(f"the backup failed, and nothing was written: {exc}") from None
    finally:
        _closing(controller, dbd, standby)
    return 0


def run_restore(inventory: Path | None, source: Path, log: Callable[[str], None],
                force: bool = False) -> int:
    if inventory is not None:
        _checked_inventory(inventory)
    manifest = checked_backup(source)
    inventory = _checked_inventory(inventory)
    controller, dbd, standby = _shells(inventory)
    try:
        restore_backup(controller, dbd, source, manifest, log, force=force, standby=standby)
    except RemoteError as exc:
        raise BackupError(f"the restore failed: {exc}; what it stopped was started again; "
                          "fix the cause and run the restore again (with --force once the "
                          "queue holds the backup's jobs)") from None
    finally:
        _closing(controller, dbd, standby)
    return 0
