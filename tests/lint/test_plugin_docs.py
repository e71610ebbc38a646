"""Every module and lookup plugin documents itself in YAML that ansible-doc can read (a
DOCUMENTATION that does not parse makes ansible-doc and ansible-lint skip the plugin with
an error, and its options go unchecked)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from tests.paths import REPO

COLLECTION = REPO / "ansible/collections/ansible_collections/metalslurm/cluster/plugins"
MODULES = sorted([*COLLECTION.glob("modules/*.py"), *REPO.glob("roles/*/library/*.py")])
DOCUMENTED = sorted([*MODULES, *COLLECTION.glob("lookup/*.py")])


def doc_strings(path: Path) -> dict[str, str]:
    """The module-level string constants DOCUMENTATION, EXAMPLES and RETURN of ``path``."""
    found = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and \
                isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name) and \
                        target.id in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
                    found[target.id] = node.value.value
    return found


def test_the_scan_sees_the_modules():
    names = {p.stem for p in MODULES}
    assert {"managed_state", "home_block", "key_file", "node_facts", "nvidia_pci"} <= names


@pytest.mark.parametrize("path", DOCUMENTED, ids=lambda p: str(p.relative_to(REPO)))
def test_a_plugins_documentation_is_yaml_that_names_it(path):
    docs = doc_strings(path)
    assert "DOCUMENTATION" in docs, f"{path.name} has no DOCUMENTATION"
    for name, text in docs.items():
        try:
            parsed = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            pytest.fail(f"{path.name}: {name} is not YAML ansible-doc can read: {exc}")
        if name != "EXAMPLES":
            assert isinstance(parsed, dict), f"{path.name}: {name} is not a mapping"
    documentation = yaml.safe_load(docs["DOCUMENTATION"])
    key = "module" if path in MODULES else "name"
    assert documentation.get(key) == path.stem, \
        f"{path.name}: DOCUMENTATION says {key}: {documentation.get(key)!r}"
