"""The cache of compiled Jinja (plugin_utils/jinja_code.py): the same results as Ansible's
own compilation, code one worker compiled loaded by another, and a directory only the run
itself can write.

Each case runs in a fresh Python (the cache patches Ansible's Jinja environment for the
whole process, as the strategy does in ansible-playbook).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible._internal._templating import _jinja_bits
from ansible_collections.metalslurm.cluster.plugins.plugin_utils import jinja_code

# Templates and conditionals as tasks write them: filters, tests, globals, loops, an
# embedded template, a backslash that YAML already unescaped, a template header that
# changes Jinja's delimiters.
TEMPLATES = [
    "{{ x + 1 }} {{ names | join(',') }}",
    "{% for n in names %}{{ n }}={{ loop.index }};{% endfor %}",
    "{{ names | map('upper') | list }} {{ range(x) | list }}",
    "{{ 'a\\1' | regex_replace('a', 'b') }}",
    "{{ \"{{ x }}\" }}",
    "#jinja2:variable_start_string:'[%', variable_end_string:'%]'\n[% x %] {{ x }}",
    "{{ {'k': names} | dict2items | map(attribute='key') | list }}",
]
CONDITIONALS = ["x > 2", "names | length == 2 and 'a' in names", "x is defined",
                "y | default(1) == 1"]
# What Jinja refuses, compiled by the expression path the cache copies from Jinja.
BROKEN_CONDITIONALS = ["x +", "x y", "x | nosuchfilter", "x is nosuchtest"]

RENDER = r"""
import json, os, sys
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.metalslurm.cluster.plugins.plugin_utils import jinja_code

cases = json.loads(sys.argv[1])
directory = jinja_code.enable()
counts = {"compiled": 0}
compile_ = jinja_code._compile


def counting(*args, **kwargs):
    counts["compiled"] += 1
    return compile_(*args, **kwargs)


jinja_code._compile = counting


def render():
    templar = Templar(loader=DataLoader(), variables={"x": 3, "names": ["a", "b"]})
    out = [str(templar.template(trust_as_template(t))) for t in cases["templates"]]
    out += [templar.evaluate_conditional(trust_as_template(c)) for c in cases["conditionals"]]
    return out


def in_child(write):
    # A worker: forked, renders, reports what it compiled through a pipe, exits.
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        jinja_code._memory.clear() if write == "fresh" else None
        before = counts["compiled"]
        result = render()
        os.write(write_end, json.dumps([result, counts["compiled"] - before]).encode())
        os._exit(0)
    os.close(write_end)
    data = b""
    while chunk := os.read(read_end, 65536):
        data += chunk
    os.waitpid(pid, 0)
    return json.loads(data)


first, compiled_first = in_child("fresh")
second, compiled_second = in_child("fresh")
mode = oct(os.stat(directory).st_mode & 0o777) if directory else None
print(json.dumps({"first": first, "second": second, "compiled_first": compiled_first,
                  "compiled_second": compiled_second, "directory": directory, "mode": mode,
                  "files": len(os.listdir(directory)) if directory else 0}))
"""


def run(switch: str, tmp_path: Path, templates=TEMPLATES, conditionals=CONDITIONALS) -> dict:
    env = dict(os.environ, METALSLURM_JINJA_CODE_CACHE=switch,
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"))
    proc = subprocess.run(
        [sys.executable, "-c", RENDER,
         json.dumps({"templates": templates, "conditionals": conditionals})],
        capture_output=True, text=True, env=env, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_the_results_are_ansibles_own(tmp_path):
    off = run("off", tmp_path)
    on = run("on", tmp_path)
    assert off["directory"] is None
    assert on["first"] == on["second"] == off["first"]
    assert on["first"][:4] == ["4 a,b", "a=1;b=2;", "['A', 'B'] [0, 1, 2]", "b\\1"]
    assert on["first"][5] == "3 {{ x }}"  # the header's delimiters; the braces are text


def test_a_worker_loads_what_another_compiled(tmp_path):
    on = run("on", tmp_path)
    # The first worker compiled every template and conditional; the second, forked with an
    # empty memory, found them all in the run's directory and compiled nothing.
    assert on["compiled_first"] >= len(TEMPLATES) + len(CONDITIONALS)
    assert on["compiled_second"] == 0
    assert on["files"] == on["compiled_first"]
    off = run("off", tmp_path)
    assert off["compiled_first"] == off["compiled_second"] == 0  # not patched: not counted


def test_the_directory_is_the_runs_own_and_private(tmp_path):
    on = run("on", tmp_path)
    directory = Path(on["directory"])
    assert directory.name == "jinja-code"
    assert (tmp_path / "ansible-tmp") in directory.parents
    assert on["mode"] == "0o700"


def stays_off(tmp_path: Path, setup: str) -> bool:
    """Whether enable(), after setup (Python run first), leaves Ansible's compile in
    place and says so (returns None)."""
    probe = setup + r"""
from ansible_collections.metalslurm.cluster.plugins.plugin_utils import jinja_code
from ansible._internal._templating import _jinja_bits
print(jinja_code.enable(), _jinja_bits.AnsibleEnvironment.compile is not jinja_code.compile_cached)
"""
    env = dict(os.environ, ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"))
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=env, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.split() == ["None", "True"]


def test_a_directory_others_can_write_is_not_used(tmp_path):
    # A run whose local temporary directory holds a jinja-code directory open to others
    # (not one this process made) compiles as Ansible does.
    assert stays_off(tmp_path, r"""
import os
from ansible import constants as C
os.makedirs(os.path.join(C.DEFAULT_LOCAL_TMP, "jinja-code"), mode=0o777)
os.chmod(os.path.join(C.DEFAULT_LOCAL_TMP, "jinja-code"), 0o777)
""")


RENDER_ONE = r"""
import os, shutil, sys
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.metalslurm.cluster.plugins.plugin_utils import jinja_code
directory = jinja_code.enable()
if sys.argv[3] == "gone" and directory:
    shutil.rmtree(directory)  # every write fails from here on
templar = Templar(loader=DataLoader(), variables={"x": 1})
for _ in range(2):  # compiled (and stored, where it can be), then loaded
    try:
        if sys.argv[1] == "template":
            print(repr(templar.template(trust_as_template(sys.argv[2]))))
        else:
            print(repr(templar.evaluate_conditional(trust_as_template(sys.argv[2]))))
    except Exception as error:
        print(type(error).__name__, error)
"""


def render_one(tmp_path: Path, switch: str, kind: str, text: str, after: str = "") -> str:
    env = dict(os.environ, METALSLURM_JINJA_CODE_CACHE=switch,
               ANSIBLE_LOCAL_TEMP=str(tmp_path / f"{switch}{after}"))
    proc = subprocess.run([sys.executable, "-c", RENDER_ONE, kind, text, after],
                          capture_output=True, text=True, env=env, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.parametrize(("kind", "broken"), [
    *(("template", text) for text in ("{{ x + }}", "{% for %}", "{{ x | nosuchfilter }}")),
    *(("conditional", text) for text in BROKEN_CONDITIONALS)])
def test_an_error_reads_the_same(tmp_path, kind, broken):
    off = render_one(tmp_path, "off", kind, broken)
    on = render_one(tmp_path, "on", kind, broken)
    assert on == off
    first, second = off.splitlines()
    assert first == second
    assert "Error" in first, first


@pytest.mark.parametrize(("kind", "text", "expected"), [
    ("template", "{{ x + 41 }}", "42"), ("conditional", "x == 1 and true", "True")])
def test_a_cache_that_cannot_be_written_changes_nothing(tmp_path, kind, text, expected):
    # The run's directory removed under it (as a full disk would fail each write): the
    # templates are compiled as Ansible does, nothing fails.
    out = render_one(tmp_path, "on", kind, text, after="gone")
    assert out.split() == [expected, expected]


def test_the_key_holds_what_jinja_compiles_with():
    # Computed in this process: key() patches nothing.
    env = _jinja_bits.AnsibleEnvironment()
    plain = jinja_code.key(env, "template", "{{ x }}")
    assert jinja_code.key(env, "template", "{{ x }}") == plain
    assert jinja_code.key(env, "template", "{{ y }}") != plain
    assert jinja_code.key(env, "expression", "{{ x }}") != plain
    called = jinja_code.key(env, "template", "{{ x }}", (None, None, False))
    for extra in (("name.j2", None, False), (None, "/roles/r/templates/name.j2", False),
                  (None, None, True)):
        assert jinja_code.key(env, "template", "{{ x }}", extra) != called
    allowed = _jinja_bits._TemplateConfig.allow_embedded_templates
    try:
        _jinja_bits._TemplateConfig.allow_embedded_templates = not allowed
        assert jinja_code.key(env, "template", "{{ x }}") != plain
    finally:
        _jinja_bits._TemplateConfig.allow_embedded_templates = allowed
    with _jinja_bits._TemplateCompileContext(escape_backslashes=True):
        assert jinja_code.key(env, "template", "{{ x }}") != plain
    other = env.overlay(variable_start_string="[%", variable_end_string="%]")
    assert jinja_code.key(other, "template", "{{ x }}") != plain


def test_a_jinja_it_was_not_written_for_keeps_ansibles_own(tmp_path):
    assert stays_off(tmp_path, "import jinja2\njinja2.__version__ = '3.2.0'\n")


def test_the_private_directory_turns_it_on(tmp_path):
    # The same probe with nothing in the way: the cache is on (so the two above can fail).
    assert not stays_off(tmp_path, "")
