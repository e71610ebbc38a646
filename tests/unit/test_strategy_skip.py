"""The Mitogen strategy (ansible/strategy_plugins/mitogen_linear.py) answers a task whose
``when:`` is false, and runs a task that reaches no host (set_fact, assert, debug, fail, a
role's argument specification, an include), in ansible-playbook itself, without forking a
worker: the run's outcome is Ansible's own linear strategy's, host by host (includes, roles,
blocks, handlers, ``register`` of a skipped result and of a fact, ``no_log``, the
connection's variables in a condition, loops, delegation, a condition that fails to
template, failed assertions, ``end_host``), and such a task is evaluated in
ansible-playbook's process, not in a worker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

HOSTS = ("h0", "h1", "h2", "h3")
PLAYBOOK = """
- name: Edge cases
  hosts: all
  gather_facts: false
  vars:
    some: [h0, h1]
  tasks:
    - name: Decided in the main process
      ansible.builtin.command: "true"
      when: (inventory_hostname | record_pid(pids)) == 'nohost'
    - name: Include on some
      ansible.builtin.include_tasks: inc.yml
      when: inventory_hostname in some
    - name: Role on some
      ansible.builtin.include_role: {name: r1}
      when: inventory_hostname != 'h0'
    - name: A block
      when: inventory_hostname == 'h2'
      block:
        - name: In the block
          ansible.builtin.command: "true"
          when: true
          register: inblock
    - name: Read the block's result
      ansible.builtin.debug: {msg: "skipped={{ inblock is skipped }}"}
    - name: A secret skipped
      ansible.builtin.debug: {msg: secret}
      no_log: true
      when: inventory_hostname == 'h1'
      register: sec
    - name: Read the registered skip
      ansible.builtin.debug:
        msg: "{{ sec.skipped | default(false) }} {{ sec.false_condition | default('') }}"
    - name: The connection's variable in a condition
      ansible.builtin.debug: {msg: local}
      when: ansible_connection == 'local' and inventory_hostname == 'h3'
    - name: A loop
      ansible.builtin.debug: {msg: "{{ item }}"}
      loop: [1, 2]
      when: item == 2 and inventory_hostname == 'h0'
    - name: Delegated
      ansible.builtin.debug: {msg: delegated}
      delegate_to: h0
      when: inventory_hostname == 'h9'
    - name: Undefined in the condition
      ansible.builtin.debug: {msg: undefined}
      when: nosuchvar | bool
      ignore_errors: true
    - name: A fact set on the controller
      ansible.builtin.set_fact:
        made: "{{ (inventory_hostname | record_pid(pids_set)) ~ '-' ~ some | length }}"
        cacheable: true
    - name: A secret fact
      ansible.builtin.set_fact: {hidden: "{{ made }}-hidden"}
      no_log: true
      register: hidden_result
    - name: Read the facts
      ansible.builtin.debug:
        msg: "{{ made }} {{ hidden }} {{ hidden_result.ansible_facts is defined }}"
    - name: An assertion that holds
      ansible.builtin.assert:
        that:
          - made is match('h[0-3]-2')
        quiet: true
    - name: An assertion that fails on one host
      ansible.builtin.assert:
        that:
          - inventory_hostname != 'h2'
        fail_msg: "{{ inventory_hostname }} is h2"
      ignore_errors: true
    - name: Fail on one host
      ansible.builtin.fail: {msg: "failing {{ inventory_hostname }}"}
      when: inventory_hostname == 'h1'
      ignore_errors: true
    - name: A templated include
      ansible.builtin.include_tasks: "{{ 'inc' ~ '.yml' }}"
    - name: A role's other tasks with variables
      ansible.builtin.include_role: {name: r1, tasks_from: other}
      vars: {other_value: "{{ made }}"}
    - name: End one host
      ansible.builtin.meta: end_host
      when: inventory_hostname == 'h3'
    - name: After the end
      ansible.builtin.debug: {msg: after}
      when: inventory_hostname != 'h0'
"""
# Cases a review found: the condition's variables the worker adds (the host's address, the
# search path a lookup reads), a block whose name fails to template on some hosts (the
# worker validates its own copy of the parents), a host's fact that the others' tasks must
# not see within the same task, a templated throttle and a templated condition's
# deprecation warning.
REVIEW_PLAYBOOK = """
- name: Found by review
  hosts: all
  gather_facts: false
  tasks:
    - name: The host's address in a condition
      ansible.builtin.debug: {msg: "address seen"}
      when: ansible_host is defined and ansible_search_path is defined
    - name: A lookup in an included file's condition reads the file beside it
      ansible.builtin.include_tasks: sub/inc.yml
    - name: Set a fact and look at h0's
      ansible.builtin.set_fact:
        mine: "{{ inventory_hostname }}"
        peek: "{{ hostvars['h0'].mine | default('unset') }}"
    - name: Show the peek
      ansible.builtin.debug: {msg: "peek={{ peek }}"}
    - name: A templated condition
      ansible.builtin.debug: {msg: templated}
      when: "{{ inventory_hostname == 'nohost' }}"
      register: templated
    - name: Its deprecation, registered
      ansible.builtin.debug:
        msg: "deprecations={{ templated.deprecations | default([]) | length }}"
    - name: "Block {{ only_h0 }}"
      vars:
        only_h0: "{{ 'yes' if inventory_hostname == 'h0' else undefined_thing }}"
      block:
        - name: In the block
          ansible.builtin.debug: {msg: in the block}
    - name: A templated throttle that is no number
      ansible.builtin.debug: {msg: throttled}
      throttle: "{{ 'abc' }}"
"""
FILES = {
    "sub/inc.yml": """
- name: Read the file beside the included one
  ansible.builtin.command: "true"
  changed_when: false
  when: lookup('file', 'x.txt') == 'sub'
""",
    "sub/files/x.txt": "sub",
    "files/x.txt": "play",
    "inc.yml": """
- name: Included task
  ansible.builtin.debug: {msg: "included {{ inventory_hostname }}"}
  when: inventory_hostname != 'h1'
""",
    "roles/r1/tasks/main.yml": """
- name: Role task
  ansible.builtin.command: "true"
  when: inventory_hostname != 'h1'
  notify: Role handler
""",
    "roles/r1/tasks/other.yml": """
- name: Other task
  ansible.builtin.debug: {msg: "other {{ other_value }}"}
""",
    "roles/r1/meta/argument_specs.yml": """
argument_specs:
  main:
    short_description: The role's main tasks
    options: {}
  other:
    short_description: Its other tasks
    options:
      other_value: {type: str, required: true, description: A value to show}
""",
    "roles/r1/handlers/main.yml": """
- name: Role handler
  ansible.builtin.debug: {msg: handled}
  when: inventory_hostname != 'h2'
""",
    "filter_plugins/record.py": """
import os


def record_pid(value, path):
    with open(path, "a") as out:
        out.write(f"{os.getpid()}\\n")
    return value


class FilterModule:
    def filters(self):
        return {"record_pid": record_pid}
""",
}


def play(work: Path, strategy: str, playbook: str = "play.yml"
         ) -> tuple[int, list[str], list[list[str]], int]:
    """ansible-playbook's exit status, its output lines sorted (workers answer in any order),
    the pids that evaluated the first task's condition and those that templated the
    controller-side fact, and ansible-playbook's pid."""
    pids = work / f"pids-{strategy}"
    pids_set = work / f"pids-set-{strategy}"
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible/ansible.cfg"),
               ANSIBLE_STRATEGY=strategy, ANSIBLE_ROLES_PATH=str(work / "roles"),
               ANSIBLE_FILTER_PLUGINS=str(work / "filter_plugins"), ANSIBLE_NOCOLOR="1",
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    proc = subprocess.Popen(["ansible-playbook", "-i", str(work / "inventory.ini"),
                             "-e", f"pids={pids}", "-e", f"pids_set={pids_set}",
                             str(work / playbook)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    out, err = proc.communicate(timeout=300)
    assert playbook != "play.yml" or "ERROR" not in err, err[-2000:]
    recorded = [path.read_text().split() if path.exists() else [] for path in (pids, pids_set)]
    return proc.returncode, sorted(map(hosts_sorted, out.splitlines())), recorded, proc.pid


def hosts_sorted(line: str) -> str:
    """'included: FILE for h1, h0' names the hosts in the order their results came."""
    head, sep, hosts = line.rpartition(" for ")
    if not line.startswith("included: ") or not sep:
        return line
    return f"{head}{sep}{', '.join(sorted(hosts.split(', ')))}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    work = tmp_path_factory.mktemp("skip")
    (work / "play.yml").write_text(PLAYBOOK)
    (work / "review.yml").write_text(REVIEW_PLAYBOOK)
    for name, text in FILES.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    (work / "inventory.ini").write_text("".join(
        f"{host} ansible_connection=local ansible_python_interpreter={sys.executable}\n"
        for host in HOSTS))
    return {(strategy, playbook): play(work, strategy, playbook)
            for strategy in ("linear", "mitogen_linear") for playbook in ("play.yml", "review.yml")}


def test_the_outcome_is_ansibles_own_linear_strategys(runs):
    rc, lines, _, _ = runs["mitogen_linear", "play.yml"]
    assert (rc, lines) == runs["linear", "play.yml"][:2]
    assert rc == 0
    # What the playbook shows, so the comparison above compares something.
    recap = {line.split()[0]: line.split(":", 1)[1].split() for line in lines
             if line.startswith(HOSTS) and "ok=" in line}
    assert {host: counts[:6] for host, counts in recap.items()} == {
        "h0": ["ok=16", "changed=0", "unreachable=0", "failed=0", "skipped=8", "rescued=0"],
        "h1": ["ok=18", "changed=0", "unreachable=0", "failed=0", "skipped=8", "rescued=0"],
        "h2": ["ok=18", "changed=2", "unreachable=0", "failed=0", "skipped=8", "rescued=0"],
        "h3": ["ok=17", "changed=1", "unreachable=0", "failed=0", "skipped=7", "rescued=0"]}
    assert [line for line in lines if line.startswith("    msg: h")] == [
        "    msg: h0-2 h0-2-hidden True", "    msg: h1-2 h1-2-hidden True", "    msg: h2 is h2",
        "    msg: h2-2 h2-2-hidden True", "    msg: h3-2 h3-2-hidden True"]
    assert lines.count("    msg: All assertions passed") == 3
    assert "    msg: failing h1" in lines and lines.count("    msg: other h1-2") == 1
    # (callback_result_format yaml, ansible.cfg)
    assert lines.count("    msg: True inventory_hostname == 'h1'") == 3
    assert lines.count("    msg: 'False '") == 1
    assert lines.count("    msg: skipped=False") == 1 and lines.count("    msg: skipped=True") == 3
    assert "included: r1 for h1, h2, h3" in lines and "ok: [h0] => (item=2) => " in lines


def test_the_cases_a_review_found_end_as_with_ansibles_own_linear_strategy(runs):
    rc, lines, _, _ = runs["mitogen_linear", "review.yml"]
    linear_rc, linear_lines, _, _ = runs["linear", "review.yml"]
    # Under linear a host's worker sees h0's fact when h0's result was read while the others
    # were still being queued: a race in Ansible's own strategy (one host saw it in a loaded
    # run). Under this one no host does: answers reach the queue when the strategy waits.
    assert (rc, without_peeks(lines)) == (linear_rc, without_peeks(linear_lines))
    # The play stops at the throttle (exit 1, no recap), after h1-h3 failed the block.
    assert rc == 1 and not [line for line in lines if "ok=" in line]
    assert lines.count("    msg: address seen") == 4 and lines.count("    msg: peek=unset") == 4
    assert lines.count("    msg: deprecations=1") == 4 and lines.count("ok: [h0] => (item") == 0
    assert [line for line in lines if line.startswith("fatal: ")] == [
        "fatal: [h1]: FAILED! => ", "fatal: [h2]: FAILED! => ", "fatal: [h3]: FAILED! => "]
    assert lines.count("    msg: in the block") == 1


def without_peeks(lines: list[str]) -> list[str]:
    return [line for line in lines if not line.startswith("    msg: peek=")]


def test_a_false_condition_and_a_controller_side_task_run_in_ansible_playbook(runs):
    """Not in a worker: the first task's condition, false everywhere, and set_fact's."""
    _, _, pids, main = runs["mitogen_linear", "play.yml"]
    assert pids == [[str(main)] * len(HOSTS)] * 2
    _, _, pids, main = runs["linear", "play.yml"]
    assert [len(p) for p in pids] == [len(HOSTS)] * 2
    assert str(main) not in pids[0] + pids[1]
