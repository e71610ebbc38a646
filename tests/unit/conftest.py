import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def filters():
    return load_module(REPO / "ansible/filter_plugins/metalslurm.py", "metalslurm_filters")


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO
