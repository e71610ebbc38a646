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
from pathlib import Path

import ansible.collections.list
import ansible_mitogen.loaders
import ansible_mitogen.strategy
from ansible._internal._templating._engine import TemplateEngine
from ansible.executor.task_executor import TaskExecutor
from ansible.executor.task_result import _WireTaskResult
from ansible.plugins import loader as plugin_loader
from ansible.plugins.loader import filter_loader, test_loader
from ansible_collections.metalslurm.cluster.plugins.plugin_utils import jinja_code

from ansible import constants as C

Base = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)


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


def skipped_here(task, task_vars, play_context, loader) -> dict | None:  # type: ignore[no-untyped-def]
    """The result a worker would send for ``task`` on its host when the task's ``when:`` is
    false (TaskExecutor._execute_internal), or None: the condition is true, or this cannot be
    sure to reach the worker's answer, so a worker decides."""
    if (not task.when or task.loop_with or task.loop is not None or task.delegate_to
            or task.run_once or task.action in _WORKER_ONLY):
        return None
    try:
        templar = TemplateEngine(loader=loader, variables=task_vars)
        variables = dict(task_vars)
        # The connection's variables, as the worker adds them before the condition.
        context = play_context.set_task_and_variable_override(task=task, variables=task_vars,
                                                              templar=templar)
        context.post_validate(templar=templar)
        context.update_vars(variables)
        false_condition: dict = {}
        if task._resolve_conditional(task.when, variables, result_context=false_condition):
            return None
        result = {"changed": False, "skipped": True,
                  "skip_reason": "Conditional result was False", **false_condition}
        task.update_result_no_log(TemplateEngine(loader=loader, variables=variables), result)
        return result
    except Exception:  # whatever fails here fails (or not) in the worker, with its own error
        return None


# Actions that the worker handles in its own way before or instead of a condition.
_WORKER_ONLY = frozenset({"ansible.builtin.meta", "meta"})
# Actions that run on the controller alone and reach no host: their task runs in
# ansible-playbook, by the same TaskExecutor a worker runs.
_CONTROLLER_ONLY = frozenset(f"{prefix}{name}" for prefix in ("", "ansible.builtin.",
                                                                "ansible.legacy.")
                             for name in ("set_fact", "assert", "debug", "fail",
                                          "validate_argument_spec", "include_tasks",
                                          "include_role"))


def runs_here(task) -> bool:  # type: ignore[no-untyped-def]
    """Whether ``task`` runs on the controller alone, with nothing that would block
    ansible-playbook (retries, a pause, a timeout's alarm, async, a debugger) or hand it to
    another host."""
    return (task.action in _CONTROLLER_ONLY and not task.loop_with and task.loop is None
            and not task.delegate_to and not task.run_once and not task.until
            and not task.async_val and not task.timeout and not task.debugger)


class StrategyModule(ansible_mitogen.strategy.StrategyMixin, Base):  # type: ignore[misc,valid-type]
    def run(self, iterator, play_context, result=0):  # type: ignore[no-untyped-def]
        preload_jinja_plugins()
        preload_collection_dirs()
        jinja_code.enable()
        return super().run(iterator, play_context, result)

    def _queue_task(self, host, task, task_vars, play_context):  # type: ignore[no-untyped-def]
        result = skipped_here(task, task_vars, play_context, self._loader)
        if result is None and not runs_here(task):
            return super()._queue_task(host, task, task_vars, play_context)
        # As StrategyBase._queue_task and a worker would: cached for the result's
        # conversion, the start callback, then the result on the results queue.
        self._queued_task_cache[(host.name, task._uuid)] = {
            "host": host, "task": task, "task_vars": task_vars, "play_context": play_context}
        self._tqm.send_callback("v2_runner_on_start", host, task)
        # A copy of the task, its parents shared (a copy of them would copy the play's
        # tasks), as the worker's copy: TaskExecutor squashes and validates it.
        done = task.copy(exclude_parent=True)
        done._parent = task._parent
        if result is None:
            result = TaskExecutor(host, done, dict(task_vars), play_context, self._loader,
                                  plugin_loader.get_plugin_loader_namespace(), self._final_q,
                                  self._variable_manager).run()
        done.squash()
        self._final_q.put(_WireTaskResult(host_name=host.name, task_uuid=task._uuid,
                                          return_data=result, task_fields=done.dump_attrs()))
        self._pending_results += 1
        return None
