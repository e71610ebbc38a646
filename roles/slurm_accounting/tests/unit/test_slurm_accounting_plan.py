"""The slurm_accounting planner (roles/slurm_accounting/module_utils/slurm_accounting_plan.py),
tested directly: recorded ``sacctmgr --noheader --parsable2 show`` lines in, the exact sacctmgr
commands out. No subprocess; test_slurm_accounting_module.py runs the whole module.

The recorded lines are what the fake in tests/fixtures/slurm/sacctmgr-fake printed (its README
says which Slurm source each shape follows): EMPTY for a fresh slurmdbd, CONVERGED after the
module converged QOS_ARGS/ACCOUNT_ARGS, HAND_MADE after an operator then ran
``sacctmgr add account lab-x Cluster=metalslurm Description='made by hand'``,
``sacctmgr add user dave Account=lab-x Cluster=metalslurm`` and ``sacctmgr add qos handmade``.
"""


import pytest
import slurm_accounting_plan as planner
import yaml

from tests.paths import FIXTURES

CLUSTER = "metalslurm"
ARGS = yaml.safe_load((FIXTURES / "slurm/accounting-args.yml")
                     .read_text())
QOS_ARGS = ARGS["qos"]
ACCOUNT_ARGS = ARGS["accounts"]

# The `show` arguments the lines were recorded with; a planner asking for other fields needs
# the lines recorded again.
RECORDED_WITH = {
    "cluster": ["cluster", "format=Cluster"],
    "qos": ["qos", "format=Name,Description,Priority,Flags,GraceTime,GrpJobs,GrpJobsAccrue,"
            "GrpSubmitJobs,GrpTRES,GrpTRESMins,GrpTRESRunMins,GrpWall,MaxJobsAccruePerUser,"
            "MaxJobsPerAccount,MaxJobsPerUser,MaxSubmitJobsPerAccount,MaxSubmitJobsPerUser,"
            "MaxTRESMinsPerJob,MaxTRESPerAccount,MaxTRESPerJob,MaxTRESPerNode,MaxTRESPerUser,"
            "MaxWall,MinPrioThreshold,MinTRESPerJob,Preempt,PreemptExemptTime,PreemptMode,"
            "UsageFactor,UsageThreshold"],
    "account": ["account", "format=Account,Description,Organization"],
    "assoc": ["assoc", "format=Cluster,Account,User,Partition,Share,QOS,DefaultQOS,ParentName"],
    "user": ["user", "format=User,DefaultAccount"],
}
NORMAL_QOS = "normal|Normal QOS default|0||00:00:00|||||||||||||||||||||||cluster|1.000000|"
EMPTY = {
    "cluster": [],
    "qos": [NORMAL_QOS],
    "account": ["root|default root account|root"],
    "assoc": [],
    "user": ["root|root"],
}
CONVERGED = {
    "cluster": ["metalslurm"],
    "qos": [
        NORMAL_QOS,
        "team-gpu|metalslurm: 720 GPU-hours a month|10|DenyOnLimit,NoDecay|00:00:00|||||"
        "gres/gpu=43200||||||||||||cpu=16|2-00:00:00|||||cluster|1.000000|",
        "scavenger|metalslurm|0||00:00:00|||||||||||||||||||||||REQUEUE|1.000000|",
        "urgent|metalslurm|100||00:05:00|||||||||||||||mem=512G,gres/gpu=16||||||scavenger||"
        "cluster|1.000000|",
    ],
    "account": ["root|default root account|root", "team-a|team a|metalslurm",
                "team-b|team-b|metalslurm"],
    "assoc": [
        "metalslurm|root|||1|normal||",
        "metalslurm|root|root||1|normal||",
        "metalslurm|team-a|||10|normal,team-gpu|team-gpu|root",
        "metalslurm|team-b|||1|normal,scavenger,urgent||root",
        "metalslurm|team-a|alice||1|normal,team-gpu|team-gpu|",
        "metalslurm|team-b|alice||1|normal,scavenger,urgent||",
        "metalslurm|team-a|carol||1|normal,team-gpu|team-gpu|",
        "metalslurm|team-b|bob||1|normal,scavenger,urgent||",
    ],
    "user": ["alice|team-a", "bob|team-b", "carol|team-a", "root|root"],
}
HAND_MADE = {  # lines CONVERGED gains from the operator's commands
    "cluster": [],
    "qos": ["handmade|handmade|0||00:00:00|||||||||||||||||||||||cluster|1.000000|"],
    "account": ["lab-x|made by hand|root"],
    "assoc": ["metalslurm|lab-x|||1|normal||root", "metalslurm|lab-x|dave||1|normal||"],
    "user": ["dave|lab-x"],
}


def read(*recordings: dict[str, list[str]]) -> planner.Current:
    """The Current state read from the recorded lines (several recordings are concatenated)."""
    def show(what: list[str]) -> str:
        assert what == RECORDED_WITH[what[0]], f"lines were recorded with {RECORDED_WITH[what[0]]}"
        return "\n".join(line for rec in recordings for line in rec[what[0]]) + "\n"
    return planner.read_current(show)


def plan_for(current: planner.Current, qos=QOS_ARGS, accounts=ACCOUNT_ARGS,
             prune: bool = True) -> planner.Plan:
    return planner.build_plan(planner.parse_desired(qos, accounts), current, CLUSTER, prune)


def commands(plan: planner.Plan) -> list[str]:
    return plan.commands("sacctmgr")


# ---------------------------------------------------------------- parsing

def test_parse_rows_pads_short_lines_cuts_long_ones_and_skips_blank_ones():
    assert planner.parse_rows("a|b\n\n  \na|b|c|d\nx\n", 3) == [
        ["a", "b", ""], ["a", "b", "c"], ["x", "", ""]]


def test_recorded_clusters_accounts_and_default_accounts_are_parsed():
    current = read(CONVERGED, HAND_MADE)
    assert (current.clusters, current.accounts, current.default_accounts) == (
        {"metalslurm"},
        {"root": {"description": "default root account", "organization": "root"},
         "team-a": {"description": "team a", "organization": "metalslurm"},
         "team-b": {"description": "team-b", "organization": "metalslurm"},
         "lab-x": {"description": "made by hand", "organization": "root"}},
        {"alice": "team-a", "bob": "team-b", "carol": "team-a", "dave": "lab-x",
         "root": "root"})


def test_a_recorded_account_association_is_parsed():
    assert read(CONVERGED).account_assoc(CLUSTER, "team-a") == planner.Assoc(
        cluster="metalslurm", account="team-a", user="", partition="", share="10",
        qos=frozenset({"normal", "team-gpu"}), default_qos="team-gpu", parent="root")


def test_a_recorded_user_association_is_parsed():
    assert [a for a in read(CONVERGED).assocs if a.user == "bob"] == [planner.Assoc(
        cluster="metalslurm", account="team-b", user="bob", partition="", share="1",
        qos=frozenset({"normal", "scavenger", "urgent"}), default_qos="", parent="")]


def test_a_user_s_accounts_and_the_users_on_a_cluster():
    current = read(CONVERGED, HAND_MADE)
    assert (current.user_accounts(CLUSTER, "alice"), current.users_on(CLUSTER)) == (
        ["team-a", "team-b"], {"root", "alice", "bob", "carol", "dave"})


@pytest.mark.parametrize(("name", "shown"), [
    ("normal", {"Description": "Normal QOS default"}),
    ("team-gpu", {"Description": "metalslurm: 720 GPU-hours a month", "Priority": "10",
                  "Flags": "denyonlimit,nodecay", "GrpTRESMins": "gres/gpu=43200",
                  "MaxTRESPerUser": "cpu=16", "MaxWall": "2-00:00:00"}),
    ("scavenger", {"Description": "metalslurm", "PreemptMode": "requeue"}),
    ("urgent", {"Description": "metalslurm", "Priority": "100", "GraceTime": "300",
                "MaxTRESPerJob": "gres/gpu=16,mem=524288", "Preempt": "scavenger"}),
])
def test_a_recorded_qos_row_is_parsed_into_its_non_default_fields(name, shown):
    raw = read(CONVERGED).qos[name]
    assert planner.display_qos(raw["Description"], planner.current_qos_values(raw)) == shown


@pytest.mark.parametrize(("kind", "given", "printed", "value"), [
    ("minutes", "2880", "2-00:00:00", 172800),
    ("seconds", 300, "00:05:00", 300),
    ("tres", "gres/gpu=16,mem=512G", "mem=512G,gres/gpu=16", (("gres/gpu", 16), ("mem", 524288))),
    ("flags", "DenyOnLimit,NoDecay", "nodecay,denyonlimit", frozenset({"denyonlimit", "nodecay"})),
    ("mode", "requeue", "REQUEUE", "requeue"),
    ("factor", None, "1.000000", 1.0),
    ("int", None, "", None),
])
def test_an_argument_and_sacctmgr_s_print_form_normalise_to_one_value(kind, given, printed,
                                                                        value):
    assert (planner.normalise(kind, given), planner.normalise(kind, printed)) == (value, value)


# ---------------------------------------------------------------- plans

def test_plan_for_an_empty_cluster_creates_everything_in_order():
    assert commands(plan_for(read(EMPTY))) == [
        "sacctmgr --immediate add cluster metalslurm",
        "sacctmgr --immediate add qos team-gpu 'Description=metalslurm: 720 GPU-hours a month' "
        "Priority=10 Flags=denyonlimit,nodecay GrpTRESMins=gres/gpu=43200 "
        "MaxTRESPerUser=cpu=16 MaxWall=2-00:00:00",
        "sacctmgr --immediate add qos scavenger Description=metalslurm PreemptMode=requeue",
        "sacctmgr --immediate add qos urgent Description=metalslurm Priority=100 GraceTime=300 "
        "MaxTRESPerJob=gres/gpu=16,mem=524288",
        "sacctmgr --immediate modify qos where name=urgent set Preempt=scavenger",
        "sacctmgr --immediate add account team-a Cluster=metalslurm Parent=root "
        "'Description=team a' Organization=metalslurm Fairshare=10 QOS=normal,team-gpu "
        "DefaultQOS=team-gpu",
        "sacctmgr --immediate add account team-b Cluster=metalslurm Parent=root "
        "Description=team-b Organization=metalslurm Fairshare=1 QOS=normal,scavenger,urgent",
        "sacctmgr --immediate add user alice Account=team-a Cluster=metalslurm "
        "DefaultAccount=team-a",
        "sacctmgr --immediate add user alice Account=team-b Cluster=metalslurm",
        "sacctmgr --immediate add user carol Account=team-a Cluster=metalslurm "
        "DefaultAccount=team-a",
        "sacctmgr --immediate add user bob Account=team-b Cluster=metalslurm "
        "DefaultAccount=team-b",
    ]


def test_plan_for_an_empty_cluster_removes_nothing():
    assert plan_for(read(EMPTY)).removals == []


def test_no_op_plan_when_current_equals_desired():
    plan = plan_for(read(CONVERGED))
    assert (plan.actions, plan.removals) == ([], [])


def test_no_op_plan_shows_the_same_state_before_and_after():
    plan = plan_for(read(CONVERGED))
    assert plan.before == plan.after


def test_the_diff_shows_managed_accounts_and_their_users_but_not_hand_made_ones():
    before = plan_for(read(CONVERGED, HAND_MADE)).before
    assert (before["accounts"], before["users"]) == (
        {"team-a": {"description": "team a", "organization": "metalslurm", "parent": "root",
                    "fairshare": "10", "qos": ["normal", "team-gpu"], "default_qos": "team-gpu"},
         "team-b": {"description": "team-b", "organization": "metalslurm", "parent": "root",
                    "fairshare": "1", "qos": ["normal", "scavenger", "urgent"],
                    "default_qos": ""}},
        {"alice": ["team-a", "team-b"], "bob": ["team-b"], "carol": ["team-a"]})


def test_a_changed_limit_is_one_modify_with_its_before_and_after():
    qos = [dict(QOS_ARGS[0], limits={**QOS_ARGS[0]["limits"], "GrpTRESMins": "gres/gpu=86400"}),
           *QOS_ARGS[1:]]
    plan = plan_for(read(CONVERGED), qos=qos)
    assert [(commands(plan)[0], plan.actions[0].changes)] == [(
        "sacctmgr --immediate modify qos where name=team-gpu set GrpTRESMins=gres/gpu=86400",
        {"GrpTRESMins": {"before": "gres/gpu=43200", "after": "gres/gpu=86400"}})]


def test_a_tres_limit_dropped_from_the_config_is_reset_to_minus_one():
    limits = {k: v for k, v in QOS_ARGS[0]["limits"].items() if k != "MaxTRESPerUser"}
    plan = plan_for(read(CONVERGED), qos=[dict(QOS_ARGS[0], limits=limits), *QOS_ARGS[1:]])
    assert commands(plan) == [
        "sacctmgr --immediate modify qos where name=team-gpu set MaxTRESPerUser=cpu=-1"]


def test_a_changed_fairshare_is_one_modify_of_the_account_association():
    accounts = [dict(ACCOUNT_ARGS[0], fairshare=20), ACCOUNT_ARGS[1]]
    assert commands(plan_for(read(CONVERGED), accounts=accounts)) == [
        "sacctmgr --immediate modify account where name=team-a cluster=metalslurm set "
        "Fairshare=20"]


def test_prune_deletes_only_managed_objects_users_first_then_accounts_then_qos():
    plan = plan_for(read(CONVERGED, HAND_MADE), qos=QOS_ARGS[:1], accounts=ACCOUNT_ARGS[:1])
    assert commands(plan) == [
        "sacctmgr --immediate delete user where name=alice account=team-b cluster=metalslurm",
        "sacctmgr --immediate delete user where name=bob",
        "sacctmgr --immediate delete account where name=team-b",
        "sacctmgr --immediate delete qos where name=scavenger",
        "sacctmgr --immediate delete qos where name=urgent",
    ]


def test_prune_reports_the_hand_made_objects_it_leaves_alone():
    plan = plan_for(read(CONVERGED, HAND_MADE), qos=QOS_ARGS[:1], accounts=ACCOUNT_ARGS[:1])
    assert plan.unmanaged == {"qos": ["handmade", "normal"], "accounts": ["lab-x"]}


def test_prune_of_an_empty_config_spares_root_normal_and_hand_made_objects():
    plan = plan_for(read(CONVERGED, HAND_MADE), qos=[], accounts=[])
    assert commands(plan) == [
        "sacctmgr --immediate delete user where name=alice",
        "sacctmgr --immediate delete user where name=bob",
        "sacctmgr --immediate delete user where name=carol",
        "sacctmgr --immediate delete account where name=team-a",
        "sacctmgr --immediate delete account where name=team-b",
        "sacctmgr --immediate delete qos where name=scavenger",
        "sacctmgr --immediate delete qos where name=team-gpu",
        "sacctmgr --immediate delete qos where name=urgent",
    ]


def test_prune_lists_every_deletion_for_the_active_job_check():
    plan = plan_for(read(CONVERGED), qos=QOS_ARGS[:1], accounts=ACCOUNT_ARGS[:1])
    assert plan.removals == [
        planner.Removal("user alice in account team-b", account="team-b", user="alice"),
        planner.Removal("user bob", user="bob"),
        planner.Removal("account team-b", account="team-b"),
        planner.Removal("QOS scavenger", qos="scavenger"),
        planner.Removal("QOS urgent", qos="urgent"),
    ]


def test_without_prune_nothing_is_deleted():
    plan = plan_for(read(CONVERGED, HAND_MADE), qos=QOS_ARGS[:1], accounts=ACCOUNT_ARGS[:1],
                    prune=False)
    assert (commands(plan), plan.removals) == ([], [])


def test_a_user_moved_between_accounts_gets_its_new_default_before_the_old_one_goes():
    accounts = [dict(ACCOUNT_ARGS[0], users=["carol"]), ACCOUNT_ARGS[1]]
    assert commands(plan_for(read(CONVERGED), accounts=accounts)) == [
        "sacctmgr --immediate modify user where name=alice cluster=metalslurm set "
        "DefaultAccount=team-b",
        "sacctmgr --immediate delete user where name=alice account=team-a cluster=metalslurm",
    ]


def test_a_new_user_first_account_is_its_default():
    accounts = [ACCOUNT_ARGS[0], dict(ACCOUNT_ARGS[1], users=["bob", "alice", "erin"])]
    assert commands(plan_for(read(CONVERGED), accounts=accounts)) == [
        "sacctmgr --immediate add user erin Account=team-b Cluster=metalslurm "
        "DefaultAccount=team-b"]


def test_a_hand_made_account_named_in_the_config_is_adopted():
    accounts = [*ACCOUNT_ARGS, {"name": "lab-x", "description": "made by hand",
                                "users": ["dave"]}]
    assert commands(plan_for(read(CONVERGED, HAND_MADE), accounts=accounts)) == [
        "sacctmgr --immediate modify account where name=lab-x set Organization=metalslurm"]


# ---------------------------------------------------------------- refusals

@pytest.mark.parametrize(("qos", "accounts", "message"), [
    (QOS_ARGS, [dict(ACCOUNT_ARGS[0], parent="team-b"), dict(ACCOUNT_ARGS[1], parent="team-a")],
     "accounts team-a -> team-b -> team-a form a parent cycle"),
    (QOS_ARGS, [dict(ACCOUNT_ARGS[0], parent="team-z")],
     "account team-a: parent account 'team-z' does not exist"),
    (QOS_ARGS[1:], [dict(ACCOUNT_ARGS[0], qos=["normal"], default_qos="normal"),
                    ACCOUNT_ARGS[1]],
     "QOS team-gpu is no longer configured, but is the default QOS of team-a, team-a/alice, "
     "team-a/carol; change that first, or set prune: false"),
])
def test_a_plan_slurmdbd_would_refuse_is_refused_before_any_write(qos, accounts, message):
    with pytest.raises(planner.InputError) as caught:
        plan_for(read(CONVERGED), qos=qos, accounts=accounts)
    assert str(caught.value) == message


def test_an_account_that_stays_under_a_pruned_one_is_refused():
    current = read(CONVERGED, {"cluster": [], "qos": [], "account": ["lab-y|lab y|root"],
                               "assoc": ["metalslurm|lab-y|||1|normal||team-b"], "user": []})
    with pytest.raises(planner.InputError) as caught:
        plan_for(current, accounts=ACCOUNT_ARGS[:1])
    assert str(caught.value) == ("account team-b is no longer configured, but account(s) lab-y "
                                 "still sit under it; move or remove them first, or set "
                                 "prune: false")


# squeue --noheader --all --format=%i|%u|%a|%q|%T, as slurmctld prints it.
SQUEUE = """\
41|bob|team-b|normal|RUNNING
42|bob|team-b|normal|PENDING
43|alice|team-a|urgent|SUSPENDED
44|carol|team-b|normal|COMPLETED
45|carol|team-a|team-gpu|RUNNING
"""


def test_active_jobs_are_parsed_and_finished_ones_skipped():
    assert [(j.id, j.state) for j in planner.parse_active_jobs(SQUEUE)] == [
        ("41", "RUNNING"), ("42", "PENDING"), ("43", "SUSPENDED"), ("45", "RUNNING")]


def test_removals_that_active_jobs_still_use_are_named_with_their_jobs():
    plan = plan_for(read(CONVERGED), qos=QOS_ARGS[:1], accounts=ACCOUNT_ARGS[:1])
    assert planner.blocked_removals(plan.removals, SQUEUE) == [
        "user bob: job(s) 41 (bob, running), 42 (bob, pending)",
        "account team-b: job(s) 41 (bob, running), 42 (bob, pending)",
        "QOS urgent: job(s) 43 (alice, suspended)",
    ]


def test_no_removal_is_blocked_when_no_job_uses_it():
    plan = plan_for(read(CONVERGED), qos=QOS_ARGS[:1], accounts=ACCOUNT_ARGS[:1])
    assert planner.blocked_removals(plan.removals, "45|carol|team-a|team-gpu|RUNNING\n") == []


def test_the_refusal_tells_the_operator_what_to_do():
    assert planner.refusal_message(["account team-b: job(s) 41 (bob, running)"]) == (
        "nothing applied: prune would remove objects that active jobs still use. Let the jobs "
        "finish or cancel them (scancel --account=NAME), or set prune: false, then run again. "
        "account team-b: job(s) 41 (bob, running)")


@pytest.mark.parametrize(("output", "noop"), [
    (" Nothing new added.\n", True),
    (" Nothing modified\n", True),
    (" Nothing deleted\n", True),
    (" Error with request: Job(s) active, cancel job(s) before remove\n", False),
])
def test_a_failed_write_that_changed_nothing_counts_as_applied(output, noop):
    assert planner.is_noop_write(output) is noop
