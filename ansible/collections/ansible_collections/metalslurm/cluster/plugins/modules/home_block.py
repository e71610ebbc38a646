#!/usr/bin/python
"""Ansible module: a managed block in a file under a user's home, written by root without
ever following what the user put there.

A home belongs to its user, who can replace any file or directory in it with a symbolic
link, a FIFO, a device node or a hard link to another file. Ansible's ``file`` with
``owner=`` changes a link's target and ``blockinfile`` resolves links, so root writing
``~/.ssh/authorized_keys`` with them hands whatever the link points at (``/etc``,
``/root/.ssh``) to the user. This module walks the path one component at a time from the
home directory with ``O_NOFOLLOW``, checks each directory and the file with ``fstat`` on the
descriptor it opened (so a swap between the check and the use changes nothing), and writes
the new file next to the old one (``O_EXCL``, owner and mode set on the descriptor, fsync)
before renaming it over. Anything else where a directory or a regular file belongs is
refused with one line naming the user and the path, and nothing is changed: the result is
``refused`` with a warning, not a failure, so that one user's home cannot stop a run that
configures the whole cluster.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: home_block
short_description: Manage a marked block in a file under a user's home, refusing links
description:
  - Inserts, replaces or removes a block of lines between two marker lines in C(path), a
    path relative to C(user)'s home directory, as C(blockinfile) does, but never follows a
    symbolic link and never writes through a FIFO, a device, a hard link or an entry owned
    by anyone but the user. Missing directories are made with C(dir_mode), owned by the user.
  - An unsafe entry is refused with one line (returned as C(refused) and as a warning) and
    nothing is changed.
options:
  user: {type: str, required: true, description: The account whose home holds the file.}
  path: {type: str, required: true, description: Path of the file relative to the home.}
  block: {type: str, default: "", description: The lines between the markers.}
  marker:
    type: str
    default: "# {mark} ANSIBLE MANAGED BLOCK"
    description: "Marker line, {mark} being BEGIN or END."
  state:
    type: str
    default: present
    choices: [present, absent]
    description: Whether the block should be there.
  create: {type: bool, default: true, description: Create the file and its directories.}
  mode: {type: str, default: "0600", description: The file's mode.}
  dir_mode: {type: str, default: "0700", description: Mode of the directories it makes.}
  home: {type: str, description: The home directory; default the user's from passwd.}
"""

EXAMPLES = r"""
- name: Write alice's keys into her authorized_keys
  metalslurm.cluster.home_block:
    user: alice
    path: .ssh/authorized_keys
    block: "{{ keys | join('\n') }}"
    marker: "# {mark} metalslurm keys"
"""

RETURN = r"""
path: {description: The file's absolute path., returned: always, type: str}
refused:
  description: Why nothing was done (an unsafe entry); empty when not refused.
  returned: always
  type: str
"""

import os
import pwd
import stat
from dataclasses import dataclass

from ansible.module_utils.basic import AnsibleModule

KINDS = {stat.S_IFLNK: "a symbolic link", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a device",
         stat.S_IFBLK: "a device", stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory",
         stat.S_IFREG: "a regular file"}


class Refused(Exception):
    """An entry that is not what it should be; the message is the one line to show."""


class MissingHome(Refused):
    """The home directory is not there (nothing to remove; nowhere to write)."""


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    home: str


def kind(mode: int) -> str:
    return KINDS.get(stat.S_IFMT(mode), "something else")


def split_relative(path: str) -> list[str]:
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if path.startswith("/") or not parts or ".." in parts:
        raise ValueError(f"path must be relative to the home and must not climb out of it "
                         f"(got {path!r})")
    return parts


def with_block(text: str, block: str, begin: str, end: str, present: bool) -> str:
    """``text`` with the block between ``begin`` and ``end`` set (or removed), as blockinfile
    does: replaced where the markers are, else appended."""
    lines = text.splitlines(keepends=True)
    try:
        first = next(i for i, line in enumerate(lines) if line.rstrip("\r\n") == begin)
        last = next(i for i in range(first, len(lines)) if lines[i].rstrip("\r\n") == end)
    except StopIteration:
        first = last = -1
    new = ([begin + "\n"] + [line + "\n" for line in block.splitlines()] + [end + "\n"]
           if present else [])
    if first >= 0:
        lines[first:last + 1] = new
    elif new:
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        lines += new
    return "".join(lines)


class HomeFile:
    """The file ``parts`` under ``account``'s home, reached without following a link."""

    def __init__(self, account: Account, parts: list[str]) -> None:
        self.account, self.parts = account, parts
        self.path = os.path.join(account.home, *parts)

    def refuse(self, where: str, what: str) -> Refused:
        return Refused(f"{self.account.name}: {where} is {what}: refused, nothing changed "
                       f"(remove it, or have {self.account.name} remove it, and run again)")

    def open_home(self) -> int:
        """The home directory's descriptor; every component from / checked."""
        # Links above the home are root's (/home -> /data/home): resolved. Each directory on
        # the way must then be root's and writable by nobody else (or sticky), or the user
        # could swap it.
        parent = os.path.realpath(os.path.dirname(self.account.home))
        components = [p for p in parent.split("/") if p] + [os.path.basename(self.account.home)]
        fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
        where = ""
        try:
            for i, name in enumerate(components):
                where += "/" + name
                try:
                    nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except FileNotFoundError:
                    raise MissingHome(f"{self.account.name}: {where} does not exist: nothing "
                                  "written (the home is made where homes are made)") from None
                except OSError as exc:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    raise self.refuse(where, kind(st.st_mode) + ", not a directory") from exc
                os.close(fd)
                fd = nxt
                st = os.fstat(fd)
                last = i == len(components) - 1
                owners = {0, self.account.uid} if last else {0}
                # A sticky directory (/tmp) lets nobody rename or remove root's entries.
                shared = st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX
                if st.st_uid not in owners or (not last and shared):
                    raise self.refuse(where, f"owned by uid {st.st_uid} with mode "
                                             f"{stat.S_IMODE(st.st_mode):04o}")
            return fd
        except BaseException:
            os.close(fd)
            raise

    def open_dir(self, create: bool, dir_mode: int, check_mode: bool) -> tuple[int | None, bool]:
        """The file's directory (made if missing and ``create``): (its descriptor, or None
        when it does not exist; whether it was (or would be) made)."""
        fd = self.open_home()
        made = False
        where = self.account.home
        try:
            for name in self.parts[:-1]:
                where = os.path.join(where, name)
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    if not create:
                        os.close(fd)
                        return None, False
                    made = True
                    if check_mode:
                        os.close(fd)
                        return None, True
                    os.mkdir(name, dir_mode, dir_fd=fd)
                    # Made by root: its owner changed while nobody else can reach it yet.
                    os.chown(name, self.account.uid, self.account.gid, dir_fd=fd,
                             follow_symlinks=False)
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if not stat.S_ISDIR(st.st_mode):
                    raise self.refuse(where, kind(st.st_mode) + ", not a directory")
                try:
                    nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except OSError as exc:  # swapped since the stat
                    raise self.refuse(where, "no longer a directory") from exc
                os.close(fd)
                fd = nxt
                st = os.fstat(fd)
                if st.st_uid != self.account.uid:
                    raise self.refuse(where, f"a directory owned by uid {st.st_uid}, not by "
                                             f"{self.account.name}")
            return fd, made
        except BaseException:
            os.close(fd)
            raise

    def read(self, dir_fd: int) -> tuple[str | None, os.stat_result | None]:
        """The file's text and status, or (None, None) when it does not exist."""
        name = self.parts[-1]
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY,
                         dir_fd=dir_fd)
        except FileNotFoundError:
            return None, None
        except OSError as exc:  # ELOOP: a link
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            raise self.refuse(self.path, kind(st.st_mode) + ", not a regular file") from exc
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise self.refuse(self.path, kind(st.st_mode) + ", not a regular file")
            if st.st_nlink != 1:
                raise self.refuse(self.path, f"a file with {st.st_nlink} hard links")
            if st.st_uid != self.account.uid:
                raise self.refuse(self.path, f"a file owned by uid {st.st_uid}, not by "
                                             f"{self.account.name}")
            chunks = []
            while chunk := os.read(fd, 1 << 16):
                chunks.append(chunk)
            return b"".join(chunks).decode("utf-8", errors="surrogateescape"), st
        finally:
            os.close(fd)

    def write(self, dir_fd: int, text: str, mode: int) -> None:
        """The new file beside the old one, renamed over it (a link put there since is
        replaced, not followed)."""
        name = self.parts[-1]
        for n in range(100):
            tmp = f".{name}.metalslurm-{os.getpid()}-{n}"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                             dir_fd=dir_fd)
                break
            except FileExistsError:
                continue
        else:
            raise self.refuse(os.path.join(os.path.dirname(self.path), f".{name}.metalslurm-*"),
                              "taken (100 temporary names)")
        try:
            os.write(fd, text.encode("utf-8", errors="surrogateescape"))
            os.fchown(fd, self.account.uid, self.account.gid)
            os.fchmod(fd, mode)
            os.fsync(fd)
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            os.unlink(tmp, dir_fd=dir_fd)
            raise
        finally:
            os.close(fd)
        os.fsync(dir_fd)


def apply(account: Account, path: str, block: str, marker: str, present: bool, create: bool,
          mode: int, dir_mode: int, check_mode: bool) -> bool:
    """Set the block; return whether anything changed (or would). Raises Refused."""
    target = HomeFile(account, split_relative(path))
    begin, end = marker.replace("{mark}", "BEGIN"), marker.replace("{mark}", "END")
    try:
        dir_fd, made = target.open_dir(create and present, dir_mode, check_mode)
    except MissingHome:
        if present:
            raise
        return False
    if dir_fd is None:
        return made
    try:
        old, st = target.read(dir_fd)
        if old is None and not (present and create):
            return False
        new = with_block(old or "", block, begin, end, present)
        if old is not None and st is not None and new == old:
            if stat.S_IMODE(st.st_mode) == mode:
                return made
            if not check_mode:
                _fchmod_regular(target, dir_fd, mode)
            return True
        if not check_mode:
            target.write(dir_fd, new, mode)
        return True
    finally:
        os.close(dir_fd)


def _fchmod_regular(target: HomeFile, dir_fd: int, mode: int) -> None:
    """The mode set through a descriptor of the file checked again (not through its name)."""
    fd = os.open(target.parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_uid != target.account.uid:
            raise target.refuse(target.path, "no longer the file that was read")
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def account_of(user: str, home: str | None) -> Account:
    entry = pwd.getpwnam(user)
    return Account(user, entry.pw_uid, entry.pw_gid, os.path.normpath(home or entry.pw_dir))


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "user": {"type": "str", "required": True},
            "path": {"type": "str", "required": True},
            "block": {"type": "str", "default": ""},
            "marker": {"type": "str", "default": "# {mark} ANSIBLE MANAGED BLOCK"},
            "state": {"type": "str", "default": "present", "choices": ["present", "absent"]},
            "create": {"type": "bool", "default": True},
            "mode": {"type": "str", "default": "0600"},
            "dir_mode": {"type": "str", "default": "0700"},
            "home": {"type": "str"},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        account = account_of(p["user"], p["home"])
        mode, dir_mode = int(p["mode"], 8), int(p["dir_mode"], 8)
    except KeyError:
        module.fail_json(msg=f"{p['user']}: no such user on this host")
    except ValueError:
        module.fail_json(msg=f"mode {p['mode']!r} and dir_mode {p['dir_mode']!r} must be octal "
                             "strings such as '0600'")
    path = os.path.join(account.home, p["path"].lstrip("/"))
    try:
        changed = apply(account, p["path"], p["block"], p["marker"], p["state"] == "present",
                        p["create"], mode, dir_mode, module.check_mode)
    except ValueError as exc:
        module.fail_json(msg=str(exc), path=path)
    except Refused as exc:
        module.warn(str(exc))
        module.exit_json(changed=False, path=path, refused=str(exc))
    module.exit_json(changed=changed, path=path, refused="")


if __name__ == "__main__":
    main()
