"""One source for every stack key and default: infra/stack/config.py's STACK_KEYS.

``Pulumi.yaml`` declares the keys Pulumi can type with the parser's defaults, Pulumi's
project schema accepts the file, the reference table in docs/reference/config.md names every
key (with the parser's default for each key Pulumi types), and the README's map of keys names
each one.
"""

import re
from pathlib import Path

import pytest
import yaml

from infra.stack.config import DEFAULTS, STACK_KEYS, TOP_KEYS, parse_config
from infra.stack.schema import NAMESPACE

REPO = Path(__file__).resolve().parents[2]
# The rules of Pulumi's project file schema for config declarations
# (pulumi/pulumi sdk/go/common/workspace/project.json, $defs configTypeDeclaration and
# simpleConfigType; and config.go mergeConfig: a declared project key with neither
# default nor value is reported missing in every stack that does not set it).
PULUMI_CONFIG_TYPES = ("string", "integer", "boolean", "array")
PULUMI_DECLARATION_FIELDS = {"type", "items", "description", "secret", "default"}


def _declared() -> dict:
    return yaml.safe_load((REPO / "Pulumi.yaml").read_text())["config"]


def _reference_rows() -> dict[str, str]:
    """docs/reference/config.md's table of keys: ``{"metalslurm:<key>": "<default column>"}``."""
    doc = (REPO / "docs/reference/config.md").read_text()
    section = doc.split("\n## Keys\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(metalslurm:[A-Za-z]+)` \| (.*?) \|", section, re.M)
    assert len(rows) == len({k for k, _ in rows}), "a key is documented twice"
    return dict(rows)


def _readme_keys() -> list[str]:
    """The keys the README's stack config map names (its table's second column)."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("\n## Stack config reference\n", 1)[1].split("\n## ", 1)[0]
    cells = re.findall(r"^\| [^|]+ \| (.*?) \|", section, re.M)
    return [key for cell in cells for key in re.findall(r"`([A-Za-z]+)`", cell)]


def test_the_reference_table_names_every_stack_key():
    assert sorted(_reference_rows()) == sorted(f"{NAMESPACE}:{k}" for k in TOP_KEYS)


def test_the_readme_names_every_stack_key_once():
    keys = _readme_keys()
    assert sorted(keys) == sorted(TOP_KEYS), "the README's stack config map and STACK_KEYS differ"
    assert len(keys) == len(set(keys)), "the README's stack config map names a key twice"


@pytest.mark.parametrize("stack_key", [k for k in STACK_KEYS if k.pulumi_type],
                         ids=lambda k: k.name)
def test_the_reference_shows_the_parsers_default_of_each_scalar_key(stack_key):
    shown = _reference_rows()[f"{NAMESPACE}:{stack_key.name}"]
    assert shown == f"`{str(stack_key.default).lower()}`" if isinstance(stack_key.default, bool) \
        else shown == f"`{stack_key.default}`"


def test_pulumi_yaml_declares_the_typed_keys_with_the_parsers_defaults():
    """Exactly the keys Pulumi can type, each with the parser's default and description
    (Pulumi applies a declared default to every stack without the key)."""
    assert _declared() == {
        f"{NAMESPACE}:{k.name}": {"type": k.pulumi_type, "default": k.default,
                                  "description": k.description}
        for k in STACK_KEYS if k.pulumi_type is not None}


@pytest.mark.parametrize("name", sorted(_declared()))
def test_pulumi_yaml_declarations_follow_pulumis_project_schema(name):
    spec = _declared()[name]
    assert set(spec) <= PULUMI_DECLARATION_FIELDS, name
    assert spec["type"] in PULUMI_CONFIG_TYPES, f"{name}: Pulumi has no config type {spec['type']}"
    if spec["type"] == "array":
        assert "items" in spec, f"{name}: an array declaration needs items"
    # Without a default Pulumi requires the key in every stack (the local stack too).
    assert "default" in spec, f"{name}: a declared key without a default is required"


@pytest.mark.parametrize("name", sorted(_declared()))
def test_every_default_pulumi_applies_is_what_the_parser_uses(name):
    """Pulumi writes a declared default into every stack that lacks the key; the cluster it
    describes must be the one 'metalslurm local up' builds from a stack without it."""
    assert parse_config({name: _declared()[name]["default"]}) == parse_config({})


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_every_default_given_explicitly_parses_to_the_same_cluster(name):
    assert parse_config({f"{NAMESPACE}:{name}": DEFAULTS[name]}) == parse_config({})
