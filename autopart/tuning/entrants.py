"""Who races: the candidate plans and peers a tune compiles for its race, and who is left out.

Every runner in the race holds a compiled model for all its rounds, so the race enters
only those that could still be kept:

- a candidate too split to compile and predicted slow (:func:`too_split_to_race`);
- a candidate measured whole beyond reach: priced wholly from partitions timed whole, at
  more than :attr:`~autopart.tuning.settings.VerifySettings.race_within` times the
  quickest candidate that could be kept (fitting memory and, as predicted and as the
  screen measured, the tolerance; :func:`~autopart.tuning.partitions.far_behind`); never
  the search's pick, nor the plan a racing peer stands for (a peer left out, below, no
  longer holds its plan in the race: it is as far behind);
- a one-target candidate whose plan, or its whole device's, the screen measured beyond
  the tolerance (a unit computes what its device computes);
- a peer the screen timed whole beyond that reach of the quickest of the incumbent and the
  peers; never the quickest peer, nor the peer whose error sets the tolerance;
- a peer whose codegen the screen saw miss its compile deadline on the whole model (the
  screen's note says so): compiled again without one, it would take as long;
- a variant peer (its library set otherwise than as installed, ``openvino alone f32``)
  that the screen did not time within its budget: the bar is the libraries as installed;
- a peer that runs a tool on the model first (an int8 quantiser,
  :attr:`~autopart.targets.peer.Peer.tool`) that the screen did not time, or measured
  beyond the tolerance: building it again costs tens of seconds, and such a peer is never
  the best one.

A plan a racing peer runs (:func:`~autopart.tuning.peers.peer_equivalents`: one partition
compiled as its library compiles the model alone) that the screen timed whole at
:attr:`~autopart.tuning.settings.VerifySettings.timed_as_peer_s` or longer is timed as that
peer (:attr:`Entrants.as_peer`), not beside it: the two run one compiled model, the plan's
executor adds microseconds a run, and a round of both took as long again on a library of
0.2-0.5 s a run (vgg19 on a CPU with AVX2, whose race ran out of budget before its rounds
gave an interval). ``--thorough`` times both.

Each left out is named, with the figure that left it out, in one note per kind. The
others enter in heats (:class:`~autopart.tuning.verify.Heats`), in the order
:meth:`Entrants.plans` gives: the search's pick, the plans the peers stand for and the
screen's incumbent (the one the screen timed quickest first), then the rest by predicted
time. The pick goes first because it is the one plan no peer stands for: a peer runs in
every round and times its own plan's library on the whole model, so under a spent budget
the pick is what would otherwise go unmeasured. The incumbent, the quickest whole plan
the screen measured within the tolerance, races beside it even where no peer stands for
it: a VGG16 classifier's int8 plan, 0.51x OpenVINO as installed, waited for a later heat
behind a pick the search made blind (one validation sample predicts every reduced
precision at 100% of answers), and the budget left none.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from autopart.costmodel.costs import Costs
from autopart.plan.schema import Plan
from autopart.search.candidates import Candidate
from autopart.search.options import Objective
from autopart.search.planner import SearchOutcome
from autopart.targets.registry import declared_peers
from autopart.tuning.partitions import far_behind, too_split_to_race
from autopart.tuning.peers import peer_equivalents
from autopart.tuning.screen import Screening, peers_out_of_reach
from autopart.tuning.settings import VERIFY


@dataclass
class Entrants:
    """The candidates left out of the race, the peers not built, and the notes saying so.

    ``first`` are the candidates that enter the race before the others, in that order;
    ``as_peer`` the plans to be timed as the peer that runs each (by plan: the peer's name),
    where that peer races.
    """

    left_out: set[str] = field(default_factory=set)
    skipped_peers: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    first: list[str] = field(default_factory=list)
    as_peer: dict[str, str] = field(default_factory=dict)

    def timed_as(
        self, racing_peers: Collection[str], twins: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """The plans timed as a peer, by plan: those of :attr:`as_peer` whose peer races.

        Each plan is named as the twin that stands for it in the race (``twins``: by
        candidate name, the name of the first with the same plan; None: as named).
        """
        twins = twins or {}
        return {
            twins.get(plan, plan): peer
            for plan, peer in self.as_peer.items()
            if peer in racing_peers
        }

    def plans(
        self,
        candidates: Mapping[str, Candidate],
        twins: Mapping[str, str],
        racing_peers: Collection[str] = (),
    ) -> dict[str, Plan]:
        """The plans that race, by name, in the order they enter.

        :attr:`first`, then the others by predicted latency: one plan per set of twins,
        none left out, none timed as one of ``racing_peers`` (:meth:`timed_as`).
        """
        out = self.left_out | set(self.timed_as(racing_peers, twins))
        racing = [n for n, c in candidates.items() if twins[n] == n and n not in out]
        rank: dict[str, int] = {}
        for name in self.first:  # a twin enters as the plan it shares
            rank.setdefault(twins.get(name, name), len(rank))
        racing.sort(key=lambda n: (rank.get(n, len(rank)), candidates[n].simulation.sequential_s))
        return {name: candidates[name].plan for name in racing}


def entrants(
    outcome: SearchOutcome,
    costs: Costs,
    candidates: Mapping[str, Candidate],
    screening: Screening | None,
    thorough: bool = False,
    samples: bool = True,
) -> Entrants:
    """Which of ``candidates`` and of the peers race (see the module).

    With ``thorough`` (``--thorough``: the exhaustive tune) every candidate races but those
    too split to compile, as does every peer. The ``pareto`` objective keeps candidates
    measured far behind: a front trades time for memory. ``samples`` says the tune judges
    on the user's samples; without them the tool peers do not race, screened or not.
    """
    skipped_notes: list[str] = []
    skipped = set() if thorough else _peers_behind(screening, skipped_notes)
    skipped |= set() if thorough else _peers_too_slow(screening)
    skipped |= set() if thorough else _tools_left_out(screening, skipped_notes, samples)
    skipped |= set() if thorough else _variants_untimed(screening, skipped_notes)
    equivalents = peer_equivalents(candidates)
    keep = {plan for peer, plan in equivalents.items() if peer not in skipped}
    incumbent = None if screening is None else screening.incumbent
    leading = {incumbent} if incumbent in candidates else set()
    first = _quickest_first(keep | leading, candidates, screening, equivalents)
    found = Entrants(first=[outcome.chosen.name, *first])
    if not thorough:
        found.as_peer = _timed_as_peer(equivalents, skipped, screening)
    split = {c.name for c in too_split_to_race(outcome)}
    if split:
        named = ", ".join(
            f"{name} ({len(candidates[name].plan.partitions)} partitions)"
            for name in sorted(split)
            if name in candidates
        )
        found.notes.append(f"not run, too split to compile and predicted slow: {named}")
    if thorough:
        found.left_out = split
        return found
    quickest = _quickest_keepable(outcome, screening)
    behind = []
    if quickest is not None and outcome.objective != Objective.PARETO:
        behind = far_behind(outcome, costs, quickest, keep)
    behind = [c for c in behind if c.name not in split]
    if behind:
        named = ", ".join(
            f"{c.name} ({c.value(outcome.objective) * 1e3:.3g} ms)"
            for c in sorted(behind, key=lambda c: c.value(outcome.objective))
        )
        found.notes.append(
            f"not raced, timed whole at over {VERIFY.race_within:g}x the quickest that "
            f"could be kept ({(quickest or 0.0) * 1e3:.3g} ms): {named}"
        )
    wrong = set() if screening is None else screening.wrong_plans(candidates)
    wrong -= split | {c.name for c in behind}
    wrong.discard(outcome.chosen.name)
    if wrong:
        found.notes.append(
            "not raced, beyond the tolerance as the screen measured their device's whole "
            f"plan: {', '.join(sorted(wrong))}"
        )
    found.left_out = split | {c.name for c in behind} | wrong
    found.skipped_peers = skipped
    found.notes.extend(skipped_notes)
    return found


def _quickest_first(
    plans: set[str],
    candidates: Mapping[str, Candidate],
    screening: Screening | None,
    equivalents: Mapping[str, str],
) -> list[str]:
    """The plans the racing peers stand for, and the incumbent, the likeliest kept first.

    By the screen's whole timing of the plan or of a peer that stands for it (the quicker,
    within the tolerance; ``equivalents``: each peer's plan, :func:`peer_equivalents`),
    then by predicted time: when the budget leaves room for only one heat, the plan raced
    beside the pick is the one the best peer stands for.
    """
    whole = {} if screening is None else screening.whole
    standing: dict[str, list[str]] = {}
    for peer, plan in equivalents.items():
        standing.setdefault(plan, []).append(peer)

    def rank(plan: str) -> tuple[float, float, str]:
        timed = [plan, *standing.get(plan, [])]
        measured = [whole[n] for n in timed if n in whole]
        seconds = [m.median_s for m in measured if m.latencies and m.correct]
        return min(seconds, default=math.inf), candidates[plan].simulation.sequential_s, plan

    return sorted(plans, key=rank)


def _timed_as_peer(
    equivalents: Mapping[str, str], skipped: Collection[str], screening: Screening | None
) -> dict[str, str]:
    """The plans of ``equivalents`` to time as their peer (see the module), by plan.

    The plan, or a peer not ``skipped`` that runs it, timed whole by the screen, correct,
    at :attr:`~autopart.tuning.settings.VerifySettings.timed_as_peer_s` or longer (the
    quickest such timing); each plan's first such peer in declared order.
    """
    whole = {} if screening is None else screening.whole
    found: dict[str, str] = {}
    for peer, plan in equivalents.items():
        if peer in skipped or plan in found:
            continue
        timed = [whole[n] for n in (plan, peer) if n in whole and whole[n].latencies]
        slow = min((m.median_s for m in timed), default=0.0) >= VERIFY.timed_as_peer_s
        if slow and all(m.correct for m in timed):
            found[plan] = peer
    return found


def _quickest_keepable(outcome: SearchOutcome, screening: Screening | None) -> float | None:
    """The price of the quickest candidate that could be kept (None: none could).

    It fits memory and its predicted error the tolerance, and the screen did not measure
    it beyond the tolerance (a single-target plan it timed whole).
    """
    whole = {} if screening is None else screening.whole
    prices = [
        c.value(outcome.objective)
        for c in outcome.candidates.values()
        if c.fits_memory and c.fits_accuracy and (c.name not in whole or whole[c.name].correct)
    ]
    return min(prices, default=None)


def _peers_too_slow(screening: Screening | None) -> set[str]:
    """The peers of codegens the screen saw miss their compile deadline (its note says so)."""
    if screening is None or not screening.too_slow:
        return set()
    return {peer.name for peer in declared_peers() if peer.codegen in screening.too_slow}


def _tools_left_out(
    screening: Screening | None, notes: list[str], samples: bool = True
) -> set[str]:
    """The tool peers the screen did not time, or timed beyond the tolerance; a note says so.

    Without a screen, every tool peer where the tune has no samples of the user's
    (``samples`` false), and none where it has.
    """
    tools = [peer.name for peer in declared_peers(available=True) if peer.tool]
    if screening is None and samples:
        return set()
    whole = {} if screening is None else screening.whole
    untimed = sorted(name for name in tools if name not in whole)
    if untimed and (screening is None or not screening.tools):
        notes.append(
            "int8 peers not run without --inputs (int8 on random inputs says nothing of the "
            f"task; bench runs them): {', '.join(untimed)}"
        )
        return set(untimed)
    wrong = sorted(name for name in tools if name in whole and not whole[name].correct)
    if untimed:
        notes.append(f"peers not raced, not timed in the screen's budget: {', '.join(untimed)}")
    if wrong:
        named = ", ".join(f"{n} ({whole[n].max_error:.3g})" for n in wrong)
        notes.append(f"peers not raced, beyond the tolerance in the screen: {named}")
    return {*untimed, *wrong}


def _variants_untimed(screening: Screening | None, notes: list[str]) -> set[str]:
    """The variant peers the screen's budget left untimed; a note names them.

    A variant (``openvino alone f32``) is its library set otherwise than as installed: the
    bar a plan must meet is the libraries as installed, so a variant races only where the
    screen had the time to weigh it (compiling a large model again costs as long).
    """
    if screening is None:
        return set()
    untimed = sorted(
        peer.name
        for peer in declared_peers(available=True)
        if peer.variant and not peer.tool and not peer.sets_tolerance
        and peer.name not in screening.whole
    )  # fmt: skip
    if untimed:
        notes.append(
            "peers not raced, not the library as installed and not timed in the screen's "
            f"budget: {', '.join(untimed)}"
        )
    return set(untimed)


def _peers_behind(screening: Screening | None, notes: list[str]) -> set[str]:
    """The peers the screen timed beyond reach (:func:`peers_out_of_reach`); a note names them."""
    if screening is None:
        return set()
    skipped = peers_out_of_reach(screening)
    if skipped:
        named = ", ".join(f"{name} ({skipped[name] * 1e3:.3g} ms)" for name in sorted(skipped))
        notes.append(
            f"peers not raced, timed whole in the screen at over {VERIFY.race_within:g}x the "
            f"quickest: {named}"
        )
    return set(skipped)
