"""The home_block module on real files: a user's home in a temporary directory, owned by a
uid that is not root's, with the links, FIFOs, devices and hard links a tenant can plant.
Root (these tests run as root, as CI does) must refuse each one and change nothing."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest
from ansible_collections.metalslurm.cluster.plugins.modules import home_block
from ansible_collections.metalslurm.cluster.plugins.modules.home_block import (
    Account,
    Refused,
    apply,
    with_block,
)

UID = 4242
MARKER = "# {mark} metalslurm keys"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE2Jx6a0pq2DHuAAuAzLkK6lEVJl3Cr8i8e9ZmE6QfFF bob"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: it chowns to a user")


@pytest.fixture
def bob(tmp_path) -> Account:
    base = tmp_path / "home"
    base.mkdir()
    base.chmod(0o755)
    home = base / "bob"
    home.mkdir(mode=0o700)
    os.chown(home, UID, UID)
    return Account("bob", UID, UID, str(home))


@pytest.fixture
def target(tmp_path) -> Path:
    """A root-only directory holding a secret, as an attacker's link target."""
    d = tmp_path / "rootonly"
    d.mkdir(mode=0o755)
    (d / "secret").write_text("root's\n")
    (d / "secret").chmod(0o600)
    return d


def snapshot(path: Path) -> tuple:
    """Owner, mode and content of a path and everything under it (links not followed)."""
    rows = []
    for p in [path, *sorted(path.rglob("*"))] if path.is_dir() else [path]:
        st = p.lstat()
        data = (hashlib.sha256(p.read_bytes()).hexdigest() if stat.S_ISREG(st.st_mode)
                else os.readlink(p) if stat.S_ISLNK(st.st_mode) else "")
        rows.append((str(p), st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode),
                     stat.S_IFMT(st.st_mode), data))
    return tuple(rows)


def put(bob: Account, block: str = KEY, state: bool = True, check: bool = False) -> bool:
    return apply(bob, ".ssh/authorized_keys", block, MARKER, state, True, 0o600, 0o700, check)


def test_keys_are_written_as_the_user_owns_them_and_a_second_run_changes_nothing(bob):
    assert put(bob) is True
    ssh = Path(bob.home, ".ssh")
    keys = ssh / "authorized_keys"
    assert keys.read_text() == f"# BEGIN metalslurm keys\n{KEY}\n# END metalslurm keys\n"
    assert [(p.stat().st_uid, p.stat().st_gid, stat.S_IMODE(p.stat().st_mode))
            for p in (ssh, keys)] == [(UID, UID, 0o700), (UID, UID, 0o600)]
    assert put(bob) is False
    assert sorted(os.listdir(ssh)) == ["authorized_keys"]  # no temporary file left


def test_the_users_own_lines_stay_and_the_block_is_replaced_then_removed(bob):
    put(bob)
    keys = Path(bob.home, ".ssh", "authorized_keys")
    with keys.open("a") as f:
        f.write("ssh-rsa AAAA mine")  # no newline at the end
    put(bob, "ssh-ed25519 BBBB new")
    assert keys.read_text() == ("# BEGIN metalslurm keys\nssh-ed25519 BBBB new\n"
                                "# END metalslurm keys\nssh-rsa AAAA mine")
    assert put(bob, state=False) is True
    assert keys.read_text() == "ssh-rsa AAAA mine"


def test_check_mode_reports_a_change_and_writes_nothing(bob):
    assert put(bob, check=True) is True
    assert os.listdir(bob.home) == []


def test_a_wrong_mode_is_mended_on_the_file_itself(bob):
    put(bob)
    keys = Path(bob.home, ".ssh", "authorized_keys")
    keys.chmod(0o644)
    inode = keys.stat().st_ino
    assert put(bob) is True
    assert (stat.S_IMODE(keys.stat().st_mode), keys.stat().st_ino) == (0o600, inode)


@pytest.mark.parametrize("plant", ["dir_link", "file_link", "dangling_link"])
def test_a_link_planted_by_the_user_is_refused_and_its_target_is_unchanged(bob, target, plant):
    ssh = Path(bob.home, ".ssh")
    if plant == "dir_link":
        ssh.symlink_to(target)
        where, what = ssh, "a symbolic link, not a directory"
    else:
        ssh.mkdir(mode=0o700)
        os.chown(ssh, UID, UID)
        link_to = target / "secret" if plant == "file_link" else target / "new-file"
        (ssh / "authorized_keys").symlink_to(link_to)
        where, what = ssh / "authorized_keys", "a symbolic link, not a regular file"
    before, home_before = snapshot(target), snapshot(Path(bob.home))
    with pytest.raises(Refused) as refused:
        put(bob)
    assert str(refused.value) == (f"bob: {where} is {what}: refused, nothing changed (remove "
                                  "it, or have bob remove it, and run again)")
    assert (snapshot(target), snapshot(Path(bob.home))) == (before, home_before)


def test_a_fifo_is_refused_without_blocking(bob):
    ssh = Path(bob.home, ".ssh")
    ssh.mkdir(mode=0o700)
    os.chown(ssh, UID, UID)
    os.mkfifo(ssh / "authorized_keys")
    with pytest.raises(Refused, match=r"authorized_keys is a FIFO, not a regular file"):
        put(bob)


def test_a_device_is_refused(bob):
    ssh = Path(bob.home, ".ssh")
    ssh.mkdir(mode=0o700)
    os.chown(ssh, UID, UID)
    os.mknod(ssh / "authorized_keys", 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null
    with pytest.raises(Refused, match=r"authorized_keys is a device, not a regular file"):
        put(bob)


def test_a_hard_link_to_a_root_file_is_refused_and_the_file_unchanged(bob, target):
    ssh = Path(bob.home, ".ssh")
    ssh.mkdir(mode=0o700)
    os.chown(ssh, UID, UID)
    os.link(target / "secret", ssh / "authorized_keys")
    before = snapshot(target)
    with pytest.raises(Refused, match=r"authorized_keys is a file with 2 hard links"):
        put(bob)
    assert snapshot(target) == before


def test_a_file_or_directory_owned_by_someone_else_is_refused(bob):
    ssh = Path(bob.home, ".ssh")
    ssh.mkdir(mode=0o700)  # root's: bob did not make it
    with pytest.raises(Refused, match=r"\.ssh is a directory owned by uid 0, not by bob"):
        put(bob)
    os.chown(ssh, UID, UID)
    (ssh / "authorized_keys").write_text("root wrote this\n")
    with pytest.raises(Refused, match=r"authorized_keys is a file owned by uid 0, not by bob"):
        put(bob)


def test_a_home_under_a_directory_others_can_write_is_refused(tmp_path):
    base = tmp_path / "open"
    base.mkdir()
    base.chmod(0o777)  # not sticky: anyone could rename bob's home away and put a link there
    (base / "bob").mkdir()
    os.chown(base / "bob", UID, UID)
    with pytest.raises(Refused, match=r"open is owned by uid 0 with mode 0777"):
        put(Account("bob", UID, UID, str(base / "bob")))


def test_a_missing_home_and_a_path_that_climbs_out(bob, tmp_path):
    gone = Account("bob", UID, UID, str(tmp_path / "home" / "nobody"))
    with pytest.raises(Refused, match=r"^bob: .*/home/nobody does not exist"):
        put(gone)
    assert put(gone, state=False) is False  # nothing to remove
    with pytest.raises(ValueError, match="must not climb out"):
        apply(bob, "../alice/.ssh/authorized_keys", KEY, MARKER, True, True, 0o600, 0o700,
              False)
    # Nothing to remove: no directory made, nothing changed.
    assert apply(bob, ".config/enroot/.credentials", "", MARKER, False, True, 0o600, 0o700,
                 False) is False
    assert os.listdir(bob.home) == []


def test_with_block_matches_blockinfile_for_a_file_without_markers():
    assert with_block("", "a\nb", "B", "E", True) == "B\na\nb\nE\n"
    assert with_block("x\n", "", "B", "E", False) == "x\n"
    assert with_block("x\nB\nold\nE\ny\n", "new", "B", "E", True) == "x\nB\nnew\nE\ny\n"


def test_the_module_documents_every_option_it_takes():
    import yaml
    documented = set(yaml.safe_load(home_block.DOCUMENTATION)["options"])
    assert documented == {"user", "path", "block", "marker", "state", "create", "mode",
                          "dir_mode", "home"}
