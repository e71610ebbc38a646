"""The munge role's own check, run by Ansible: an inventory that names no key file is refused
before any host is touched, with a sentence saying where the key comes from; the role never
makes a key (the cluster's is made once on the operator's side, infra/stack/state.py); a
controller holding another key keeps it unless the operator re-keys on purpose."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.paths import REPO


def run_checks(tmp_path: Path, expect_failure: bool = True,
               controller: str = "localhost", **role_vars: object) -> str:
    """The role's checks alone on this machine, whose controller is ``controller`` (an
    inventory line; this machine by default): their output, whitespace folded (the run must
    fail, unless ``expect_failure`` is false)."""
    play = [{"hosts": "nodes", "gather_facts": False,
             "vars": {"ansible_python_interpreter": sys.executable, **role_vars},
             "tasks": [{"name": "The munge role's checks", "ansible.builtin.include_role": {
                 "name": "munge", "tasks_from": "validate.yml"}}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"),
           "ANSIBLE_ROLES_PATH": str(REPO / "roles"), "ANSIBLE_NOCOLOR": "1"}
    # Two nodes on this machine: the controller is asked from the first, once; the other
    # shows what every other node of the play is told.
    (tmp_path / "hosts.ini").write_text(
        "[nodes]\nlocalhost ansible_connection=local\nnode-2 ansible_connection=local\n"
        f"[slurm_controller]\n{controller}\n")
    proc = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i",
                           str(tmp_path / "hosts.ini"),
                           str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=env, check=False, timeout=300)
    assert (proc.returncode != 0) == expect_failure, proc.stdout[-3000:]
    return " ".join(proc.stdout.split())


def test_an_inventory_without_a_key_file_is_refused(tmp_path: Path) -> None:
    out = run_checks(tmp_path)
    assert "munge_key_b64_file is not set: name the operator-side file holding the cluster's " \
           "munge key" in out, out[-3000:]
    assert "which is not a file" not in out


def test_a_key_file_that_is_not_there_is_refused_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "secrets" / "munge.key.b64"
    out = run_checks(tmp_path, munge_key_b64_file=str(missing))
    assert f"munge_key_b64_file names {missing}, which is not a file on this machine " \
           "(the one running Ansible)" in out, out[-3000:]
    assert "is not set" not in out


def _key_files(tmp_path: Path) -> tuple[Path, Path]:
    """(the operator's file with one key, the controller's key file holding another)."""
    operator = tmp_path / "secrets" / "munge.key.b64"
    operator.parent.mkdir()
    operator.write_text(base64.b64encode(bytes(range(256)) * 4).decode() + "\n")
    held = tmp_path / "etc-munge" / "munge.key"
    held.parent.mkdir()
    held.write_bytes(bytes(reversed(range(256))) * 4)
    return operator, held


def _serving(tmp_path: Path) -> str:
    """The controller's slurm.conf: it serves a cluster, so its key is that cluster's."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=c\n")
    return str(conf)


def test_a_controller_holding_another_key_is_refused_and_keeps_it(tmp_path: Path) -> None:
    operator, held = _key_files(tmp_path)
    before = held.read_bytes()
    out = run_checks(tmp_path, munge_key_b64_file=str(operator), munge_key_path=str(held),
                     munge_cluster_file=_serving(tmp_path))
    assert f"localhost, which serves a Slurm cluster, holds another munge key than " \
           f"{operator}; nothing was changed." in out, out[-3000:]
    assert "resume every powered-down node first and run with -e munge_key_rotate=true" in out
    assert held.read_bytes() == before


def test_the_same_key_a_package_made_key_or_a_deliberate_rekey_passes(tmp_path: Path) -> None:
    """The package's own key on a server that serves no cluster yet is replaced, as is
    any key on a deliberate re-key; the cluster's own key or none passes."""
    operator, held = _key_files(tmp_path)
    unserved = str(tmp_path / "no-slurm.conf")
    run_checks(tmp_path, False, munge_key_b64_file=str(operator), munge_key_path=str(held),
               munge_cluster_file=unserved)
    run_checks(tmp_path, False, munge_key_b64_file=str(operator), munge_key_path=str(held),
               munge_cluster_file=_serving(tmp_path), munge_key_rotate=True)
    held.write_bytes(base64.b64decode(operator.read_text()))
    run_checks(tmp_path, False, munge_key_b64_file=str(operator), munge_key_path=str(held),
               munge_cluster_file=_serving(tmp_path))
    held.unlink()
    run_checks(tmp_path, False, munge_key_b64_file=str(operator), munge_key_path=str(held),
               munge_cluster_file=_serving(tmp_path))


def test_a_controller_that_cannot_be_asked_ends_the_run_on_every_host(tmp_path: Path) -> None:
    """The controller unreachable (nothing listens on its SSH port): the question is asked
    once, from the first node, and its failure is every node's, so no node goes on to be
    given a key (the other node never reaches the assert)."""
    operator, held = _key_files(tmp_path)
    out = run_checks(tmp_path, controller="ctl ansible_host=127.0.0.1 ansible_port=1 "
                     "ansible_connection=ssh ansible_ssh_common_args='-o ConnectTimeout=5'",
                     munge_key_b64_file=str(operator), munge_key_path=str(held),
                     munge_cluster_file=_serving(tmp_path))
    assert "fatal: [localhost -> ctl]: UNREACHABLE!" in out, out[-3000:]
    assert "TASK [munge : Check the inventory names the cluster's munge key" not in out, \
        out[-3000:]
