"""The README is a map (STYLE.md, "Docs"): it names every part and links every page.

Its architecture section ("How it fits together") has a table row for every role
(``roles/*``), every operator-side module (``infra/**/*.py``), every plugin file of the
collection (``plugins/*/*.py``) and every CLI verb (walked from ``build_parser()``), and
names every program a role installs (``roles/*/files/*``). Every page under ``docs/`` sits in
one of its three kinds (reference, how-to, lab) and is linked from the docs index, which the
README links; every relative link in the README and the docs reaches a file (and, with
``#anchor``, a heading of a Markdown file), and every ``docs/...md`` path the repository names
exists. The README stays short: caps on its lines, its characters and each line's length.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from infra.cli import build_parser
from tests.paths import COLLECTION, REPO, ROLES

README = REPO / "README.md"
DOCS = REPO / "docs"
DOCS_INDEX = DOCS / "README.md"
DOC_KINDS = ("reference", "how-to", "lab")
ARCHITECTURE = "How it fits together"
# The map's caps: a little above what it needs (298 lines, 22,657 characters, longest line
# 185), so a new role or module fits and a section of detail does not.
MAX_LINES = 320
MAX_CHARS = 25_000
MAX_LINE_CHARS = 200


@cache
def architecture() -> str:
    text = README.read_text()
    marker = f"\n## {ARCHITECTURE}\n"
    assert marker in text, f"the README has no '## {ARCHITECTURE}' section"
    return text.split(marker, 1)[1].split("\n## ", 1)[0]


def named_in_a_row(name: str) -> bool:
    """A table row of the architecture section starts with ``name`` in backticks."""
    return re.search(rf"^\| `{re.escape(name)}[` ]", architecture(), re.MULTILINE) is not None


def roles() -> list[str]:
    return sorted(p.name for p in ROLES.iterdir() if p.is_dir())


def infra_modules() -> list[str]:
    return sorted(p.relative_to(REPO).as_posix() for p in (REPO / "infra").rglob("*.py")
                  if p.name != "__init__.py")


def collection_plugins() -> list[str]:
    return sorted(f"{p.parent.name}/{p.name}" for p in (COLLECTION / "plugins").glob("*/*.py")
                  if p.name != "__init__.py")


def role_programs() -> list[str]:
    return sorted(p.relative_to(REPO).as_posix() for p in ROLES.glob("*/files/*")
                  if not p.name.startswith((".", "__")))


def cli_verbs() -> list[str]:
    def walk(parser: argparse.ArgumentParser, words: list[str]) -> Iterator[str]:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield " ".join(["metalslurm", *words])
        for action in subs:
            for name, sub in action.choices.items():
                yield from walk(sub, [*words, name])
    return sorted(walk(build_parser(), []))


def docs_pages() -> list[str]:
    return sorted(p.relative_to(REPO).as_posix() for p in DOCS.rglob("*.md"))


def test_the_walks_find_what_the_repository_has():
    """Guards the tests below against an empty walk (a moved directory would pass them)."""
    assert len(roles()) >= 17
    assert {"infra/cli.py", "infra/providers/local.py"} <= set(infra_modules())
    assert {"module_utils/slurmconf.py", "filter/slurm.py"} <= set(collection_plugins())
    assert "roles/slurm_health/files/metalslurm-health" in role_programs()
    assert {"metalslurm local up", "metalslurm report usage"} <= set(cli_verbs())
    assert len(docs_pages()) >= 10


@pytest.mark.parametrize("role", roles())
def test_the_map_has_a_line_for_each_role(role):
    assert named_in_a_row(role), (
        f"README '{ARCHITECTURE}' has no table row for role {role} (| `{role}` | what it owns |)")


@pytest.mark.parametrize("module", infra_modules())
def test_the_map_has_a_line_for_each_infra_module(module):
    assert named_in_a_row(module), (
        f"README '{ARCHITECTURE}' has no table row for {module} (| `{module}` | its job |)")


@pytest.mark.parametrize("plugin", collection_plugins())
def test_the_map_has_a_line_for_each_collection_plugin(plugin):
    assert named_in_a_row(plugin), (
        f"README '{ARCHITECTURE}' has no table row for the collection's plugins/{plugin} "
        f"(| `{plugin}` | what it holds |)")


@pytest.mark.parametrize("program", role_programs())
def test_the_map_names_each_program_a_role_installs(program):
    assert program in architecture(), f"README '{ARCHITECTURE}' does not name {program}"


@pytest.mark.parametrize("verb", cli_verbs())
def test_the_map_has_a_line_for_each_cli_verb(verb):
    assert named_in_a_row(verb), (
        f"README '{ARCHITECTURE}' has no table row for `{verb}` (| `{verb} ARGS` | what it does |)")


def test_the_readme_is_short():
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_LINES, (
        f"README.md has {lines} lines; keep it a map within {MAX_LINES} and move detail to docs/")


def test_the_readme_has_few_characters():
    chars = len(README.read_text())
    assert chars <= MAX_CHARS, (
        f"README.md has {chars} characters; keep it a map within {MAX_CHARS} "
        "and move detail to docs/")


def test_no_readme_line_is_long():
    long = [f"line {n}: {len(line)} characters" for n, line in
            enumerate(README.read_text().splitlines(), 1) if len(line) > MAX_LINE_CHARS]
    assert long == [], f"README.md lines over {MAX_LINE_CHARS} characters (wrap or shorten): {long}"


def links(path: Path) -> list[str]:
    """The targets of the Markdown links in a file, outside code blocks and code spans."""
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.MULTILINE | re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    return re.findall(r"\]\(([^)\s]+)\)", text)


def heading_anchors(path: Path) -> set[str]:
    """GitHub's anchors for a Markdown file's headings."""
    anchors = set()
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.MULTILINE | re.DOTALL)
    for heading in re.findall(r"^#+ (.+)$", text, re.MULTILINE):
        anchors.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return anchors


def resolved(source: Path, target: str) -> tuple[Path, str]:
    file, _, anchor = target.partition("#")
    return ((source.parent / file).resolve() if file else source.resolve()), anchor


def test_the_readme_links_the_docs_index():
    targets = {resolved(README, t)[0] for t in links(README)}
    assert DOCS_INDEX.resolve() in targets, "README.md does not link docs/README.md"


@pytest.mark.parametrize("page", [p for p in docs_pages() if p != "docs/README.md"])
def test_each_docs_page_is_of_one_kind(page):
    assert page.split("/")[1] in DOC_KINDS, (
        f"{page}: a docs page goes under docs/reference/, docs/how-to/ or docs/lab/ "
        "(docs/README.md says which)")


@pytest.mark.parametrize("page", [p for p in docs_pages() if p != "docs/README.md"])
def test_the_docs_index_links_each_page(page):
    targets = {resolved(DOCS_INDEX, t)[0] for t in links(DOCS_INDEX)}
    assert (REPO / page).resolve() in targets, f"docs/README.md does not link {page}"


@pytest.mark.parametrize("source", ["README.md", *docs_pages()])
def test_every_relative_link_reaches_a_file(source):
    path = REPO / source
    broken = []
    for target in links(path):
        if re.match(r"^[a-z]+:", target):  # https:, mailto:
            continue
        file, anchor = resolved(path, target)
        if not file.exists() or (anchor and file.suffix == ".md"
                                 and anchor not in heading_anchors(file)):
            broken.append(target)
    assert broken == [], f"{source}: links to nothing: {broken}"


TEXT_SUFFIXES = {".md", ".py", ".yml", ".yaml", ".j2", ".toml", ".cfg", ".ini", ".sh", ".sbatch",
                 ".txt", ".json", ".conf"}
SKIPPED_DIRS = {".git", ".venv", "__pycache__", "node_modules"}
# docs/<page>.md, alone or after ../ steps (a link from deeper in the tree), not in a URL's path.
DOCS_PATH = re.compile(r"(?:^|(?<=[^\w./-]))(?:\.\./)*(docs/[\w-][\w./-]*?\.md)\b", re.MULTILINE)


def text_files() -> Iterator[Path]:
    for root, dirs, files in os.walk(REPO):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith(".")
                         and not d.endswith(".egg-info"))
        for name in sorted(files):
            path = Path(root, name)
            if path.suffix in TEXT_SUFFIXES or name == "Makefile":
                yield path


def named_docs_paths() -> dict[str, list[str]]:
    named: dict[str, list[str]] = {}
    for path in text_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for match in DOCS_PATH.finditer(text):
            named.setdefault(match.group(1), []).append(path.relative_to(REPO).as_posix())
    return named


def test_the_docs_path_walk_finds_the_names():
    """Guards the test below against a pattern that matches nothing."""
    assert {"docs/reference/config.md", "docs/lab/scale-lab.md"} <= set(named_docs_paths())


def test_every_docs_path_the_repository_names_exists():
    missing = {doc: where for doc, where in named_docs_paths().items()
               if not (REPO / doc).is_file()}
    assert missing == {}, f"docs pages named but not there (moved? see docs/README.md): {missing}"
