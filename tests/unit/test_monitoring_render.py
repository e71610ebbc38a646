"""The monitoring role's files rendered by Ansible itself (the role's own defaults, vars and
templates, the default local stack's inventory), then checked by the tools that read them:
``promtool check config`` / ``check rules`` / ``check web-config`` and ``amtool
check-config`` (from Debian's prometheus and prometheus-alertmanager packages; skipped,
saying so, where they are absent). Also the stack-config and inventory rules of
``metalslurm:monitoring`` (bad input refused with the key named) and the web password's
hash.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import bcrypt
import pytest
import yaml
from ansible_collections.metalslurm.cluster.plugins.module_utils.inventory_contract import (
    inventory_problems,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.monitoring import (
    NOTICE_TEXT,
    NOTICE_TITLE,
)

from infra.stack.config import parse_config
from infra.stack.inventory import inventory_view
from infra.stack.schema import ConfigError
from infra.stack.state import SecretError, StateDir, write_alert_secrets_file
from tests.slurm_render import fixture_inventory

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles/monitoring"
PASSWORD = "a-test-password-of-32-characters"
RECEIVERS = [{"name": "ops"},
             {"name": "pager", "type": "webhook", "send_resolved": False},
             {"name": "oncall", "type": "slack", "channel": "#hpc-alerts"},
             {"name": "mail", "type": "email", "to": "ops@example.org",
              "from": "am@cluster.example.org", "smarthost": "smtp.example.org:587",
              "username": "am"}]
ALERT_SECRETS = {"ops": {"url": "https://hooks.example.org/alerts?token=test-token"},
                 "pager": {"url": "http://10.77.0.5:8080/"},
                 "oncall": {"url": "https://hooks.slack.com/services/T0/B0/test"},
                 "mail": {"password": "smtp-test-password"}}
FILES = {
    "prometheus.yml": "etc/prometheus/prometheus.yml.j2",
    "alertmanager.yml": "etc/prometheus/alertmanager.yml.j2",
    "prometheus.conf": "etc/systemd/system/prometheus.service.d/metalslurm.conf.j2",
    "alertmanager.conf": "etc/systemd/system/prometheus-alertmanager.service.d/metalslurm.conf.j2",
}


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (Debian package "
                    f"{'prometheus' if name == 'promtool' else 'prometheus-alertmanager'})")
    return path


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("monitoring")
    inventory = fixture_inventory()
    inventory["all"]["vars"]["metalslurm_monitoring"]["receivers"] = RECEIVERS
    (out / "password").write_text(PASSWORD + "\n")
    (out / "alert-secrets.json").write_text(json.dumps(ALERT_SECRETS))
    tasks = [{"name": f"Render {name}", "ansible.builtin.template": {
        "src": str(ROLE / "templates" / src), "dest": str(out / name)}}
        for name, src in FILES.items()]
    tasks += [
        {"name": "Render the alert rules", "ansible.builtin.template": {
            "src": str(ROLE / "templates/etc/prometheus/rules/metalslurm-alerts.yml.j2"),
            "dest": str(out / "alerts.yml"), "variable_start_string": "[[",
            "variable_end_string": "]]"}},
        {"name": "Write the targets", "ansible.builtin.copy": {
            "content": "{{ __monitoring_node_targets | to_nice_yaml }}",
            "dest": str(out / "node.yml")}},
        {"name": "Write the web config", "ansible.builtin.copy": {
            "content": "basic_auth_users:\n  {{ monitoring_web_user }}: {{ lookup("
                       "'ansible.builtin.file', monitoring_password_file) | "
                       "metalslurm.cluster.web_password_hash | to_json }}\n",
            "dest": str(out / "web.yml")}},
    ]
    play = [{"name": "Render the monitoring role's files", "hosts": "slurm_controller",
             "gather_facts": False,
             "vars_files": [str(REPO / "ansible/group_vars/all/metalslurm.yml"),
                            str(ROLE / "defaults/main.yml"), str(ROLE / "vars/main.yml")],
             "vars": {"ansible_managed": "rendered by tests/unit/test_monitoring_render.py"},
             "tasks": tasks}]
    (out / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (out / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible/ansible.cfg"),
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", ANSIBLE_NOCOLOR="1")
    # The role's defaults are read as vars_files here, above the inventory: the secret
    # file's path comes as an extra var.
    proc = subprocess.run(["ansible-playbook", "-i", str(out / "inventory.yml"), "-e",
                           f"monitoring_password_file={out / 'password'}", "-e",
                           f"monitoring_alert_secrets_file={out / 'alert-secrets.json'}",
                           str(out / "play.yml")], capture_output=True, text=True, env=env,
                          check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:]
    return out


def test_every_node_is_a_target_with_the_labels_the_rules_join_on(rendered):
    targets = yaml.safe_load((rendered / "node.yml").read_text())
    assert targets == [
        {"targets": ["10.77.0.10:9100"],
         "labels": {"node": "ctl", "role": "controller", "elastic": "false"}},
        {"targets": ["10.77.0.11:9100"],
         "labels": {"node": "gpu-001", "role": "compute", "elastic": "false"}},
        {"targets": ["10.77.0.12:9100"],
         "labels": {"node": "gpu-002", "role": "compute", "elastic": "false"}},
        {"targets": ["10.77.0.13:9100"],
         "labels": {"node": "gpu-003", "role": "compute", "elastic": "true"}},
        {"targets": ["10.77.0.14:9100"],
         "labels": {"node": "gpu-004", "role": "compute", "elastic": "true"}},
        {"targets": ["10.77.0.253:9100"],
         "labels": {"node": "login-001", "role": "login", "elastic": "false"}}]


def test_prometheus_config_is_valid_and_listens_on_the_private_address(rendered):
    promtool = tool("promtool")
    proc = subprocess.run([promtool, "check", "config", "--syntax-only",
                           str(rendered / "prometheus.yml")], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    config = yaml.safe_load((rendered / "prometheus.yml").read_text())
    assert config["global"]["scrape_interval"] == "30s"
    assert [j["job_name"] for j in config["scrape_configs"]] == [
        "prometheus", "alertmanager", "node", "slurm", "dcgm"]
    flags = (rendered / "prometheus.conf").read_text()
    assert "--web.listen-address=10.77.0.10:9090" in flags
    assert "--web.config.file=/etc/prometheus/metalslurm-web.yml" in flags
    assert "--storage.tsdb.retention.size=20GB" in flags


def test_alertmanager_config_is_valid_and_sends_to_every_receiver(rendered):
    amtool = tool("amtool")
    proc = subprocess.run([amtool, "check-config", str(rendered / "alertmanager.yml")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    config = yaml.safe_load((rendered / "alertmanager.yml").read_text())
    assert config["receivers"] == [{"name": "metalslurm", "webhook_configs": [
        {"url": "https://hooks.example.org/alerts?token=test-token", "send_resolved": True},
        {"url": "http://10.77.0.5:8080/", "send_resolved": False}],
        "slack_configs": [{"api_url": "https://hooks.slack.com/services/T0/B0/test",
                           "channel": "#hpc-alerts", "send_resolved": True,
                           "title": NOTICE_TITLE, "text": NOTICE_TEXT}],
        "email_configs": [{"to": "ops@example.org", "from": "am@cluster.example.org",
                           "smarthost": "smtp.example.org:587", "require_tls": True,
                           "send_resolved": True, "auth_username": "am",
                           "auth_password": "smtp-test-password",
                           "headers": {"Subject": NOTICE_TITLE}}]}]
    assert "--cluster.listen-address=" in (rendered / "alertmanager.conf").read_text()


def test_the_rendered_alert_rules_are_valid(rendered):
    promtool = tool("promtool")
    proc = subprocess.run([promtool, "check", "rules", str(rendered / "alerts.yml")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_web_login_is_a_bcrypt_hash_of_the_password(rendered):
    users = yaml.safe_load((rendered / "web.yml").read_text())["basic_auth_users"]
    assert list(users) == ["metalslurm"]
    assert bcrypt.checkpw(PASSWORD.encode(), users["metalslurm"].encode())
    assert PASSWORD not in (rendered / "web.yml").read_text()
    promtool = tool("promtool")
    proc = subprocess.run([promtool, "check", "web-config", str(rendered / "web.yml")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


BASE = {"metalslurm:provider": "local"}


@pytest.mark.parametrize(("section", "problem"), [
    ({"receivers": [{"name": "ops", "url": "https://hooks.example.org/alerts?token=x"}]},
     "metalslurm:monitoring.receivers[0].url: a webhook receiver's url is a credential: give "
     "it in the alert secrets (metalslurm:alertSecrets or monitoring.secretsFile) under 'ops', "
     "not in the config"),
    ({"retentionSize": "10 GB"},
     "metalslurm:monitoring.retentionSize: '10 GB' is not a Prometheus size"),
    ({"retentionTime": "two weeks"},
     "metalslurm:monitoring.retentionTime: 'two weeks' is not a Prometheus duration"),
    ({"host": "grafana"}, "metalslurm:monitoring.host: 'grafana' is not a machine of this "
                          "cluster"),
    ({"scrapeInterval": 15, "exporterInterval": 30},
     "metalslurm:monitoring.scrapeInterval: 15 s is below the Slurm exporter's interval (30 s)"),
    ({"exporterInterval": 2}, "metalslurm:monitoring.exporterInterval: 2 is not a whole number "
                              "of seconds from 5"),
    ({"diskFreeRatio": 10}, "metalslurm:monitoring.diskFreeRatio: 10 is not a fraction"),
    ({"scrapInterval": 30}, "metalslurm:monitoring.scrapInterval: unknown key"),
])
def test_bad_monitoring_settings_are_refused_naming_the_key(section, problem):
    with pytest.raises(ConfigError) as err:
        parse_config({**BASE, "metalslurm:monitoring": section})
    assert any(p.startswith(problem) for p in err.value.problems), err.value.problems


def test_the_monitoring_host_may_be_any_static_machine_of_the_cluster():
    cfg = parse_config({**BASE, "metalslurm:monitoring": {"host": "gpu-002"}})
    assert cfg.monitoring.inventory_vars()["host"] == "gpu-002"


def test_an_elastic_node_cannot_be_the_monitoring_host():
    pools = [{"name": "gpu", "count": 1, "elasticCount": 1}]
    with pytest.raises(ConfigError) as err:
        parse_config({**BASE, "metalslurm:computePools": pools,
                      "metalslurm:monitoring": {"host": "gpu-002"}})
    assert err.value.problems == [
        "metalslurm:monitoring.host: 'gpu-002' is an elastic node: Slurm powers it down when "
        "idle, and Prometheus with it; name a static machine (or leave it out: the controller)"]
    inventory = fixture_inventory()
    inventory["all"]["vars"]["metalslurm_monitoring"] = {"host": "gpu-003"}
    assert [p for p in inventory_problems(inventory_view(inventory)) if "monitoring" in p] == [
        "metalslurm_monitoring.host 'gpu-003' is an elastic node (Slurm powers it down when "
        "idle, and Prometheus with it); name a static host"]


def test_a_hand_written_inventory_is_held_to_the_same_rules():
    inventory = fixture_inventory()
    inventory["all"]["vars"]["metalslurm_monitoring"] = {"host": "prom", "retention_time": "1x"}
    problems = inventory_problems(inventory_view(inventory))
    assert [p for p in problems if "monitoring" in p] == [
        "metalslurm_monitoring.retention_time: '1x' is not a Prometheus duration (e.g. 15d, "
        "12h, 2w)",
        "metalslurm_monitoring.host 'prom' is not a host of this inventory; name one of its "
        "hosts, or leave it empty (the controller)"]


SLACK_RECEIVER = {"name": "oncall", "type": "slack", "channel": "#hpc"}


def secrets_file(tmp_path: Path, content: str, mode: int = 0o600) -> Path:
    path = tmp_path / "alert-secrets.yaml"
    path.write_text(content)
    path.chmod(mode)
    return path


def test_a_secrets_file_next_to_the_stack_gives_the_receivers_their_credentials(tmp_path):
    secrets_file(tmp_path, "oncall: {url: 'https://hooks.slack.com/services/T/B/x'}\n")
    cfg = parse_config({**BASE, "metalslurm:monitoring": {
        "receivers": [SLACK_RECEIVER], "secretsFile": "alert-secrets.yaml"}},
        base_dir=tmp_path)
    assert cfg.monitoring.secrets_file == str(tmp_path / "alert-secrets.yaml")
    # The inventory names no credential: the file reaches the roles as a 0600 secret file.
    assert "secretsFile" not in cfg.monitoring.inventory_vars()
    assert "hooks.slack.com" not in json.dumps(cfg.monitoring.inventory_vars())
    state = StateDir(tmp_path / "state")
    assert state.checked_secret("monitoring_alert_secrets_file", (
        tmp_path / "alert-secrets.yaml").read_text()) == (
        '{"oncall": {"url": "https://hooks.slack.com/services/T/B/x"}}\n')


def test_a_webhook_url_reaches_only_the_0600_secret_file_never_the_inventory(tmp_path):
    url = "https://hooks.example.org/alerts?token=s3cret-token"
    secrets_file(tmp_path, f"ops: {{url: '{url}'}}\n")
    cfg = parse_config({**BASE, "metalslurm:monitoring": {
        "receivers": [{"name": "ops"}], "secretsFile": "alert-secrets.yaml"}},
        base_dir=tmp_path)
    assert cfg.monitoring.inventory_vars()["receivers"] == [{"name": "ops"}]
    state = StateDir(tmp_path / "state")
    assert write_alert_secrets_file(state, cfg.monitoring.secrets_file) == {
        "monitoring_alert_secrets_file": str(state.secrets.resolve() / "alert-secrets.json")}
    written = state.secrets / "alert-secrets.json"
    assert written.read_text() == f'{{"ops": {{"url": "{url}"}}}}\n'
    assert oct(written.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize(("content", "mode", "secure", "problem"), [
    ("oncall: {url: 'https://h.example/x'}\n", 0o644, False,
     "metalslurm:monitoring.secretsFile: {file} is readable by other users (mode 644); run "
     "'chmod 600 {file}'"),
    ("{}\n", 0o600, False,
     "metalslurm:monitoring.secretsFile: oncall.url: the Slack receiver 'oncall' needs its "
     "incoming-webhook URL here"),
    ("oncall: [\n", 0o600, False, "metalslurm:monitoring.secretsFile: {file} is not YAML or JSON"),
    ("oncall: {url: 'https://h.example/x'}\n", 0o600, True,
     "metalslurm:alertSecrets: and metalslurm:monitoring.secretsFile are both set: keep one"),
    (None, None, False,
     "metalslurm:monitoring.receivers: a receiver needs credentials that the config must not "
     "hold (webhook (url) and slack (url) and email (password)): set the secret "
     "metalslurm:alertSecrets"),
], ids=["world-readable", "lacks-the-url", "not-yaml", "both", "neither"])
def test_receiver_credentials_are_refused_naming_the_key(tmp_path, content, mode, secure,
                                                         problem):
    section = {"receivers": [SLACK_RECEIVER]}
    if content is not None:
        secrets_file(tmp_path, content, mode)
        section["secretsFile"] = "alert-secrets.yaml"
    raw = {**BASE, "metalslurm:monitoring": section}
    if secure:
        raw["metalslurm:alertSecrets"] = {"secure": "v1:abc"}
    with pytest.raises(ConfigError) as err:
        parse_config(raw, base_dir=tmp_path)
    expected = problem.format(file=tmp_path / "alert-secrets.yaml")
    assert any(p.startswith(expected) for p in err.value.problems), err.value.problems


def test_a_pulumi_secret_satisfies_the_receivers_without_a_file():
    cfg = parse_config({**BASE, "metalslurm:alertSecrets": {"secure": "v1:abc"},
                        "metalslurm:monitoring": {"receivers": [SLACK_RECEIVER]}})
    assert cfg.monitoring.secrets_file == ""


@pytest.mark.parametrize("value", ["not: [yaml", "[1, 2]", "{oncall: {url: 7}}"])
def test_a_pulumi_alert_secret_of_the_wrong_shape_is_refused_before_any_file(tmp_path, value):
    with pytest.raises(SecretError, match="^metalslurm:alertSecrets: "):
        StateDir(tmp_path).checked_secret("monitoring_alert_secrets_file", value)
