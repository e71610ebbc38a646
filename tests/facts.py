"""Facts for the tests that render roles' templates with ansible-playbook and no gathering."""

from __future__ import annotations


def set_facts_task(keys: list[str] | dict) -> dict:
    """A task that puts each host's ``test_node_facts`` (an inventory variable) into
    ``ansible_facts``: ansible.cfg does not inject facts as top-level variables, so a
    variable named like a fact is not one, and a cacheable set_fact is what fills
    ``ansible_facts``. Hosts without ``test_node_facts`` get none."""
    return {"name": "the host's facts", "when": "test_node_facts is defined",
            "ansible.builtin.set_fact": {
                **{key: f"{{{{ test_node_facts.{key} }}}}" for key in keys}, "cacheable": True}}
