"""A wheelhouse: the pinned wheels of a requirements file, for the nodes' Python, downloaded
on this machine so that nodes without a reachable package index install from it
(``PIP_NO_INDEX=1 PIP_FIND_LINKS=/shared/wheelhouse``, as ``examples/setup-train-env.sh``
says).

``metalslurm wheelhouse`` and the e2e tests (``train_wheels`` in tests/e2e/cluster.py) fill
one with the same function, :func:`fill_wheelhouse`. This machine's pip downloads for
another interpreter and platform: binary wheels only, for CPython ``--python`` on the
manylinux platforms every supported node OS runs (glibc 2.35 or newer).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from ansible_collections.metalslurm.cluster.plugins.module_utils.operating_systems import (
    OPERATING_SYSTEMS,
    by_id,
)

from infra.ops.output import say
from infra.stack.config import SECRETS_AS_FILES, load_stack_file
from infra.stack.inputs import InputError, read_text_argument

REPO_ROOT = Path(__file__).resolve().parents[2]
# The CPU training examples' environment (examples/setup-train-env.sh builds it).
DEFAULT_REQUIREMENTS = REPO_ROOT / "examples" / "python" / "requirements-train-cpu.txt"
# Wheel platforms the nodes accept, newest first (every node OS has glibc >= 2.35).
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64")
PYTHON_RE = re.compile(r"^3\.([89]|[1-9][0-9])$")
# Written last: what the wheelhouse was filled for; the same stamp, nothing to download.
STAMP = ".metalslurm-wheelhouse"
DOWNLOAD_TIMEOUT = 900


class WheelhouseError(RuntimeError):
    """The download failed (no index, a pin without a wheel for that Python)."""


def node_python(os_name: str) -> str:
    """The Python version of a node running ``os_name`` (``debian13`` -> ``3.13``)."""
    try:
        return by_id(os_name).python
    except KeyError:
        raise InputError("--stack", f"no Python version known for os {os_name!r}; give "
                         f"--python (known: "
                         f"{', '.join(f'{o.id} {o.python}' for o in OPERATING_SYSTEMS)})"
                         ) from None


def check_python(python: str) -> str:
    """``python`` if it is a version such as 3.13, else an InputError naming --python."""
    if not PYTHON_RE.fullmatch(python):
        raise InputError("--python", f"give the nodes' Python as 3.N, such as 3.13 "
                         f"({', '.join(f'{o.id}: {o.python}' for o in OPERATING_SYSTEMS)})",
                         repr(python))
    return python


def check_inputs(requirements: Path, dest: Path) -> None:
    """Refuse, naming the argument, a requirements file that cannot be read as text and a
    destination that cannot be written (nothing is left behind)."""
    read_text_argument(requirements, "--requirements", "a pip requirements file")
    problem = _unwritable(dest)
    if problem:
        raise InputError("--dest", f"{problem}; give a directory this user can write",
                         dest)


def _unwritable(dest: Path) -> str | None:
    """Why files cannot be written in ``dest`` (or made there, when it does not exist yet:
    then its nearest existing parent is tried), or None. Nothing is left behind."""
    existing = dest
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    try:
        fd, probe = tempfile.mkstemp(prefix=".metalslurm-probe-", dir=existing)
    except OSError as exc:
        return f"cannot write in {existing} ({exc.strerror})"
    os.close(fd)
    os.unlink(probe)
    return None


def pip_download_command(python: str, requirements: Path, dest: Path,
                         interpreter: str = sys.executable) -> list[str]:
    """The pip command that downloads ``requirements``' wheels for CPython ``python``."""
    return [interpreter, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
            "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
            *(f"--platform={p}" for p in PLATFORMS),
            "--requirement", str(requirements), "--dest", str(dest)]


def stamp_text(python: str, requirements: Path) -> str:
    return (f"python {python}\nplatforms {' '.join(PLATFORMS)}\n"
            f"{requirements.read_text()}")


def run_pip(command: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, check=False, capture_output=True, text=True,
                          timeout=timeout)


def fill_wheelhouse(dest: Path, python: str, requirements: Path = DEFAULT_REQUIREMENTS,
                    timeout: float = DOWNLOAD_TIMEOUT) -> bool:
    """Download the wheels of ``requirements`` for CPython ``python`` into ``dest``, unless
    its stamp says it holds them already. True when it downloaded."""
    stamp = dest / STAMP
    wanted = stamp_text(python, requirements)
    if stamp.is_file() and stamp.read_text() == wanted:
        return False
    dest.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    try:
        proc = run_pip(pip_download_command(python, requirements, dest), timeout)
    except subprocess.TimeoutExpired:
        raise WheelhouseError(f"pip download of {requirements.name} took more than "
                              f"{timeout:.0f} s") from None
    if proc.returncode != 0:
        tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise WheelhouseError(f"pip download of {requirements.name} for Python {python} "
                              f"failed: {tail}")
    stamp.write_text(wanted)
    return True


def wheels(dest: Path) -> list[Path]:
    return sorted(dest.glob("*.whl"))


def build(dest: Path, *, python: str | None, stack: Path,
          requirements: Path | None = None) -> int:
    """``metalslurm wheelhouse``: the pinned wheels the nodes install offline (the e2e tests'
    own download), for ``python`` or the stack's OS's Python."""
    requirements = requirements or DEFAULT_REQUIREMENTS
    check_inputs(requirements, dest)
    python = check_python(python) if python else node_python(
        load_stack_file(stack, "--stack", check_artifacts=False,
                        secrets_given=SECRETS_AS_FILES).os)
    say(f"==> wheelhouse {dest}: the wheels of {requirements} for Python {python}")
    fetched = fill_wheelhouse(dest, python, requirements)
    found = wheels(dest)
    size = sum(w.stat().st_size for w in found) / 2**20
    say(f"    {len(found)} wheels, {size:.1f} MiB"
        + ("" if fetched else " (already complete for these requirements: nothing downloaded)"))
    say("copy it to shared storage on the cluster (e.g. /shared/wheelhouse), then build "
        "offline: srun --nodes=1 --ntasks=1 env PIP_NO_INDEX=1 "
        "PIP_FIND_LINKS=/shared/wheelhouse setup-train-env.sh")
    return 0
