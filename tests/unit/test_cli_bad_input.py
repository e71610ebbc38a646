"""Bad input on the metalslurm CLI: one line on stderr naming the argument, exit 2, nothing
written, never a traceback (issue 22).

Every case runs ``main`` in an empty working directory with subprocesses, ansible-playbook
and sockets replaced by a tripwire: bad input must be refused before any of them, so a
case that reaches one fails. One test walks the argparse parser and feeds every file
argument of every subcommand a binary file, so a file argument added later is held to
the same rule without anyone listing it here.
"""

from __future__ import annotations

import argparse
import random
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from infra import cli
from infra.cli import build_parser, main

REPO = Path(__file__).resolve().parents[2]
LOCAL_STACK = REPO / "Pulumi.local.yaml"
BYO_STACK = REPO / "Pulumi.example-byo.yaml"
INVENTORY = REPO / "tests/fixtures/inventory/nfs-server.yml"
FABRIC = REPO / "tests/fixtures/ib/local-e2e.ibnetdiscover"
SACCT = REPO / "tests/fixtures/slurm/sacct/usage-2026-05.txt"
# A private key as --ssh-key wants it (0600), for the commands that require one.
_KEY_DIR = tempfile.TemporaryDirectory(prefix="metalslurm-bad-input-key-")
SSH_KEY = Path(_KEY_DIR.name) / "id_ed25519"
SSH_KEY.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaA==\n"
                   "-----END OPENSSH PRIVATE KEY-----\n")
SSH_KEY.chmod(0o600)


class Reached(BaseException):
    """A command got past its input checks to a subprocess, ansible-playbook or a socket (a
    BaseException, so that no command's error handling can swallow it)."""


@pytest.fixture
def inputs(tmp_path):
    """Bad (and a few good) input files, in a directory of their own."""
    d = tmp_path / "inputs"
    d.mkdir()
    files = {
        "binary": random.Random(22).randbytes(510) + b"\0\xff",
        "png": b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR",
        "empty": b"",
        "not-yaml": b"config: [1, 2\n",
        "yaml-list": b"- a\n- b\n",
        "config-list": b"config:\n  - metalslurm:provider\n",
        "config-problem": b"config:\n  metalslurm:computePools: [{name: gpu, count: -1}]\n",
        "inventory-groups": b"all:\n  children:\n    slurm_compute:\n      hosts: [gpu-001]\n",
        "inventory-no-group": b"all:\n  hosts: {ctl: }\n",
        "text": b"hello world\n",
        "topology-conf": b"SwitchName=s1 Nodes=gpu-[001-\n",
        "sacct-fields": b"101|alice|team-a\n",
        "sacct-elapsed": b"1|alice|acct|train|COMPLETED|2026-05-02T00:00:00|"
                         b"2026-05-02T01:00:00|01:00:00|abc|gres/gpu=1|1\n",
        "prices-list": b"- 4.21\n",
        "prices-word": b"h100: cheap\n",
        "prices-nan": b"h100: .nan\n",
    }
    made = {}
    for name, content in files.items():
        made[name] = d / name
        made[name].write_bytes(content)
    made["directory"] = d / "a-directory"
    made["directory"].mkdir()
    made["missing"] = d / "missing.yaml"
    return made


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def refuse(tmp_path, monkeypatch, capsys):
    """Run main(argv) as a user would, in an empty directory, with tripwires on anything a
    refused command must not reach; return (rc, stdout, stderr) after checking that
    nothing was written anywhere."""
    from infra.ops import configure

    def tripwire(*args, **_kwargs):
        raise Reached(f"reached {args[:1]}")

    monkeypatch.setattr(subprocess, "Popen", tripwire)
    monkeypatch.setattr(configure, "spawn", tripwire)  # ansible-playbook
    monkeypatch.setattr(socket.socket, "connect", tripwire)
    work = tmp_path / "cwd"
    temp = tmp_path / "tmp"
    work.mkdir()
    temp.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))

    def run(argv: list[str]) -> tuple[int, str, str]:
        before = _tree(tmp_path)
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as exc:  # argparse's own usage errors
            rc = int(exc.code or 0)
        out, err = capsys.readouterr()
        assert _tree(tmp_path) == before, "a refused command wrote files"
        return rc, out, err

    return run


def assert_one_line(rc: int, out: str, err: str, *named: str) -> None:
    assert "Traceback" not in out + err
    assert rc == 2, (out, err)
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("error: ")
    for name in named:
        assert name in err, (name, err)


STACK_KINDS = {
    "binary": "not UTF-8 text (byte 0x",
    "png": "not UTF-8 text (byte 0x89 at offset 0)",
    "empty": "the file has no metalslurm: config",
    "directory": "is a directory",
    "missing": "file not found",
    "not-yaml": "not valid YAML: the sequence '[' opened on line 1 (column 9) is not closed "
                "where line 2 (column 1) breaks it",
    "yaml-list": "the file is a list in YAML",
    "config-list": "'config:' is a list",
    "config-problem": "metalslurm:computePools[0].count: must be at least 0",
}
INVENTORY_KINDS = {
    "binary": "not UTF-8 text (byte 0x",
    "empty": "is empty",
    "directory": "is a directory",
    "missing": "file not found",
    "not-yaml": "not valid YAML",
    "yaml-list": "is a list in YAML, not a mapping",
    "inventory-groups": "all.children.slurm_compute.hosts is a list",
}
LOCAL_COMMANDS = [["local", "up"], ["local", "down"], ["local", "status"], ["image", "build"],
                  ["local", "exec", "ctl", "--", "true"]]


def _with_stack(command: list[str], stack: Path) -> list[str]:
    return [*command[:2], "--stack", stack, *command[2:]]


@pytest.mark.parametrize("command", LOCAL_COMMANDS, ids=lambda c: " ".join(c[:2]))
@pytest.mark.parametrize("kind", STACK_KINDS)
def test_local_commands_refuse_a_bad_stack_file(refuse, inputs, command, kind):
    rc, out, err = refuse(_with_stack(command, inputs[kind]))
    assert_one_line(rc, out, err, f"--stack {inputs[kind]}: ", STACK_KINDS[kind])


@pytest.mark.parametrize("command", LOCAL_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_local_commands_refuse_another_providers_stack(refuse, command):
    rc, out, err = refuse(_with_stack(command, BYO_STACK))
    assert_one_line(rc, out, err, "--stack", "metalslurm:provider is 'byo'")


BYO_COMMANDS = [["up", "--ssh-key", str(SSH_KEY)], ["preflight", "--ssh-key", str(SSH_KEY)]]


@pytest.mark.parametrize("command", BYO_COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("kind", STACK_KINDS)
def test_byo_commands_refuse_a_bad_stack_file(refuse, inputs, command, kind):
    rc, out, err = refuse([command[0], "--stack", inputs[kind], *command[1:]])
    assert_one_line(rc, out, err, f"--stack {inputs[kind]}: ", STACK_KINDS[kind])


def test_preflight_of_a_stack_needs_the_ssh_key(refuse):
    rc, out, err = refuse(["preflight", "--stack", BYO_STACK])
    assert_one_line(rc, out, err, "--ssh-key: is missing: with --stack, give the SSH private "
                    "key file the hosts accept")


def test_local_commands_refuse_a_missing_default_stack(refuse):
    rc, out, err = refuse(["local", "up"])
    assert_one_line(rc, out, err, "--stack Pulumi.local.yaml: file not found")


def test_local_exec_refuses_an_unknown_node(refuse):
    rc, out, err = refuse(["local", "exec", "--stack", LOCAL_STACK, "gpu-999", "--", "true"])
    assert_one_line(rc, out, err, "NODE 'gpu-999': is not a node of cluster metalslurm",
                    "give one of: ctl, gpu-001")


@pytest.mark.parametrize("words", [["ctl", "--"], ["--"], []], ids=["node", "no node", "nothing"])
def test_local_exec_refuses_no_command(refuse, words):
    rc, out, err = refuse(["local", "exec", "--stack", LOCAL_STACK, *words])
    assert_one_line(rc, out, err, "COMMAND: is missing; write: metalslurm local exec [NODE] -- "
                    "COMMAND")


@pytest.mark.parametrize("kind", STACK_KINDS)
def test_config_validate_refuses_a_bad_stack_file(refuse, inputs, kind):
    rc, out, err = refuse(["config", "validate", inputs[kind]])
    assert_one_line(rc, out, err, f"STACK_FILE {inputs[kind]}: ", STACK_KINDS[kind])


INVENTORY_COMMANDS = [["configure"], ["verify"], ["topology", "discover"],
                      ["report", "usage"], ["topology", "from-file", FABRIC], ["preflight"]]


@pytest.mark.parametrize("command", INVENTORY_COMMANDS, ids=lambda c: " ".join(map(str, c[:2])))
@pytest.mark.parametrize("kind", INVENTORY_KINDS)
def test_inventory_commands_refuse_a_bad_inventory(refuse, inputs, command, kind):
    rc, out, err = refuse([*command, "-i", inputs[kind]])
    assert_one_line(rc, out, err, f"--inventory {inputs[kind]}: ", INVENTORY_KINDS[kind])


@pytest.mark.parametrize(("item", "problem"), [
    ("novalue", "-e 'novalue': write KEY=VALUE"),
    ("=1", "-e '=1': write KEY=VALUE"),
    ("a=[1", "-e 'a=[1': not valid YAML: the sequence '[' opened on line 1 (column 1) is not "
     "closed where line 1 (column 3) breaks it"),
    ("a-b=1", "-e 'a-b=1': 'a-b' is not an Ansible variable name"),
])
def test_configure_refuses_a_bad_extra_var(refuse, item, problem):
    rc, out, err = refuse(["configure", "-i", INVENTORY, "-e", "ok=1", "-e", item])
    assert_one_line(rc, out, err, problem)


@pytest.mark.parametrize(("args", "problem"), [
    (["--become-password-file", "/nonexistent/pw"],
     "--become-password-file /nonexistent/pw: file not found; give a file holding the sudo "
     "password on its first line"),
    (["--become-password-file", "pw", "-K"], "not allowed with argument"),
])
def test_configure_refuses_a_bad_become_password_before_running(refuse, args, problem):
    rc, out, err = refuse(["configure", "-i", INVENTORY, *args])
    assert_one_line(rc, out, err, problem)


def test_configure_refuses_a_password_file_whose_first_line_no_sudo_password_is(refuse,
                                                                                 tmp_path):
    """A first line over 4096 bytes is the wrong file (and would not fit the pipe the
    password goes through before ansible-playbook reads it)."""
    wrong = tmp_path / "wrong-file"
    wrong.write_text("x" * 5000 + "\nsecond line\n")
    rc, out, err = refuse(["configure", "-i", INVENTORY, "--become-password-file", wrong])
    assert_one_line(rc, out, err, f"--become-password-file {wrong}: has a first line longer "
                    "than 4096 bytes, which no sudo password is; give a file holding the sudo "
                    "password on its first line")


@pytest.mark.parametrize(("args", "problem"), [
    (["--lock-wait", "-1"], "--lock-wait: is -1.0; give the seconds to wait for apt's lock"),
    (["--lock-wait", "nan"], "--lock-wait: is nan; give the seconds"),
    (["--lock-wait", "soon"], "argument --lock-wait: invalid float value: 'soon'"),
    (["--ssh-wait", "-5"], "--ssh-wait: is -5.0; give the seconds to wait for an unreachable "
     "host's sshd, from 0 (do not wait) to 3600"),
    (["--ssh-wait", "inf"], "--ssh-wait: is inf; give the seconds"),
    (["--become-password-file", "/nonexistent/pw"],
     "--become-password-file /nonexistent/pw: file not found; give a file holding the sudo "
     "password on its first line"),
    (["--become-password-file", "pw", "-K"], "not allowed with argument"),
    (["--ssh-key", str(SSH_KEY)], f"--ssh-key {SSH_KEY}: goes with --stack only (with -i, the "
     "inventory says how to reach the hosts); leave it out"),
])
def test_preflight_refuses_bad_options_before_reaching_a_host(refuse, args, problem):
    rc, out, err = refuse(["preflight", "-i", INVENTORY, *args])
    assert_one_line(rc, out, err, problem)


@pytest.mark.parametrize(("kind", "problem"), [
    ("binary", "not UTF-8 text (byte 0x"),
    ("empty", "is empty"),
    ("directory", "is a directory"),
    ("missing", "file not found"),
    ("text", "ibnetdiscover line 1: not ibnetdiscover output: 'hello world'"),
])
def test_topology_from_file_refuses_a_bad_ibnetdiscover_output(refuse, inputs, kind, problem):
    rc, out, err = refuse(["topology", "from-file", inputs[kind], "--nodes", "gpu-[001-004]"])
    assert_one_line(rc, out, err, f"IBNETDISCOVER_OUTPUT {inputs[kind]}: {problem}")


@pytest.mark.parametrize(("kind", "problem"), [
    ("binary", "not UTF-8 text (byte 0x"),
    ("directory", "is a directory"),
    ("missing", "file not found"),
    ("topology-conf", "topology.conf line 1: 'gpu-[001-' is not a hostlist expression"),
])
def test_topology_from_file_refuses_a_bad_previous_file(refuse, inputs, kind, problem):
    rc, out, err = refuse(["topology", "from-file", FABRIC, "--nodes", "gpu-[001-004]",
                           "--previous", inputs[kind]])
    assert_one_line(rc, out, err, f"--previous {inputs[kind]}: {problem}")


def test_topology_from_file_takes_an_empty_previous_file_as_none(refuse, inputs):
    rc, out, _err = refuse(["topology", "from-file", FABRIC, "--nodes", "gpu-[001-004]",
                            "--previous", inputs["empty"]])
    assert rc == 0
    assert "SwitchName=" in out


@pytest.mark.parametrize(("nodes", "problem"), [
    ("gpu-[001-", "--nodes 'gpu-[001-': is not a hostlist (unbalanced brackets)"),
    ("gpu-[1-99999999]", "--nodes 'gpu-[1-99999999]': is not a hostlist (range too large)"),
    ("", "--nodes '': names no host"),
])
def test_topology_from_file_refuses_a_bad_hostlist(refuse, nodes, problem):
    rc, out, err = refuse(["topology", "from-file", FABRIC, "--nodes", nodes])
    assert_one_line(rc, out, err, problem)


@pytest.mark.parametrize(("command", "group"), [
    (["topology", "from-file", FABRIC], "slurm_compute"),
    (["topology", "discover"], "slurm_controller"),
    (["report", "usage"], "slurm_controller"),
])
def test_an_inventory_without_the_group_a_command_runs_on(refuse, inputs, command, group):
    rc, out, err = refuse([*command, "-i", inputs["inventory-no-group"]])
    assert_one_line(rc, out, err, f"--inventory {inputs['inventory-no-group']}: has no host "
                    f"in group {group}")


def test_topology_from_file_refuses_an_unknown_plugin(refuse):
    rc, out, err = refuse(["topology", "from-file", FABRIC, "--nodes", "gpu-001",
                           "--plugin", "fat-tree"])
    assert_one_line(rc, out, err, "argument --plugin: invalid choice: 'fat-tree'")


@pytest.mark.parametrize(("kind", "problem"), [
    ("binary", "not UTF-8 text (byte 0x"),
    ("directory", "is a directory"),
    ("missing", "file not found"),
    ("sacct-fields", "sacct line 1 has 3 fields, expected 11"),
    ("sacct-elapsed", "sacct line 1: ElapsedRaw 'abc' is not a number of seconds"),
])
def test_report_usage_refuses_a_bad_recorded_sacct_output(refuse, inputs, kind, problem):
    rc, out, err = refuse(["report", "usage", "--from-file", inputs[kind], "--start",
                           "2026-05-01"])
    assert_one_line(rc, out, err, f"--from-file {inputs[kind]}: {problem}")


@pytest.mark.parametrize("kind", STACK_KINDS)
def test_report_usage_refuses_a_bad_stack_file(refuse, inputs, kind):
    rc, out, err = refuse(["report", "usage", "--stack", inputs[kind]])
    assert_one_line(rc, out, err, f"--stack {inputs[kind]}: ", STACK_KINDS[kind])


def test_report_usage_refuses_another_providers_stack(refuse):
    rc, out, err = refuse(["report", "usage", "--stack", BYO_STACK])
    assert_one_line(rc, out, err, "--stack", "for another cluster give -i INVENTORY")


@pytest.mark.parametrize(("kind", "problem"), [
    ("binary", "not UTF-8 text (byte 0x"),
    ("empty", "is empty"),
    ("directory", "is a directory"),
    ("missing", "file not found"),
    ("not-yaml", "not valid YAML"),
    ("prices-list", "is a list in YAML, not a mapping"),
    ("prices-word", "'cheap' is not a number"),
    ("prices-nan", "nan is not a finite number of 0 or more"),
])
def test_report_usage_refuses_a_bad_prices_file(refuse, inputs, kind, problem):
    rc, out, err = refuse(["report", "usage", "--from-file", SACCT, "--prices", inputs[kind]])
    assert_one_line(rc, out, err, f"--prices {inputs[kind]}", problem)


@pytest.mark.parametrize(("price", "problem"), [
    ("h100=abc", "--price 'h100=abc': 'abc' is not a number"),
    ("h100", "--price 'h100': write TYPE=PRICE"),
    ("=4", "--price '=4': write TYPE=PRICE"),
    ("h100=-1", "--price 'h100=-1': '-1' is not a finite number of 0 or more"),
    ("h100=inf", "--price 'h100=inf': 'inf' is not a finite number of 0 or more"),
])
def test_report_usage_refuses_a_bad_price(refuse, price, problem):
    rc, out, err = refuse(["report", "usage", "--from-file", SACCT, "--price", price])
    assert_one_line(rc, out, err, problem)


@pytest.mark.parametrize(("times", "problem"), [
    (["--start", "yesterday-ish"], "--start: 'yesterday-ish' is not a time"),
    (["--end", "2026-13-01"], "--end: '2026-13-01' is not a time"),
    (["--start", "2026-05-01T00:00+05:00"], "--start: '2026-05-01T00:00+05:00' has a UTC "
     "offset"),
    (["--start", "now-9999999999days"], "--start: 'now-9999999999days' is outside the "
     "calendar"),
    (["--end", "now+999999999999w"], "--end: 'now+999999999999w' is outside the calendar"),
    (["--start", "2026-05-02", "--end", "2026-05-01"], "--end: 2026-05-01T00:00:00 is not "
     "after --start 2026-05-02T00:00:00"),
])
def test_report_usage_refuses_a_bad_time(refuse, times, problem):
    rc, out, err = refuse(["report", "usage", "--from-file", SACCT, *times])
    assert_one_line(rc, out, err, problem)


def test_report_usage_checks_every_input_before_sacct_runs(refuse):
    """No source given: sacct would run here, after the prices were read."""
    rc, out, err = refuse(["report", "usage", "--price", "h100=abc"])
    assert_one_line(rc, out, err, "--price")


def test_a_usage_error_is_one_line(refuse):
    rc, out, err = refuse(["configure"])
    assert_one_line(rc, out, err, "the following arguments are required: -i/--inventory")


# ---------------------------------------------------------------- bugs keep a traceback

@pytest.mark.parametrize("bug", [KeyError("x"), TypeError("x"), AttributeError("x"),
                                 RecursionError("x"), FileNotFoundError(2, "x")])
def test_a_bug_is_not_dressed_as_bad_input(monkeypatch, bug):
    def broken(_args):
        raise bug

    monkeypatch.setattr(cli, "cmd_config_validate", broken)
    with pytest.raises(type(bug)):
        main(["config", "validate", str(LOCAL_STACK)])


# ---------------------------------------------------------------- the parser walk

def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(subcommand words, parser) of every runnable subcommand."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _leaves(sub, (*path, name))
    if parser.get_default("func") is not None:
        yield path, parser


# A valid value for each argument a command may need besides the one under test, so that
# it gets as far as reading that one. A new required argument needs an entry here.
VALID: dict[str, list[str]] = {
    "ssh_key": [str(SSH_KEY)],
    "stack": [str(LOCAL_STACK)],
    "stack_file": [str(LOCAL_STACK)],
    "inventory": [str(INVENTORY)],
    "ibnetdiscover": [str(FABRIC)],
    "nodes": ["gpu-[001-004]"],
    "words": ["ctl", "--", "true"],
    "from_file": [str(SACCT)],
    "dest": ["/tmp/metalslurm-bad-input-test/wheelhouse"],  # checked, never written
    "dir": ["/tmp/metalslurm-bad-input-test/backup"],  # checked, never written
}


def _is_positional(action: argparse.Action) -> bool:
    return not action.option_strings


def _argv_with(path: tuple[str, ...], parser: argparse.ArgumentParser,
               tested: argparse.Action, bad: Path) -> list[str]:
    """The command line that gives ``tested`` the file ``bad`` and every other required
    argument a valid value (options first, positionals in their order)."""
    exclusive = {a for g in parser._mutually_exclusive_groups
                 if tested in g._group_actions for a in g._group_actions}
    needed = [a for a in parser._actions
              if a is not tested and a not in exclusive and not isinstance(
                  a, (argparse._HelpAction, argparse._SubParsersAction))
              and (a.required or (_is_positional(a) and a.nargs not in ("?", "*")))]
    for group in parser._mutually_exclusive_groups:
        if group.required and tested not in group._group_actions:
            needed.append(group._group_actions[0])
    options: list[str] = []
    positionals: list[str] = []
    for action in parser._actions:
        if action is tested:
            (positionals if _is_positional(action) else options).extend(
                [str(bad)] if _is_positional(action) else [action.option_strings[-1], str(bad)])
        elif action in needed:
            if action.dest not in VALID:
                pytest.fail(f"metalslurm {' '.join(path)}: required argument {action.dest!r} "
                            "has no valid value in VALID; add one", pytrace=False)
            value = VALID[action.dest]
            (positionals if _is_positional(action) else options).extend(
                value if _is_positional(action) else [action.option_strings[-1], *value])
    return [*path, *options, *positionals]


def test_every_file_argument_is_typed_as_a_path():
    """The walk below finds file arguments by type=Path: one declared as a plain string
    would escape it."""
    for path, parser in _leaves(build_parser()):
        for action in parser._actions:
            words = f"{action.dest} {action.metavar or ''} {action.help or ''}".lower()
            if any(w in words for w in ("file", "inventory", "stack", "output")):
                assert action.type is Path, (
                    f"metalslurm {' '.join(path)} {action.dest}: looks like a file argument "
                    "but is not type=Path")


def _file_arguments():
    found = []
    for path, parser in _leaves(build_parser()):
        for action in parser._actions:
            if action.type is Path:
                found.append(pytest.param(path, action.dest,
                                          id=f"{' '.join(path)} {action.dest}"))
    return found


def test_the_walk_finds_the_known_file_arguments():
    found = {(" ".join(p.values[0]), p.values[1]) for p in _file_arguments()}
    assert {("local up", "stack"), ("config validate", "stack_file"),
            ("topology from-file", "ibnetdiscover"), ("topology from-file", "previous"),
            ("report usage", "prices"), ("configure", "inventory")} <= found
    assert len(found) >= 14


@pytest.mark.parametrize(("path", "dest"), _file_arguments())
def test_every_file_argument_refuses_a_binary_file(refuse, inputs, path, dest):
    parser = dict(_leaves(build_parser()))[path]
    tested = next(a for a in parser._actions if a.dest == dest)
    rc, out, err = refuse(_argv_with(path, parser, tested, inputs["binary"]))
    named = tested.option_strings or [tested.metavar or tested.dest]
    assert "Traceback" not in out + err
    assert rc == 2, (out, err)
    assert err.count("\n") == 1 and err.startswith("error: "), err
    # an output directory (metavar DIR) is not read: a file there is not a directory
    said = "is not a directory" if tested.metavar == "DIR" else "not UTF-8 text"
    assert any(f"{name} {inputs['binary']}: " in err and said in err for name in named), err


@pytest.mark.parametrize(("section", "problem"), [
    ("containers: {credentialsFile: binary}",
     "metalslurm:containers.credentialsFile: {binary} is not UTF-8 text"),
    ("topology: {source: ibnetdiscover, discovery: {simulator: binary}}",
     "metalslurm:topology.discovery.simulator: {binary}: not UTF-8 text"),
])
def test_local_up_refuses_a_binary_file_the_stack_names(refuse, inputs, section, problem):
    """Files a stack config names are read when it is parsed, before anything is made."""
    stack = inputs["binary"].parent / "Pulumi.named.yaml"
    stack.write_text(f"config:\n  metalslurm:provider: local\n  metalslurm:{section}\n")
    inputs["binary"].chmod(0o600)
    rc, out, err = refuse(["local", "up", "--stack", stack])
    assert_one_line(rc, out, err, f"--stack {stack}: ",
                    problem.format(binary=inputs["binary"]))
