"""Alert receivers (module_utils/monitoring.py): webhook, Slack and e-mail in the settings,
their credentials (a webhook's URL, a Slack URL, an SMTP password) from the alert secrets,
never the config, and the one Alertmanager receiver built from both."""

from __future__ import annotations

import pytest
from ansible_collections.metalslurm.cluster.plugins.module_utils.monitoring import (
    NOTICE_TEXT,
    NOTICE_TITLE,
    MonitoringSettingsError,
    alertmanager_receiver,
    monitoring_settings,
    receiver_problems,
    secrets_problems,
)

SLACK = {"name": "oncall", "type": "slack", "channel": "#hpc-alerts"}
MAIL = {"name": "ops-mail", "type": "email", "to": "hpc-ops@example.org",
        "from": "alertmanager@cluster.example.org", "smarthost": "smtp.example.org:587",
        "username": "alertmanager"}
HOOK = {"name": "recorder", "sendResolved": False}
SECRETS = {"recorder": {"url": "http://10.0.0.5:9099/alerts?token=hook-token"},
           "oncall": {"url": "https://hooks.slack.com/services/T000/B000/XXXX"},
           "ops-mail": {"password": "smtp-password"}}


def test_every_receiver_type_becomes_its_alertmanager_config_with_its_credentials():
    settings = monitoring_settings({"receivers": [HOOK, SLACK, MAIL]})
    assert settings["receivers"][1:] == [
        {"name": "oncall", "type": "slack", "send_resolved": True, "channel": "#hpc-alerts"},
        {"name": "ops-mail", "type": "email", "send_resolved": True,
         "to": "hpc-ops@example.org", "from": "alertmanager@cluster.example.org",
         "smarthost": "smtp.example.org:587", "username": "alertmanager",
         "require_tls": True}]
    assert alertmanager_receiver(settings, SECRETS) == {
        "name": "metalslurm",
        "webhook_configs": [{"url": "http://10.0.0.5:9099/alerts?token=hook-token",
                             "send_resolved": False}],
        "slack_configs": [{"api_url": "https://hooks.slack.com/services/T000/B000/XXXX",
                           "channel": "#hpc-alerts", "send_resolved": True,
                           "title": NOTICE_TITLE, "text": NOTICE_TEXT}],
        "email_configs": [{"to": "hpc-ops@example.org",
                           "from": "alertmanager@cluster.example.org",
                           "smarthost": "smtp.example.org:587", "require_tls": True,
                           "send_resolved": True, "auth_username": "alertmanager",
                           "auth_password": "smtp-password",
                           "headers": {"Subject": NOTICE_TITLE}}]}


def test_an_email_receiver_without_a_login_needs_no_secret_and_may_skip_tls():
    mail = {k: v for k, v in MAIL.items() if k != "username"} | {"require_tls": False}
    settings = monitoring_settings({"receivers": [mail]})
    assert alertmanager_receiver(settings, None)["email_configs"] == [
        {"to": "hpc-ops@example.org", "from": "alertmanager@cluster.example.org",
         "smarthost": "smtp.example.org:587", "require_tls": False, "send_resolved": True,
         "headers": {"Subject": NOTICE_TITLE}}]


def test_no_receiver_is_an_empty_receiver():
    assert alertmanager_receiver(monitoring_settings({}), {}) == {"name": "metalslurm"}


@pytest.mark.parametrize(("receiver", "problem"), [
    ({**SLACK, "url": "https://hooks.slack.com/x"},
     ("receivers[0].url", "a slack receiver's url is a credential: give it in the alert "
                          "secrets (metalslurm:alertSecrets or monitoring.secretsFile) under "
                          "'oncall', not in the config")),
    ({"name": "oncall", "type": "slack"}, ("receivers[0].channel",
                                           "a slack receiver needs channel")),
    ({**MAIL, "smarthost": "smtp.example.org"},
     ("receivers[0].smarthost", "'smtp.example.org' is not host:port of an SMTP server "
                                "(e.g. smtp.example.org:587)")),
    ({**MAIL, "to": "ops at example"},
     ("receivers[0].to", "'ops at example' is not an e-mail address (or a comma-separated "
                         "list of them)")),
    ({**MAIL, "password": "x"},
     ("receivers[0].password", "an email receiver's password is a credential: give it in "
                               "the alert secrets (metalslurm:alertSecrets or "
                               "monitoring.secretsFile) under 'ops-mail', not in the config")),
    ({**MAIL, "requireTls": "yes"}, ("receivers[0].requireTls", "'yes' is not true or false")),
    ({"name": "p", "type": "pagerduty"},
     ("receivers[0].type", "'pagerduty' is not a receiver type metalslurm writes; it writes "
                           "webhook, slack, email")),
    ({**HOOK, "channel": "#x"},
     ("receivers[0]", "unknown key(s) channel; a webhook receiver has name, sendResolved, "
                      "type")),
    ({**HOOK, "url": "https://hooks.example.org/alerts?token=x"},
     ("receivers[0].url", "a webhook receiver's url is a credential: give it in the alert "
                          "secrets (metalslurm:alertSecrets or monitoring.secretsFile) under "
                          "'recorder', not in the config")),
], ids=["slack-url-in-config", "slack-no-channel", "smarthost-no-port", "bad-address",
        "password-in-config", "tls-not-bool", "unknown-type", "field-of-another-type",
        "webhook-url-in-config"])
def test_bad_receivers_are_refused_naming_the_key(receiver, problem):
    assert receiver_problems([receiver]) == [problem]


@pytest.mark.parametrize(("secrets", "problems"), [
    ({}, ["recorder.url: the webhook receiver 'recorder' needs the URL Alertmanager posts "
          "alerts to here (http:// or https://)",
          "oncall.url: the Slack receiver 'oncall' needs its incoming-webhook URL here",
          "ops-mail.password: the e-mail receiver 'ops-mail' logs in as 'alertmanager' and "
          "needs its password here"]),
    ({**SECRETS, "recorder": {"url": "ftp://10.0.0.5/alerts"}},
     ["recorder.url: not an http:// or https:// URL"]),
    ({**SECRETS, "pager": {"url": "https://x.example"}},
     ["'pager' names no receiver of metalslurm:monitoring.receivers"]),
    ({**SECRETS, "oncall": {"url": "hooks.slack.com/x"}},
     ["oncall.url: not an http:// or https:// URL"]),
    ({**SECRETS, "ops-mail": {"password": "p", "url": "https://x.example"}},
     ["ops-mail.url: an email receiver takes no url from the secrets (password)"]),
    (["oncall"], ["must map each receiver's name to {field: text} (url for webhook and "
                  "slack, password for email)"]),
], ids=["missing", "bad-webhook-url", "stranger", "bad-url", "field-of-another-type",
        "not-a-mapping"])
def test_the_secrets_must_hold_what_the_receivers_need(secrets, problems):
    receivers = monitoring_settings({"receivers": [HOOK, SLACK, MAIL]})["receivers"]
    assert secrets_problems(receivers, secrets) == problems


def test_missing_credentials_stop_the_receiver_without_quoting_any_secret():
    settings = monitoring_settings({"receivers": [SLACK, MAIL]})
    with pytest.raises(MonitoringSettingsError) as err:
        alertmanager_receiver(settings, {"ops-mail": {"password": "smtp-password"}})
    assert str(err.value) == ("alert secrets: oncall.url: the Slack receiver 'oncall' needs "
                              "its incoming-webhook URL here")
    assert "smtp-password" not in str(err.value)
