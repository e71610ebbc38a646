"""One owner per setting (docs/reference/settings.md): every default is written once, and every
other reader takes it from there. Where a reader cannot (a program on a node that runs without
this repository, a role default that must be a literal), these tests fail the moment its
copy drifts from the owner; where a reader does take it from the owner, they check it still
does, and that no copy has crept back in."""

from __future__ import annotations

import ast
import base64
import importlib
import importlib.machinery
import re
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from ansible_collections.metalslurm.cluster.plugins.module_utils import (
    containers,
    elastic,
    health,
    inventory_contract,
    monitoring,
    rest,
)

from infra import state
from infra.config import DEFAULT_JOB_TIME, _parse_elastic, parse_config
from infra.health import HealthSettings
from infra.inventory import cluster_vars
from infra.monitoring_config import MonitoringSettings
from infra.rest_config import RestSettings
from infra.schema import Collector
from tests.paths import COLLECTION, REPO, ROLES, load_module

HEALTH_PROGRAM = ROLES / "slurm_health/files/metalslurm-health"


def role_defaults(role: str) -> dict:
    return yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text())


def ansible_files() -> list[Path]:
    """Every file the playbook reads settings from: group_vars and the roles' defaults, vars,
    tasks and templates."""
    files = sorted((REPO / "ansible/group_vars").rglob("*.yml"))
    for part in ("defaults", "vars", "tasks", "templates"):
        files += sorted(p for p in ROLES.glob(f"*/{part}/**/*") if p.is_file())
    return files


# ---- the supported operating systems: module_utils/operating_systems.py -----------------------

def _os_names() -> set[str]:
    """Every name a copy of the OS list would spell: ids, codenames, CUDA repository names."""
    from ansible_collections.metalslurm.cluster.plugins.module_utils.operating_systems import (
        OPERATING_SYSTEMS,
    )

    return {n for o in OPERATING_SYSTEMS for n in (o.id, o.codename, o.cuda_repository)}


def _source_files() -> list[Path]:
    """The Python the operator side, the collection, the roles and the benches run (not tests)."""
    files = [REPO / "__main__.py"]
    for top in (REPO / "infra", REPO / "bench", REPO / "examples", COLLECTION / "plugins", ROLES):
        files += [p for p in top.rglob("*.py") if "tests" not in p.relative_to(REPO).parts]
    return sorted(files)


def _os_list_copies(node: ast.AST, names: set[str]) -> list[str]:
    """The OS names ``node`` spells as a list: two or more as the items of a list, tuple, set
    or dict's keys, or three or more in one string (a message listing them); else []."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        spelled = sorted(n for n in names if re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)",
                                                       node.value))
        return spelled if len(spelled) >= 3 else []
    items = (node.keys if isinstance(node, ast.Dict)
             else node.elts if isinstance(node, ast.List | ast.Tuple | ast.Set) else [])
    spelled = [i.value for i in items if isinstance(i, ast.Constant) and i.value in names]
    return spelled if len(spelled) >= 2 else []


def test_the_os_list_is_written_once():
    """No module but the OS table spells the supported operating systems as a list (a second
    copy of it); each reads module_utils/operating_systems.py instead."""
    names = _os_names()
    owner = COLLECTION / "plugins/module_utils/operating_systems.py"
    copies = [f"{path.relative_to(REPO)}:{node.lineno}: {spelled}"
              for path in _source_files() if path != owner
              for node in ast.walk(ast.parse(path.read_text(), str(path)))
              if (spelled := _os_list_copies(node, names))]
    assert copies == []


def test_the_roles_default_time_is_the_stack_configs():
    """A hand-written inventory's partitions get the same DefaultTime as a parsed stack's."""
    assert role_defaults("slurm_controller")["slurm_controller_default_time"] == DEFAULT_JOB_TIME


# ---- the node health checker: module_utils/health.py --------------------------------------

def test_the_stack_parser_takes_the_health_defaults_from_their_owner():
    assert HealthSettings().inventory_vars() == health.DEFAULTS


def test_the_checker_programs_own_defaults_are_the_owners():
    """The checker runs on nodes without the repository, so it keeps copies (used when it is
    run by hand without a config file); its config-file names differ from the inventory's."""
    loader = importlib.machinery.SourceFileLoader("metalslurm_health_owners", str(HEALTH_PROGRAM))
    program = types.ModuleType(loader.name)
    sys.modules[loader.name] = program  # its dataclasses look their module up there
    loader.exec_module(program)
    copies = program.DEFAULTS
    assert {"check_timeout": copies["check_timeout"],
            "xid_window": copies["xid_window_seconds"],
            "max_ecc_uncorrected": copies["max_ecc_uncorrected"],
            "ib_rate_gbps": copies["ib"]["rate_gbps"]} == {
        k: health.DEFAULTS[k] for k in ("check_timeout", "xid_window", "max_ecc_uncorrected",
                                        "ib_rate_gbps")}


# ---- monitoring: module_utils/monitoring.py ------------------------------------------------

def test_the_stack_parser_takes_the_monitoring_defaults_from_their_owner():
    assert MonitoringSettings().inventory_vars() == monitoring.DEFAULTS


def test_the_gpu_alerts_critical_xids_are_the_health_checkers():
    """The Xid alert and the health checker drain on the same errors; the checker owns them."""
    loader = importlib.machinery.SourceFileLoader("metalslurm_health_xids", str(HEALTH_PROGRAM))
    program = types.ModuleType(loader.name)
    sys.modules[loader.name] = program
    loader.exec_module(program)
    assert list(monitoring.CRITICAL_XIDS) == program.DEFAULT_CRITICAL_XIDS


def test_the_playbooks_monitoring_switch_defaults_as_the_owner_says():
    group_vars = (REPO / "ansible/group_vars/all/metalslurm.yml").read_text().splitlines()
    assert MONITORING_ENABLED % str(monitoring.DEFAULTS["enabled"]).lower() in group_vars


# ---- power saving: module_utils/elastic.py -------------------------------------------------

@pytest.mark.parametrize("provider", sorted(elastic.PROVIDER_DEFAULTS))
def test_the_stack_parser_takes_each_providers_timings_from_their_owner(provider):
    """A stack without metalslurm:elastic gets, in its inventory, exactly what the roles
    would fill a hand-written inventory of that provider with."""
    c = Collector()
    parsed = _parse_elastic(c, {}, provider, [])
    assert c.problems == []
    cfg = replace(parse_config({"metalslurm:computePools": [{"name": "gpu", "count": 1}]}),
                  elastic=parsed)
    assert cluster_vars(cfg, [])["metalslurm_elastic"] == elastic.elastic_settings({}, provider)


# ---- no copy has crept back into the playbook ----------------------------------------------

# A `| default(...)` on one of these settings would be a second owner of its default.
OWNED_ELSEWHERE = re.compile(
    r"(metalslurm_health|metalslurm_elastic|metalslurm_monitoring|metalslurm_rest|"
    r"slurm_health_settings|"
    r"slurm_elastic_settings|monitoring_settings|"
    r"slurm_controller_power_saving|__slurm_controller_power)\.\w+\s*\|\s*default\(")


# The one copy the playbook must keep: site.yml's `when` reads it, and the verify suite's
# map of the playbook (infra/playbook.py) evaluates those conditions without the collection's
# filters. Held equal to the owner below.
HEALTH_ENABLED = "__metalslurm_health_enabled: \"{{ metalslurm_health.enabled | default(%s) }}\""
MONITORING_ENABLED = ("__metalslurm_monitoring_enabled: "
                      "\"{{ metalslurm_monitoring.enabled | default(%s) }}\"")
REST_ENABLED = "__metalslurm_rest_enabled: \"{{ metalslurm_rest.enabled | default(%s) }}\""


def test_the_playbook_keeps_no_copy_of_an_owned_default():
    kept = {HEALTH_ENABLED % str(health.DEFAULTS["enabled"]).lower(),
            MONITORING_ENABLED % str(monitoring.DEFAULTS["enabled"]).lower(),
            REST_ENABLED % str(rest.DEFAULTS["enabled"]).lower()}
    copies = [f"{path.relative_to(REPO)}:{n}: {line.strip()}"
              for path in ansible_files()
              for n, line in enumerate(path.read_text().splitlines(), start=1)
              if OWNED_ELSEWHERE.search(line) and line.strip() not in kept]
    assert copies == []


def test_the_playbooks_rest_switch_defaults_as_the_owner_says():
    group_vars = (REPO / "ansible/group_vars/all/metalslurm.yml").read_text().splitlines()
    assert REST_ENABLED % str(rest.DEFAULTS["enabled"]).lower() in group_vars


def test_the_stack_parser_takes_the_rest_defaults_from_their_owner():
    assert RestSettings().inventory_vars() == rest.DEFAULTS
    assert parse_config({"metalslurm:provider": "local"}).rest.inventory_vars() == rest.DEFAULTS


def test_the_playbooks_health_switch_defaults_as_the_owner_says():
    group_vars = (REPO / "ansible/group_vars/all/metalslurm.yml").read_text().splitlines()
    assert HEALTH_ENABLED % str(health.DEFAULTS["enabled"]).lower() in group_vars


def test_the_docs_table_of_timings_is_the_owners():
    """docs/how-to/elastic.md's table of power-saving defaults by provider says what the table
    holds."""
    text = (REPO / "docs/how-to/elastic.md").read_text()
    for stack_key, key in (("bootTime", "boot_time"), ("resumeTimeout", "resume_timeout"),
                           ("suspendTime", "suspend_time"), ("suspendTimeout", "suspend_timeout")):
        row = re.search(rf"^\| `{stack_key}` \| (\d+) s \| (\d+) s \| (\d+) s \|", text, re.M)
        assert row is not None, f"docs/how-to/elastic.md has no row for {stack_key}"
        assert [int(v) for v in row.groups()] == [
            elastic.PROVIDER_DEFAULTS[p][key] for p in ("local", "byo", "oci")], stack_key


# ---- the munge key: made once on the operator's side (infra/state.py) ----------------------

def test_the_munge_modules_shortest_key_is_the_operator_sides():
    """The module runs on nodes and cannot import infra/: its copy is held equal here."""
    module = load_module(COLLECTION / "plugins/modules/key_file.py", "key_file_owners")
    assert module.MIN_KEY_BYTES == state.MUNGE_MIN_KEY_BYTES


def test_the_pulumi_stacks_key_is_as_long_as_the_local_clusters():
    """Two drivers each keep the key where their state lives (infra/state.py says why); what
    a key is, is one definition."""
    text = (REPO / "infra/cluster.py").read_text()
    assert 'random.RandomBytes(f"{name}-munge-key", length=MUNGE_KEY_BYTES' in text
    assert len(base64.b64decode(state.new_munge_key())) == state.MUNGE_KEY_BYTES


def test_no_role_makes_a_munge_key():
    """Nodes never make the cluster's key: the munge role only installs the one it is given."""
    tasks = "\n".join(p.read_text() for p in (ROLES / "munge/tasks").glob("*.yml"))
    assert "generate" not in tasks and "slurp" not in tasks


# ---- shared storage: module_utils/inventory_contract.py --------------------------------------

def test_the_stack_parsers_shared_paths_are_the_contracts():
    cfg = parse_config({"metalslurm:computePools": [{"name": "gpu", "count": 1}]})
    assert cfg.storage.paths == inventory_contract.DEFAULT_SHARED_PATHS
    assert cluster_vars(cfg, [])["metalslurm_shared_paths"] == list(
        inventory_contract.DEFAULT_SHARED_PATHS)


def test_every_role_takes_the_shared_paths_from_one_filter():
    """The NFS server exports, the clients mount, the health checker checks and jobs list the
    same paths, for a hand-written inventory without metalslurm_shared_paths too."""
    readers = {"nfs_server": "nfs_server_exports", "nfs_client": "nfs_client_mounts",
               "common": "common_shared_paths", "slurm_health": "slurm_health_mounts"}
    for role, var in readers.items():
        assert " ".join(role_defaults(role)[var].split()) == (
            "{{ metalslurm_shared_paths | default(none) | metalslurm.cluster.shared_paths("
            "metalslurm_shared_storage | default(none)) }}"), role
    literal = re.compile(r"metalslurm_shared_paths\s*\|\s*default\(\s*\[")
    assert [str(p) for p in ansible_files() if literal.search(p.read_text())] == []


# ---- settings two roles must agree on: each role keeps its own, held equal here ----------------
# (a role reads no variable of another role or of the playbook: tests/lint/test_roles.py)

@pytest.mark.parametrize(("first", "second"), [
    (("slurm_elastic", "slurm_elastic_bin_dir"),
     ("slurm_controller", "slurm_controller_power_programs_dir")),
    (("slurmdbd", "slurmdbd_port"), ("slurm_controller", "slurm_controller_dbd_port")),
])
def test_what_two_roles_must_agree_on_is_equal(first, second):
    """Where slurm_elastic links the power programs is what slurm.conf names; the port
    slurmdbd listens on is the one slurmctld talks to."""
    assert role_defaults(first[0])[first[1]] == role_defaults(second[0])[second[1]]


# ---- containers: module_utils/containers.py ---------------------------------------------------

def test_the_stack_parser_takes_enroots_defaults_from_their_owner():
    from infra.containers_config import ContainerSettings

    d = ContainerSettings()
    assert (d.storage_dir, d.run_size) == (containers.DEFAULT_STORAGE_DIR,
                                           containers.DEFAULT_RUN_SIZE)


def test_the_health_checker_checks_the_cache_where_enroot_puts_it():
    """Both roles take Enroot's directories from the one filter (no '/var/lib/enroot' or
    '/cache' rule of their own)."""
    for role in ("enroot_pyxis", "slurm_health"):
        text = (ROLES / role / "defaults/main.yml").read_text()
        assert "metalslurm.cluster.container_settings" in text, role
        assert containers.DEFAULT_STORAGE_DIR not in text and "'/cache'" not in text, role


# ---- held equal: role defaults that are literals in Jinja, owned by the stack parser -------
# These roles' defaults for a hand-written inventory are written in the role (a literal in
# a `| default(...)`); the stack parser's dataclass owns the value. Moving them behind a
# filter as above is the better fix; until then, these fail when the copies drift.

def jinja_default(path: Path, expression: str):
    """The literal in ``expression | default(<literal>)`` in ``path``, as YAML reads it."""
    found = re.search(re.escape(expression) + r"\s*\|\s*default\(([^()]*)\)", path.read_text())
    assert found is not None, f"{path.relative_to(REPO)} has no {expression} | default(...)"
    return yaml.safe_load(found.group(1))


LITERAL_DEFAULTS = [
    ("roles/slurmdbd/defaults/main.yml", "slurmdbd_accounting.database_port",
     "infra.accounting_config:AccountingSettings", "database_port"),
    ("roles/slurmdbd/defaults/main.yml", "slurmdbd_accounting.database_name",
     "infra.accounting_config:AccountingSettings", "database_name"),
    ("roles/slurmdbd/defaults/main.yml", "slurmdbd_accounting.database_user",
     "infra.accounting_config:AccountingSettings", "database_user"),
    ("roles/slurm_accounting/defaults/main.yml", "slurm_accounting_settings.prune",
     "infra.accounting_config:AccountingSettings", "prune"),
    ("roles/slurm_topology/defaults/main.yml", "metalslurm_topology.plugin",
     "infra.topology_config:TopologySettings", "plugin"),
    ("roles/slurm_controller/vars/main.yml", "metalslurm_topology.plugin",
     "infra.topology_config:TopologySettings", "plugin"),
    ("roles/nccl_ib/defaults/main.yml", "metalslurm_nccl.enabled",
     "infra.nccl_config:NcclConfig", "enabled"),
    ("roles/nvidia_gpu/vars/main.yml", "nvidia_gpu_settings.mode",
     "infra.gpu_config:GpuSettings", "mode"),
    ("roles/nvidia_gpu/vars/main.yml", "nvidia_gpu_settings.branch",
     "infra.gpu_config:GpuSettings", "branch"),
    ("roles/nvidia_gpu/vars/main.yml", "nvidia_gpu_settings.reboot_policy",
     "infra.gpu_config:GpuSettings", "reboot_policy"),
    ("roles/nvidia_gpu/vars/main.yml", "nvidia_gpu_settings.fabric_manager",
     "infra.gpu_config:GpuSettings", "fabric_manager"),
    ("roles/nvidia_gpu/vars/main.yml", "nvidia_gpu_settings.dcgm",
     "infra.gpu_config:GpuSettings", "dcgm"),
    ("roles/nvidia_gpu/vars/main.yml", "nvidia_gpu_settings.container_toolkit",
     "infra.gpu_config:GpuSettings", "container_toolkit"),
    ("roles/slurm_compute/vars/main.yml", "(metalslurm_accept | default({})).gate",
     "infra.accept.gate:GateSettings", "gate"),
    ("roles/nvidia_gpu/vars/main.yml", "(metalslurm_accept | default({})).gate",
     "infra.accept.gate:GateSettings", "gate"),
]


@pytest.mark.parametrize(("file", "expression", "owner", "field"), LITERAL_DEFAULTS,
                         ids=[f"{f.split('/')[1]}:{e}" for f, e, _o, _d in LITERAL_DEFAULTS])
def test_a_roles_literal_default_is_the_stack_parsers(file, expression, owner, field):
    module, cls = owner.split(":")
    default = getattr(getattr(importlib.import_module(module), cls)(), field)
    assert jinja_default(REPO / file, expression) == default, (
        f"{file}: {expression} defaults to something else than {owner}.{field} ({default!r})")


@pytest.mark.parametrize(("role", "var"), [("slurm_compute", "__slurm_compute_gate_reason"),
                                          ("nvidia_gpu", "__nvidia_gpu_gate_reason")])
def test_the_roles_drain_into_the_gate_with_the_gates_own_prefix(role, var):
    """'metalslurm accept' takes (and alone returns) the nodes drained with its prefix."""
    from infra.accept.verdicts import REASON_PREFIX

    reason = yaml.safe_load((ROLES / role / "vars/main.yml").read_text())[var]
    assert reason.startswith(REASON_PREFIX + " "), reason


def test_slurm_conf_names_the_health_checker_where_its_role_installs_it():
    assert role_defaults("slurm_controller")["slurm_controller_health_program"] == \
        role_defaults("slurm_health")["slurm_health_program"]


def test_slurm_conf_names_the_prolog_and_epilog_where_their_role_installs_them():
    controller, role = role_defaults("slurm_controller"), role_defaults("monitoring_node")
    assert (controller["slurm_controller_job_prolog"], controller["slurm_controller_job_epilog"]) \
        == (role["monitoring_node_job_prolog"], role["monitoring_node_job_epilog"])


def test_the_gpu_job_prolog_writes_where_node_exporter_reads():
    program = (ROLES / "monitoring_node/files/metalslurm-gpu-jobs").read_text()
    textfile_dir = re.search(r'^TEXTFILE_DIR = Path\("([^"]+)"\)', program, re.M).group(1)
    assert textfile_dir == role_defaults("monitoring_node")["monitoring_node_textfile_dir"]


def test_the_dcgm_exporter_reads_the_job_files_where_the_gpu_job_prolog_writes_them():
    program = (ROLES / "monitoring_node/files/metalslurm-gpu-jobs").read_text()
    map_dir = re.search(r'^DCGM_MAP_DIR = Path\("([^"]+)"\)', program, re.M).group(1)
    assert map_dir == role_defaults("nvidia_gpu")["nvidia_gpu_dcgm_job_map_dir"]


def test_slurm_runs_as_the_user_the_common_role_creates():
    assert role_defaults("slurm_common")["slurm_common_user"] == \
        role_defaults("common")["common_slurm_user"]
