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

What the code object depends on, and so what the key holds: the template's text; the
environment's lexer settings (a template's ``#jinja2:`` overrides), extensions and code
generator switches; the backslash escaping Ansible applies to expressions from YAML; the
name, file name and ``defer_init`` Jinja's ``compile`` takes. Jinja also looks each filter
and test up while compiling (to pass it the context or the environment as its first
argument): the key assumes a name resolves to the same plugin throughout a run, which holds
while filters and tests come from Ansible, the configured plugin paths and collections (by
their full names), and no role brings its own ``filter_plugins`` or ``test_plugins``
(tests/lint/test_roles.py refuses one).

The directory is opened once, without following a link, and held open: the workers read and
write in it through that descriptor whatever happens to the path, and load only regular
files this user owns that no one else can write. A file that cannot be written (a full disk)
leaves the template compiled as Ansible does; nothing fails because of the cache.

``METALSLURM_JINJA_CODE_CACHE=off`` leaves Ansible's compilation as it is (for measuring
both in one run); so does a Jinja outside the 3.1 series, an ansible-core outside 2.19, or
one without the names the key reads (both pinned in constraints.txt).
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import os
import secrets
import stat
from types import CodeType
from typing import Any

SWITCH = "METALSLURM_JINJA_CODE_CACHE"
# What the cache was written against: Jinja 3.1's compile_expression (copied below) and
# ansible-core 2.19's names for the compile settings. Elsewhere it stays off.
JINJA_SERIES = "3.1."
ANSIBLE_SERIES = "2.19."
_NEEDED = ("AnsibleEnvironment", "_TemplateCompileContext", "_TEMPLATE_OVERRIDE_FIELD_NAMES",
           "_TemplateConfig")

_compile: Any = None  # Jinja's own Environment.compile and compile_expression
_compile_expression: Any = None
_memory: dict[str, CodeType] = {}
_directory: str | None = None
_directory_fd: int | None = None


def key(env: Any, kind: str, source: str, extra: tuple[Any, ...] = ()) -> str:
    """The cache key of ``source`` compiled by ``env`` as a ``kind`` ("template" or
    "expression"), ``extra`` being the compile call's own arguments."""
    from ansible._internal._templating import _jinja_bits as bits

    escaping = bits._TemplateCompileContext.current(optional=True)
    settings = (kind, type(env).__module__, type(env).__qualname__,
                tuple(getattr(env, name) for name in bits._TEMPLATE_OVERRIDE_FIELD_NAMES),
                bool(escaping and escaping.escape_backslashes), env.optimized, env.autoescape,
                env.is_async, tuple(sorted(env.extensions)),
                type(env).code_generator_class.__qualname__,
                bits._TemplateConfig.allow_embedded_templates, extra)
    digest = hashlib.sha256(repr(settings).encode())
    digest.update(b"\0")
    digest.update(str.encode(source, "utf-8", "surrogatepass"))
    return digest.hexdigest()


def _load(name: str) -> CodeType | None:
    code = _memory.get(name)
    if code is not None or _directory_fd is None:
        return code
    try:
        handle = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=_directory_fd)
    except OSError:
        return None
    try:
        found = os.fstat(handle)
        if (not stat.S_ISREG(found.st_mode) or found.st_uid != os.getuid()
                or found.st_mode & 0o022):
            return None
        with os.fdopen(handle, "rb", closefd=False) as stored:
            loaded = marshal.load(stored)
    except (OSError, EOFError, ValueError, TypeError):
        return None
    finally:
        os.close(handle)
    if not isinstance(loaded, CodeType):
        return None
    _memory[name] = loaded
    return loaded


def _store(name: str, code: CodeType) -> None:
    global _directory_fd
    _memory[name] = code
    if _directory_fd is None:
        return
    # Written whole under a temporary name, then renamed: a worker reading it at the same
    # time finds either nothing or the whole file. A write that fails (a full disk, the
    # directory gone) stops this process writing; the template is compiled all the same.
    partial = f".partial-{secrets.token_hex(8)}"
    try:
        handle = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                         dir_fd=_directory_fd)
        with os.fdopen(handle, "wb") as out:
            marshal.dump(code, out)
        os.replace(partial, name, src_dir_fd=_directory_fd, dst_dir_fd=_directory_fd)
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            os.unlink(partial, dir_fd=_directory_fd)
        _directory_fd = None


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


def compile_expression_cached(env: Any, source: str, undefined_to_none: bool = True) -> Any:
    """Jinja's ``Environment.compile_expression`` (Jinja 3.1's, step for step), its code
    object kept for the expression's text."""
    from jinja2 import nodes
    from jinja2.environment import TemplateExpression
    from jinja2.exceptions import TemplateSyntaxError
    from jinja2.parser import Parser

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


def _private_directory() -> tuple[str, int] | None:
    """The run's cache directory, made and opened (not through a link), when it is this
    user's alone; else None."""
    import ansible.constants as C

    directory = os.path.join(C.DEFAULT_LOCAL_TMP, "jinja-code")
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        handle = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    found = os.fstat(handle)
    if found.st_uid != os.getuid() or found.st_mode & 0o077:
        os.close(handle)
        return None
    return directory, handle


def enable() -> str | None:
    """Keep compiled Jinja for this process and the workers it forks from now on; the
    directory, or None when the cache stays off. Call it once per run, before any fork."""
    global _compile, _compile_expression, _directory, _directory_fd
    if _directory is not None:
        return _directory
    if os.environ.get(SWITCH, "on") == "off":
        return None
    try:
        import jinja2
        from ansible._internal._templating import _jinja_bits
        from ansible.release import __version__ as ansible_version
    except ImportError:
        return None
    if not (jinja2.__version__.startswith(JINJA_SERIES)
            and ansible_version.startswith(ANSIBLE_SERIES)
            and all(hasattr(_jinja_bits, name) for name in _NEEDED)):
        return None  # a Jinja or ansible-core this was not written against: Ansible's own
    opened = _private_directory()
    if opened is None:
        return None  # not this run's own private directory: compile as Ansible does
    _directory, _directory_fd = opened
    environment = _jinja_bits.AnsibleEnvironment
    _compile = environment.compile
    _compile_expression = environment.compile_expression
    environment.compile = compile_cached
    environment.compile_expression = compile_expression_cached
    return _directory
