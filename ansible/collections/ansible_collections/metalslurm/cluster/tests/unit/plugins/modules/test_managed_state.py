"""The managed_state module's readers, on real files in a temporary directory (and a
recorded `systemctl show` output)."""

from __future__ import annotations

import hashlib
import os
import pwd
import subprocess

import pytest
from ansible_collections.metalslurm.cluster.plugins.modules import managed_state


def test_a_file_a_directory_a_link_and_a_missing_path(tmp_path):
    (tmp_path / "f").write_text("hello\n")
    (tmp_path / "f").chmod(0o640)
    (tmp_path / "d").mkdir(mode=0o700)
    (tmp_path / "d").chmod(0o700)
    os.symlink("/usr/sbin/prog", tmp_path / "l")
    me = pwd.getpwuid(os.getuid()).pw_name
    f = managed_state.path_state(str(tmp_path / "f"))
    assert f == {"exists": True, "type": "file", "owner": me, "group": f["group"],
                 "mode": "0640", "sha1": hashlib.sha1(b"hello\n").hexdigest()}  # noqa: S324
    d = managed_state.path_state(str(tmp_path / "d"))
    assert (d["type"], d["mode"]) == ("directory", "0700")
    link = managed_state.path_state(str(tmp_path / "l"))
    assert (link["type"], link["target"]) == ("link", "/usr/sbin/prog")  # not followed
    assert managed_state.path_state(str(tmp_path / "nothing")) == {"exists": False}
    assert managed_state.read_text(str(tmp_path / "f")) == "hello\n"
    assert managed_state.read_text(str(tmp_path / "nothing")) is None


def fake_systemctl(stdout: str, returncode: int = 0):
    def run(argv, **_kwargs):
        assert argv[:3] == ["systemctl", "show", "--property=Id,ActiveState,UnitFileState"]
        return subprocess.CompletedProcess(argv, returncode, stdout, "")
    return run


def test_units_from_one_systemctl_show():
    out = ("Id=prometheus.service\nActiveState=active\nUnitFileState=enabled\n\n"
           "Id=prometheus-alertmanager.service\nActiveState=inactive\nUnitFileState=masked\n\n"
           "Id=nothing.service\nActiveState=inactive\nUnitFileState=\n")
    assert managed_state.unit_states(["prometheus", "prometheus-alertmanager", "nothing"],
                                     run=fake_systemctl(out)) == {
        "prometheus": {"active": "active", "enabled": "enabled"},
        "prometheus-alertmanager": {"active": "inactive", "enabled": "masked"},
        "nothing": {"active": "inactive", "enabled": "unknown"}}


def test_a_failing_systemctl_leaves_every_unit_unknown():
    assert managed_state.unit_states(["a", "b"], run=fake_systemctl("", 1)) == {
        "a": {"active": "unknown", "enabled": "unknown"},
        "b": {"active": "unknown", "enabled": "unknown"}}
    assert managed_state.unit_states([]) == {}


def fake_getent(stdout: bytes, returncode: int = 0, stderr: bytes = b""):
    def run(argv, **_kwargs):
        assert argv[:2] == ["getent", "--"]
        return subprocess.CompletedProcess(argv, returncode, stdout, stderr)
    return run


def test_a_getent_database_is_read_as_the_getent_module_sets_it_first_entry_kept():
    out = ("root:x:0:0:root:/root:/bin/bash\n"
           "alice:x:2001:2001::/home/alice:/bin/bash\n"
           "alice:x:9999:9999:from LDAP:/ldap/alice:/bin/sh\n"  # NSS resolves the first
           "slurm:x:64030:64030:Slurm workload manager:/nonexistent:/usr/sbin/nologin\n")
    assert managed_state.getent_table("passwd", run=fake_getent(out.encode())) == {
        "root": ["x", "0", "0", "root", "/root", "/bin/bash"],
        "alice": ["x", "2001", "2001", "", "/home/alice", "/bin/bash"],
        "slurm": ["x", "64030", "64030", "Slurm workload manager", "/nonexistent",
                  "/usr/sbin/nologin"]}
    assert managed_state.getent_table("group", run=fake_getent(b"sudo:x:27:alice,bob\n")) == {
        "sudo": ["x", "27", "alice,bob"]}


def test_a_getent_that_fails_is_an_error_not_an_empty_database():
    with pytest.raises(OSError, match="getent shadow failed \\(exit 2\\): no access"):
        managed_state.getent_table("shadow", run=fake_getent(b"", 2, b"no access"))


def test_a_latin_1_comment_is_read_and_shadows_hashes_are_left_out():
    passwd = b"eve:x:2005:2005:Ren\xe9e:/home/eve:/bin/bash\n"
    assert managed_state.getent_table("passwd", run=fake_getent(passwd))["eve"][3] == "Ren\ufffde"
    shadow = b"alice:$y$j9T$salt$hash:20000:0:99999:7:::\nbob:!:20000:0:99999:7::1:\n"
    assert managed_state.getent_table("shadow", run=fake_getent(shadow)) == {
        "alice": ["", "20000", "0", "99999", "7", "", "", ""],
        "bob": ["", "20000", "0", "99999", "7", "", "1", ""]}


def test_the_real_getent_of_this_machine_has_root():
    assert managed_state.getent_table("passwd")["root"][1] == "0"


def test_a_file_longer_than_the_read_limit_is_refused_never_cut_short(tmp_path):
    """A JSON record cut at the limit would no longer parse (a large cluster's GPU facts):
    the text of a file at the limit comes back whole, one byte more fails, naming the path."""
    at_limit = tmp_path / "at-limit.json"
    at_limit.write_bytes(b"[" + b" " * (managed_state.READ_LIMIT - 2) + b"]")
    assert len(managed_state.read_text(str(at_limit))) == managed_state.READ_LIMIT
    over = tmp_path / "over.json"
    over.write_bytes(b"[" + b" " * (managed_state.READ_LIMIT - 1) + b"]")
    with pytest.raises(managed_state.TooLongError, match=f"^{over} is longer than the "):
        managed_state.read_text(str(over))
