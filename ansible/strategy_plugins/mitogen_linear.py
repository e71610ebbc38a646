"""Ansible's linear strategy run over Mitogen (https://mitogen.networkgenomics.com/):
one Python interpreter per node for the whole run, modules sent once and cached, instead
of a new interpreter and a copied module per task. The converged re-run of the default
stack takes about two thirds of the time (docs/lab/benchmarks.md).

Each task runs in a worker process forked from ansible-playbook. A worker that templates
``metalslurm.cluster.*`` filters loads every filter file of the collection (Ansible looks a
filter up file by file), and the worker's imports are lost when it exits: measured with
py-spy on the default stack's converged re-run, that was two fifths of the workers' CPU
time. The strategy imports the Jinja2 filters and tests once, in ansible-playbook, before
the first worker forks, so every worker inherits them.

Likewise Mitogen, the first time a worker runs a module from a collection, lists every
installed collection's directory (``ansible.collections.list.list_collection_dirs``: the
``ansible`` package's hundred-odd collections, each one's metadata read), and a worker runs
one task: so every task of a collection module paid for that listing again, a fifth of the
workers' time in a converged run of the monitoring roles (py-spy). The strategy lists them
once, before the first worker forks, and the workers get that list.

And each worker compiled the Jinja of its task's ``when:`` and arguments, and of the
variables they read, again: ansible-core keeps no compiled template, and the worker exits
after one task (42 % of the workers' samples in a converged run, py-spy). The strategy turns
on the collection's cache of compiled Jinja (plugin_utils/jinja_code.py) before the first
worker forks: a worker loads what another compiled.

And every task on every host cost a worker forked from ansible-playbook (about 48 ms of
host CPU per host step on the 2-core machine, docs/lab/benchmarks.md), even where the worker
only found the task's ``when:`` false (about a third of a converged run's host steps) or ran
an action that reaches no host (set_fact, assert, debug, fail, a role's argument
specification, an include: another third). The strategy answers those in ansible-playbook: a
condition evaluated with the variables the worker would have (the connection's included)
that is false gets the result the worker would send; a controller-side action is run by the
same TaskExecutor a worker runs, on a copy of the task. Only where it is sure to reach the
worker's answer: no loop, no delegation, no ``run_once``, nothing that would block
ansible-playbook (retries, async, a timeout's alarm, a debugger), a condition that
templates. The result goes through Ansible's own result handling (callbacks, ``register``,
handlers, the recap); any other task goes to a worker as before. (This reads ansible-core's
private task-result and template classes: the project pins ansible-core, and
tests/unit/test_strategy_skip.py holds the outcome to Ansible's own linear strategy's.)

ansible.cfg names this plugin; ``ANSIBLE_STRATEGY=linear`` goes back to Ansible's own.
The ``mitogen`` package is pinned with the project's Python dependencies.
"""

from __future__ import annotations

import contextlib
import functools
import io
import re
import textwrap
from pathlib import Path

import ansible.collections.list
import ansible_mitogen.loaders
import ansible_mitogen.strategy
from ansible._internal import _display_utils, _task
from ansible._internal._templating._engine import TemplateEngine
from ansible.executor.task_executor import TaskExecutor
from ansible.executor.task_result import _WireTaskResult
from ansible.plugins import loader as plugin_loader
from ansible.plugins.loader import filter_loader, test_loader
from ansible.utils.display import Display
from ansible_collections.metalslurm.cluster.plugins.plugin_utils import jinja_code

from ansible import constants as C

Base = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)
display = Display()


def project_collections() -> list[str]:
    """``namespace.name`` of each collection under the configured collections paths (this
    project's, not the hundreds the ``ansible`` package installs in site-packages)."""
    found = []
    for root in C.COLLECTIONS_PATHS:
        base = Path(root) / "ansible_collections"
        if base.is_dir():
            found += [f"{ns.name}.{coll.name}" for ns in sorted(base.iterdir()) if ns.is_dir()
                      for coll in sorted(ns.iterdir()) if (coll / "plugins").is_dir()]
    return found


@functools.cache
def preload_jinja_plugins() -> None:
    """Import Ansible's own filters and tests and those of the project's collections
    (once per run: the strategy runs each play)."""
    for loader in (filter_loader, test_loader):
        for _plugin in loader.all():
            pass
        for collection in project_collections():
            # A name no file defines makes the loader import every file of the
            # collection's plugins/filter (or plugins/test) package, and find nothing. A
            # broken plugin file is left to fail the task that uses it, with its own error.
            with contextlib.suppress(Exception):
                loader.get(f"{collection}.metalslurm_preload_absent")


_list_collection_dirs = ansible.collections.list.list_collection_dirs


@functools.cache
def _installed_collection_dirs() -> tuple[bytes, ...]:
    return tuple(_list_collection_dirs())


def list_collection_dirs(*args, **kwargs):  # type: ignore[no-untyped-def]
    """Every installed collection's directory as Ansible lists it, listed once per run
    (the collections installed do not change during a run); a filtered call asks Ansible."""
    if args or kwargs:
        return _list_collection_dirs(*args, **kwargs)
    return iter(_installed_collection_dirs())


def preload_collection_dirs() -> None:
    ansible.collections.list.list_collection_dirs = list_collection_dirs
    _installed_collection_dirs()


def worker_variables(task, host, task_vars, play_context, loader) -> dict:  # type: ignore[no-untyped-def]
    """The variables a worker evaluates ``task``'s condition with: the task's, the search
    path (TaskExecutor._get_loop_items) and the connection's (_execute_internal: the host's
    address where the inventory names none)."""
    variables = dict(task_vars)
    search = task.get_search_path()
    if loader.get_basedir() not in search:
        search.append(loader.get_basedir())
    variables["ansible_search_path"] = search
    templar = TemplateEngine(loader=loader, variables=variables)
    context = play_context.set_task_and_variable_override(task=task, variables=variables,
                                                          templar=templar)
    context.post_validate(templar=templar)
    if not context.remote_addr:
        context.remote_addr = host.address
    context.update_vars(variables)
    return variables


def skipped_here(task, host, task_vars, play_context, loader) -> dict | None:  # type: ignore[no-untyped-def]
    """The result a worker would send for ``task`` on ``host`` when the task's ``when:`` is
    false (TaskExecutor._execute, _execute_internal), or None: the condition is true, or this
    cannot be sure to reach the worker's answer, so a worker decides."""
    if (not task.when or task.loop_with or task.loop is not None or task.delegate_to
            or task.run_once or task.action in _WORKER_ONLY or mentions_lookup(task.when)):
        return None
    try:
        with _display_utils.DeferredWarningContext(variables=task_vars) as warnings:
            variables = worker_variables(task, host, task_vars, play_context, loader)
            false_condition: dict = {}
            if task._resolve_conditional(task.when, variables, result_context=false_condition):
                return None  # the worker evaluates it again, and says its own warnings
            result = {"changed": False, "skipped": True,
                      "skip_reason": "Conditional result was False", **false_condition}
            task.update_result_no_log(TemplateEngine(loader=loader, variables=variables),
                                      result)
    except Exception:  # whatever fails here fails (or not) in the worker, with its own error
        return None
    if found := warnings.get_warnings():
        result["warnings"] = found
    if found := warnings.get_deprecation_warnings():
        result["deprecations"] = found
    return result


# Actions that the worker handles in its own way before or instead of a condition.
_WORKER_ONLY = frozenset({"ansible.builtin.meta", "meta"})
# Actions that run on the controller alone and reach no host: their task runs in
# ansible-playbook, by the same TaskExecutor a worker runs.
_CONTROLLER_ONLY = frozenset(f"{prefix}{name}" for prefix in ("", "ansible.builtin.",
                                                                "ansible.legacy.")
                             for name in ("set_fact", "assert", "debug", "fail",
                                          "validate_argument_spec", "include_tasks",
                                          "include_role"))
# A lookup may be slow (ansible-playbook would wait for it host after host, where workers
# run it side by side) or act on the world (a true condition is evaluated twice): a task
# whose condition, arguments or variables call one goes to a worker.
_LOOKUP = re.compile(r"\b(?:lookup|query|q)\s*\(")


def mentions_lookup(*values) -> bool:  # type: ignore[no-untyped-def]
    return any(_LOOKUP.search(str(value)) for value in values if value)


def runs_here(task) -> bool:  # type: ignore[no-untyped-def]
    """Whether ``task`` runs on the controller alone, with nothing that would block
    ansible-playbook (retries, a pause, a timeout's alarm, async, a debugger, a lookup) or
    hand it to another host."""
    return (task.action in _CONTROLLER_ONLY and not task.loop_with and task.loop is None
            and not task.delegate_to and not task.run_once and not task.until
            and not task.async_val and not task.timeout and not task.debugger
            and not mentions_lookup(task.args, task.when, task.vars))


def run_here(task, host, task_vars, play_context, loader, final_q,  # type: ignore[no-untyped-def]
             variable_manager, capture: bool = True) -> dict:
    """``task`` run on ``host`` by the TaskExecutor a worker runs, as the worker runs it:
    on a copy (TaskExecutor validates the task and its parents), in the task's context,
    with what a plugin prints kept off ansible-playbook's output (the worker warns). Without
    ``capture``, nothing is kept off: the capture is process-wide, and would also take what
    the results thread prints meanwhile (a loop's items)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with _task.TaskContext(task), \
            contextlib.redirect_stdout(stdout) if capture else contextlib.nullcontext(), \
            contextlib.redirect_stderr(stderr) if capture else contextlib.nullcontext():
        result = TaskExecutor(host, task, dict(task_vars), play_context, loader,
                              plugin_loader.get_plugin_loader_namespace(), final_q,
                              variable_manager).run()
    for name, stdio in (("stdout", stdout), ("stderr", stderr)):
        if data := stdio.getvalue():
            display.warning(f"[{host}/{task}] sent data directly to {name} instead of using "
                            f"Display:\n{textwrap.indent(data[:256], '    ')}\n",
                            formatted=True)
    return result


class AnsweredHere:
    """A strategy's tasks answered in ansible-playbook (``_answer_here``) instead of a
    worker, their results put on the results queue when the strategy waits for the task's
    results (or the next task comes): a host's facts then reach the others no sooner than a
    worker's would."""

    def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self._answered_here: list[_WireTaskResult] = []

    def _put_answered_here(self) -> None:
        for answer in self._answered_here:
            self._final_q.put(answer)  # type: ignore[attr-defined]
        self._answered_here.clear()

    def _wait_on_pending_results(self, iterator):  # type: ignore[no-untyped-def]
        self._put_answered_here()
        return super()._wait_on_pending_results(iterator)  # type: ignore[misc]

    def _answer_here(self, host, task, task_vars, play_context,  # type: ignore[no-untyped-def]
                     result: dict | None = None) -> None:
        """``task`` on ``host`` answered with ``result``, or (None) run here by the
        TaskExecutor a worker runs."""
        if self._answered_here and self._answered_here[0].task_uuid != task._uuid:
            self._put_answered_here()
        # As StrategyBase._queue_task and a worker would: cached for the result's
        # conversion, the start callback, then the result on the results queue.
        self._queued_task_cache[(host.name, task._uuid)] = {  # type: ignore[attr-defined]
            "host": host, "task": task, "task_vars": task_vars, "play_context": play_context}
        self._tqm.send_callback("v2_runner_on_start", host, task)  # type: ignore[attr-defined]
        # The worker's own copy of the task: its parents copied too (TaskExecutor validates
        # them), not their tasks (a copy of those would copy the play's).
        done = task.copy(exclude_tasks=True)
        if result is None:
            result = self._run_here(done, host, task_vars, play_context)
        done.squash()
        self._answered_here.append(_WireTaskResult(
            host_name=host.name, task_uuid=task._uuid, return_data=result,
            task_fields=done.dump_attrs()))
        self._pending_results += 1  # type: ignore[attr-defined]

    def _run_here(self, task, host, task_vars, play_context) -> dict:  # type: ignore[no-untyped-def]
        return run_here(task, host, task_vars, play_context, self._loader,  # type: ignore[attr-defined]
                        self._final_q, self._variable_manager)  # type: ignore[attr-defined]


class StrategyModule(AnsweredHere, ansible_mitogen.strategy.StrategyMixin, Base):  # type: ignore[misc,valid-type]
    def run(self, iterator, play_context, result=0):  # type: ignore[no-untyped-def]
        preload_jinja_plugins()
        preload_collection_dirs()
        jinja_code.enable()
        return super().run(iterator, play_context, result)

    def _queue_task(self, host, task, task_vars, play_context):  # type: ignore[no-untyped-def]
        # A templated throttle is left to Ansible's own conversion (and its error).
        result = skipped_here(task, host, task_vars, play_context, self._loader) \
            if isinstance(task.throttle, int) else None
        if result is None and not (isinstance(task.throttle, int) and runs_here(task)):
            if self._answered_here and self._answered_here[0].task_uuid != task._uuid:
                self._put_answered_here()
            return super()._queue_task(host, task, task_vars, play_context)
        self._answer_here(host, task, task_vars, play_context, result)
        return None
