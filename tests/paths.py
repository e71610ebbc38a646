"""Where the tests find the repository and its recorded fixtures, wherever the test file lives
(tests/, a role's tests/unit/, the collection's tests/unit/)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
# Recorded command outputs and sysfs trees, each directory with a README saying where its
# shape comes from.
FIXTURES = REPO / "tests" / "fixtures"
ROLES = REPO / "roles"
COLLECTION = REPO / "ansible/collections/ansible_collections/metalslurm/cluster"


def load_module(path: Path, name: str) -> ModuleType:
    """A Python file that is not on the import path (an Ansible module, a node program) as a
    module named ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
