"""Which pairs of nodes the acceptance gate's two-node tests run on, round after round, until
each node under test is named good or bad.

A two-node test (NCCL all_reduce over the fabric, ib_write_bw between two HCAs) that fails
says that one of its two nodes is bad, not which. The plan follows Google's cluster health
scanner: a first round pairs every node under test with another; a pair that passes proves
both nodes good; each node of a failing pair is then paired again with a node known good, and
a node that fails beside a good partner is the bad one. A test that passes is taken as proof
(a slow or broken node makes the figure fall, it cannot raise it above the threshold).

Every node takes one test at a time (the jobs are exclusive), so a round holds at most one
test per known-good node; suspects beyond that wait for the next round. Where no node is
known good yet (every first-round pair failed), suspects are paired among themselves with
partners they have not been tested with, so that a healthy node meets another healthy one;
what is still unproven when the rounds run out is "inconclusive": such nodes stay drained,
saying so, rather than being taken for good or bad.

Pure Python: the gate (infra/accept/gate.py) runs it on Slurm jobs, bench/bench_accept_pairing.py
on a simulated fleet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

GOOD, BAD, INCONCLUSIVE = "good", "bad", "inconclusive"
DEFAULT_MAX_ROUNDS = 4


class PairingError(ValueError):
    """A pairing that cannot be planned (the message names what to change)."""


Pair = tuple[str, str]


@dataclass
class Pairing:
    """The rounds of pairwise tests for ``nodes``; ``reference`` nodes are known good
    already (passed before, not under test) and serve as partners only."""

    nodes: Sequence[str]
    reference: Sequence[str] = ()
    max_rounds: int = DEFAULT_MAX_ROUNDS
    rounds: list[dict[Pair, bool]] = field(default_factory=list)
    _good: set[str] = field(default_factory=set)
    _bad: set[str] = field(default_factory=set)
    _met: dict[str, set[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        nodes = list(dict.fromkeys(self.nodes))
        if len(nodes) + len(set(self.reference) - set(nodes)) < 2:
            raise PairingError(
                f"a pairwise test needs two nodes; got {len(nodes)} under test and no other "
                "known-good node: add nodes to the gate or name a reference node")
        if self.max_rounds < 2:
            raise PairingError(f"max_rounds must be at least 2, got {self.max_rounds}")
        self.nodes = nodes
        self._good = set(self.reference) - set(nodes)
        self._met = {node: set() for node in nodes}

    # ---- the plan ----------------------------------------------------------------------

    @property
    def pending(self) -> list[str]:
        """Nodes under test not yet named good or bad, in the given order."""
        return [n for n in self.nodes if n not in self._good and n not in self._bad]

    @property
    def good(self) -> set[str]:
        """The nodes proven good so far, references included."""
        return set(self._good)

    def add_reference(self, node: str) -> None:
        """A known-good node from outside the gate, to partner suspects from the next round
        (where no node under test has been proven good)."""
        if node in self._met:
            raise PairingError(f"{node} is under test, it cannot be a reference")
        self._good.add(node)

    @property
    def done(self) -> bool:
        return not self.pending or len(self.rounds) >= self.max_rounds or not self.next_round()

    def next_round(self) -> list[Pair]:
        """The pairs of the next round (empty when nothing more can be learnt)."""
        pending = self.pending
        if not pending:
            return []
        if not self.rounds:
            first = [(pending[i], pending[i + 1]) for i in range(0, len(pending) - 1, 2)]
            if len(pending) % 2 and self._good:  # the odd one out meets a reference node
                first.append((pending[-1], sorted(self._good)[0]))
            return first
        partners = sorted(self._good)
        if partners:
            return list(zip(pending, partners, strict=False))
        # Nobody is known good: suspects meet suspects they have not met yet.
        pairs: list[Pair] = []
        taken: set[str] = set()
        for node in pending:
            if node in taken:
                continue
            other = next((o for o in pending if o != node and o not in taken
                          and o not in self._met[node]), None)
            if other is not None:
                pairs.append((node, other))
                taken.update((node, other))
        return pairs

    def record(self, results: Mapping[Pair, bool]) -> None:
        """The outcome of one round: each pair's test passed (True) or failed."""
        planned = set(self.next_round())
        unknown = set(results) - planned
        if unknown:
            raise PairingError(f"results for pairs this round did not plan: {sorted(unknown)}")
        self.rounds.append(dict(results))
        for (a, b), passed in results.items():
            for node, partner in ((a, b), (b, a)):
                if node in self._met:
                    self._met[node].add(partner)
            if passed:
                self._good.update((a, b))
                self._bad.difference_update((a, b))
            else:
                for node, partner in ((a, b), (b, a)):
                    if partner in self._good and node not in self._good:
                        self._bad.add(node)

    def verdicts(self) -> dict[str, str]:
        """Each node under test: good, bad, or inconclusive (still unproven)."""
        return {n: GOOD if n in self._good else BAD if n in self._bad else INCONCLUSIVE
                for n in self.nodes}

    @property
    def jobs(self) -> int:
        return sum(len(r) for r in self.rounds)


def isolate(nodes: Sequence[str], passes: Callable[[str, str], bool],
            reference: Iterable[str] = (), max_rounds: int = DEFAULT_MAX_ROUNDS) -> Pairing:
    """Run the rounds with ``passes(a, b)`` as the test (the simulation's, or a gate's that
    runs one round's jobs at once via :meth:`Pairing.next_round`)."""
    plan = Pairing(nodes, tuple(reference), max_rounds)
    while len(plan.rounds) < plan.max_rounds:
        pairs = plan.next_round()
        if not pairs:
            break
        plan.record({pair: passes(*pair) for pair in pairs})
    return plan

