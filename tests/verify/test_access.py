"""Who may SSH to a compute node (roles/slurm_pam_adopt): sshd's account stack ends with the
pam_access admin exemption and then pam_slurm_adopt, after the distribution's common-account;
the exemption lets in root and the admin group and nobody else; pam_systemd is in none of the
stacks sshd reads; slurmctld creates the extern step sessions are adopted into."""

from __future__ import annotations

import pytest


def _access(cluster) -> dict:
    return {"admin_group": "hpcadmin", "pam_slurm_adopt": True,
            **dict(cluster.var("metalslurm_access") or {})}


@pytest.fixture(autouse=True)
def _only_with_pam_slurm_adopt(request: pytest.FixtureRequest, cluster) -> None:
    if not _access(cluster)["pam_slurm_adopt"]:
        pytest.skip("metalslurm:access.pamSlurmAdopt is false: any user may SSH to any node")
    if "host" in request.fixturenames:
        name = str(request.getfixturevalue("host").backend.host)
        if "slurm_compute" not in cluster.groups_of(name):
            pytest.skip(f"{name} runs no jobs")


def _account_lines(host) -> list[str]:
    lines = [line.split("#")[0].split() for line in
             host.file("/etc/pam.d/sshd").content_string.splitlines()]
    return [" ".join(words) for words in lines
            if words and (words[0].lstrip("-") == "account" or words[:2] == ["@include",
                                                                              "common-account"])]


def test_sshd_checks_the_admin_exemption_then_pam_slurm_adopt_last(host):
    account = _account_lines(host)
    exemption = next(i for i, line in enumerate(account) if "pam_access.so" in line)
    adopt = next(i for i, line in enumerate(account) if "pam_slurm_adopt.so" in line)
    assert account.index("@include common-account") < exemption < adopt == len(account) - 1
    assert account[exemption].startswith("account sufficient pam_access.so accessfile=")
    # required, never "-account": a missing module must not let everyone in
    assert account[adopt].startswith("account required pam_slurm_adopt.so")


def test_the_exemption_lets_in_root_and_the_admin_group_only(host, cluster):
    line = next(line for line in _account_lines(host) if "pam_access.so" in line)
    rules = [r.strip() for r in host.file(line.split("accessfile=")[1].split()[0])
             .content_string.splitlines() if r.strip() and not r.startswith("#")]
    assert rules[-1] == "-:ALL:ALL"
    allowed = {r[2:].split(":")[0] for r in rules[:-1]}
    assert f"({_access(cluster)['admin_group']})" in allowed and "root" in allowed
    assert all(r.startswith("+:") for r in rules[:-1]), rules


def test_no_pam_systemd_where_sshd_reads(host):
    for path in ("/etc/pam.d/sshd", "/etc/pam.d/common-session"):
        text = host.file(path).content_string
        assert not [line for line in text.splitlines()
                    if "pam_systemd" in line and not line.lstrip().startswith("#")], path


def test_jobs_get_an_extern_step_to_adopt_into(controller):
    config = controller.check_output("scontrol show config")
    flags = next(line.split("=", 1)[1].strip() for line in config.splitlines()
                 if line.startswith("PrologFlags "))
    assert "Contain" in flags.split(",")
