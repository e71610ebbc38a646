"""Repository-wide pytest set-up: every test layer but e2e and verify runs with a podman
stand-in that refuses and records (tests/podman_guard.py): unit tests start no container.

The programs tests start by name (python3, ansible-playbook, a stand-in's
``#!/usr/bin/env python3``) are the virtualenv's: its bin goes first on PATH, so a host
whose PATH puts a version manager's shims first does not run them through it (pyenv's
python3 shim cost about 70 ms of CPU for each one started, a quarter of the accept gate's
unit tests)."""

import os
import sys
from pathlib import Path

pytest_plugins = ["tests.podman_guard"]

_VENV_BIN = str(Path(sys.executable).parent)
if os.environ.get("PATH", "").split(os.pathsep)[0] != _VENV_BIN:
    os.environ["PATH"] = os.pathsep.join([_VENV_BIN, os.environ.get("PATH", "")])
