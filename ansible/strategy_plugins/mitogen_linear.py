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


class StrategyModule(ansible_mitogen.strategy.StrategyMixin, Base):  # type: ignore[misc,valid-type]
    def run(self, iterator, play_context, result=0):  # type: ignore[no-untyped-def]
        preload_jinja_plugins()
        preload_collection_dirs()
        jinja_code.enable()
        return super().run(iterator, play_context, result)
