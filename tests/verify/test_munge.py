"""One munge key everywhere, protected, and credentials that cross nodes."""

import pytest

KEY = "/etc/munge/munge.key"
PAYLOAD = "metalslurm-verify"


@pytest.fixture(scope="module")
def controller_key_hash(controller):
    return controller.check_output(f"sha256sum {KEY}").split()[0]


@pytest.fixture(scope="module")
def controller_credential(controller):
    return controller.check_output(f"echo -n {PAYLOAD} | munge")


def test_munge_key_is_owned_by_munge_and_read_only(host):
    key = host.file(KEY)
    assert (key.user, key.group, oct(key.mode)) == ("munge", "munge", "0o400")


def test_munge_key_is_the_controllers(host, controller_key_hash):
    assert host.check_output(f"sha256sum {KEY}").split()[0] == controller_key_hash


def test_controller_credential_decodes_here(host, controller_credential):
    out = host.run(f"echo '{controller_credential}' | unmunge")
    assert out.rc == 0, out.stderr
    assert "STATUS:          Success (0)" in out.stdout
    assert out.stdout.rstrip().endswith(PAYLOAD)


def test_credential_made_here_decodes_on_controller(host, controller):
    credential = host.check_output(f"echo -n {PAYLOAD} | munge")
    out = controller.run(f"echo '{credential}' | unmunge")
    assert out.rc == 0, out.stderr
    assert out.stdout.rstrip().endswith(PAYLOAD)
