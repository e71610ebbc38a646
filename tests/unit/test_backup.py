"""metalslurm backup / restore (infra/ops/backup.py): the inputs refused before anything is
done, and the steps as the controller's shell runs them: this machine's bash with
stand-ins for Slurm's and MariaDB's commands (they log their calls), the real tar, chown,
mktemp and find, against a StateSaveLocation in a temporary directory."""

from __future__ import annotations

import functools
import getpass
import gzip
import io
import json
import os
import shlex
import socket
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from infra import cli
from infra.ops import backup as b
from infra.ops import maintain

CONFIG = """Configuration data as of 2026-12-03T10:00:00
AccountingStorageType   = accounting_storage/slurmdbd
ClusterName             = ms-e2e13b
SLURM_CONF              = {etc}/slurm.conf
SLURM_VERSION           = 24.11.5
SlurmUser               = {user}(0)
StateSaveLocation       = {state}
"""

STANDINS = {
    "scontrol": """case "$1" in
  show) cat "$ROOT/config";;
  ping) echo "Slurmctld(primary) at ctl is UP";;
esac
echo "scontrol $*" >> "$ROOT/calls"
""",
    "squeue": 'cat "$ROOT/queue" 2>/dev/null; echo "squeue $*" >> "$ROOT/calls"\n',
    "systemctl": ('echo "systemctl $*" >> "$ROOT/calls"\n'
                  '[ "$1 $2" = "stop slurmctld" ] && echo stopped > "$ROOT/ctld"\n'
                  '[ "$1 $2" = "start slurmctld" ] && echo started > "$ROOT/ctld"\n'
                  '[ "$1" = show ] && echo active\n'
                  '[ "$1" = is-active ] && { grep -q started "$ROOT/ctld"; exit; }\ntrue\n'),
    # As root it would run tar as SlurmUser; here, this user is SlurmUser.
    "runuser": 'shift 3; exec "$@"\n',
    "systemd-run": 'echo "systemd-run $*" >> "$ROOT/calls"\n',
    "mysqldump": ('echo "mysqldump $* (slurmctld $(cat "$ROOT/ctld"))" >> "$ROOT/calls"\n'
                  '[ -e "$ROOT/dump-fails" ] && { echo "mysqldump: Got error" >&2; exit 2; }\n'
                  '[ -e "$ROOT/timer-fires" ] && echo started > "$ROOT/ctld"\n'
                  'echo "CREATE DATABASE slurm_acct_db; -- the dump"\n'),
    "mysql": 'echo "mysql $*" >> "$ROOT/calls"; [ "$1" = -e ] || cat > "$ROOT/loaded"\n',
}


class StandInShell:
    """The controller's shell: bash on this machine, the stand-ins first on its PATH."""

    host = "ctl"

    def __init__(self, root: Path) -> None:
        self.root = root
        bin_dir = root / "bin"
        bin_dir.mkdir()
        for name, body in STANDINS.items():
            (bin_dir / name).write_text("#!/bin/bash\n" + body)
            (bin_dir / name).chmod(0o755)
        self.env = {**os.environ, "ROOT": str(root), "PATH": f"{bin_dir}:{os.environ['PATH']}"}

    def run(self, command: str, check: bool = True, timeout: float = 120,
            stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                              timeout=timeout, input=stdin, env=self.env, check=False)
        if check and proc.returncode:
            raise b.RemoteError(f"on ctl: {command[:80]!r} failed ({proc.returncode}): "
                                f"{proc.stderr.strip()}")
        return proc

    def start(self, command: str) -> subprocess.Popen[str]:
        return subprocess.Popen(["bash", "-c", command], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=self.env)

    def to_file(self, command: str, dest: Path, timeout: float = 3600) -> None:
        self._binary(command, stdout=dest)

    def from_file(self, command: str, source: Path, timeout: float = 3600) -> None:
        self._binary(command, stdin=source)

    def _binary(self, command: str, stdout: Path | None = None,
                stdin: Path | None = None) -> None:
        with open(stdout or os.devnull, "wb") as out, open(stdin or os.devnull, "rb") as into:
            proc = subprocess.run(["bash", "-c", command], stdin=into, stdout=out,
                                  stderr=subprocess.PIPE, env=self.env, check=False)
        if proc.returncode:
            raise b.RemoteError(f"on ctl: {command[:80]!r} failed ({proc.returncode}): "
                                f"{proc.stderr.decode().strip()}")

    def calls(self) -> list[str]:
        path = self.root / "calls"
        return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def dbd_port():
    """slurmdbd's port: a socket that listens (a restore waits for it to answer)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


@pytest.fixture
def ctl(tmp_path, monkeypatch, dbd_port):
    root = tmp_path / "ctl"
    root.mkdir()
    shell = StandInShell(root)
    state = root / "var" / "slurmctld"
    (state / "hash.3" / "job.13").mkdir(parents=True)
    (state / "job_state").write_bytes(b"\x00job state\x01")
    (state / "hash.3" / "job.13" / "script").write_text("#!/bin/sh\nhostname\n")
    (root / "etc").mkdir()
    (root / "etc" / "slurmdbd.conf").write_text(f"DbdPort={dbd_port}\nStorageLoc=slurm_acct_db\n")
    secrets = root / "etc" / "munge"
    secrets.mkdir()
    (secrets / "munge.key").write_bytes(b"SECRET-KEY-BYTES")
    (secrets / "munge.key").chmod(0o400)
    (secrets / "README").write_text("readable\n")
    (secrets / "README").chmod(0o644)
    (root / "config").write_text(CONFIG.format(etc=root / "etc", user=getpass.getuser(),
                                               state=state))
    (root / "ctld").write_text("started\n")
    monkeypatch.setattr(b, "SECRET_DIRS", (str(secrets), str(root / "no-such-dir")))
    monkeypatch.setattr(b, "controller_lock", functools.partial(
        maintain.controller_lock, lock=str(root / "metalslurm.lock")))
    monkeypatch.setattr(b.time, "sleep", lambda s: None)
    return shell


@pytest.fixture
def inventory(tmp_path):
    path = tmp_path / "inventory.yml"
    path.write_text("all:\n  children:\n    slurm_controller: {hosts: {ctl: {}}}\n")
    return path


def test_a_backup_stops_slurmctld_for_the_dump_and_the_archive_and_lists_secrets(
        ctl, inventory, tmp_path):
    lines: list[str] = []
    dest = tmp_path / "backup"
    manifest = b.take_backup(ctl, ctl, dest, inventory, lines.append)
    calls = ctl.calls()
    stop = calls.index("systemctl stop slurmctld")
    start = calls.index("systemctl start slurmctld")
    dump = next(i for i, c in enumerate(calls) if c.startswith("mysqldump"))
    assert calls[dump] == ("mysqldump --single-transaction --routines --events --databases "
                           "slurm_acct_db (slurmctld stopped)")
    assert stop < dump < start
    assert calls[stop - 1] == ("systemd-run --quiet --unit=metalslurm-backup-restart "
                               "--on-active=600 /bin/systemctl start slurmctld")
    assert calls[start + 1] == "systemctl stop metalslurm-backup-restart.timer"
    assert (ctl.root / "ctld").read_text() == "started\n"
    assert sorted(p.name for p in dest.iterdir()) == sorted(
        [b.DATABASE_FILE, b.STATE_FILE, b.INVENTORY_COPY, b.MANIFEST])
    assert dest.stat().st_mode & 0o777 == 0o700
    assert {p.name: p.stat().st_mode & 0o777 for p in dest.iterdir()} == dict.fromkeys(
        [b.DATABASE_FILE, b.STATE_FILE, b.INVENTORY_COPY, b.MANIFEST], 0o600)
    with tarfile.open(dest / b.STATE_FILE) as archive:
        assert sorted(archive.getnames()) == [".", "./hash.3", "./hash.3/job.13",
                                              "./hash.3/job.13/script", "./job_state"]
    assert json.loads((dest / b.MANIFEST).read_text()) == manifest
    assert manifest["cluster"] == "ms-e2e13b" and manifest["slurm_version"] == "24.11.5"
    assert manifest["database"] == {"name": "slurm_acct_db", "host": "ctl", "included": True}
    assert manifest["secrets_not_copied"] == [{
        "host": "ctl", "path": str(ctl.root / "etc" / "munge" / "munge.key"),
        "owner": getpass.getuser(), "group": manifest["secrets_not_copied"][0]["group"],
        "mode": "0400", "size": 16}]
    assert all(b"SECRET-KEY-BYTES" not in p.read_bytes() for p in dest.iterdir()
               if p.name != b.STATE_FILE)
    assert b.checked_backup(dest) == manifest
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert len(lines) == 1 and lines[0].startswith(
        f"backup of cluster ms-e2e13b (Slurm 24.11.5) in {dest}: the accounting database "
        "slurm_acct_db, slurmctld's state (0 jobs in the queue), the inventory; 1 secret "
        "files listed, not copied;")


def test_a_failed_dump_writes_nothing_and_starts_slurmctld_again(ctl, inventory, tmp_path):
    (ctl.root / "dump-fails").touch()
    with pytest.raises(b.RemoteError, match="mysqldump: Got error"):
        b.take_backup(ctl, ctl, tmp_path / "backup", inventory, print)
    assert not (tmp_path / "backup").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ctl", "inventory.yml"]
    assert (ctl.root / "ctld").read_text() == "started\n"
    assert ctl.calls()[-3:] == ["systemctl start slurmctld",
                                "systemctl stop metalslurm-backup-restart.timer",
                                "scontrol ping"]


def test_a_restore_loads_the_database_and_puts_the_state_in_place_keeping_the_old(
        ctl, inventory, tmp_path):
    dest = tmp_path / "backup"
    manifest = b.take_backup(ctl, ctl, dest, inventory, print)
    state = ctl.root / "var" / "slurmctld"
    for path in sorted(state.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    (state / "job_state").write_bytes(b"a new controller's empty state")
    before = len(ctl.calls())
    lines: list[str] = []
    b.restore_backup(ctl, ctl, dest, manifest, lines.append)
    calls = [c for c in ctl.calls()[before:] if not c.startswith(("scontrol", "squeue"))]
    # The restart timer around the stop; the state is in place (it is read below) before the
    # database is loaded; slurmdbd is waited for before slurmctld starts.
    assert calls == ["systemctl stop metalslurm-backup-restart.timer",
                     "systemctl reset-failed metalslurm-backup-restart.timer "
                     "metalslurm-backup-restart.service",
                     "systemd-run --quiet --unit=metalslurm-backup-restart --on-active=600 "
                     "/bin/systemctl start slurmctld",
                     "systemctl stop slurmctld", "systemctl stop slurmdbd",
                     "mysql -e DROP DATABASE IF EXISTS `slurm_acct_db`", "mysql --binary-mode",
                     "systemctl start slurmdbd", "systemctl show --property=ActiveState "
                     "--value slurmdbd", "systemctl start slurmctld",
                     "systemctl stop metalslurm-backup-restart.timer"]
    assert (ctl.root / "loaded").read_text() == "CREATE DATABASE slurm_acct_db; -- the dump\n"
    assert (state / "job_state").read_bytes() == b"\x00job state\x01"
    assert (state / "hash.3" / "job.13" / "script").read_text() == "#!/bin/sh\nhostname\n"
    replaced = [p for p in state.parent.iterdir() if p.name.startswith("slurmctld.replaced-")]
    assert len(replaced) == 1
    assert (replaced[0] / "job_state").read_bytes() == b"a new controller's empty state"
    assert sorted(p.name for p in state.parent.iterdir()) == sorted(["slurmctld",
                                                                     replaced[0].name])
    assert lines[0].startswith(f"restored cluster ms-e2e13b from {dest} (taken "
                               f"{manifest['taken_at']} on Slurm 24.11.5): the accounting "
                               "database, slurmctld's state (0 jobs in the queue;")


def test_a_restore_is_refused_before_anything_stops(ctl, inventory, tmp_path):
    dest = tmp_path / "backup"
    manifest = b.take_backup(ctl, ctl, dest, inventory, print)
    before = len(ctl.calls())
    (ctl.root / "queue").write_text("PENDING\nRUNNING\nPENDING\n")
    with pytest.raises(b.BackupError) as refused:
        b.restore_backup(ctl, ctl, dest, manifest, print)
    assert str(refused.value) == (
        "the controller's queue holds 3 jobs (2 PENDING, 1 RUNNING), which a restore replaces: "
        "cancel them (scancel) or give --force")
    (ctl.root / "queue").unlink()
    with pytest.raises(b.InputError) as other:
        b.restore_backup(ctl, ctl, dest, {**manifest, "cluster": "prod"}, print)
    assert str(other.value) == (f"DIR {dest}: is a backup of cluster prod, and this "
                                "inventory's controller runs cluster ms-e2e13b: give a backup "
                                "of ms-e2e13b")
    with pytest.raises(b.InputError, match=r"was taken on Slurm 25.05.1, newer than the "
                       r"controller's 24.11.5, which cannot read its state"):
        b.restore_backup(ctl, ctl, dest, {**manifest, "slurm_version": "25.05.1"}, print)
    assert not any(c.startswith("systemctl") for c in ctl.calls()[before:])


def _tar(path: Path, *members: tarfile.TarInfo) -> None:
    with tarfile.open(path, "w:gz") as archive:
        for member in members:
            archive.addfile(member, io.BytesIO(b"x" * member.size) if member.isreg() else None)


def _member(name: str, kind: bytes = tarfile.REGTYPE, **attrs: object) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = 1 if kind == tarfile.REGTYPE else 0
    for key, value in attrs.items():
        setattr(info, key, value)
    return info


@pytest.mark.parametrize(("member", "problem"), [
    (_member("./job_state", tarfile.SYMTYPE, linkname="/etc/shadow"),
     "holds './job_state', which is not a plain file or directory"),
    (_member("./hash.0", tarfile.LNKTYPE, linkname="/etc/shadow"),
     "holds './hash.0', which is not a plain file or directory"),
    (_member("./fifo", tarfile.FIFOTYPE), "holds './fifo', which is not a plain file or "
     "directory"),
    (_member("../../etc/cron.d/x"), "holds '../../etc/cron.d/x', a path outside its directory"),
    (_member("/etc/cron.d/x"), "holds '/etc/cron.d/x', a path outside its directory"),
])
def test_a_state_archive_with_links_devices_or_paths_outside_is_refused(
        ctl, inventory, tmp_path, member, problem):
    dest = tmp_path / "backup"
    b.take_backup(ctl, ctl, dest, inventory, print)
    _tar(dest / b.STATE_FILE, _member("./job_state"), member)
    manifest = json.loads((dest / b.MANIFEST).read_text())
    manifest["files"][b.STATE_FILE]["sha256"] = b.sha256_of(dest / b.STATE_FILE)
    (dest / b.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(b.InputError) as refused:
        b.checked_backup(dest)
    assert str(refused.value) == (f"DIR {dest}: {b.STATE_FILE} {problem}: restore only what "
                                  "'metalslurm backup' wrote")


def _main(*argv: str) -> tuple[int, list[str]]:
    err = io.StringIO()
    from contextlib import redirect_stderr
    with redirect_stderr(err):
        code = cli.main(list(argv))
    return code, err.getvalue().splitlines()


@pytest.mark.parametrize(("make", "problem"), [
    (lambda d: None, "is not a directory: give a directory 'metalslurm backup' wrote"),
    (lambda d: d.mkdir(), "has no metalslurm-backup.json: give a directory 'metalslurm "
     "backup' wrote"),
    (lambda d: (d.mkdir(), (d / b.MANIFEST).write_bytes(b"\xff\xfe\x00binary")),
     "metalslurm-backup.json cannot be read as JSON (UnicodeDecodeError): give a directory "
     "'metalslurm backup' wrote"),
    (lambda d: (d.mkdir(), (d / b.MANIFEST).write_text("{not json")),
     "metalslurm-backup.json cannot be read as JSON (JSONDecodeError): give a directory "
     "'metalslurm backup' wrote"),
    (lambda d: (d.mkdir(), (d / b.MANIFEST).write_text("[1, 2]")),
     "metalslurm-backup.json is not a JSON object: give a directory 'metalslurm backup' wrote"),
    (lambda d: (d.mkdir(), (d / b.MANIFEST).write_text('{"format": "1"}')),
     "metalslurm-backup.json has no valid 'format': give a directory 'metalslurm backup' "
     "wrote"),
])
def test_restore_refuses_what_is_not_a_backup_in_one_line(tmp_path, inventory, make, problem):
    source = tmp_path / "backup"
    make(source)
    code, lines = _main("restore", "-i", str(inventory), str(source))
    assert (code, lines) == (2, [f"error: DIR {source}: {problem}"])


def test_restore_refuses_a_damaged_or_partial_backup(ctl, inventory, tmp_path):
    dest = tmp_path / "backup"
    b.take_backup(ctl, ctl, dest, inventory, print)
    with open(dest / b.DATABASE_FILE, "ab") as handle:
        handle.write(b"\0")
    code, lines = _main("restore", "-i", str(inventory), str(dest))
    assert (code, lines) == (2, [f"error: DIR {dest}: {b.DATABASE_FILE} is not the file the "
                                 "backup wrote (its SHA-256 differs): the backup is damaged; "
                                 "give another"])
    (dest / b.DATABASE_FILE).unlink()
    code, lines = _main("restore", "-i", str(inventory), str(dest))
    assert (code, lines) == (2, [f"error: DIR {dest}: lacks {b.DATABASE_FILE}, which its "
                                 "manifest names: the backup is not whole"])


def test_backup_refuses_a_directory_it_would_write_over_in_one_line(tmp_path, inventory):
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep").write_text("mine\n")
    afile = tmp_path / "afile"
    afile.write_text("x")
    cases = [
        (full, "is not empty: give a new or empty directory (a backup never writes over "
         "another)"),
        (afile, "is not a directory: give a new or empty directory for the backup"),
        (tmp_path / "no" / "dir", f"is under {tmp_path / 'no'}, which does not exist: make it "
         "first"),
    ]
    for dest, problem in cases:
        code, lines = _main("backup", "-i", str(inventory), str(dest))
        assert (code, lines) == (2, [f"error: DIR {dest}: {problem}"])
    assert (full / "keep").read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "full", "inventory.yml"]
    code, lines = _main("backup", str(tmp_path / "new"))
    assert code == 2 and lines[0].startswith("error: --inventory: is required")


def test_the_config_and_release_readers():
    config = b.parse_config("Configuration data as of x\nClusterName = a b\nSLURM_VERSION  =  "
                            "24.11.5\nNodeFeaturesPlugins    = (null)\n")
    assert config == {"ClusterName": "a b", "SLURM_VERSION": "24.11.5",
                      "NodeFeaturesPlugins": "(null)"}
    assert b.release_of("24.11.5") == (24, 11) and b.release_of("22.05.8") < (23, 2)
    with pytest.raises(ValueError):
        b.release_of("unknown")


def test_a_backup_during_which_slurmctld_came_back_is_not_written(ctl, inventory, tmp_path):
    """The restart timer fired in the middle of a long copy: the state archived after it
    would not agree with the dump."""
    (ctl.root / "timer-fires").touch()
    with pytest.raises(b.BackupError, match=r"^slurmctld started during the copy \(the restart "
                       r"timer metalslurm-backup-restart fires after 600 s\): the backup would "
                       r"not be consistent, and was not written$"):
        b.take_backup(ctl, ctl, tmp_path / "backup", inventory, print)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ctl", "inventory.yml"]


def _rewrite(dest: Path, name: str, data: bytes, **manifest_changes: object) -> None:
    (dest / name).write_bytes(data)
    manifest = json.loads((dest / b.MANIFEST).read_text())
    if name in manifest["files"]:
        manifest["files"][name]["sha256"] = b.sha256_of(dest / name)
    manifest.update(manifest_changes)
    (dest / b.MANIFEST).write_text(json.dumps(manifest))


def test_restore_refuses_what_would_act_as_root_beyond_the_state(ctl, inventory, tmp_path):
    """A dump that runs a shell command through mysql's client, a manifest whose database
    and files disagree or that names other files, a directory others can write."""
    dest = tmp_path / "backup"
    b.take_backup(ctl, ctl, dest, inventory, print)
    original = (dest / b.DATABASE_FILE).read_bytes()
    _rewrite(dest, b.DATABASE_FILE, gzip.compress(b"USE x;\n\\! touch /tmp/owned\n"))
    code, lines = _main("restore", "-i", str(inventory), str(dest))
    assert (code, lines) == (2, [f"error: DIR {dest}: {b.DATABASE_FILE} line 2 is a mysql "
                                 "client command, not SQL: restore only what 'metalslurm "
                                 "backup' wrote"])
    _rewrite(dest, b.DATABASE_FILE, original)
    manifest = json.loads((dest / b.MANIFEST).read_text())
    _rewrite(dest, b.MANIFEST, (dest / b.MANIFEST).read_bytes(),
             files={k: v for k, v in manifest["files"].items() if k != b.DATABASE_FILE})
    code, lines = _main("restore", "-i", str(inventory), str(dest))
    assert (code, lines) == (2, [f"error: DIR {dest}: {b.MANIFEST} says the database is "
                                 f"included, and does not name {b.DATABASE_FILE}: give a "
                                 "directory 'metalslurm backup' wrote"])
    _rewrite(dest, b.MANIFEST, (dest / b.MANIFEST).read_bytes(),
             files={**manifest["files"], "../../etc/shadow": {"sha256": "0"}})
    code, lines = _main("restore", "-i", str(inventory), str(dest))
    assert (code, lines) == (2, [f"error: DIR {dest}: {b.MANIFEST} names files a backup does "
                                 "not hold (../../etc/shadow): give a directory 'metalslurm "
                                 "backup' wrote"])
    _rewrite(dest, b.MANIFEST, (dest / b.MANIFEST).read_bytes(), files=manifest["files"])
    dest.chmod(0o770)
    code, lines = _main("restore", "-i", str(inventory), str(dest))
    assert (code, lines) == (2, [f"error: DIR {dest}: it can be written by others than its "
                                 f"owner (mode 0770, uid {os.geteuid()}): a backup is unpacked "
                                 "and loaded as root on the controller; keep it where only its "
                                 "owner can write"])
    dest.chmod(0o700)
    assert b.checked_backup(dest)["cluster"] == "ms-e2e13b"


def test_a_manifest_that_is_a_fifo_or_a_link_is_refused_without_reading(tmp_path, inventory):
    source = tmp_path / "backup"
    source.mkdir()
    os.mkfifo(source / b.MANIFEST)
    code, lines = _main("restore", "-i", str(inventory), str(source))
    assert (code, lines) == (2, [f"error: DIR {source}: {b.MANIFEST} cannot be read as JSON "
                                 "(ValueError): give a directory 'metalslurm backup' wrote"])
    (source / b.MANIFEST).unlink()
    (source / b.MANIFEST).symlink_to("/etc/passwd")
    code, lines = _main("restore", "-i", str(inventory), str(source))
    assert (code, lines) == (2, [f"error: DIR {source}: {b.MANIFEST} cannot be read as JSON "
                                 "(OSError): give a directory 'metalslurm backup' wrote"])


def test_a_backup_into_a_link_is_refused(tmp_path, inventory):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    code, lines = _main("backup", "-i", str(inventory), str(tmp_path / "link"))
    assert (code, lines) == (2, [f"error: DIR {tmp_path / 'link'}: is a link or names a "
                                 "directory through one (or . or ..): give the directory's own "
                                 "path"])


def test_the_controller_refuses_an_archive_with_a_link_whatever_passed_the_check(ctl, tmp_path):
    """The controller's own check after unpacking (as SlurmUser): a link that came out of
    the archive (GNU tar reads on where Python's tarfile stopped) is refused, the unpacked
    directory removed, the state in place untouched."""
    state = ctl.root / "var" / "slurmctld"
    archive = tmp_path / "state.tar.gz"
    _tar(archive, _member("./job_state"),
         _member("./evil", tarfile.SYMTYPE, linkname="/etc"))
    script = b.RESTORE_STATE.format(state=state, user=getpass.getuser(), stamp="X")
    with pytest.raises(b.RemoteError, match=r"the archive holds evil: not a file or "
                       r"directory"):
        ctl.from_file("bash -c " + shlex.quote(script), archive)
    assert (state / "job_state").read_bytes() == b"\x00job state\x01"
    assert sorted(p.name for p in state.parent.iterdir()) == ["slurmctld"]


def test_the_inventory_copy_leaves_connection_passwords_out(ctl, tmp_path):
    """A hand-written inventory may hold a sudo or SSH password: the backup, kept off-site,
    must not carry it (the manifest says where each was)."""
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        "all:\n  vars: {ansible_become_password: hunter2-group, metalslurm_cluster_name: x}\n"
        "  hosts:\n    ctl: {ansible_host: 10.0.0.10, ansible_password: hunter2-ssh,\n"
        "          ansible_become_pass: hunter2-sudo, ansible_user: debian}\n"
        "  children:\n    slurm_controller: {hosts: {ctl: {}}}\n")
    lines: list[str] = []
    manifest = b.take_backup(ctl, ctl, tmp_path / "backup", inventory, lines.append)
    assert manifest["inventory_secrets_removed"] == [
        "all.vars.ansible_become_password", "all.hosts.ctl.ansible_password",
        "all.hosts.ctl.ansible_become_pass"]
    copy = yaml.safe_load((tmp_path / "backup" / b.INVENTORY_COPY).read_text())
    assert copy == {"all": {"vars": {"metalslurm_cluster_name": "x"},
                            "hosts": {"ctl": {"ansible_host": "10.0.0.10",
                                              "ansible_user": "debian"}},
                            "children": {"slurm_controller": {"hosts": {"ctl": {}}}}}}
    assert all(b"hunter2" not in p.read_bytes() for p in (tmp_path / "backup").iterdir())
    assert "the inventory (without its 3 connection passwords);" in lines[0]


def test_a_restore_stops_the_backup_controller_around_the_controllers_stop(
        ctl, inventory, tmp_path):
    """With a backup controller its slurmctld is stopped first and started last: it must
    not take over, on the state being replaced, during a load longer than SlurmctldTimeout;
    it is started again even when the restore fails."""
    dest = tmp_path / "backup"
    manifest = b.take_backup(ctl, ctl, dest, inventory, print)
    (tmp_path / "ctl2").mkdir()
    standby = StandInShell(tmp_path / "ctl2")
    before = len(ctl.calls())
    b.restore_backup(ctl, ctl, dest, manifest, print, standby=standby)
    assert standby.calls() == ["systemctl stop slurmctld", "systemctl start slurmctld"]
    ours = [c for c in ctl.calls()[before:] if c.startswith("systemctl")]
    assert ours[2] == "systemctl stop slurmctld" and ours[-2] == "systemctl start slurmctld"

    (ctl.root / "bin" / "mysql").write_text("#!/bin/bash\nexit 1\n")
    with pytest.raises(b.RemoteError):
        b.restore_backup(ctl, ctl, dest, manifest, print, force=True, standby=standby)
    assert standby.calls()[-2:] == ["systemctl stop slurmctld", "systemctl start slurmctld"]
