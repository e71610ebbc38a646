"""``metalslurm.cluster.template``: Ansible's template lookup without its copy of every variable.

``ansible.builtin.template`` (the lookup) deep-copies all the host's variables for each file
it renders, to add its own few (``template_path`` and the like) without touching the
caller's: on a node with its package facts that copy was about a third of what the
monitoring roles cost a converged configure (measured: the monitoring role 0.8-1.0 s with
it, 0.5-0.6 s without). This lookup is that plugin with a shallow copy: its added
variables still go into a copy, never into the caller's. The difference: a template that
changes a variable's value in place (calls a list's ``append()``, say) would change the
caller's; the project's templates never do. Options and results are the builtin's.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.lookup.template import LookupModule as BuiltinTemplateLookup

DOCUMENTATION = r"""
    name: template
    author: metalslurm
    short_description: Ansible's template lookup, without a deep copy of every variable
    description:
      - Renders each file like M(ansible.builtin.template) and the C(ansible.builtin.template)
        lookup, from the role's C(templates) directory, with the same options and results.
      - The host's variables are copied shallowly, not deeply, for each file.
    options:
      _terms:
        description: The templates to render.
      variable_start_string:
        description: The string marking the beginning of a print statement.
        default: '{{'
        type: str
      variable_end_string:
        description: The string marking the end of a print statement.
        default: '}}'
        type: str
      template_vars:
        description: A dictionary, the keys become additional variables available for templating.
        default: {}
        type: dict
      comment_start_string:
        description: The string marking the beginning of a comment statement.
        type: str
        default: '{#'
      comment_end_string:
        description: The string marking the end of a comment statement.
        type: str
        default: '#}'
      trim_blocks:
        description: Whether the first newline after a block is removed.
        type: bool
        default: true
"""

EXAMPLES = r"""
- name: Render a role's template into a variable
  ansible.builtin.set_fact:
    content: "{{ lookup('metalslurm.cluster.template', 'etc/prometheus/prometheus.yml.j2') }}"
"""

RETURN = r"""
_raw:
  description: The rendered contents of each file.
  type: list
  elements: str
"""


class _ShallowlyCopied(dict):  # type: ignore[type-arg]
    """The variables, given to the builtin lookup: its ``deepcopy`` of them is a shallow one."""

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return dict(self)


class LookupModule(BuiltinTemplateLookup):
    def run(self, terms: list[Any], variables: Any = None, **kwargs: Any) -> list[Any]:
        return super().run(terms, _ShallowlyCopied(variables or {}), **kwargs)
