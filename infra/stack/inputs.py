"""Bad input on the command line: one error type and the readers every command uses.

A command reads and checks every input it is given (files, hostlists, KEY=VALUE items,
times, prices) before it does anything with side effects, through the readers here;
each refuses bad input with an :class:`InputError` that names the argument, says what is
wrong and what to give instead. ``metalslurm``'s ``main`` catches it once and prints it on
one line (exit 2). Any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import hostlist
import yaml

# Larger than any stack config, inventory, sacct or ibnetdiscover output metalslurm
# reads (a 1,000-node fabric's ibnetdiscover output is a few MiB); a device such as
# /dev/zero is refused here instead of filling the memory.
MAX_INPUT_BYTES = 256 * 1024 * 1024
_PEEK_BYTES = 64 * 1024


class InputError(ValueError):
    """Bad input, named by the command-line argument it came through.

    ``argument`` is how the user gave it (``--stack``, ``-e``, a positional's name);
    ``value`` what they gave (a path, a hostlist), when it helps to repeat it; ``problem``
    says what is wrong and what to give instead.
    """

    def __init__(self, argument: str, problem: str, value: str | Path | None = None) -> None:
        self.argument = argument
        self.value = None if value is None else str(value)
        self.problem = problem
        named = argument if self.value is None else f"{argument} {self.value}"
        super().__init__(f"{named}: {problem}")


class _Unreadable(Exception):
    """Why a file cannot be used as text (a phrase, without the file's name)."""


def type_name(value: Any) -> str:
    """How a YAML value's type is said to a user: 'a list', 'a string', 'empty'."""
    if value is None:
        return "empty"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return f"a {type(value).__name__}"


def _read_text(path: Path, allow_empty: bool) -> str:
    try:
        if path.is_dir():
            raise _Unreadable("is a directory")
        with path.open("rb") as f:
            data = f.read(_PEEK_BYTES)
            nul = data.find(b"\0")
            if nul < 0:
                data += f.read(MAX_INPUT_BYTES + 1 - len(data))
    except FileNotFoundError:
        raise _Unreadable("file not found") from None
    except PermissionError:
        raise _Unreadable("cannot be read (permission denied)") from None
    except IsADirectoryError:
        raise _Unreadable("is a directory") from None
    except OSError as exc:
        raise _Unreadable(f"cannot be read ({exc.strerror or exc})") from None
    except ValueError as exc:  # a path with a NUL byte in it
        raise _Unreadable(f"is not a usable path ({exc})") from None
    if len(data) > MAX_INPUT_BYTES:
        raise _Unreadable(f"is larger than {MAX_INPUT_BYTES // 2**20} MiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Unreadable(f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                          f"{exc.start})") from None
    nul = text.find("\0")
    if nul >= 0:
        raise _Unreadable(f"not text (a NUL byte at offset {nul})")
    if not allow_empty and not text.strip():
        raise _Unreadable("is empty")
    return text


def text_file_problem(path: Path) -> str | None:
    """Why ``path`` is not a readable, non-empty UTF-8 text file, or None (for checks
    that collect problems, such as the stack config's)."""
    try:
        _read_text(path, allow_empty=False)
    except _Unreadable as exc:
        return f"{path}: {exc}"
    return None


def read_text_argument(path: Path, argument: str, what: str, *,
                       allow_empty: bool = False) -> str:
    """The text of the file an argument names; an :class:`InputError` if it is missing,
    a directory, unreadable, binary, not UTF-8, too large or (unless ``allow_empty``)
    empty. ``what`` completes 'give ...' in the message: 'the YAML stack config file'."""
    try:
        return _read_text(Path(path), allow_empty)
    except _Unreadable as exc:
        raise InputError(argument, f"{exc}; give {what}", path) from None


# A construct PyYAML names in a syntax error's context ('while parsing a flow sequence'):
# how it is said, whether it is closed by a character (else it ends with its indentation)
# and what to do.
_YAML_CONSTRUCTS = {
    "flow sequence": ("the sequence '['", True, "fix the brackets"),
    "flow mapping": ("the mapping '{'", True, "fix the braces"),
    "quoted scalar": ("the quoted string", True, "close the quotes"),
    "block mapping": ("the mapping", False, "fix the indentation"),
    "block collection": ("the list", False, "fix the indentation"),
}


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """How a YAML syntax error is said: where the construct it broke opened, when PyYAML
    says (its ``context_mark``), and where it broke (``problem_mark``)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is None or not problem:
        return "not valid YAML (" + " ".join(str(exc).split()) + ")"
    broke = f"line {mark.line + 1} (column {mark.column + 1})"
    opened = getattr(exc, "context_mark", None)
    context = str(getattr(exc, "context", None) or "")
    for verb in ("while parsing a ", "while scanning a ", "while scanning an "):
        if opened is not None and context.startswith(verb):
            construct = context[len(verb):]
            said, closed, todo = _YAML_CONSTRUCTS.get(construct, (f"the {construct}", False,
                                                                   ""))
            start = f"line {opened.line + 1} (column {opened.column + 1})"
            what = (f"{said} opened on {start} is not closed where {broke} breaks it"
                    if closed else f"{said} that starts on {start} breaks on {broke}")
            return f"not valid YAML: {what} ({problem})" + (f": {todo}" if todo else "")
    hint = ("; a key indented deeper than the one above it, or a value with ': ' in it "
            "that needs quotes" if problem == "mapping values are not allowed here" else "")
    return f"not valid YAML (line {mark.line + 1}, column {mark.column + 1}: {problem}{hint})"


def parse_yaml_text(text: str, argument: str, what: str, value: str | Path | None = None
                    ) -> Any:
    """YAML text given through an argument (a file's content or a -e VALUE)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(argument, f"{_yaml_problem(exc)}; give {what}", value) from None
    except RecursionError:
        raise InputError(argument, f"nested too deeply to be read; give {what}",
                         value) from None


def load_yaml_argument(path: Path, argument: str, what: str, *,
                       allow_empty: bool = False) -> Any:
    """The YAML document of the file an argument names (None for an empty one when
    ``allow_empty``)."""
    text = read_text_argument(path, argument, what, allow_empty=allow_empty)
    return parse_yaml_text(text, argument, what, path)


def load_yaml_mapping(path: Path, argument: str, what: str, *,
                      allow_empty: bool = False) -> dict[Any, Any]:
    """The YAML mapping of the file an argument names; anything else (a list, a string,
    an empty document unless ``allow_empty``) is an :class:`InputError`."""
    document = load_yaml_argument(path, argument, what, allow_empty=allow_empty)
    if document is None:
        if allow_empty:
            return {}
        raise InputError(argument, f"has no YAML content (only comments?); give {what}", path)
    if not isinstance(document, Mapping):
        raise InputError(argument, f"is {type_name(document)} in YAML, not a mapping; "
                         f"give {what}", path)
    return dict(document)


def parse_hostlist(expression: str, argument: str) -> list[str]:
    """The host names of a Slurm hostlist expression (``gpu-[001-064]``)."""
    example = "write it like gpu-[001-064] or gpu-001,gpu-002"
    try:
        names = list(hostlist.expand_hostlist(expression))
    except hostlist.BadHostlist as exc:
        raise InputError(argument, f"is not a hostlist ({exc}); {example}",
                         repr(expression)) from None
    if not names or not all(name.strip() for name in names):
        raise InputError(argument, f"names no host; {example}", repr(expression))
    return names


def parse_key_value(item: str, argument: str, form: str, example: str) -> tuple[str, str]:
    """``KEY=VALUE`` split at the first '='; a missing '=' or an empty KEY is an
    :class:`InputError` that shows ``form`` (KEY=VALUE) and an example."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise InputError(argument, f"write {form}, e.g. {example}", repr(item))
    return key.strip(), value


def parse_number(text: Any, argument: str, what: str, value: str | None = None) -> float:
    """A finite number that is not negative (a price)."""
    try:
        number = float(str(text).strip())
    except ValueError:
        raise InputError(argument, f"{text!r} is not a number; give {what}", value) from None
    if not math.isfinite(number) or number < 0:
        raise InputError(argument, f"{text!r} is not a finite number of 0 or more; give {what}",
                         value)
    return number
