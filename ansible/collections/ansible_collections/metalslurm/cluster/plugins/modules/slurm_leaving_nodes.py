#!/usr/bin/python
"""Ansible module: before slurm.conf drops a node, drain the nodes Slurm knows that the
inventory no longer has, wait for their jobs up to a bound, or fail naming the jobs.

Runs on the controller (Slurm's client commands), first in the configure, so that a refused
run has changed nothing, and once more (``recheck``) right before the controller role writes
a new slurm.conf. The logic is module_utils/slurm_leaving.py, shared with the local
provider's ``up``.
"""

from __future__ import annotations

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.metalslurm.cluster.plugins.module_utils.slurm_leaving import (
    DRAIN_POLL_S,
    DRAIN_WAIT_MAX_S,
    DRAIN_WAIT_S,
    LEAVING_MAX_SHARE,
    NOT_INSTALLED,
    LeavingError,
    Words,
    conf_node_names,
    drain_leaving,
)

DOCUMENTATION = r"""
module: slurm_leaving_nodes
short_description: Drain the Slurm nodes leaving the cluster, or refuse while jobs need them
description:
  - >-
    Asks Slurm (sinfo) which nodes it knows. Those not in O(nodes) are leaving: each is drained
    with the reason "metalslurm: leaving the cluster (no longer in its stack config or
    inventory)", so no new job starts there (a node already drained for another reason keeps
    that reason), and the module waits up to O(wait) seconds for the jobs that need them to
    end: those running there, and pending jobs that asked for one of them. Jobs left after that
    fail the module with one message naming each job, its user, state and nodes; the nodes stay
    drained. A node in O(nodes) that was drained for leaving is resumed.
  - >-
    When more than O(max_share) of the nodes Slurm knows would leave, the module fails before
    draining anything (a wrong or partial inventory is the likelier cause).
  - >-
    Without Slurm on the host (sinfo not installed) there is nothing to drain. Where slurmctld
    does not answer, the module fails if O(config) names a node O(nodes) lacks (it cannot tell
    whether jobs run there), and otherwise warns and goes on: the run that finds slurmctld down
    is the one that repairs it.
  - >-
    In check mode, and with O(recheck), nothing is drained, resumed or waited for; with O(wait)
    0 (always, with O(recheck)), jobs that need leaving nodes fail the module as a real run
    would.
options:
  nodes:
    description: The Slurm nodes the cluster keeps (every compute host of the inventory).
    type: list
    elements: str
    required: true
  wait:
    description: Seconds to wait for the jobs on leaving nodes before failing (at most a week).
    type: float
    default: 0
  poll:
    description: Seconds between two looks at the leaving nodes' jobs while waiting.
    type: float
    default: 5
  max_share:
    description: The largest share of Slurm's nodes one run may take out (above 0, at most 1).
    type: float
    default: 0.5
  recheck:
    description: A last look right before slurm.conf drops the nodes; drains and waits for nothing.
    type: bool
    default: false
  config:
    description:
      - The controller's slurm.conf. While slurmctld does not answer, the nodes it names are the
        ones that could be leaving; where it does not exist, the controller was never configured
        (a prepared image's first configure).
    type: path
"""

RETURN = r"""
leaving:
  description: The nodes Slurm knows that are leaving the cluster.
  type: list
  returned: always
drained:
  description: The leaving nodes drained by this run (not drained before).
  type: list
  returned: always
resumed:
  description: The nodes back in the inventory that were drained for leaving, resumed.
  type: list
  returned: always
"""

WORDS = Words(source="inventory", rerun="the configure",
              wait_hint="--drain-wait SECONDS (ansible-playbook: -e metalslurm_drain_wait=SECONDS)")


def main() -> None:
    module = AnsibleModule(
        argument_spec={"nodes": {"type": "list", "elements": "str", "required": True},
                       "wait": {"type": "float", "default": DRAIN_WAIT_S},
                       "poll": {"type": "float", "default": DRAIN_POLL_S},
                       "max_share": {"type": "float", "default": LEAVING_MAX_SHARE},
                       "recheck": {"type": "bool", "default": False},
                       "config": {"type": "path"}},
        supports_check_mode=True)
    params = module.params
    wait, poll, share = params["wait"], params["poll"], params["max_share"]
    if not 0 <= wait <= DRAIN_WAIT_MAX_S:  # NaN fails both
        module.fail_json(msg=f"wait={wait!r}: give the seconds to wait for the jobs on leaving "
                             f"nodes, from 0 to {DRAIN_WAIT_MAX_S:.0f} (a week)")
    if not 0 < poll <= 3600:
        module.fail_json(msg=f"poll={poll!r}: give the seconds between two looks, above 0 and "
                             "at most 3600")
    if not 0 < share <= 1:
        module.fail_json(msg=f"max_share={share!r}: give the largest share of the nodes one "
                             "run may take out of the cluster, above 0 and at most 1")

    def run(argv: list) -> tuple:
        try:
            return module.run_command(argv, handle_exceptions=False)
        except FileNotFoundError as err:  # no Slurm here yet: as a shell says it
            return NOT_INSTALLED, "", str(err)

    config = params["config"]

    def conf_nodes() -> list:
        try:
            with open(config, encoding="utf-8", errors="replace") as handle:
                return conf_node_names(run, handle.read())
        except (OSError, TypeError):  # no slurm.conf (or none named): never configured
            return []

    try:
        found = drain_leaving(run, params["nodes"], 0 if params["recheck"] else wait,
                              fallback=conf_nodes, max_share=share, poll_s=poll, words=WORDS,
                              dry_run=module.check_mode or params["recheck"], log=module.log)
    except LeavingError as err:
        module.fail_json(msg=str(err))
    if found.error and config and os.path.exists(config):
        module.warn(f"slurmctld did not answer ({found.error}); slurm.conf names no node that "
                    "leaves, so the run goes on")
    module.exit_json(changed=found.changed and not params["recheck"], leaving=found.nodes,
                     drained=found.drained, resumed=found.resumed)


if __name__ == "__main__":
    main()
