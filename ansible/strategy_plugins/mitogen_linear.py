"""Ansible's linear strategy run over Mitogen (https://mitogen.networkgenomics.com/):
one Python interpreter per node for the whole run, modules sent once and cached, instead
of a new interpreter and a copied module per task. The converged re-run of the default
stack takes about two thirds of the time (docs/benchmarks.md).

ansible.cfg names this plugin; ``ANSIBLE_STRATEGY=linear`` goes back to Ansible's own.
The ``mitogen`` package is pinned with the project's Python dependencies.
"""

from __future__ import annotations

import ansible_mitogen.loaders
import ansible_mitogen.strategy

Base = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)


class StrategyModule(ansible_mitogen.strategy.StrategyMixin, Base):  # type: ignore[misc,valid-type]
    pass
