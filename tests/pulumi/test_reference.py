"""README's stack config reference, Pulumi.yaml and the parser name the same keys."""

import re
from pathlib import Path

import yaml

from infra.config import _TOP_KEYS, NAMESPACE, SECRET_KEYS

REPO = Path(__file__).resolve().parents[2]


def _declared() -> dict:
    return yaml.safe_load((REPO / "Pulumi.yaml").read_text())["config"]


def test_readme_table_matches_pulumi_yaml():
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Stack config reference", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `(metalslurm:[A-Za-z]+)` \|", section, re.M)
    assert len(documented) == len(set(documented))
    assert sorted(documented) == sorted(_declared())


def test_pulumi_yaml_declares_every_parsed_key_with_type_and_description():
    declared = _declared()
    assert sorted(declared) == sorted(f"{NAMESPACE}:{k}" for k in _TOP_KEYS)
    for key, spec in declared.items():
        assert spec.get("type") and spec.get("description"), key
        name = key.partition(":")[2]
        assert bool(spec.get("secret")) == (name in SECRET_KEYS), key
        if name not in SECRET_KEYS:
            assert "default" in spec, key
