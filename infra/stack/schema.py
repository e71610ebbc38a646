"""The building blocks every stack-config section parser uses.

:class:`Collector` reads typed values out of a raw mapping and records every problem it
finds, each naming the key to change; :class:`ConfigError` reports them all at once. The
core schema (:mod:`infra.stack.config`) and each provider's own section
(``infra/stack/<section>.py``) are parsed with the same collector, so a user fixes a
file in one pass.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# The inventory contract's names, which every section parser checks against.
from ansible_collections.metalslurm.cluster.plugins.module_utils.inventory_contract import (  # noqa: F401
    GPU_TYPES,
    MAX_GPUS_PER_NODE,
    NODE_NAME_RE,
    gpu_type_problem,
)

from infra.stack.inputs import InputError

NAMESPACE = "metalslurm"

# Login names: what useradd and sacctmgr accept without quoting.
USER_NAME_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
# An address or a DNS name.
HOST_ADDRESS_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$")
MAX_NODES_PER_POOL = 1000


def key(name: str) -> str:
    """The stack-file key of a top-level setting: ``metalslurm:<name>``."""
    return f"{NAMESPACE}:{name}"


class ConfigError(InputError):
    """A stack config with one or more problems; ``problems`` holds one line each.

    An :class:`~infra.stack.inputs.InputError` whose argument is ``source`` (``--stack`` on the
    command line, with the file as ``value``): one problem is said on one line, several
    are listed below a count, so a user fixes a file in one pass.
    """

    def __init__(self, problems: list[str], source: str = "stack config",
                 value: str | None = None) -> None:
        self.problems = problems
        self.source = source
        if len(problems) == 1:
            said = problems[0]
        else:
            said = f"{len(problems)} problem(s):\n" + "\n".join(f"  - {p}" for p in problems)
        super().__init__(source, said, value)


class Collector:
    """Reads typed values out of a raw mapping, recording every problem it finds."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def problem(self, where: str, message: str) -> None:
        self.problems.append(f"{where}: {message}")

    def string(self, raw: Mapping[str, Any], name: str, where: str, default: str | None = None,
               choices: tuple[str, ...] | None = None, pattern: re.Pattern[str] | None = None,
               what: str = "") -> str | None:
        value = raw.get(name)
        if value is None:  # absent, or null in YAML: the default
            value = default
        if value is None:
            if default is None:
                self.problem(where, "is required")
            return None
        if not isinstance(value, str):
            self.problem(where, f"must be a string, got {type(value).__name__} {value!r}")
            return None
        if choices is not None and value not in choices:
            self.problem(where, f"{value!r} is not one of the allowed values: {', '.join(choices)}")
            return None
        if pattern is not None and not pattern.fullmatch(value):
            self.problem(where, f"{value!r} is not valid: {what}")
            return None
        return value

    def integer(self, raw: Mapping[str, Any], name: str, where: str, default: int | None,
                minimum: int = 0, maximum: int | None = None) -> int | None:
        value = raw.get(name, default)
        if value is None:
            self.problem(where, "is required")
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.problem(where, f"must be a whole number, got {value!r}")
            return None
        if value < minimum:
            self.problem(where, f"must be at least {minimum}, got {value}")
            return None
        if maximum is not None and value > maximum:
            self.problem(where, f"must be at most {maximum}, got {value}")
            return None
        return value

    def boolean(self, raw: Mapping[str, Any], name: str, where: str, default: bool) -> bool:
        value = raw.get(name, default)
        if not isinstance(value, bool):
            self.problem(where, f"must be true or false, got {value!r}")
            return default
        return value

    def mapping(self, raw: Mapping[str, Any], name: str, where: str,
                default: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
        value = raw.get(name, default)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.problem(where, f"must be a mapping, got {type(value).__name__}")
            return {}
        return value

    def mappings(self, value: Any, where: str, allowed: tuple[str, ...],
                 what: str) -> list[tuple[str, Mapping[str, Any]]]:
        """``(item_key, item)`` for each mapping in a list; problems for everything else."""
        if not isinstance(value, list) or not value:
            self.problem(where, f"must be a non-empty list of {what}")
            return []
        found = []
        for i, item in enumerate(value):
            item_key = f"{where}[{i}]"
            if not isinstance(item, Mapping):
                self.problem(item_key, f"must be a mapping with {', '.join(allowed)}")
                continue
            self.unknown_keys(item, allowed, item_key)
            found.append((item_key, item))
        return found

    def string_list(self, item: Mapping[str, Any], name: str, where: str,
                    pattern: re.Pattern[str], what: str) -> tuple[str, ...]:
        """A list of strings that each match ``pattern``, without duplicates."""
        value = item.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.problem(where, f"must be a list of {what}")
            return ()
        for v in value:
            if not pattern.fullmatch(v):
                self.problem(where, f"{v!r} is not a valid {what}")
        self.duplicates(where, list(value), what)
        return tuple(value)

    def duplicates(self, where: str, names: list[str], what: str) -> None:
        for dup in sorted({n for n in names if names.count(n) > 1}):
            self.problem(where, f"{what} {dup!r} is used more than once")

    def unknown_keys(self, raw: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
        for name in raw:
            if name not in allowed:
                self.problem(f"{where}.{name}", f"unknown key; allowed keys: {', '.join(allowed)}")

    def provider_section(self, raw: Mapping[str, Any], name: str,
                         provider: str | None) -> Mapping[str, Any] | None:
        """The section ``metalslurm:<name>`` of provider ``name``: None when another provider
        is configured (a problem if the section is there anyway), else the mapping."""
        if provider != name:
            if raw.get(name) is not None:
                self.problem(key(name), f"is only read when {key('provider')} is {name} (it "
                             f"is {provider!r})")
            return None
        return self.mapping(raw, name, key(name))

    def secret_present(self, raw: Mapping[str, Any], name: str) -> bool:
        """A secret key is present as ``{secure: ...}`` (opaque here); plain text is refused."""
        if raw.get(name) is None:
            return False
        value = raw[name]
        if (isinstance(value, Mapping) and set(value) == {"secure"}
                and isinstance(value["secure"], str)):
            return True
        self.problem(key(name), "is a secret but is stored in plain text; set it with "
                     f"'pulumi config set --secret {key(name)} ...'")
        return True
