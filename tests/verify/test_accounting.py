"""Accounting: slurmdbd and its database, where they should listen, secrets' modes, and the
scheduling policy slurmctld runs with (fair share, preemption, enforced associations)."""

import pytest

SLURMDBD_CONF = "/etc/slurm/slurmdbd.conf"


@pytest.fixture(scope="module")
def dbd(cluster):
    import testinfra

    hosts = cluster.hosts_in("slurmdbd")
    if not hosts:
        pytest.skip("no slurmdbd host in this inventory")
    return testinfra.get_host(f"ansible://{hosts[0]}", ansible_inventory=cluster.inventory)


def local_database(cluster) -> bool:
    return not (cluster.var("metalslurm_accounting", {}) or {}).get("database_host")


def test_slurmdbd_runs_and_listens_on_its_port(dbd):
    assert dbd.service("slurmdbd").is_running
    assert dbd.service("slurmdbd").is_enabled
    assert dbd.socket("tcp://0.0.0.0:6819").is_listening or \
        dbd.socket("tcp://:::6819").is_listening


def test_mariadb_listens_on_loopback_only(dbd, cluster):
    if not local_database(cluster):
        pytest.skip("external accounting database")
    assert dbd.service("mariadb").is_running
    listening = [s for s in dbd.socket.get_listening_sockets() if s.endswith(":3306")]
    assert listening == ["tcp://127.0.0.1:3306"]


def test_slurmdbd_conf_holds_the_password_for_slurm_only(dbd):
    conf = dbd.file(SLURMDBD_CONF)
    assert (conf.user, conf.group, oct(conf.mode)) == ("slurm", "slurm", "0o600")
    # Counted on the node, so a failure never prints the password.
    assert dbd.check_output(f"grep -cE '^StoragePass=[^[:space:]]{{16,}}$' {SLURMDBD_CONF}") == "1"


def test_the_cluster_is_registered(dbd, cluster):
    out = dbd.check_output("sacctmgr --parsable2 --noheader show cluster format=cluster")
    assert cluster.var("metalslurm_cluster_name") in out.split()


@pytest.mark.parametrize(("key", "value"), [
    ("AccountingStorageType", "accounting_storage/slurmdbd"),
    ("AccountingStorageEnforce", "associations,limits,qos,safe"),
    ("PriorityType", "priority/multifactor"),
    ("PreemptType", "preempt/partition_prio"),
    ("PreemptMode", "REQUEUE"),
])
def test_slurmctld_runs_with_the_accounting_policy(controller, cluster, key, value):
    if not cluster.hosts_in("slurmdbd"):
        pytest.skip("no slurmdbd host in this inventory")
    lines = controller.check_output("scontrol show config").splitlines()
    found = {line.split("=", 1)[0].strip(): line.split("=", 1)[1].strip()
             for line in lines if "=" in line}
    assert found[key] == value
