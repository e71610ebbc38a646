"""Where test code lives (make lint): a conftest.py holds fixtures and hooks, the helpers
tests share live in importable modules (tests/e2e/cluster.py, tests/slurm_render.py,
tests/pulumi/mocks.py, ...), and a test module is imported by pytest alone. pytest advises
against importing a conftest: it is loaded as a plugin, and imported a second time under
another name it runs twice. A test module imported by another runs its module-level code
and fixtures in a place pytest does not know.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.paths import REPO

SKIP = {".venv", ".metalslurm", ".git", "node_modules", "fixtures", "__pycache__"}
# Where the repository's modules are imported from (pyproject's pytest pythonpath, and the
# collection's root).
IMPORT_ROOTS = (REPO, REPO / "ansible/collections", REPO / "roles/slurm_accounting/module_utils",
                REPO / "roles/slurm_elastic/tests/unit")


def python_files() -> list[Path]:
    return sorted(p for p in REPO.rglob("*.py")
                  if not SKIP & set(p.relative_to(REPO).parts))


def imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of each module a file imports, ``from x import y`` giving x.y
    too (y may be a module)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.lineno, node.module
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"


def repository_file(name: str) -> Path | None:
    """The repository's file of the module ``name`` (None: not the repository's)."""
    for root in IMPORT_ROOTS:
        path = root.joinpath(*name.split(".")).with_suffix(".py")
        if path.is_file():
            return path
    return None


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(REPO)}:{line}"


def test_the_scan_sees_the_test_modules_and_conftests():
    names = {p.name for p in python_files()}
    assert {"conftest.py", "test_test_layout.py", "cluster.py"} <= names


def test_no_module_imports_a_conftest():
    found = [f"{where(path, line)}: {name}" for path in python_files()
             for line, name in imported_modules(path)
             if name.split(".")[-1] == "conftest" and repository_file(name)]
    assert found == [], (f"modules that import a conftest (move what they need into an "
                         f"importable module beside it): {found}")


def test_no_module_imports_a_test_module():
    found = [f"{where(path, line)}: {name}" for path in python_files()
             for line, name in imported_modules(path)
             if name.split(".")[-1].startswith("test_") and repository_file(name)]
    assert found == [], (f"modules that import a test module (move what they share into an "
                         f"importable module): {found}")


def is_fixture(node: ast.FunctionDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr == "fixture":
            return True
    return False


@pytest.mark.parametrize("conftest", [p for p in python_files() if p.name == "conftest.py"],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_a_conftest_defines_only_fixtures_and_hooks(conftest):
    """Its public functions are fixtures or pytest hooks (pytest_*): a helper it defined
    could only be reached by importing the conftest."""
    tree = ast.parse(conftest.read_text(), str(conftest))
    helpers = [f"{node.name} (line {node.lineno})" for node in tree.body
               if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
               and not node.name.startswith(("_", "pytest_")) and not is_fixture(node)]
    assert helpers == [], f"{conftest.relative_to(REPO)} defines helpers: {helpers}"
