"""``metalslurm:login``: login nodes, the hosts users SSH to and submit jobs from.

A login node runs no slurmd and takes no jobs: it has Slurm's client commands (kept current
by ``sackd`` where the release has it, else the controller's configuration synced by each
configure), Pyxis for ``srun --container-image``, the shared file systems, MPI and the
build prerequisites, and Slurm's REST API (the first login node serves it). Without login
nodes the controller is the submit host.

Every provider makes them: the local provider as containers on the cluster network, oci as
instances of ``shape`` in the private subnet, byo from its hosts with ``role: login`` (their
number is the count; a ``count`` given as well must agree).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infra.stack.schema import Collector, key

_KEYS = ("count", "name", "shape")
# At most this many login nodes: a login pool is for users' shells, not for capacity.
MAX_LOGIN_NODES = 16
LOGIN_PREFIX_RE = re.compile(r"^[a-z][a-z0-9-]{0,15}$")
# The oci provider's CPU shapes (infra/stack/oci.py has the same rule for the
# controller's): login nodes have no GPUs.
_CPU_SHAPE_RE = re.compile(r"^(VM|BM)\.Standard[A-Za-z0-9.]*$")
DEFAULT_SHAPE = "VM.Standard.E5.Flex"


@dataclass(frozen=True)
class LoginSettings:
    """``metalslurm:login``, parsed; ``hosts`` are the byo provider's own names."""

    count: int = 0
    prefix: str = "login"
    shape: str = DEFAULT_SHAPE
    hosts: tuple[str, ...] = ()

    def names(self) -> list[str]:
        """The login nodes' host names: the byo hosts, else ``<prefix>-001`` onwards."""
        if self.hosts:
            return list(self.hosts)
        return [f"{self.prefix}-{i:03d}" for i in range(1, self.count + 1)]


def parse_login(c: Collector, raw: Mapping[str, Any], provider: str | None) -> LoginSettings:
    """``metalslurm:login`` (count 0, no login nodes, when left out)."""
    where = key("login")
    item = c.mapping(raw, "login", where)
    c.unknown_keys(item, _KEYS, where)
    d = LoginSettings()
    count = c.integer(item, "count", f"{where}.count", d.count, 0, MAX_LOGIN_NODES)
    prefix = c.string(item, "name", f"{where}.name", default=d.prefix, pattern=LOGIN_PREFIX_RE,
                      what="a host name prefix: lower-case letters, digits and '-', starting "
                      "with a letter, at most 16 characters")
    shape = d.shape
    if "shape" in item:
        if provider != "oci":
            c.problem(f"{where}.shape", f"only the oci provider reads a shape; the {provider} "
                      "provider's login nodes come from "
                      + ("its hosts with role login" if provider == "byo" else "its own image")
                      + ": remove it")
        else:
            shape = c.string(item, "shape", f"{where}.shape", pattern=_CPU_SHAPE_RE,
                             what="a CPU shape such as VM.Standard.E5.Flex") or d.shape
    return LoginSettings(count=d.count if count is None else count,
                         prefix=prefix or d.prefix, shape=shape)
