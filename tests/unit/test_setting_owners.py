"""One owner per setting (docs/reference/settings.md): every default is written once, and
every other reader takes it from there. No literal default is the default of settings in two owners
(:func:`test_no_literal_default_has_two_owners`); where a reader does take it from the owner,
these tests check it still does. The copies left are held by programs that run on nodes
without this repository, each test saying so."""

from __future__ import annotations

import ast
import base64
import importlib.machinery
import re
import sys
import types
from collections import defaultdict
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

from infra.ops.playbook import SWITCHES
from infra.stack import state
from infra.stack.config import _parse_elastic, parse_config
from infra.stack.health import HealthSettings
from infra.stack.inventory import cluster_vars
from infra.stack.monitoring import MonitoringSettings
from infra.stack.rest import RestSettings
from infra.stack.schema import Collector
from tests.paths import COLLECTION, REPO, ROLES

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


# ---- the node health checker: module_utils/health.py --------------------------------------

def test_the_stack_parser_takes_the_health_defaults_from_their_owner():
    assert HealthSettings().inventory_vars() == health.DEFAULTS


def test_the_checker_programs_own_defaults_are_the_owners():
    """Held equal, not single-owner: the checker is one file copied to nodes that have
    neither this repository nor the collection, so it keeps copies (used when it is run by
    hand without a config file); its config-file names differ from the inventory's."""
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
    """The Xid alert and the health checker drain on the same errors. Held equal, not
    single-owner: the checker owns the list and runs on nodes without the collection, so
    module_utils/monitoring.py cannot be its source; the alert rules keep a copy."""
    loader = importlib.machinery.SourceFileLoader("metalslurm_health_xids", str(HEALTH_PROGRAM))
    program = types.ModuleType(loader.name)
    sys.modules[loader.name] = program
    loader.exec_module(program)
    assert list(monitoring.CRITICAL_XIDS) == program.DEFAULT_CRITICAL_XIDS


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

# A `| default(...)` on a key of one of these settings would be a second owner of its
# default: each is read over its table (module_utils/<topic>.py) through a filter.
# (metalslurm_accept's table holds the roles' key, gate, alone: the gate's other keys are
# infra/accept's.)
OWNED_ELSEWHERE = re.compile(
    r"(metalslurm_health|metalslurm_elastic|metalslurm_monitoring|metalslurm_rest|"
    r"metalslurm_gpu|metalslurm_nccl|metalslurm_accounting|metalslurm_access|"
    r"metalslurm_topology|slurm_health_settings|nvidia_gpu_settings|slurmdbd_accounting|"
    r"slurm_accounting_settings|slurm_elastic_settings|monitoring_settings|"
    r"slurm_controller_power_saving|__slurm_controller_power)"
    r"(\s*\|\s*default\([^()]*\)\s*\))?\.(?!host\b)\w+\s*\|\s*default\(")
# (metalslurm_monitoring.host is not a default: "" in the table, the controller when empty.)


def test_the_playbook_keeps_no_copy_of_an_owned_default():
    copies = [f"{path.relative_to(REPO)}:{n}: {line.strip()}"
              for path in ansible_files()
              for n, line in enumerate(path.read_text().splitlines(), start=1)
              if OWNED_ELSEWHERE.search(line)]
    assert copies == []


@pytest.mark.parametrize(("switch", "owner"), [
    ("__metalslurm_health_enabled", health), ("__metalslurm_monitoring_enabled", monitoring),
    ("__metalslurm_rest_enabled", rest)])
def test_the_playbooks_switches_and_its_map_read_the_owners_table(switch, owner):
    """site.yml's `when` reads these through the owner's filter; the verify suite's map of the
    playbook (infra/ops/playbook.py), which evaluates them without Ansible's collection loader,
    takes the default from the same table."""
    group_vars = yaml.safe_load((REPO / "ansible/group_vars/all/metalslurm.yml").read_text())
    setting, table = SWITCHES[switch]
    topic = owner.__name__.rsplit(".", 1)[1]
    assert " ".join(group_vars[switch].split()) == (
        f"{{{{ ({setting} | default(none) | metalslurm.cluster.{topic}_settings).enabled }}}}")
    assert table is owner.DEFAULTS


def test_the_stack_parser_takes_the_rest_defaults_from_their_owner():
    assert RestSettings().inventory_vars() == rest.DEFAULTS
    assert parse_config({"metalslurm:provider": "local"}).rest.inventory_vars() == rest.DEFAULTS


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


# ---- the munge key: made once on the operator's side (infra/stack/state.py) ----------------------

def test_the_pulumi_stacks_key_is_as_long_as_the_local_clusters():
    """Two drivers each keep the key where their state lives (infra/stack/state.py says why); what
    a key is, is one definition."""
    text = (REPO / "infra/pulumi/cluster.py").read_text()
    assert 'stack_key(f"{name}-munge-key-b64", MUNGE_KEY_BYTES' in text
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


# ---- containers: module_utils/containers.py ---------------------------------------------------

def test_the_stack_parser_takes_enroots_defaults_from_their_owner():
    from infra.stack.containers import ContainerSettings

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


def test_the_gpu_job_prolog_writes_where_node_exporter_reads():
    """Held equal, not single-owner: the prolog program is copied to compute nodes, which
    have neither this repository nor the collection."""
    program = (ROLES / "monitoring_node/files/metalslurm-gpu-jobs").read_text()
    textfile_dir = re.search(r'^TEXTFILE_DIR = Path\("([^"]+)"\)', program, re.M).group(1)
    assert textfile_dir == role_defaults("monitoring_node")["monitoring_node_textfile_dir"]


def test_the_dcgm_exporter_reads_the_job_files_where_the_gpu_job_prolog_writes_them():
    """Held equal for the same reason: the program on the node keeps its own path."""
    program = (ROLES / "monitoring_node/files/metalslurm-gpu-jobs").read_text()
    map_dir = re.search(r'^DCGM_MAP_DIR = Path\("([^"]+)"\)', program, re.M).group(1)
    assert map_dir == role_defaults("nvidia_gpu")["nvidia_gpu_dcgm_job_map_dir"]




# ---- no literal default has two owners -------------------------------------------------------
# The defaults of settings, by owner: each role's defaults (its public settings, and the
# literals in their `| default(...)`), the `| default(...)` literals in its vars (the
# defaults of the settings it reads there; the other values of vars are the role's
# internals), group_vars, the stack parser's defaults (infra/: dataclass fields, DEFAULT_*
# constants, `default=` arguments) and the collection's tables (module_utils/: upper-case
# constants and the values of its DEFAULTS dicts). A non-trivial literal that is the
# default in two owners is a copy one of them should read from the other.

_DURATION = re.compile(r"^(\d+-)?\d+:\d\d(:\d\d)?$")  # Slurm's 1-00:00:00, 30:00
_VERSION = re.compile(r"^[1-9]\d{2,}$|^\d+(\.\d+)+$")  # a driver branch ("580"), 24.11, 1.2.3
_JINJA_DEFAULT = re.compile(r"\|\s*default\(\s*('[^']*'|\"[^\"]*\"|-?\d+)\s*[,)]")


def nontrivial(value: object) -> bool:
    """A port or ID (an int of 1024 or more), a path, a Slurm duration or a version; not a
    boolean, a small number, an empty value, a word or a file mode ("0755"), nor a whole
    number of minutes (seconds: an hour is the window of one setting and the timeout of
    another without either being the other's copy)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 1024 and value % 60 != 0
    return isinstance(value, str) and (
        (value.startswith("/") and len(value.strip("/")) > 1) or bool(_DURATION.match(value))
        or bool(_VERSION.match(value)))


def _yaml_literals(value: object, templates_only: bool) -> list[object]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _yaml_literals(v, templates_only)]
    if isinstance(value, list):
        return [x for v in value for x in _yaml_literals(v, templates_only)]
    if isinstance(value, str) and "{{" in value:
        return [yaml.safe_load(m.group(1)) for m in _JINJA_DEFAULT.finditer(value)]
    return [] if templates_only else [value]


def _python_literals(path: Path, infra: bool) -> list[tuple[str, object]]:
    """(name, literal) of the defaults ``path`` writes (see above)."""
    found: list[tuple[str, object]] = []
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and infra and any(
                "dataclass" in ast.unparse(d) for d in node.decorator_list):
            found += [(f"{node.name}.{s.target.id}", s.value.value) for s in node.body
                      if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                      and isinstance(s.value, ast.Constant)]
        elif isinstance(node, ast.Call) and infra:
            found += [(f"default= at line {node.lineno}", k.value.value) for k in node.keywords
                      if k.arg == "default" and isinstance(k.value, ast.Constant)]
    for node in tree.body:
        target = (node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1
                  else node.target if isinstance(node, ast.AnnAssign) else None)
        if not isinstance(target, ast.Name) or node.value is None:
            continue
        name = target.id
        if isinstance(node.value, ast.Constant) and (
                name.startswith("DEFAULT") if infra else name.isupper()):
            found.append((name, node.value.value))
        elif isinstance(node.value, ast.Dict) and "DEFAULTS" in name:
            found += [(f"{name}[{ast.unparse(k)}]", v.value)
                      for k, v in zip(node.value.keys, node.value.values, strict=True)
                      if k is not None and isinstance(v, ast.Constant)]
    return found


def literal_defaults(repo: Path) -> dict[object, set[str]]:
    """Each non-trivial literal default under ``repo``, with where it is written as
    "owner: setting" (the owner a role, group_vars, infra or a module_utils table)."""
    found: dict[object, set[str]] = defaultdict(set)

    def add(owner: str, setting: str, literals: list[object]) -> None:
        for literal in literals:
            if nontrivial(literal):
                found[literal].add(f"{owner}: {setting}")

    for part, templates_only in (("defaults", False), ("vars", True)):
        for path in sorted(repo.glob(f"roles/*/{part}/main.yml")):
            owner = f"roles/{path.parts[-3]}"
            for name, value in (yaml.safe_load(path.read_text()) or {}).items():
                add(owner, f"{part}/{name}", _yaml_literals(value, templates_only))
    for path in sorted((repo / "ansible/group_vars").rglob("*.yml")):
        for name, value in (yaml.safe_load(path.read_text()) or {}).items():
            add("group_vars", name, _yaml_literals(value, False))
    for path in sorted((repo / "infra").rglob("*.py")):
        for name, value in _python_literals(path, infra=True):
            add("infra", f"{path.relative_to(repo)}:{name}", [value])
    utils = repo / COLLECTION.relative_to(REPO) / "plugins/module_utils"
    for path in sorted(utils.glob("*.py")):
        for name, value in _python_literals(path, infra=False):
            add(f"module_utils/{path.name}", name, [value])
    return found


def copies(found: dict[object, set[str]]) -> list[str]:
    """The literals written as the default of settings in two owners or more."""
    return [f"{literal!r}: {', '.join(sorted(where))}" for literal, where in
            sorted(found.items(), key=lambda item: repr(item[0]))
            if len({w.split(": ")[0] for w in where}) > 1]


def test_no_literal_default_has_two_owners():
    assert copies(literal_defaults(REPO)) == []


def test_the_scan_sees_the_owners_tables():
    """The scan reads what it should: the tables the roles read through filters."""
    found = literal_defaults(REPO)
    assert found[6819] == {"module_utils/cluster_defaults.py: SLURMDBD_PORT"}
    assert found["580"] == {"module_utils/gpu.py: DEFAULTS['branch']"}
    assert found[3306] == {
        "module_utils/cluster_defaults.py: ACCOUNTING_DEFAULTS['database_port']"}


@pytest.mark.parametrize(("path", "text"), [
    ("roles/b/defaults/main.yml", "b_port: 6819\n"),
    ("roles/b/defaults/main.yml", "b_time: \"{{ b_settings.time | default('1-00:00:00') }}\"\n"),
    ("roles/b/vars/main.yml", "__b_dir: \"{{ b_settings.dir | default('/usr/local/sbin') }}\"\n"),
    ("ansible/group_vars/all/x.yml", "__x_branch: \"{{ x.branch | default('580') }}\"\n"),
    ("infra/b_config.py", "from dataclasses import dataclass\n\n\n@dataclass\nclass B:\n"
                          "    port: int = 6819\n"),
    ("infra/b.py", "def parse(c, item):\n"
                   "    return c.string(item, 'time', default='1-00:00:00')\n"),
])
def test_the_scan_finds_a_planted_copy(tmp_path, path, text):
    """A tree whose one role owns a setting, and a copy of one of its defaults planted
    elsewhere: the copy is found; the tree without it has none."""
    (tmp_path / "roles/a/defaults").mkdir(parents=True)
    (tmp_path / "roles/a/defaults/main.yml").write_text(
        "a_port: 6819\na_dir: /usr/local/sbin\na_time: 1-00:00:00\na_branch: '580'\n"
        "a_mode: '0755'\na_enabled: true\na_retries: 3\n")
    (tmp_path / "infra").mkdir()
    (tmp_path / "ansible/group_vars").mkdir(parents=True)
    (tmp_path / COLLECTION.relative_to(REPO) / "plugins/module_utils").mkdir(parents=True)
    assert copies(literal_defaults(tmp_path)) == []
    (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / path).write_text(text)
    assert len(copies(literal_defaults(tmp_path))) == 1
