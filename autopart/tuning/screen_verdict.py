"""A race with one plan to keep gives way to the screen when it cannot fit the budget left.

The race runs every runner it holds a fixed least number of times (its warm-up, one run
per judged sample, :attr:`~autopart.tuning.settings.VerifySettings.min_paired_rounds`
timed rounds), whatever the budget left. Where one run is a sizeable share of the budget
(FCOS at 2.5 s a run: the race's four runners took 105 s of a tune given 30 s), that
least is the overshoot. The race is there to decide between plans, in paired rounds: two
sessions of one compiled model timed apart differed by up to 1.7x on this shared machine
(``docs/tuning.md``, "Slow runs and a short budget"), so the screen's timings cannot
decide between plans. But where every runner the race would hold stands for one plan (the
plan, and the peers whose library compiles the model as that plan does), there is
nothing to decide, and the screen timed each of them, judged, on these very targets.
A plan the race would time as its peer (:meth:`~autopart.tuning.entrants.Entrants.timed_as`)
is no runner of its own here either: the peer's screen timing is the plan's, as the
peer's rounds are in the race. Then, when the race's least run time at the screen's
timings exceeds the budget left (:func:`race_least_s`), the screen's measurements stand
for the race's (:func:`screen_verdict`): each kept as measured, its rounds numbered to
pair with no other runner's (they ran apart), held to the screen's tolerance, judged on
the screen's samples (the timing inputs, or the user's validation samples); the plans the
spent budget leaves out wait as in the race, and notes say all of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from autopart.costmodel.costs import Costs
from autopart.ir.graph import Graph
from autopart.search.candidates import Candidate
from autopart.search.planner import SearchOutcome
from autopart.targets.registry import declared_peers
from autopart.tuning import choice
from autopart.tuning.accuracy import accuracy_notes
from autopart.tuning.blocks import WARMUP_ROUNDS
from autopart.tuning.clock import Clock
from autopart.tuning.entrants import entrants
from autopart.tuning.judge import Judge
from autopart.tuning.kept_measure import measured_as_peers, timed_apart
from autopart.tuning.options import TuneOptions
from autopart.tuning.plan_rows import failure_notes
from autopart.tuning.screen import Screening
from autopart.tuning.settings import VERIFY
from autopart.tuning.verify import BUDGET_SPENT, RACE_MIN_TIMED_S, Measured


def race_least_s(run_s: Iterable[float], judged: int) -> float:
    """The least wall time a race of runners taking ``run_s`` seconds a run can take.

    Each runner runs once per warm-up round and once more to settle the last, once per
    judged sample (``judged``), and once per timed round, of which there are at least
    :attr:`~autopart.tuning.settings.VerifySettings.min_paired_rounds`, lasting at least
    :data:`RACE_MIN_TIMED_S` in all. Compiles are left out: a lower bound.
    """
    one_of_each = sum(max(seconds, 0.0) for seconds in run_s)
    untimed = (WARMUP_ROUNDS + 1 + judged) * one_of_each
    return untimed + max(RACE_MIN_TIMED_S, VERIFY.min_paired_rounds * one_of_each)


@dataclass
class ScreenVerdict:
    """The screen's measurements in the race's place: as :func:`measure_plans` gives them.

    ``measured`` holds the plans by candidate name (twins included), ``peer_results`` the
    peers, ``notes`` what the tune says of it, and ``judge`` what they were judged on.
    """

    measured: dict[str, Measured]
    peer_results: dict[str, Measured]
    notes: list[str]
    judge: Judge


class RaceInputs(Protocol):
    """What decides whether the race runs: the search's outcome and the tune's state.

    ``judge`` judges the race (None: the timing inputs alone). A tune's prepared state
    (``autopart.tuning.workflow.Prepared``) is one.
    """

    graph: Graph
    outcome: SearchOutcome
    costs: Costs
    screening: Screening | None
    clock: Clock
    judge: Judge | None


def screen_verdict(
    given: RaceInputs,
    candidates: Mapping[str, Candidate],
    twins: Mapping[str, str],
    options: TuneOptions,
) -> ScreenVerdict | None:
    """The screen's verdict when a race of one plan cannot fit the budget left, else None.

    None (the race runs) too with no budget, no screen, ``--thorough``, plans to decide
    between, or no plan the race would hold timed by the screen. See the module.
    """
    screening, clock = given.screening, given.clock
    if screening is None or clock.budget_s is None or options.thorough:
        return None
    judge = given.judge or Judge(given.graph)
    skippable = screening if options.peers else None  # as the race's own entrants
    entry = entrants(given.outcome, given.costs, candidates, skippable, False, judge.real)
    racing_peers = [
        peer.name
        for peer in (declared_peers(available=True) if options.peers else ())
        if peer.name not in entry.skipped_peers
    ]
    runners = choice.runners_of(candidates, twins, racing_peers)
    whole = {twins.get(name, name): result for name, result in screening.whole.items()}
    waiting: dict[str, str] = {}
    race = choice.BudgetedRace(runners, clock)
    as_peer = entry.timed_as(racing_peers, twins)
    entering = entry.plans(candidates, twins, racing_peers)
    plans = list(race.entering(entering, set(whole), waiting))
    keep = plans_to_keep(plans, runners)
    if len(keep) != 1:  # to decide between: only paired rounds can
        return None
    run_s = [
        whole[name].median_s if name in whole else candidates[name].simulation.sequential_s
        for name in plans
    ] + [whole[name].median_s for name in racing_peers if name in whole]
    judged = len(judge.samples) + (1 if judge.feeds_judged else 0)
    least = race_least_s(run_s, judged)
    if clock.covers(least + VERIFY.finish_s):
        return None
    measured = timed_apart({n: whole[n] for n in plans if n in whole}, screening.tolerance)
    peer_results = timed_apart(
        {n: whole[n] for n in racing_peers if n in whole}, screening.tolerance, len(measured)
    )
    as_peer_notes = measured_as_peers(measured, peer_results, as_peer)
    if not measured:  # the race would measure a plan, so that one is always measured
        return None
    waiting.update({name: BUDGET_SPENT for name in [*plans, *racing_peers] if name not in whole})
    measured.update({n: measured[t] for n, t in twins.items() if t in measured})
    left, screen_judge = clock.left_s() or 0.0, judge.screen()
    clock.cut.append("the race (its one plan's screen timings stand)")
    notes = [
        *entry.notes,
        f"the race did not run: its runners stand for one plan, {min(keep)}, and its least "
        f"{least:.3g} s at the screen's timings could not fit the {left:.3g} s the budget "
        "left, so the screen's whole timings stand, each timed apart",
        *as_peer_notes,
        *failure_notes(waiting),
        *accuracy_notes({**measured, **peer_results}, options.accuracy_policy, screen_judge),
    ]
    return ScreenVerdict(measured, peer_results, notes, screen_judge)


def plans_to_keep(plans: Iterable[str], runners: Mapping[str, choice.Runner]) -> set[str]:
    """The plans a race of ``plans`` and the peers among ``runners`` could keep.

    Each plan, and each plan a peer stands for; a peer that stands for none is the bar,
    never kept (:func:`~autopart.tuning.choice.decide`).
    """
    stood_for = {runner.stands_for for runner in runners.values() if runner.peer}
    return set(plans) | {plan for plan in stood_for if plan is not None}
