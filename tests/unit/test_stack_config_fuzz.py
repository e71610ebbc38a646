"""Wrong types anywhere in a stack config are ConfigErrors, never another exception.

Starts from each shipped stack (Pulumi.example-*.yaml, Pulumi.local.yaml, the e2e stacks)
and puts a value of the wrong type at every key: the keys the stack has, and every key the
parser would accept there but the stack leaves out (found by asking the parser: an
unknown key's problem lists the allowed ones), in sections the stack does not have too.
Anything but a ConfigError (an AttributeError from ``.get`` on a list, a TypeError from
comparing a string with a number, an assert) is a bug in the parser.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.stack.config import (
    SECRETS_AS_FILES,
    TOP_KEYS,
    ConfigError,
    load_stack_file,
    parse_config,
)
from infra.stack.schema import NAMESPACE

REPO = Path(__file__).resolve().parents[2]
STACKS = sorted(REPO.glob("Pulumi.example-*.yaml")) + [REPO / "Pulumi.local.yaml"] + sorted(
    (REPO / "tests/e2e/stacks").glob("*.yaml")) + sorted((REPO / "bench/stacks").glob("*.yaml"))
# A list, a mapping, a number, a string, null; and the near misses: a boolean, a float,
# empty containers, containers of the wrong things, a number too big for any field.
WRONG: list[Any] = [["x"], {"k": "v"}, 7, "s", None, True, 1.5, [], {}, [None],
                    [{"a": 1}], {"k": None}, -1, 10**30]
PROBE = "zzzFuzzProbe"
Path_ = tuple[str | int, ...]


def _put(document: Any, path: Path_, value: Any) -> Any:
    document = copy.deepcopy(document)
    node = document
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return document


def _allowed_keys(config: dict[str, Any], path: Path_, base: Path) -> list[str]:
    """The keys the parser accepts in the mapping at ``path``, from its unknown-key problem."""
    try:
        parse_config(_put(config, (*path, PROBE), 1), base_dir=base, check_artifacts=False)
    except ConfigError as exc:
        for problem in exc.problems:
            m = re.search(rf"{PROBE}: unknown key; allowed keys: (.*)$", problem)
            if m:
                return [k.strip() for k in m.group(1).split(",")]
    return []


def _cases(config: dict[str, Any], node: Any, path: Path_, base: Path
           ) -> Iterator[tuple[dict[str, Any], Path_]]:
    """(config, path) for every value the config has and every key it could have."""
    if isinstance(node, dict):
        allowed = (_allowed_keys(config, path, base) if path
                   else [f"{NAMESPACE}:{k}" for k in TOP_KEYS])
        for name in [*node, *(k for k in allowed if k not in node)]:
            yield config, (*path, name)
            if name in node:
                yield from _cases(config, node[name], (*path, name), base)
                continue
            for seed in ({}, [{}]):  # an absent section: what it would hold
                seeded = _put(config, (*path, name), seed)
                inner = (*path, name, 0) if isinstance(seed, list) else (*path, name)
                if _allowed_keys(seeded, inner, base):
                    yield from _cases(seeded, seed, (*path, name), base)
                    break
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield config, (*path, i)
            yield from _cases(config, item, (*path, i), base)


@pytest.mark.parametrize("stack", STACKS, ids=lambda p: p.name)
def test_a_wrong_type_at_any_key_is_a_config_error(stack):
    config = yaml.safe_load(stack.read_text())["config"]
    # The stack is valid (a byo stack for 'metalslurm up' takes its secrets as files).
    parse_config(config, base_dir=stack.parent, check_artifacts=False,
                 secrets_given=SECRETS_AS_FILES)
    crashes = []
    tried = 0
    for document, path in _cases(config, config, (), stack.parent):
        for value in WRONG:
            tried += 1
            try:
                parse_config(_put(document, path, value), base_dir=stack.parent,
                             check_artifacts=False, secrets_given=SECRETS_AS_FILES)
            except ConfigError:
                pass
            except Exception as exc:  # noqa: BLE001 - every other exception is the finding
                crashes.append(f"{'.'.join(map(str, path))} = {value!r}: "
                               f"{type(exc).__name__}: {exc}")
    assert tried > 1000
    assert not crashes, "\n".join(crashes[:20])


@pytest.mark.parametrize("document", [
    "[1, 2]", "just a string", "42", "null", "config: [1]", "config: words", "config: 3",
    "config: {metalslurm:provider: [local]}", "config: {metalslurm:computePools: {a: 1}}",
    "config: {metalslurm:computePools: [[1]]}", "config: {metalslurm:partitions: 3}",
    "config: {metalslurm:storage: {paths: {a: 1}}}", "config: {metalslurm:users: [7]}",
    "config: {7: 8}",
])
def test_a_stack_file_of_the_wrong_shape_is_a_config_error(tmp_path, document):
    path = tmp_path / "Pulumi.fuzz.yaml"
    path.write_text(document)
    with pytest.raises(ConfigError):
        load_stack_file(path, "--stack")


def test_null_takes_the_default():
    """A key given as null reads like an absent one (it crashed parse_config before)."""
    config = {f"{NAMESPACE}:controller": {"name": None}}
    assert parse_config(config).controller_name == "ctl"
