"""The key_file module (the munge role's munge key, slurm_common's Slurm JWT key), run as
Ansible runs it: a process reading its JSON arguments."""

import base64
import json
import os
import subprocess
import sys

import pytest
from ansible_collections.metalslurm.cluster.plugins.modules import key_file

KEY = base64.b64encode(bytes(range(256)) * 4).decode()


@pytest.fixture
def run_module(tmp_path):
    module = key_file.__file__

    def run(**args):
        args.setdefault("_ansible_check_mode", False)
        path = tmp_path / "args.json"
        path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
        proc = subprocess.run([sys.executable, module, str(path)], capture_output=True,
                              text=True, check=False)
        return json.loads(proc.stdout)
    return run


def test_writes_exact_bytes_with_mode_then_is_idempotent(run_module, tmp_path):
    key = tmp_path / "munge.key"
    first = run_module(path=str(key), content_b64=KEY, mode="0400")
    assert first["changed"] is True
    assert key.read_bytes() == base64.b64decode(KEY)
    assert oct(os.stat(key).st_mode & 0o777) == "0o400"
    assert run_module(path=str(key), content_b64=KEY, mode="0400")["changed"] is False
    assert KEY not in json.dumps(first)


def test_check_mode_reports_without_writing(run_module, tmp_path):
    key = tmp_path / "munge.key"
    result = run_module(path=str(key), content_b64=KEY, _ansible_check_mode=True)
    assert (result["changed"], result["replaces"]) == (True, False)
    assert not key.exists()


def test_it_says_when_it_replaces_another_key(run_module, tmp_path):
    """A first key, or the same key with another mode, replaces nothing; another key does."""
    key = tmp_path / "munge.key"
    run_module(path=str(key), content_b64=KEY, mode="0400")
    assert run_module(path=str(key), content_b64=KEY, mode="0600")["replaces"] is False
    other = base64.b64encode(bytes(reversed(range(256))) * 4).decode()
    result = run_module(path=str(key), content_b64=other, _ansible_check_mode=True)
    assert (result["changed"], result["replaces"]) == (True, True)
    assert key.read_bytes() == base64.b64decode(KEY)
    # held_if: another key counts only where that file says the key is in service.
    marker = tmp_path / "slurm.conf"
    result = run_module(path=str(key), content_b64=other, held_if=str(marker),
                        _ansible_check_mode=True)
    assert (result["changed"], result["replaces"]) == (True, False)
    marker.write_text("ClusterName=c\n")
    result = run_module(path=str(key), content_b64=other, held_if=str(marker),
                        _ansible_check_mode=True)
    assert (result["changed"], result["replaces"]) == (True, True)


def test_a_key_is_required_the_module_never_makes_one(run_module, tmp_path):
    key = tmp_path / "munge.key"
    result = run_module(path=str(key), mode="0400")
    assert result.get("failed") is True and "content_b64" in result["msg"]
    assert not key.exists()
    assert "generate" in run_module(path=str(key), generate=True, content_b64=KEY)["msg"]


@pytest.mark.parametrize(("content", "message"), [
    ("not base64!!", "not valid base64"),
    (base64.b64encode(b"short").decode(), "at least 32"),
])
def test_bad_keys_are_refused(run_module, tmp_path, content, message):
    result = run_module(path=str(tmp_path / "k"), content_b64=content)
    assert result.get("failed") is True
    assert message in result["msg"]


def test_the_jwt_key_is_written_the_same_way_with_its_own_floor(run_module, tmp_path):
    """slurm_common writes Slurm's JWT key with the same module: 32 random bytes, the bytes
    the operator's secret file holds."""
    jwt_key = base64.b64encode(bytes(range(32))).decode()
    key = tmp_path / "jwt_hs256.key"
    assert run_module(path=str(key), content_b64=jwt_key, mode="0400")["changed"] is True
    assert key.read_bytes() == bytes(range(32))
    result = run_module(path=str(key), content_b64=base64.b64encode(b"k" * 16).decode(),
                        min_bytes=32)
    assert result.get("failed") is True and "needs at least 32" in result["msg"]
    assert key.read_bytes() == bytes(range(32))
