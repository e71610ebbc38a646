"""The readers every command reads its inputs through (infra/stack/inputs.py,
infra/ops/inventory_file.py): each bad input is one InputError naming the argument, what is
wrong and what to give."""

import random
from pathlib import Path

import pytest

from infra.ops.inventory_file import group_hosts, inventory_structure_problem, load_inventory
from infra.stack.inputs import (
    InputError,
    load_yaml_mapping,
    parse_hostlist,
    parse_key_value,
    parse_number,
    parse_yaml_text,
    read_text_argument,
    text_file_problem,
)

REPO = Path(__file__).resolve().parents[2]
WHAT = "the YAML thing"


def binary_bytes() -> bytes:
    """512 bytes that are no text: random, with a NUL and a 0xff."""
    return random.Random(22).randbytes(510) + b"\0\xff"


@pytest.fixture
def files(tmp_path):
    made = {"binary": tmp_path / "binary.dat", "png": tmp_path / "image.png",
            "nul": tmp_path / "nul.txt", "empty": tmp_path / "empty.yaml",
            "blank": tmp_path / "blank.yaml", "directory": tmp_path / "adir",
            "missing": tmp_path / "missing.yaml"}
    made["binary"].write_bytes(binary_bytes())
    made["png"].write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    made["nul"].write_bytes(b"config:\n\0\n")
    made["empty"].write_bytes(b"")
    made["blank"].write_text("\n  \n")
    made["directory"].mkdir()
    return made


@pytest.mark.parametrize(("kind", "problem"), [
    ("png", "not UTF-8 text (byte 0x89 at offset 0)"),
    ("nul", "not text (a NUL byte at offset 8)"),
    ("empty", "is empty"),
    ("blank", "is empty"),
    ("directory", "is a directory"),
    ("missing", "file not found"),
])
def test_a_file_that_is_no_text_is_one_sentence_naming_the_argument(files, kind, problem):
    with pytest.raises(InputError) as err:
        read_text_argument(files[kind], "--stack", WHAT)
    assert str(err.value) == f"--stack {files[kind]}: {problem}; give {WHAT}"
    assert (err.value.argument, err.value.value) == ("--stack", str(files[kind]))


def test_random_bytes_are_refused(files):
    with pytest.raises(InputError, match=r"not (UTF-8 )?text \("):
        read_text_argument(files["binary"], "--stack", WHAT)


def test_an_unreadable_file_says_so(tmp_path, monkeypatch):
    """(Faked: root, which runs these tests here, reads a file of mode 000.)"""
    locked = tmp_path / "locked.yaml"
    locked.write_text("a: 1\n")

    def refuse(*_args, **_kwargs):
        raise PermissionError(13, "Permission denied", str(locked))

    monkeypatch.setattr(Path, "open", refuse)
    with pytest.raises(InputError) as err:
        read_text_argument(locked, "-i", WHAT)
    assert str(err.value) == f"-i {locked}: cannot be read (permission denied); give {WHAT}"


def test_a_path_with_a_nul_byte_is_refused():
    with pytest.raises(InputError, match="is not a usable path"):
        read_text_argument(Path("a\0b"), "--stack", WHAT)


def test_empty_is_allowed_where_it_means_none(files):
    assert read_text_argument(files["empty"], "--previous", WHAT, allow_empty=True) == ""


def test_text_file_problem_names_the_file(files):
    assert text_file_problem(files["directory"]) == f"{files['directory']}: is a directory"
    assert text_file_problem(REPO / "Pulumi.local.yaml") is None


@pytest.mark.parametrize(("text", "problem"), [
    ("a: [1, 2\n", "not valid YAML: the sequence '[' opened on line 1 (column 4) is not "
     "closed where line 2 (column 1) breaks it (expected ',' or ']', but got '<stream end>'): "
     "fix the brackets"),
    ("- a\n- b\n", "is a list in YAML, not a mapping"),
    ("just words\n", "is a string in YAML, not a mapping"),
    ("42\n", "is a number in YAML, not a mapping"),
    ("# only a comment\n", "has no YAML content (only comments?)"),
    ("[" * 5000 + "]" * 5000, "nested too deeply to be read"),
])
def test_yaml_that_is_not_a_mapping(tmp_path, text, problem):
    path = tmp_path / "f.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_yaml_mapping(path, "--prices", WHAT)
    assert str(err.value) == f"--prices {path}: {problem}; give {WHAT}"


STACK_HEAD = "config:\n" + "".join(f"  metalslurm:key{i}: {i}\n" for i in range(19))


@pytest.mark.parametrize(("tail", "problem"), [
    # line 22 opens a flow sequence, line 23 breaks it; line 22 is indented by one space
    ("  metalslurm:computePools:\n    - {name: gpu, count: 4, gpus: [h100, h100\n"
     "  metalslurm:os: debian13\n",
     "the sequence '[' opened on line 22 (column 35) is not closed where line 23 (column 16) "
     "breaks it (expected ',' or ']', but got ':'): fix the brackets"),
    ("  metalslurm:cluster: lab\n metalslurm:os: debian13\n",
     "the mapping that starts on line 1 (column 1) breaks on line 22 (column 2) (expected "
     "<block end>, but found '<block mapping start>'): fix the indentation"),
    ("  metalslurm:cluster: lab\n  metalslurm:os: 'debian13\n",
     "the quoted string opened on line 22 (column 18) is not closed where line 23 (column 1) "
     "breaks it (found unexpected end of stream): close the quotes"),
])
def test_a_yaml_syntax_error_names_where_the_construct_opened_and_where_it_broke(
        tmp_path, tail, problem):
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(STACK_HEAD + tail)
    with pytest.raises(InputError) as err:
        load_yaml_mapping(path, "--stack", WHAT)
    assert str(err.value) == f"--stack {path}: not valid YAML: {problem}; give {WHAT}"
    assert "\n" not in str(err.value)


def test_a_key_indented_too_deep_is_named_with_its_line():
    with pytest.raises(InputError) as err:
        parse_yaml_text("config:\n  a: 1\n    b: 2\n", "-e", "YAML")
    assert str(err.value) == (
        "-e: not valid YAML (line 3, column 6: mapping values are not allowed here; a key "
        "indented deeper than the one above it, or a value with ': ' in it that needs quotes); "
        "give YAML")


@pytest.mark.parametrize(("expression", "problem"), [
    ("gpu-[001-", "is not a hostlist (unbalanced brackets)"),
    ("gpu-[1-99999999]", "is not a hostlist (range too large)"),
    ("", "names no host"),
    (",", "names no host"),
])
def test_a_bad_hostlist(expression, problem):
    with pytest.raises(InputError) as err:
        parse_hostlist(expression, "--nodes")
    assert str(err.value).startswith(f"--nodes {expression!r}: {problem}; write it like")


def test_a_hostlist():
    assert parse_hostlist("gpu-[001-003],ctl", "--nodes") == ["gpu-001", "gpu-002", "gpu-003",
                                                              "ctl"]


@pytest.mark.parametrize("item", ["novalue", "=1", " =1"])
def test_key_value_needs_a_key_and_an_equals_sign(item):
    with pytest.raises(InputError, match=r"^-e .*: write KEY=VALUE, e\.g\. a=1$"):
        parse_key_value(item, "-e", "KEY=VALUE", "a=1")


def test_key_value_splits_at_the_first_equals_sign():
    assert parse_key_value("a=b=c", "-e", "KEY=VALUE", "a=1") == ("a", "b=c")


@pytest.mark.parametrize("text", ["abc", "nan", "inf", "-inf", "-1", "", [1], True])
def test_a_number_is_finite_and_not_negative(text):
    with pytest.raises(InputError, match="--price"):
        parse_number(text, "--price", "a price")


def test_a_number():
    assert parse_number(" 4.21 ", "--price", "a price") == 4.21
    assert parse_number(3, "--price", "a price") == 3.0


# ---------------------------------------------------------------- inventories

@pytest.mark.parametrize("name", ["nfs-server.yml", "external-db.yml"])
def test_the_inventory_fixtures_are_inventories(name):
    document = load_inventory(REPO / "tests/fixtures/inventory" / name, "--inventory")
    assert group_hosts(document, "slurm_compute")


@pytest.mark.parametrize(("text", "problem"), [
    ("all: [a]", "all: group 'all' is a list; a group is a mapping of hosts, children, vars"),
    ("all:\n  host: {a: }", "all.host: unknown key in group 'all' (a group has hosts, "
     "children, vars)"),
    ("all:\n  children: [a]", "all.children is a list, not a mapping of group names to "
     "groups"),
    ("all:\n  children:\n    slurm_compute:\n      hosts: [gpu-001]",
     "all.children.slurm_compute.hosts is a list, not a mapping of host names to their "
     "variables"),
    ("all:\n  hosts:\n    gpu-001: [1]", "all.hosts.gpu-001 is a list, not a mapping of its "
     "variables"),
    ("all:\n  vars: 3", "all.vars is a number, not a mapping of variable names to values"),
    ("plugin: amazon.aws.aws_ec2", "is an inventory plugin's configuration, not an inventory"),
])
def test_an_inventory_that_ansible_would_not_read(text, problem):
    import yaml

    assert inventory_structure_problem(yaml.safe_load(text)).startswith(problem)


def test_group_hosts_finds_a_group_anywhere_with_its_children():
    import yaml

    document = yaml.safe_load("""
        all:
          hosts: {ctl: {}}
          children:
            slurm_compute:
              hosts: {gpu-001: }
              children:
                big: {hosts: {gpu-002: , gpu-001: }}
            other: {children: {slurm_compute: {hosts: {gpu-003: }}}}
    """)
    assert group_hosts(document, "slurm_compute") == ["gpu-001", "gpu-002", "gpu-003"]
    assert group_hosts(document, "login") == []
