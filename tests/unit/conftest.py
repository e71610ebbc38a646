from pathlib import Path

import pytest

from tests.paths import REPO


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO
