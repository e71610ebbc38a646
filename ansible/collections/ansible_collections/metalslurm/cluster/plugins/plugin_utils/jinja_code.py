"""Compiled Jinja shared by the worker processes of one ansible-playbook run.

Ansible forks a worker for every task and host; the worker templates the task's ``when:``
and arguments and the variables they read, and ansible-core 2.19 compiles each of those
templates anew (Jinja's ``from_string`` and ``compile_expression`` keep no cache), in a
process that exits after one task. Measured with py-spy on the default stack's converged
run: 42 % of the workers' samples were Jinja's lexer, parser, code generator and Python's
``compile`` (docs/lab/benchmarks.md).

:func:`enable` (the project's strategy calls it in ansible-playbook, before the first worker
forks) makes the Jinja environment keep each compiled template's Python code object, in
memory and as a file in a directory of the run's own local temporary directory
(``ansible-local-<pid>…``, mode 0700, which ansible-playbook removes when it exits): a worker
that meets a template another worker compiled loads its code instead of compiling it again.

A code object is a function of the template's text and of what Jinja compiles it with: the
environment's lexer settings (a template's ``#jinja2:`` overrides), the backslash escaping
Ansible applies to expressions from YAML, the code generator's switches, and the name,
file name and ``defer_init`` Jinja's ``compile`` takes. The cache's key holds all of them;
whatever is looked up at render time (filters, tests, variables) is not in the code object.
Only the run's own processes write the directory; the files are loaded with ``marshal``.

``METALSLURM_JINJA_CODE_CACHE=off`` leaves Ansible's compilation as it is (for measuring
both in one run); so does a Jinja outside the 3.1 series or an ansible-core without the
names the key reads (both pinned in constraints.txt).
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import os
import stat
import tempfile
from types import CodeType
from typing import Any

import ansible.constants as C
import jinja2
from ansible._internal._templating import _jinja_bits
from jinja2 import nodes
from jinja2.environment import TemplateExpression
from jinja2.exceptions import TemplateSyntaxError
from jinja2.parser import Parser

SWITCH = "METALSLURM_JINJA_CODE_CACHE"
# What the cache was written against: Jinja 3.1's compile_expression (copied below) and
# ansible-core's names for the compile settings. Elsewhere it stays off.
JINJA_SERIES = "3.1."
_NEEDED = ("AnsibleEnvironment", "_TemplateCompileContext", "_TEMPLATE_OVERRIDE_FIELD_NAMES",
           "_TemplateConfig")

_Environment = _jinja_bits.AnsibleEnvironment
_compile = _Environment.compile
_compile_expression = _Environment.compile_expression
_memory: dict[str, CodeType] = {}
_directory: str | None = None


def key(env: Any, kind: str, source: str, extra: tuple[Any, ...] = ()) -> str:
    """The cache key of ``source`` compiled by ``env`` as a ``kind`` ("template" or
    "expression"), ``extra`` being the compile call's own arguments."""
    escaping = _jinja_bits._TemplateCompileContext.current(optional=True)
    settings = (kind, type(env).__module__, type(env).__qualname__,
                tuple(getattr(env, name) for name in _jinja_bits._TEMPLATE_OVERRIDE_FIELD_NAMES),
                bool(escaping and escaping.escape_backslashes), env.optimized, env.autoescape,
                env.is_async, type(env).code_generator_class.__qualname__,
                _jinja_bits._TemplateConfig.allow_embedded_templates, extra)
    digest = hashlib.sha256(repr(settings).encode())
    digest.update(b"\0")
    digest.update(str.encode(source, "utf-8", "surrogatepass"))
    return digest.hexdigest()


def _load(name: str) -> CodeType | None:
    code = _memory.get(name)
    if code is None and _directory is not None:
        try:
            with open(os.path.join(_directory, name), "rb") as stored:
                loaded = marshal.load(stored)
        except (OSError, EOFError, ValueError, TypeError):
            return None
        if not isinstance(loaded, CodeType):
            return None
        code = _memory[name] = loaded
    return code


def _store(name: str, code: CodeType) -> None:
    _memory[name] = code
    if _directory is None:
        return
    # Written whole under a temporary name, then renamed: a worker reading it at the same
    # time finds either nothing or the whole file.
    handle, partial = tempfile.mkstemp(dir=_directory, prefix=".partial-")
    try:
        with os.fdopen(handle, "wb") as out:
            marshal.dump(code, out)
        os.replace(partial, os.path.join(_directory, name))
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(partial)


def compile_cached(env: Any, source: Any, name: str | None = None,
                   filename: str | None = None, raw: bool = False,
                   defer_init: bool = False) -> Any:
    """Jinja's ``Environment.compile``, its code object kept for template text."""
    if raw or not isinstance(source, str) or env._debuggable_template_source:
        return _compile(env, source, name, filename, raw, defer_init)
    name_ = key(env, "template", source, (name, filename, defer_init))
    code = _load(name_)
    if code is None:
        code = _compile(env, source, name, filename, raw, defer_init)
        _store(name_, code)
    return code


def compile_expression_cached(env: Any, source: str,
                              undefined_to_none: bool = True) -> TemplateExpression:
    """Jinja's ``Environment.compile_expression`` (Jinja 3.1's, step for step), its code
    object kept for the expression's text."""
    if env._debuggable_template_source:
        return _compile_expression(env, source, undefined_to_none)
    name = key(env, "expression", source)
    code = _load(name)
    if code is None:
        parser = Parser(env, source, state="variable")
        try:
            expr = parser.parse_expression()
            if not parser.stream.eos:
                raise TemplateSyntaxError("chunk after expression", parser.stream.current.lineno,
                                          None, None)
            expr.set_environment(env)
        except TemplateSyntaxError:
            env.handle_exception(source=source)
        body = [nodes.Assign(nodes.Name("result", "store"), expr, lineno=1)]
        code = _compile(env, nodes.Template(body, lineno=1))
        _store(name, code)
    template = env.template_class.from_code(env, code, env.make_globals(None), None)
    return TemplateExpression(template, undefined_to_none)


def enable() -> str | None:
    """Keep compiled Jinja for this process and the workers it forks from now on; the
    directory, or None when the switch is off. Call it once per run, before any fork."""
    global _directory
    if os.environ.get(SWITCH, "on") == "off":
        return None
    if not (jinja2.__version__.startswith(JINJA_SERIES)
            and all(hasattr(_jinja_bits, name) for name in _NEEDED)):
        return None  # a Jinja or ansible-core this was not written against: Ansible's own
    if _directory is None:
        directory = os.path.join(C.DEFAULT_LOCAL_TMP, "jinja-code")
        os.makedirs(directory, mode=0o700, exist_ok=True)
        found = os.lstat(directory)
        if (not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid()
                or found.st_mode & 0o077):
            return None  # not this run's own private directory: compile as Ansible does
        _directory = directory
        _Environment.compile = compile_cached  # type: ignore[method-assign,assignment]
        _Environment.compile_expression = compile_expression_cached  # type: ignore[method-assign]
    return _directory
