"""The converged fast path's comparison: what differs between a node's state (the
managed_state module's result) and what a role would write."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.metalslurm.cluster.plugins.filter.managed import (
    FilterModule,
    managed_drift,
    managed_paths,
    managed_retire,
)

FILTERS = FilterModule().filters()
CONTENT = "scrape_configs: []\n"


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()  # noqa: S324


def converged() -> tuple[dict, dict]:
    wanted = {"files": [{"path": "/etc/p.yml", "content": CONTENT},
                        {"path": "/etc/secret", "content": "pw", "group": "prometheus",
                         "mode": "0640"}],
              "directories": ["/etc/rules", {"path": "/run/x", "mode": "0700"}],
              "links": [{"path": "/usr/sbin/prolog", "src": "/usr/sbin/prog"}],
              "units": ["prometheus"]}
    state = {"paths": {
        "/etc/p.yml": {"exists": True, "type": "file", "owner": "root", "group": "root",
                       "mode": "0644", "sha1": sha1(CONTENT)},
        "/etc/secret": {"exists": True, "type": "file", "owner": "root", "group": "prometheus",
                        "mode": "0640", "sha1": sha1("pw")},
        "/etc/rules": {"exists": True, "type": "directory", "owner": "root", "group": "root",
                       "mode": "0755"},
        "/run/x": {"exists": True, "type": "directory", "owner": "root", "group": "root",
                   "mode": "0700"},
        "/usr/sbin/prolog": {"exists": True, "type": "link", "owner": "root", "group": "root",
                             "mode": "0777", "target": "/usr/sbin/prog"}},
        "units": {"prometheus": {"active": "active", "enabled": "enabled"}}}
    return state, wanted


def test_a_converged_node_has_no_drift():
    state, wanted = converged()
    assert managed_drift(state, wanted) == []
    assert FILTERS["managed_drift"](state, wanted) == []


@pytest.mark.parametrize(("path", "change", "said"), [
    ("/etc/p.yml", {"sha1": sha1(CONTENT + "# by hand\n")}, "/etc/p.yml: content differs"),
    ("/etc/p.yml", {"mode": "0600"}, "/etc/p.yml: mode 0600 (not 0644)"),
    ("/etc/secret", {"group": "root"}, "/etc/secret: group root (not prometheus)"),
    ("/etc/p.yml", {"exists": False}, "/etc/p.yml: missing"),
    ("/etc/rules", {"type": "file"}, "/etc/rules: a file, not a directory"),
    ("/run/x", {"mode": "0755"}, "/run/x: mode 0755 (not 0700)"),
    ("/usr/sbin/prolog", {"target": "/bin/true"},
     "/usr/sbin/prolog: points to /bin/true, not /usr/sbin/prog"),
])
def test_each_difference_is_named(path, change, said):
    state, wanted = converged()
    state["paths"][path] = {**state["paths"][path], **change}
    assert managed_drift(state, wanted) == [said]


@pytest.mark.parametrize(("unit", "said"), [
    ({"active": "inactive", "enabled": "enabled"}, "prometheus: inactive, enabled"),
    ({"active": "active", "enabled": "disabled"}, "prometheus: active, disabled"),
    ({"active": "inactive", "enabled": "masked"}, "prometheus: inactive, masked"),
    ({}, "prometheus: unknown, unknown"),
])
def test_a_unit_not_running_and_enabled_is_a_difference(unit, said):
    state, wanted = converged()
    state["units"]["prometheus"] = unit
    assert managed_drift(state, wanted) == [said]


def test_an_unread_path_is_a_difference():
    state, wanted = converged()
    del state["paths"]["/etc/rules"]
    assert managed_drift(state, wanted) == ["/etc/rules: not read"]


@pytest.mark.parametrize("state", [None, {}, {"skipped": True}, {"paths": None}, "text"])
def test_a_state_that_was_not_read_sends_the_run_through_the_write_tasks(state):
    assert managed_drift(state, converged()[1]) == ["the node's state was not read"]


def test_missing_packages_come_first_and_need_the_package_facts():
    state, wanted = converged()
    wanted = {**wanted, "packages": ["prometheus", "prometheus-alertmanager", "curl"]}
    installed = {"curl": [{"version": "8"}], "prometheus": [{"version": "2.53"}]}
    assert managed_drift(state, wanted, installed) == [
        "packages missing: prometheus-alertmanager"]
    assert managed_drift(None, wanted, {}) == [
        "packages missing: prometheus, prometheus-alertmanager, curl",
        "the node's state was not read"]
    assert managed_drift(state, wanted, {**installed, "prometheus-alertmanager": []}) == []
    with pytest.raises(AnsibleFilterError, match=r"wanted.packages needs the installed "
                                                 r"packages .*ansible_facts.packages"):
        FILTERS["managed_drift"](state, wanted)


def test_the_paths_to_read_are_every_managed_one():
    assert managed_paths(converged()[1]) == [
        "/etc/p.yml", "/etc/secret", "/etc/rules", "/run/x", "/usr/sbin/prolog"]


def test_an_entry_without_a_path_reaches_the_play_as_a_filter_error():
    with pytest.raises(AnsibleFilterError, match="a managed file without a path"):
        FILTERS["managed_drift"](converged()[0], {"files": [{"content": "x"}]})
    with pytest.raises(AnsibleFilterError, match="a managed directory without a path"):
        FILTERS["managed_paths"]({"directories": [""]})


# Retiring: monitoring turned off, or Prometheus moved to another host.
MARKER = "/etc/prometheus/metalslurm-web.yml"
RETIRABLE = [{"unit": "prometheus", "marker": MARKER, "runs": False},
             {"unit": "prometheus-alertmanager", "marker": MARKER, "runs": "False"},
             {"unit": "prometheus-node-exporter", "marker": "/etc/ne.conf", "runs": True}]


def retire_state(marker: bool = True, **units: tuple[str, str]) -> dict:
    return {"paths": {MARKER: {"exists": marker}, "/etc/ne.conf": {"exists": True}},
            "units": {name.replace("_", "-"): {"active": active, "enabled": enabled}
                      for name, (active, enabled) in units.items()}}


def test_a_service_that_must_not_run_here_and_runs_is_stopped():
    state = retire_state(prometheus=("active", "enabled"),
                         prometheus_alertmanager=("inactive", "enabled"),
                         prometheus_node_exporter=("active", "enabled"))
    assert managed_retire(state, RETIRABLE) == ["prometheus", "prometheus-alertmanager"]


def test_a_stopped_and_disabled_service_is_left_alone():
    state = retire_state(prometheus=("inactive", "disabled"),
                         prometheus_alertmanager=("failed", "disabled"))
    assert managed_retire(state, RETIRABLE) == []


def test_a_service_metalslurm_did_not_set_up_is_never_touched():
    """No marker file: the site's own Prometheus on that host."""
    state = retire_state(marker=False, prometheus=("active", "enabled"),
                         prometheus_alertmanager=("active", "enabled"))
    assert managed_retire(state, RETIRABLE) == []


def test_a_service_that_runs_here_is_kept_and_an_unread_state_stops_nothing():
    state = retire_state(prometheus_node_exporter=("active", "enabled"))
    assert managed_retire(state, RETIRABLE[2:]) == []
    assert managed_retire(None, RETIRABLE) == []
    assert managed_retire({"skipped": True}, RETIRABLE) == []


def test_a_malformed_retirable_list_is_refused_naming_the_entry():
    with pytest.raises(AnsibleFilterError, match="needs unit and marker"):
        FILTERS["managed_retire"](retire_state(), [{"unit": "prometheus"}])


def copy_state(dest_text: str, src_text: str | None, mode: str = "0755") -> dict:
    paths = {"/etc/hooks/a.sh": {"exists": True, "type": "file", "owner": "root",
                                 "group": "root", "mode": mode, "sha1": sha1(dest_text)}}
    paths["/usr/share/hooks/a.sh"] = ({"exists": True, "type": "file", "owner": "root",
                                       "group": "root", "mode": "0644", "sha1": sha1(src_text)}
                                      if src_text is not None else {"exists": False})
    return {"paths": paths}


COPY = {"copies": [{"path": "/etc/hooks/a.sh", "src": "/usr/share/hooks/a.sh", "mode": "0755"}]}


def test_a_copy_matches_its_source_on_the_node():
    assert managed_drift(copy_state("#!/bin/sh\n", "#!/bin/sh\n"), COPY) == []
    assert managed_paths(COPY) == ["/etc/hooks/a.sh", "/usr/share/hooks/a.sh"]


@pytest.mark.parametrize(("state", "drift"), [
    (copy_state("#!/bin/sh\nedited\n", "#!/bin/sh\n"),
     ["/etc/hooks/a.sh: differs from /usr/share/hooks/a.sh"]),
    (copy_state("#!/bin/sh\n", None), ["/etc/hooks/a.sh: differs from /usr/share/hooks/a.sh"]),
    (copy_state("#!/bin/sh\n", "#!/bin/sh\n", mode="0644"),
     ["/etc/hooks/a.sh: mode 0644 (not 0755)"]),
], ids=["edited", "source-gone", "mode"])
def test_a_copy_that_differs_from_its_source_or_its_mode_is_drift(state, drift):
    assert managed_drift(state, COPY) == drift


def test_a_copy_of_itself_checks_only_its_mode_and_owner():
    wanted = {"copies": [{"path": "/etc/hooks/a.sh", "src": "/etc/hooks/a.sh", "mode": "0644"}]}
    assert managed_paths(wanted) == ["/etc/hooks/a.sh"]
    assert managed_drift(copy_state("anything\n", None, mode="0644"), wanted) == []
    assert managed_drift(copy_state("anything\n", None, mode="0755"), wanted) == [
        "/etc/hooks/a.sh: mode 0755 (not 0644)"]


def test_a_copy_that_is_a_link_is_drift():
    state = copy_state("x", "x")
    state["paths"]["/etc/hooks/a.sh"] = {"exists": True, "type": "link", "target": "/tmp/evil"}
    assert managed_drift(state, COPY) == ["/etc/hooks/a.sh: a link, not a file"]


HOSTS_BLOCK = {"path": "/etc/hosts", "marker": "# {mark} metalslurm cluster c1",
               "block": "10.0.0.1\tctl\n10.0.0.2\tgpu-001\n"}
BLOCK_TEXTS = {
    "converged": "127.0.0.1\tlocalhost\n# BEGIN metalslurm cluster c1\n10.0.0.1\tctl\n"
                 "10.0.0.2\tgpu-001\n# END metalslurm cluster c1\n::1\tlocalhost\n",
    "missing": "127.0.0.1\tlocalhost\n",
    "edited": "# BEGIN metalslurm cluster c1\n10.0.0.1\tctl\n10.0.0.9\tgpu-001\n"
              "# END metalslurm cluster c1\n",
    "a line added": "# BEGIN metalslurm cluster c1\n10.0.0.1\tctl\n10.0.0.2\tgpu-001\n"
                    "10.6.6.6\tevil\n# END metalslurm cluster c1\n",
    "no final newline": "# BEGIN metalslurm cluster c1\n10.0.0.1\tctl\n10.0.0.2\tgpu-001\n"
                        "# END metalslurm cluster c1",
    "crlf": "# BEGIN metalslurm cluster c1\r\n10.0.0.1\tctl\r\n10.0.0.2\tgpu-001\r\n"
            "# END metalslurm cluster c1\r\n",
    "twice": "# BEGIN metalslurm cluster c1\n10.0.0.1\tctl\n10.0.0.2\tgpu-001\n"
             "# END metalslurm cluster c1\n" * 2,
    "end before begin": "# END metalslurm cluster c1\n10.0.0.1\tctl\n10.0.0.2\tgpu-001\n"
                        "# BEGIN metalslurm cluster c1\n",
    "another cluster's": "# BEGIN metalslurm cluster c2\n10.0.0.1\tctl\n"
                         "# END metalslurm cluster c2\n",
}


def block_state(text: str | None) -> dict:
    return {"paths": {}, "contents": {} if text is None else {"/etc/hosts": text}}


def test_a_managed_block_is_drift_exactly_where_blockinfile_would_change_the_file(tmp_path):
    """Each text against Ansible's own blockinfile (check mode, on this machine): the filter
    finds a difference exactly where the module reports a change."""
    tasks = []
    for i, text in enumerate(BLOCK_TEXTS.values()):
        (tmp_path / f"hosts{i}").write_bytes(text.encode())
        tasks.append({"ansible.builtin.blockinfile": {
            "path": str(tmp_path / f"hosts{i}"), "marker": HOSTS_BLOCK["marker"],
            "block": HOSTS_BLOCK["block"]}, "register": f"r{i}"})
    tasks.append({"ansible.builtin.copy": {"dest": str(tmp_path / "changed.json"), "content":
                  "{{ [" + ", ".join(f"r{i}.changed" for i in range(len(BLOCK_TEXTS)))
                  + "] | to_json }}"}})
    playbook, config = tmp_path / "play.yml", tmp_path / "ansible.cfg"
    config.write_text("[defaults]\n")  # Ansible's own defaults, not the project's
    playbook.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False,
                                     "tasks": tasks}]))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i",
                           "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}", str(playbook)],
                          cwd=tmp_path, env={**os.environ, "ANSIBLE_CONFIG": str(config)},
                          capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:]
    changed = dict(zip(BLOCK_TEXTS, json.loads((tmp_path / "changed.json").read_text()),
                       strict=True))
    drift = {name: managed_drift(block_state(text), {"blocks": [HOSTS_BLOCK]}) != []
             for name, text in BLOCK_TEXTS.items()}
    assert drift == changed
    assert changed == {"converged": False, "missing": True, "edited": True,
                       "a line added": True, "no final newline": True, "crlf": True,
                       "twice": False, "end before begin": True, "another cluster's": True}


def test_a_block_names_what_differs_and_an_unread_file_is_drift():
    wanted = {"blocks": [HOSTS_BLOCK]}
    assert managed_drift(block_state(BLOCK_TEXTS["edited"]), wanted) == [
        "/etc/hosts: the managed block differs"]
    assert managed_drift(block_state(BLOCK_TEXTS["missing"]), wanted) == [
        "/etc/hosts: no block between '# BEGIN metalslurm cluster c1' and "
        "'# END metalslurm cluster c1'"]
    assert managed_drift(block_state(None), wanted) == ["/etc/hosts: not read"]
    assert FILTERS["managed_reads"](wanted) == ["/etc/hosts"]
    assert managed_paths(wanted) == []


def test_an_entry_for_a_directory_the_node_may_lack_is_wanted_only_where_it_exists():
    wanted = {"files": [{"path": "/etc/cloud/cloud.cfg.d/99-x.cfg", "content": "a: 1\n",
                         "if_exists": "/etc/cloud/cloud.cfg.d"}]}
    assert managed_paths(wanted) == ["/etc/cloud/cloud.cfg.d/99-x.cfg", "/etc/cloud/cloud.cfg.d"]
    no_cloud_init = {"paths": {"/etc/cloud/cloud.cfg.d": {"exists": False},
                               "/etc/cloud/cloud.cfg.d/99-x.cfg": {"exists": False}}}
    assert managed_drift(no_cloud_init, wanted) == []
    with_cloud_init = {"paths": {"/etc/cloud/cloud.cfg.d": {"exists": True, "type": "directory"},
                                 "/etc/cloud/cloud.cfg.d/99-x.cfg": {"exists": False}}}
    assert managed_drift(with_cloud_init, wanted) == ["/etc/cloud/cloud.cfg.d/99-x.cfg: missing"]
    assert managed_drift({"paths": {}}, wanted) == ["/etc/cloud/cloud.cfg.d: not read"]


def test_a_block_in_a_file_the_node_may_lack_has_it_read_and_applies_only_there():
    """cloud-init's hosts template: its existence must be read (managed_paths), or the block
    is 'not read' drift on every run, on a node with cloud-init and on one without."""
    template = "/etc/cloud/templates/hosts.debian.tmpl"
    wanted = {"blocks": [{**HOSTS_BLOCK, "path": template, "if_exists": template}]}
    assert managed_paths(wanted) == [template]
    assert FILTERS["managed_reads"](wanted) == [template]
    assert managed_drift({"paths": {template: {"exists": False}}, "contents": {}}, wanted) == []
    text = BLOCK_TEXTS["converged"]
    assert managed_drift({"paths": {template: {"exists": True, "type": "file"}},
                          "contents": {template: text}}, wanted) == []
    assert managed_drift({"paths": {template: {"exists": True, "type": "file"}},
                          "contents": {template: BLOCK_TEXTS["missing"]}}, wanted) == [
        f"{template}: no block between '# BEGIN metalslurm cluster c1' and "
        "'# END metalslurm cluster c1'"]


class ContentUnread(dict):
    """A wanted entry whose content must not be read (Ansible renders a variable's value
    when it is read: listing the paths must not render the files)."""

    def __getitem__(self, key):
        assert key != "content", "the content was rendered"
        return super().__getitem__(key)

    def get(self, key, default=None):
        assert key != "content", "the content was rendered"
        return super().get(key, default)

    def items(self):
        raise AssertionError("every value was read")

    def keys(self):
        raise AssertionError("every value was read")


def test_listing_the_paths_reads_no_content():
    wanted = {"files": [ContentUnread(path="/etc/a", content="x", if_exists="/etc")],
              "copies": [ContentUnread(path="/etc/b", src="/usr/b")],
              "blocks": [ContentUnread(path="/etc/hosts", block="x")]}
    assert managed_paths(wanted) == ["/etc/a", "/etc", "/etc/b", "/usr/b"]
    assert FILTERS["managed_reads"](wanted) == ["/etc/hosts"]
