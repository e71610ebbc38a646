"""The acceptance gate's pairwise plan (infra/accept/pairing.py) on simulated fleets: a test
passes when neither of its two nodes is bad."""

from __future__ import annotations

import itertools

import pytest

from infra.accept.pairing import BAD, GOOD, INCONCLUSIVE, Pairing, PairingError, isolate


def nodes(n: int) -> list[str]:
    return [f"gpu-{i:03d}" for i in range(1, n + 1)]


def sim(bad: set[str]):
    calls: list[tuple[str, str]] = []

    def passes(a: str, b: str) -> bool:
        calls.append((a, b))
        return a not in bad and b not in bad
    return passes, calls


def test_one_bad_node_among_eight_is_named_in_two_rounds_of_six_jobs():
    passes, calls = sim({"gpu-006"})
    plan = isolate(nodes(8), passes)
    assert plan.rounds[0] == {("gpu-001", "gpu-002"): True, ("gpu-003", "gpu-004"): True,
                              ("gpu-005", "gpu-006"): False, ("gpu-007", "gpu-008"): True}
    # Each member of the failing pair meets a different node proven good in round 1.
    assert plan.rounds[1] == {("gpu-005", "gpu-001"): True, ("gpu-006", "gpu-002"): False}
    assert (len(plan.rounds), plan.jobs, len(calls)) == (2, 6, 6)
    assert plan.verdicts() == {n: BAD if n == "gpu-006" else GOOD for n in nodes(8)}


@pytest.mark.parametrize("bad", [set(c) for c in itertools.combinations(nodes(6), 2)])
def test_any_two_bad_nodes_among_six_are_named_and_nobody_else(bad):
    passes, _ = sim(bad)
    plan = isolate(nodes(6), passes)
    assert plan.verdicts() == {n: BAD if n in bad else GOOD for n in nodes(6)}
    assert len(plan.rounds) <= 3


def test_every_first_round_pair_failing_re_pairs_suspects_that_have_not_met():
    # gpu-001 and gpu-003 bad: both pairs fail, nobody is known good yet.
    passes, _ = sim({"gpu-001", "gpu-003"})
    plan = isolate(nodes(4), passes)
    assert list(plan.rounds[1]) == [("gpu-001", "gpu-003"), ("gpu-002", "gpu-004")]
    assert plan.verdicts() == {"gpu-001": BAD, "gpu-002": GOOD, "gpu-003": BAD, "gpu-004": GOOD}


def test_two_bad_nodes_alone_stay_inconclusive_rather_than_guessed():
    passes, _ = sim({"gpu-001", "gpu-002"})
    plan = isolate(nodes(2), passes)
    assert (len(plan.rounds), plan.verdicts()) == (
        1, {"gpu-001": INCONCLUSIVE, "gpu-002": INCONCLUSIVE})


def test_a_reference_node_partners_the_odd_node_out_and_the_suspects():
    passes, _ = sim({"gpu-003"})
    plan = isolate(nodes(3), passes, reference=["gpu-100"])
    assert plan.rounds[0] == {("gpu-001", "gpu-002"): True, ("gpu-003", "gpu-100"): False}
    assert plan.verdicts() == {"gpu-001": GOOD, "gpu-002": GOOD, "gpu-003": BAD}


def test_a_round_holds_one_test_per_known_good_partner():
    # 3 bad among 6: the one good pair partners two suspects a round.
    bad = {"gpu-001", "gpu-003", "gpu-004"}
    passes, _ = sim(bad)
    plan = isolate(nodes(6), passes, max_rounds=6)
    assert [len(r) for r in plan.rounds] == [3, 2, 2]
    assert plan.verdicts() == {n: BAD if n in bad else GOOD for n in nodes(6)}


def test_rounds_run_out_leaving_the_unproven_inconclusive():
    passes, _ = sim({"gpu-001", "gpu-003", "gpu-004"})
    plan = isolate(nodes(6), passes, max_rounds=2)
    assert plan.verdicts() == {"gpu-001": BAD, "gpu-002": GOOD, "gpu-003": INCONCLUSIVE,
                               "gpu-004": INCONCLUSIVE, "gpu-005": GOOD, "gpu-006": GOOD}


def test_results_for_pairs_not_planned_are_refused():
    plan = Pairing(nodes(4))
    with pytest.raises(PairingError, match="did not plan"):
        plan.record({("gpu-001", "gpu-003"): True})


@pytest.mark.parametrize("given, reference", [([], []), (["gpu-001"], []),
                                              (["gpu-001", "gpu-001"], ["gpu-001"])])
def test_fewer_than_two_nodes_are_refused_naming_the_fix(given, reference):
    with pytest.raises(PairingError, match="needs two nodes.*name a reference node"):
        Pairing(given, reference)


def test_a_reference_added_after_every_pair_failed_partners_the_suspects():
    passes, _ = sim({"gpu-002"})
    plan = Pairing(nodes(2))
    plan.record({("gpu-001", "gpu-002"): False})
    assert (plan.good, plan.next_round()) == (set(), [])
    plan.add_reference("gpu-100")
    assert plan.next_round() == [("gpu-001", "gpu-100")]
    with pytest.raises(PairingError, match="under test"):
        plan.add_reference("gpu-001")
