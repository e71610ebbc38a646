"""The converged fast path's comparison: what differs between a node's state (the
managed_state module's result) and what a role would write."""

from __future__ import annotations

import hashlib

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
