"""metalslurm.cluster.template renders what ansible.builtin.template's lookup renders (the
same file, variables, Ansible's own added variables and delimiters), run by a real
ansible-playbook on localhost, and leaves the caller's variables as they were."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

COLLECTIONS = Path(__file__).resolve().parents[7]
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars:
    nodes: [gpu-001, gpu-002]
    settings: {port: 9100, labels: {role: compute}}
  tasks:
    - name: Render with both lookups
      ansible.builtin.set_fact:
        ours: "{{ lookup('metalslurm.cluster.template', 'conf.j2') }}"
        builtin: "{{ lookup('ansible.builtin.template', 'conf.j2') }}"
        ours_brackets: >-
          {{ lookup('metalslurm.cluster.template', 'rules.j2',
                    variable_start_string='[[', variable_end_string=']]') }}
        builtin_brackets: >-
          {{ lookup('ansible.builtin.template', 'rules.j2',
                    variable_start_string='[[', variable_end_string=']]') }}
    - name: Show them
      ansible.builtin.debug:
        msg: "{{ {'ours': ours, 'builtin': builtin, 'ours_brackets': ours_brackets,
                  'builtin_brackets': builtin_brackets, 'nodes': nodes, 'settings': settings,
                  'template_path_leaked': template_path is defined} | to_json }}"
"""


def test_it_renders_what_the_builtin_lookup_renders(tmp_path):
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "conf.j2").write_text(
        "# {{ template_path | basename }}\n"
        "{% for n in nodes %}{{ n }}:{{ settings.port }}\n{% endfor %}"
        "role={{ settings.labels.role }}\n")
    (tmp_path / "templates" / "rules.j2").write_text(
        "summary: \"{{ $labels.node }} on [[ nodes | length ]] nodes\"\n")
    (tmp_path / "site.yml").write_text(PLAYBOOK)
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
           "ANSIBLE_STDOUT_CALLBACK": "json", "ANSIBLE_LOCALHOST_WARNING": "false",
           "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "site.yml"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(proc.stdout)["plays"][0]["tasks"][1]["hosts"]["localhost"]["msg"]
    seen = json.loads(result) if isinstance(result, str) else result
    assert seen["ours"] == seen["builtin"] == \
        "# conf.j2\ngpu-001:9100\ngpu-002:9100\nrole=compute\n"
    assert seen["ours_brackets"] == seen["builtin_brackets"] == \
        'summary: "{{ $labels.node }} on 2 nodes"\n'
    # The lookup's own variables went into its copy, not into the play's.
    assert seen["nodes"] == ["gpu-001", "gpu-002"]
    assert seen["settings"] == {"port": 9100, "labels": {"role": "compute"}}
    assert seen["template_path_leaked"] is False
