"""infra/ in layers, imports pointing one way (make lint).

Bottom to top (infra/__init__.py says what each holds)::

    infra.cli        parses arguments and calls the layers below; nothing imports it
    infra.ops        operator commands
    infra.accept     the acceptance gate's runner
    infra.pulumi     the Pulumi program and resources: the only package that imports Pulumi
    infra.providers  plain-Python provider machinery
    infra.stack      the stack config, its inventory and its state directory

Every import counts, wherever it is written: at the top, inside a function, or under
``if TYPE_CHECKING:`` (a type-only import still ties the two modules together), and the
modules of infra/ import one another without a cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from tests.paths import REPO

INFRA = REPO / "infra"

# What each layer may import from infra/ (its own package always).
ALLOWED: dict[str, set[str]] = {
    "infra.stack": set(),
    "infra.providers": {"infra.stack"},
    "infra.pulumi": {"infra.stack", "infra.providers"},
    "infra.accept": {"infra.stack"},
    "infra.ops": {"infra.stack", "infra.providers", "infra.accept"},
    "infra.cli": {"infra.stack", "infra.providers", "infra.accept", "infra.ops"},
}
# Third-party Pulumi packages: only the Pulumi layer imports them.
PULUMI_PACKAGES = ("pulumi", "pulumi_command", "pulumi_random", "pulumi_oci")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(INFRA.rglob("*.py"))}


def layer(module: str) -> str | None:
    """The layer a module of infra/ belongs to (None: the package ``infra`` itself)."""
    return next((name for name in ALLOWED if module == name or module.startswith(name + ".")),
                None)


def imported(module: str) -> Iterator[tuple[str, int]]:
    """Every module name ``module`` imports, absolute, with the line, as written."""
    path = modules()[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(parent + ([base] if base else []))
            for alias in node.names:
                yield f"{base}.{alias.name}", node.lineno


def infra_target(name: str) -> str | None:
    """The module of infra/ an imported name lands in (``infra.x.y.Thing`` -> ``infra.x.y``)."""
    while name not in modules():
        if "." not in name:
            return None
        name = name.rpartition(".")[0]
    return None if name == "infra" else name


@cache
def graph() -> dict[str, dict[str, int]]:
    """Module -> {module of infra/ it imports: first line}."""
    edges: dict[str, dict[str, int]] = {}
    for module in modules():
        edges[module] = {}
        for name, line in imported(module):
            target = infra_target(name)
            if target and target != module:
                edges[module].setdefault(target, line)
    return edges


def violations() -> list[str]:
    found = []
    for module, targets in graph().items():
        own = layer(module)
        if own is None:
            continue
        for target, line in targets.items():
            other = layer(target)
            if other == own or other in ALLOWED[own]:
                continue
            found.append(f"{modules()[module].relative_to(REPO)}:{line}: {own} imports "
                         f"{target} ({other}); {own} may import "
                         f"{', '.join(sorted(ALLOWED[own])) or 'nothing else in infra/'}")
    return found


def cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    edges = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_every_module_is_in_a_layer():
    """No flat module beside cli.py: a new module goes into the package of its layer."""
    loose = [m for m in modules() if layer(m) is None and m != "infra"]
    assert not loose, f"modules outside the layer packages {sorted(ALLOWED)}: {loose}"


def test_imports_point_down_the_layers():
    assert not violations(), "\n".join(violations())


def test_only_the_pulumi_layer_imports_pulumi():
    found = [f"{modules()[m].relative_to(REPO)}:{line}: imports {name}"
             for m in modules() if layer(m) != "infra.pulumi"
             for name, line in imported(m) if name.split(".")[0] in PULUMI_PACKAGES]
    assert not found, "\n".join(found)


def test_no_import_cycle_among_infra_modules():
    """Type-only and function-level imports included."""
    assert not cycles(), f"import cycles: {cycles()}"
