"""Roles that stand on their own, checked statically (make lint).

A role reads only: its own variables (defaults, vars, what its tasks register or set), the
public variables of the roles it declares as dependencies (meta/main.yml), the inventory
contract (module_utils/inventory_contract.py), the node facts contract (``metalslurm_node``)
and Ansible's own variables. It sets facts only in its own namespace or in
``metalslurm_node``, notifies only its own handlers or a topic another role owns (never
another role's handler by name), and calls only filters the collection has. Its modules and
programs are tested next to it; the collection's plugins are tested in the collection.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.metalslurm.cluster.plugins.module_utils import inventory_contract
from jinja2 import Environment, meta
from jinja2.exceptions import TemplateSyntaxError

from tests.paths import COLLECTION, REPO, ROLES

ROLE_NAMES = sorted(p.name for p in ROLES.iterdir() if (p / "tasks").is_dir())
# Task keys whose strings are bare Jinja expressions (no braces).
CONDITION_KEYS = {"when", "failed_when", "changed_when", "until", "that"}
NODE_CONTRACT = "metalslurm_node"
# Variables Ansible itself defines (magic variables; facts are ansible_*), and Jinja's.
ANSIBLE_NAMES = {
    "hostvars", "groups", "group_names", "inventory_hostname", "inventory_hostname_short",
    "inventory_dir", "inventory_file", "play_hosts", "playbook_dir", "role_path", "role_name",
    "omit", "item", "lookup", "query", "q", "now", "undef", "range", "dict", "lipsum",
    "cycler", "joiner", "namespace", "true", "false", "none", "True", "False", "None",
}
CONTRACT = (set(inventory_contract.CLUSTER_VARS) | set(inventory_contract.HOST_VARS)
            | set(inventory_contract.SECRET_FILE_VARS))


class _AnyFilter(dict):
    """Filters and tests for parsing only: every name is one (Ansible's and the collection's
    are not Jinja's)."""

    def __contains__(self, key: object) -> bool:
        return True

    def get(self, key: Any, default: Any = None) -> Any:
        return super().get(key) or (lambda *args, **kwargs: None)


_JINJA = Environment(extensions=["jinja2.ext.do", "jinja2.ext.loopcontrols"])
_JINJA.filters = _AnyFilter(_JINJA.filters)
_JINJA.tests = _AnyFilter(_JINJA.tests)


def names_in(template: str, where: str, delimiters: tuple[str, str] | None = None) -> set[str]:
    env = _JINJA
    if delimiters is not None:  # a template task's variable_start_string/_end_string
        env = _JINJA.overlay(variable_start_string=delimiters[0],
                             variable_end_string=delimiters[1])
    try:
        return set(meta.find_undeclared_variables(env.parse(template)))
    except TemplateSyntaxError as exc:
        raise AssertionError(f"{where}: not a Jinja template: {exc}") from exc


def strings(doc: Any, key: str | None = None) -> Iterator[tuple[str | None, str]]:
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from strings(v, k)
    elif isinstance(doc, list):
        for v in doc:
            yield from strings(v, key)
    elif isinstance(doc, str):
        yield key, doc


def read_in_yaml(doc: Any, where: str) -> set[str]:
    found: set[str] = set()
    for key, text in strings(doc):
        if key in CONDITION_KEYS and "{{" not in text:
            found |= names_in("{{ (" + text + ") }}", where)
        elif "{{" in text or "{%" in text:
            found |= names_in(text, where)
    return found


def tasks_of(doc: Any) -> Iterator[dict]:
    """Every task, block and handler in a task file, nested blocks included."""
    for task in doc or []:
        if isinstance(task, dict):
            yield task
            for section in ("block", "rescue", "always"):
                yield from tasks_of(task.get(section))


def set_in_tasks(doc: Any) -> dict[str, set[str]]:
    """What tasks define: registered results, set facts, task and loop variables."""
    found: dict[str, set[str]] = {"register": set(), "set_fact": set(), "vars": set()}
    for task in tasks_of(doc):
        if isinstance(task.get("register"), str):
            found["register"].add(task["register"])
        for module in ("ansible.builtin.set_fact", "set_fact"):
            if isinstance(task.get(module), dict):
                found["set_fact"] |= {k for k in task[module] if k != "cacheable"}
        if isinstance(task.get("vars"), dict):
            found["vars"] |= set(task["vars"])
        for include in ("ansible.builtin.include_role", "ansible.builtin.include_tasks"):
            if isinstance((task.get(include) or {}), dict) and "vars" in (task.get(include) or {}):
                found["vars"] |= set(task[include]["vars"])
        loop_var = (task.get("loop_control") or {}).get("loop_var")
        if loop_var:
            found["vars"].add(loop_var)
    return found


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


@cache
def role_files(role: str) -> dict[str, list[Path]]:
    base = ROLES / role
    return {"vars": [*sorted((base / "defaults").glob("*.yml")),
                     *sorted((base / "vars").glob("*.yml"))],
            "tasks": [*sorted((base / "tasks").glob("*.yml")),
                      *sorted((base / "handlers").glob("*.yml"))],
            "templates": sorted((base / "templates").rglob("*.j2"))}


@cache
def dependencies(role: str) -> tuple[str, ...]:
    metadata = load(ROLES / role / "meta" / "main.yml") or {}
    direct = [d["role"] if isinstance(d, dict) else d for d in metadata.get("dependencies") or []]
    found = list(direct)
    for dep in direct:
        found += [d for d in dependencies(dep) if d not in found]
    return tuple(found)


@cache
def defined_by(role: str) -> frozenset[str]:
    """The variables a role defines itself."""
    names: set[str] = set()
    for path in role_files(role)["vars"]:
        names |= set(load(path) or {})
    for path in role_files(role)["tasks"]:
        for kind in set_in_tasks(load(path)).values():
            names |= kind
    return frozenset(names)


@cache
def template_delimiters(role: str) -> dict[str, tuple[str, str]]:
    """src -> (start, end) of the role's template tasks, and of its vars' template lookups,
    that set their own delimiters."""
    found = {}
    for path in role_files(role)["vars"]:
        for src, start, end in re.findall(
                r"lookup\('(?:ansible\.builtin|metalslurm\.cluster)\.template',\s*'([^']+)',\s*"
                r"variable_start_string='([^']+)',\s*variable_end_string='([^']+)'",
                path.read_text()):
            found[src] = (start, end)
    for path in role_files(role)["tasks"]:
        for task in tasks_of(load(path)):
            args = task.get("ansible.builtin.template")
            if isinstance(args, dict) and "variable_start_string" in args:
                found[args["src"]] = (args["variable_start_string"],
                                      args.get("variable_end_string", "}}"))
    return found


@cache
def read_by(role: str) -> dict[str, set[str]]:
    """name -> the files of the role that read it."""
    found: dict[str, set[str]] = {}
    for kind, paths in role_files(role).items():
        for path in paths:
            where = str(path.relative_to(REPO))
            src = str(path.relative_to(ROLES / role / "templates")) \
                if kind == "templates" else ""
            names = (names_in(path.read_text(), where, template_delimiters(role).get(src))
                     if kind == "templates" else read_in_yaml(load(path), where))
            for name in names:
                found.setdefault(name, set()).add(where)
    return found


def owner_prefix(role: str) -> re.Pattern[str]:
    return re.compile(rf"^_{{0,2}}{re.escape(role)}_")


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_a_role_reads_only_variables_it_its_dependencies_or_the_contracts_define(role):
    allowed = set(defined_by(role)) | CONTRACT | ANSIBLE_NAMES | {NODE_CONTRACT}
    for dep in dependencies(role):
        allowed |= {n for n in defined_by(dep) if not n.startswith("_")}
    unknown = {name: sorted(files) for name, files in read_by(role).items()
               if name not in allowed and not name.startswith("ansible_")}
    assert unknown == {}, (
        f"role {role} reads variables that neither it, its dependencies "
        f"({', '.join(dependencies(role)) or 'none'}), the inventory contract nor the node "
        f"facts contract define: {unknown}")


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_a_role_sets_facts_only_in_its_namespace_or_the_node_contract(role):
    prefix = owner_prefix(role)
    set_facts = set()
    for path in role_files(role)["tasks"]:
        set_facts |= set_in_tasks(load(path))["set_fact"]
    strangers = sorted(n for n in set_facts if not prefix.match(n) and n != NODE_CONTRACT)
    assert strangers == [], f"role {role} sets facts outside its namespace: {strangers}"


def node_contract_keys(role: str) -> set[str]:
    """The metalslurm_node keys a role sets (combine({'key': ...}) or a vars dict)."""
    keys = set()
    for path in role_files(role)["tasks"]:
        for task in tasks_of(load(path)):
            fact = (task.get("ansible.builtin.set_fact") or {}).get(NODE_CONTRACT)
            if fact is None:
                continue
            literal = re.findall(r"combine\(\{'(\w+)'", str(fact))
            named = re.findall(r"combine\((__\w+)\)", str(fact))
            keys |= set(literal)
            for var in named:
                for vars_path in role_files(role)["vars"]:
                    value = (load(vars_path) or {}).get(var)
                    if value is not None:
                        keys |= set(re.findall(r"'(\w+)':", str(value)))
    return keys


def test_each_node_fact_has_one_owner_and_the_readme_names_it():
    owners: dict[str, list[str]] = {}
    for role in ROLE_NAMES:
        for key in node_contract_keys(role):
            owners.setdefault(key, []).append(role)
    assert owners, "no role publishes metalslurm_node"
    assert {k: v for k, v in owners.items() if len(v) > 1} == {}
    readme = (COLLECTION / "README.md").read_text()
    table = {m.group(1): m.group(2) for m in
             re.finditer(r"^ *\| `(\w+)` \| (\w+) \|", readme, re.MULTILINE)}
    assert {k: v[0] for k, v in owners.items()} == {
        k: v for k, v in table.items() if not k.startswith("metalslurm:")}


def handlers_of(role: str) -> tuple[set[str], set[str]]:
    path = ROLES / role / "handlers" / "main.yml"
    if not path.exists():
        return set(), set()
    handlers = list(tasks_of(load(path)))
    return ({h["name"] for h in handlers if "name" in h},
            {h["listen"] for h in handlers if "listen" in h})


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_a_role_notifies_its_own_handlers_or_a_topic_a_dependency_owns(role):
    """A role plays alone: what it notifies is its own handler, or a metalslurm: topic of a
    role it depends on (meta/main.yml), never one that only some other role in the same
    play happens to define."""
    own_names, own_topics = handlers_of(role)
    owned = {t for dep in dependencies(role) for t in handlers_of(dep)[1]}
    problems = []
    for path in role_files(role)["tasks"]:
        for task in tasks_of(load(path)):
            notify = task.get("notify") or []
            for target in [notify] if isinstance(notify, str) else notify:
                if target in own_names | own_topics:
                    continue
                if target in owned and target.startswith("metalslurm:"):
                    continue
                problems.append(f"{path.relative_to(REPO)}: notify {target!r}")
    assert problems == [], (f"role {role} notifies handlers it does not own and none of its "
                            f"dependencies owns as a metalslurm: topic: {problems}")


def test_no_role_asks_which_roles_are_in_its_play():
    """A role's behaviour does not depend on its neighbours (ansible_play_role_names)."""
    found = [str(path.relative_to(REPO)) for role in ROLE_NAMES
             for path in (ROLES / role).rglob("*.yml")
             if "ansible_play_role_names" in path.read_text()]
    assert found == []


@cache
def collection_filters() -> frozenset[str]:
    names = set()
    for path in (COLLECTION / "plugins" / "filter").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "filters":
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Dict):
                        names |= {k.value for k in sub.keys if isinstance(k, ast.Constant)}
    return frozenset(names)


def test_the_roles_and_the_playbook_call_only_filters_the_collection_has():
    used = {}
    files = [REPO / "ansible" / "site.yml", *REPO.glob("ansible/group_vars/**/*.yml")]
    for role in ROLE_NAMES:
        files += [p for paths in role_files(role).values() for p in paths]
    for path in files:
        for name in re.findall(r"metalslurm\.cluster\.(\w+)", path.read_text()):
            used.setdefault(name, set()).add(str(path.relative_to(REPO)))
        legacy = re.findall(r"\|\s*(metalslurm_\w+)", path.read_text())
        assert legacy == [], f"{path}: filters without the collection's name: {legacy}"
    assert used, "no role uses the collection's filters"
    modules = {p.stem for p in (COLLECTION / "plugins" / "modules").glob("*.py")}
    lookups = {p.stem for p in (COLLECTION / "plugins" / "lookup").glob("*.py")}
    missing = {n: sorted(f) for n, f in used.items()
               if n not in collection_filters() | modules | lookups}
    assert missing == {}, f"filters, modules or lookups the collection does not have: {missing}"


PLUGIN_DIRS = {"filter_plugins", "library", "module_utils", "action_plugins",
               "lookup_plugins", "callback_plugins", "test_plugins", "plugins"}


def test_plugins_live_in_a_role_or_in_the_collection():
    skip = {".venv", ".metalslurm", ".git", "node_modules"}
    found = []
    for path in REPO.rglob("*"):
        parts = path.relative_to(REPO).parts
        if not path.is_dir() or path.name not in PLUGIN_DIRS or skip & set(parts):
            continue
        in_role = parts[0] == "roles" and len(parts) == 3
        in_collection = (path.is_relative_to(COLLECTION / "plugins")
                         or path.is_relative_to(COLLECTION / "tests"))
        if not (in_role or in_collection):
            found.append(str(path.relative_to(REPO)))
    assert found == [], f"plugin directories outside the roles and the collection: {found}"


def test_filters_and_tests_come_from_the_collection_not_from_a_role():
    # The cache of compiled Jinja (the collection's plugin_utils/jinja_code.py) keeps code
    # that calls each filter and test as Jinja resolved it when compiling: a role that
    # brought its own filter_plugins or test_plugins would add names in the middle of a run.
    found = sorted(str(p.relative_to(REPO)) for kind in ("filter_plugins", "test_plugins")
                   for p in ROLES.glob(f"*/{kind}"))
    assert found == [], f"move these into the collection's plugins/filter or plugins/test: {found}"


def role_code() -> list[tuple[str, Path, tuple[str, ...]]]:
    """Each role's modules, module_utils and Python programs (a file or a project under
    files/), with the names a test of it would use."""
    code = []
    for role in ROLE_NAMES:
        base = ROLES / role
        for kind in ("library", "module_utils"):
            code += [(role, p, (p.stem,)) for p in sorted((base / kind).glob("*.py"))]
        for entry in sorted((base / "files").glob("*")):
            if entry.is_dir() and (entry / "pyproject.toml").is_file():
                code.append((role, entry, (entry.name, entry.name.replace("-", "_"))))
            elif entry.is_file() and (entry.suffix == ".py"
                                      or entry.read_bytes()[:2] == b"#!" and b"python"
                                      in entry.read_bytes().split(b"\n", 1)[0]):
                code.append((role, entry, (entry.name,)))
    return code


def test_each_module_and_program_of_a_role_is_tested_next_to_it():
    untested = []
    for role, path, names in role_code():
        tests = "".join(p.read_text() for p in (ROLES / role / "tests").rglob("test_*.py"))
        if not any(name in tests for name in names):
            untested.append(str(path.relative_to(REPO)))
    assert role_code(), "no role has code of its own"
    assert untested == [], f"role code no test under roles/<role>/tests names: {untested}"


def test_no_test_outside_a_role_loads_the_roles_code():
    patterns = [re.compile(rf"roles/{re.escape(role)}/(library|module_utils)/")
                for role in ROLE_NAMES]
    offenders = []
    for base in (REPO / "tests" / "unit", REPO / "tests" / "pulumi", COLLECTION / "tests"):
        for path in base.rglob("*.py"):
            text = path.read_text()
            offenders += [f"{path.relative_to(REPO)}: {m.group(0)}" for p in patterns
                          for m in p.finditer(text)]
    assert offenders == [], f"tests outside the role that load its code: {offenders}"


PLUGIN_KINDS = ("callback", "filter", "lookup", "module_utils", "modules", "plugin_utils")


def collection_plugins() -> list[Path]:
    return sorted(p for kind in PLUGIN_KINDS
                  for p in (COLLECTION / "plugins" / kind).glob("*.py"))


@cache
def collection_test_imports() -> dict[str, str]:
    """Dotted name -> the collection test text that imports it (``from x import y`` gives x
    and x.y), and the text of the tests (a playbook calling a module or lookup by name)."""
    found: dict[str, str] = {}
    for path in sorted((COLLECTION / "tests" / "unit" / "plugins").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            for name in names:
                found.setdefault(name, str(path.relative_to(COLLECTION)))
    return found


@pytest.mark.parametrize("plugin", collection_plugins(),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_collection_plugin_is_tested_in_the_collection(plugin):
    """A test under the collection's tests/unit/plugins imports the plugin itself, or, for a
    module or lookup, runs a playbook that calls it by its full name
    (metalslurm.cluster.<name>), as Ansible loads it."""
    kind = plugin.parent.name
    tests = COLLECTION / "tests" / "unit" / "plugins"
    module = f"ansible_collections.metalslurm.cluster.plugins.{kind}.{plugin.stem}"
    imported = module in collection_test_imports()
    called = kind in ("modules", "lookup") and any(
        re.search(rf"\bmetalslurm\.cluster\.{plugin.stem}\b", p.read_text())
        for p in (tests / kind).rglob("test_*.py"))
    assert imported or called, (
        f"no test under {tests.relative_to(REPO)} imports {module}"
        + (f" or calls metalslurm.cluster.{plugin.stem}" if kind in ("modules", "lookup")
           else ""))


def test_a_task_on_the_operators_machine_never_becomes_root_there():
    """A task delegated to localhost runs on the operator's machine, as the operator: it sets
    the ansible_become variable to false, because a sudo user's inventory sets that variable
    (infra/stack/byo_hosts.py, infra/pulumi/oci.py) and it outranks the become keyword (Mitogen
    then runs sudo on the operator's machine)."""
    offenders = []
    for role in ROLE_NAMES:
        for path in role_files(role)["tasks"]:
            for task in tasks_of(load(path)):
                if task.get("delegate_to") in ("localhost", "127.0.0.1") and (
                        (task.get("vars") or {}).get("ansible_become") is not False):
                    offenders.append(f"{path.relative_to(REPO)}: {task.get('name')}")
    assert offenders == []
