#!/usr/bin/python
"""Ansible module: converge Slurm accounting (cluster, QOS, accounts, users) with sacctmgr.

The parsing, validation and planning live in the role's module_utils/slurm_accounting_plan.py;
this file runs sacctmgr and squeue, applies the plan and reports."""

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_accounting
short_description: Converge the cluster, QOS, accounts and users in slurmdbd with sacctmgr
description:
  - One call converges the whole desired state. It reads the current state with
    C(sacctmgr --noheader --parsable2 show cluster/qos/account/assoc/user format=...),
    computes the difference, and applies it with C(sacctmgr --immediate add/modify/delete).
    A second run with the same arguments reports C(changed=false) and runs no sacctmgr write.
  - Values are compared in normalised form, because sacctmgr prints them differently from how
    they are written (TRES in TRES-id order with memory in units, C(MaxWall=2880) printed as
    C(2-00:00:00), C(GraceTime) in seconds printed as C(00:05:00), flag and QOS lists in any
    order and case, account descriptions lower-cased).
  - Every argument is validated before sacctmgr is called for a write. A QOS referenced by an
    account (C(qos), C(default_qos)) or by another QOS (C(Preempt)) must be defined in C(qos) or
    already exist in the database (and not be about to be pruned); otherwise the module fails
    and applies nothing.
  - "Which objects are managed (the removal policy). An account is managed when its
    Organization is C(metalslurm); the module sets that on every account it creates or is given.
    A QOS is managed when its Description is C(metalslurm) or starts with C(metalslurm:); the
    module writes descriptions as C(metalslurm: <description>). The mark lives in slurmdbd
    itself, so it survives a lost inventory and needs no list of previously managed names (a
    parameter listing them would have to be kept by hand and is wrong the moment someone
    forgets). A user association is managed when its account is managed. Objects named in the
    arguments are always managed (an existing hand-made account or QOS of the same name is
    adopted and marked)."
  - "With C(prune=true), a managed QOS or account that is no longer in the arguments is
    deleted, and so is a user's association with a managed account that no longer lists the
    user (a user whose last association goes is deleted). Hand-made (unmarked) accounts and QOS
    are never modified or deleted, and neither are their user associations. The C(root) account,
    the C(root) user and the C(normal) QOS are never deleted. Partition-level associations are
    not managed."
  - "A removal that would hit active work is refused: if a pending, running or suspended job
    (from C(squeue)) uses an account, user association or QOS that is about to be deleted, the
    module fails before running any sacctmgr write, naming the jobs. The operator lets them
    finish or cancels them (C(scancel --account=NAME)), or sets C(prune=false), and runs again.
    Failing early, instead of skipping, keeps a run all-or-nothing and never reports a state as
    converged when it is not; slurmdbd itself would refuse the deletion half-way through."
  - "Fields that are left out are not managed: an account without C(qos) keeps whatever QOS it
    has (it inherits its parent's), an account without C(default_qos) keeps its default. QOS
    limits are managed as a whole: a limit removed from C(limits) is reset to Slurm's default
    (C(-1), no limit)."
options:
  cluster: {type: str, required: true, description: Slurm ClusterName; registered if missing.}
  qos:
    type: list
    elements: dict
    default: []
    description:
      - "QOS: C(name), C(description), C(priority) (int, default 0), C(limits) (a dict of sacctmgr
        QOS fields such as C(GrpTRESMins: gres/gpu=43200), C(MaxTRESPerUser: cpu=16),
        C(MaxWall: 2-00:00:00), C(Flags: DenyOnLimit,NoDecay), C(Preempt: scavenger),
        C(PreemptMode: requeue)); C(flags), C(preempt) and C(preempt_mode) may be given as keys
        of their own."
  accounts:
    type: list
    elements: dict
    default: []
    description:
      - "Accounts: C(name), C(description), C(fairshare) (int or C(parent), default 1), C(qos)
        (list), C(default_qos), C(parent) (default C(root)), C(users) (list). A user's default
        account is the first account that lists the user."
  prune:
    type: bool
    default: false
    description: Delete managed objects missing from the arguments (see above).
  sacctmgr: {type: path, default: sacctmgr, description: The sacctmgr executable.}
  squeue:
    type: path
    default: squeue
    description: The squeue executable, asked for active jobs before any deletion.
"""

EXAMPLES = r"""
- name: Converge accounts, users and QOS
  slurm_accounting:
    cluster: metalslurm
    prune: true
    qos:
      - name: team-gpu
        description: 720 GPU-hours a month
        priority: 10
        limits: {GrpTRESMins: gres/gpu=43200, MaxTRESPerUser: cpu=16}
    accounts:
      - {name: team-a, fairshare: 10, qos: [normal, team-gpu], default_qos: team-gpu,
         users: [alice]}
      - {name: team-b, users: [bob, alice]}
"""

RETURN = r"""
changed:
  description: Whether sacctmgr changed (in check mode, would change) anything.
  returned: always
  type: bool
commands:
  description: The sacctmgr write commands run (in check mode, that would run), in order.
  returned: always
  type: list
actions:
  description: One dict per change, C({action, object, name, changes}), in the order applied.
  returned: always
  type: list
diff:
  description: C(before) and C(after) of the managed objects (shown with --diff).
  returned: always
  type: dict
unmanaged:
  description: Accounts and QOS left alone because they are not marked as managed.
  returned: always
  type: dict
blocked:
  description: With a failure, the removals active jobs block, one sentence each.
  returned: when prune is blocked
  type: list
"""

import shlex
from typing import Any

from ansible.module_utils.basic import AnsibleModule

try:  # as Ansible runs it: the role's module_utils directory is shipped with the module
    from ansible.module_utils import slurm_accounting_plan as planner
except ImportError:  # run straight from the repository by the unit tests, which put the
    # role's module_utils directory on PYTHONPATH
    import slurm_accounting_plan as planner

ARGUMENT_SPEC: dict[str, Any] = {
    "cluster": {"type": "str", "required": True},
    "qos": {"type": "list", "elements": "dict", "default": []},
    "accounts": {"type": "list", "elements": "dict", "default": []},
    "prune": {"type": "bool", "default": False},
    "sacctmgr": {"type": "path", "default": "sacctmgr"},
    "squeue": {"type": "path", "default": "squeue"},
}


def show(module: AnsibleModule, sacctmgr: str, what: list[str]) -> str:
    """The output of ``sacctmgr --noheader --parsable2 show *what``; fails the module on error."""
    args = [sacctmgr, "--noheader", "--parsable2", "show", *what]
    rc, out, err = module.run_command(args, environ_update={"LC_ALL": "C"})
    if rc != 0:
        module.fail_json(msg=f"{shlex.join(args)} failed (rc {rc}): {(err or out).strip()}",
                         changed=False, commands=[])
    return out


def refuse_if_jobs_block(module: AnsibleModule, plan: planner.Plan,
                         result: dict[str, Any]) -> None:
    """Fail, having written nothing, if squeue cannot answer or active jobs use a removal."""
    args = [module.params["squeue"], *planner.SQUEUE_ARGS]
    try:
        rc, out, err = module.run_command(args, environ_update={"LC_ALL": "C"})
    except OSError as exc:  # pragma: no cover - run_command normally reports this as rc
        rc, out, err = 1, "", str(exc)
    if rc != 0:
        module.fail_json(msg=planner.jobs_unknown_message(plan.removals, shlex.join(args),
                                                          err or out),
                         **{**result, "changed": False})
    blocked = planner.blocked_removals(plan.removals, out)
    if blocked:
        module.fail_json(msg=planner.refusal_message(blocked), blocked=blocked,
                         **{**result, "changed": False})


def apply_plan(module: AnsibleModule, plan: planner.Plan, sacctmgr: str,
               result: dict[str, Any]) -> None:
    """Run the writes in order; on a real failure, report which ones were applied before it."""
    applied: list[str] = []
    for action, command in zip(plan.actions, result["commands"], strict=True):
        args = [sacctmgr, "--immediate", *action.args]
        rc, out, err = module.run_command(args, environ_update={"LC_ALL": "C"})
        text = f"{out}\n{err}"
        if rc != 0 and not planner.is_noop_write(text):
            module.fail_json(msg=f"{command} failed (rc {rc}): {text.strip()}; "
                             f"{len(applied)} earlier command(s) were applied",
                             **{**result, "commands": applied, "changed": bool(applied)})
        applied.append(command)


def main() -> None:
    """Read the state, plan, refuse a removal that active jobs block, apply, report."""
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    cluster = str(p["cluster"]).lower()
    sacctmgr = module.get_bin_path(p["sacctmgr"], required=True) if "/" not in p["sacctmgr"] \
        else p["sacctmgr"]
    try:
        desired = planner.parse_desired(p["qos"] or [], p["accounts"] or [])
        current = planner.read_current(lambda what: show(module, sacctmgr, what))
        plan = planner.build_plan(desired, current, cluster, p["prune"])
    except planner.InputError as exc:
        module.fail_json(msg=f"nothing applied: {exc}", changed=False, commands=[])

    result: dict[str, Any] = {
        "changed": bool(plan.actions), "commands": plan.commands(p["sacctmgr"]),
        "actions": [a.summary() for a in plan.actions],
        "diff": {"before": plan.before, "after": plan.after}, "unmanaged": plan.unmanaged,
    }
    if plan.removals:
        refuse_if_jobs_block(module, plan, result)
    if not module.check_mode:
        apply_plan(module, plan, sacctmgr, result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
