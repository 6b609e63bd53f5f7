"""Choosing among runners measured side by side: the measurement decides, never the prediction.

Every runner (a candidate plan, or a peer: a library alone at its defaults) is timed in the
same interleaved rounds (:func:`autopart.tuning.verify.measure_plans`), one median per
round. Two runners are compared by the ratio of their medians over the rounds both ran,
with a bootstrap confidence interval that resamples those rounds in pairs (a round's
runners share the machine's state, so the pairing takes the drift out). A runner is
*clearly slower* than another when that interval lies wholly above 1.

:func:`decide` takes the quickest correct runner as the leader and every runner not
clearly slower than it as tied with it; of the tied ones it keeps the simplest (fewest
partitions; a peer counts as one), then the plan a peer stands for (a library as
installed: a plan that departs from it, such as the same library pinned to one core, must
be measurably quicker to be kept), then the plan of the quicker runner; a peer gives way
to the plan it stands for, measured as itself.
:func:`contested` names the tied runners while they stand for different plans: the tune
races them on alone until every interval excludes 1 or its rounds run out. A prediction
only orders what is measured first; it never overrules a measurement.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from scipy.stats import bootstrap

from autopart.ir.target import VirtualDevice
from autopart.plan.schema import Plan
from autopart.search.candidates import Candidate
from autopart.targets.registry import declared_peers
from autopart.tuning.beyond_tolerance import cannot_judge, most_accurate, no_plan_as_peer
from autopart.tuning.clock import Clock
from autopart.tuning.peers import peer_equivalents
from autopart.tuning.settings import VERIFY
from autopart.tuning.verify import BUDGET_SPENT, Measured

RESAMPLES = 2000  # bootstrap resamples: the interval's ends move by under 1% beyond this


@dataclass(frozen=True)
class Interval:
    """The ratio of two runners' medians over their paired rounds, and its interval.

    ``low`` and ``high`` bound the ratio at ``VERIFY.confidence``; with fewer than
    ``VERIFY.min_paired_rounds`` paired rounds they are 0 and infinity (nothing is known),
    unless each ran that many rounds apart (runners of different heats): then ``unpaired``
    holds their round counts, and the interval is over their rounds unpaired.
    """

    ratio: float
    low: float
    high: float
    rounds: int
    unpaired: tuple[int, int] | None = None

    @property
    def excludes_one(self) -> bool:
        """Whether the interval lies wholly on one side of 1 (the two differ)."""
        return self.high < 1.0 or self.low > 1.0

    def __str__(self) -> str:
        if self.unpaired is not None:
            first, second = self.unpaired
            return (
                f"{self.ratio:.3f}x [{self.low:.3f}, {self.high:.3f}] ({VERIFY.confidence:.0%} "
                f"interval over {first} and {second} rounds unpaired: timed apart)"
            )
        if math.isinf(self.high):
            return f"{self.ratio:.3f}x (only {self.rounds} paired rounds: no interval)"
        return (
            f"{self.ratio:.3f}x [{self.low:.3f}, {self.high:.3f}] "
            f"({VERIFY.confidence:.0%} interval over {self.rounds} paired rounds)"
        )


def paired_rounds(first: Measured, second: Measured) -> tuple[list[float], list[float]]:
    """The round medians of the rounds both runners ran, in round order."""
    if first.round_indices and second.round_indices:
        theirs = dict(zip(second.round_indices, second.round_medians, strict=True))
        pairs = [
            (mine, theirs[index])
            for index, mine in zip(first.round_indices, first.round_medians, strict=True)
            if index in theirs
        ]
    else:  # rounds recorded without their indices: the common prefix
        pairs = list(zip(first.samples, second.samples, strict=False))
    return [a for a, _ in pairs], [b for _, b in pairs]


def paired_ratio(first: Measured, second: Measured) -> float:
    """``first``'s median over ``second``'s, estimated as :func:`ratio_interval` does.

    Over their paired rounds; over their own rounds unpaired when too few rounds pair but
    each ran enough (different heats); else, with no round paired, the ratio of their
    whole medians. Never a ratio of medians taken over different rounds while enough pair:
    on a shared machine one runner's rounds may all fall in a slow spell.
    """
    a, b = paired_rounds(first, second)
    enough = VERIFY.min_paired_rounds
    if len(a) < enough and min(len(first.round_medians), len(second.round_medians)) >= enough:
        return statistics.median(first.round_medians) / statistics.median(second.round_medians)
    if not a:
        return first.median_s / second.median_s
    return statistics.median(a) / statistics.median(b)


def ratio_interval(first: Measured, second: Measured) -> Interval:
    """``first``'s median over ``second``'s on their paired rounds, with its interval.

    Two runners timed apart (different heats, or the screen's sessions), too few rounds
    paired but enough each, are compared over their own rounds unpaired
    (:attr:`Interval.unpaired`); with no round paired and too few each, by the ratio of
    their whole medians, with no interval.
    """
    a, b = paired_rounds(first, second)
    enough = VERIFY.min_paired_rounds
    if len(a) < enough and min(len(first.round_medians), len(second.round_medians)) >= enough:
        return _unpaired_interval(first.round_medians, second.round_medians)
    if not a:  # no round in common: their whole medians, and nothing known of the noise
        return Interval(first.median_s / second.median_s, 0.0, math.inf, 0)
    ratio = statistics.median(a) / statistics.median(b)  # paired_ratio's, pairs in hand
    if len(a) < enough:
        return Interval(ratio, 0.0, math.inf, len(a))
    if np.ptp(a) == 0.0 and np.ptp(b) == 0.0:
        return Interval(ratio, ratio, ratio, len(a))
    return Interval(ratio, *_bootstrap_ratio(a, b, paired=True), len(a))


def _unpaired_interval(a: list[float], b: list[float]) -> Interval:
    """The ratio of the medians of ``a`` and ``b``, each resampled on its own."""
    ratio = statistics.median(a) / statistics.median(b)
    if np.ptp(a) == 0.0 and np.ptp(b) == 0.0:
        return Interval(ratio, ratio, ratio, 0, (len(a), len(b)))
    return Interval(ratio, *_bootstrap_ratio(a, b, paired=False), 0, (len(a), len(b)))


def _bootstrap_ratio(a: list[float], b: list[float], paired: bool) -> tuple[float, float]:
    """The percentile bootstrap interval of median(a) / median(b), seeded."""

    def ratio_of_medians(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.median(x, axis=axis) / np.median(y, axis=axis)

    result = bootstrap(
        (np.asarray(a), np.asarray(b)),
        ratio_of_medians,
        paired=paired,
        vectorized=True,
        n_resamples=RESAMPLES,
        confidence_level=VERIFY.confidence,
        method="percentile",
        rng=np.random.default_rng(0),
    )
    low, high = result.confidence_interval
    return float(low), float(high)


def best_peer(peers: Mapping[str, Measured]) -> str | None:
    """The quickest of ``peers`` whose outputs are within its tolerance (None: none is).

    The bar a tuned plan is held to, in ``tune`` and ``bench`` alike: a library as set
    up by the user without a tool, so never a peer that quantises the model first (an int8
    tool peer: compared on its own, by its column and the task's drop); and a peer over
    the tolerance (OpenVINO as installed under ``--precision f32``) is no bar.
    """
    tools = {peer.name for peer in declared_peers() if peer.tool}
    within = [name for name, result in peers.items() if result.correct and name not in tools]
    return min(within, key=lambda name: peers[name].median_s, default=None)


def peers_behind(
    measured: Mapping[str, Measured], peers: Collection[str], rounds: int
) -> list[str]:
    """The peers that can no longer be the best peer, once done with their ``rounds``.

    Those of ``peers`` with ``rounds`` timed rounds in ``measured`` whose ratio's interval
    against :func:`best_peer` lies above 1: measurably slower. The best peer itself never;
    a peer over its tolerance never (it may be quicker than the bar, and its column says
    by how much). Once such a peer leaves the rounds, the plans racing later are compared
    with it over its own rounds (:func:`ratio_interval`, unpaired).
    """
    timed = {name: measured[name] for name in peers if name in measured}
    best = best_peer(timed)
    if best is None:
        return []
    bar = timed[best]
    return [
        name
        for name, result in timed.items()
        if name != best
        and result.correct
        and len(result.round_medians) >= rounds
        and ratio_interval(result, bar).low > 1.0
    ]


@dataclass(frozen=True)
class Runner:
    """What :func:`decide` knows of a runner besides its timings.

    ``partitions`` is how many partitions it runs (a peer: 1); ``stands_for`` the plan it
    amounts to (a peer: the candidate plan compiled as that library compiles the whole
    model, or None when there is none; a plan: itself).
    """

    partitions: int
    stands_for: str | None
    peer: bool = False


def within_tolerance(
    runners: Mapping[str, Runner],
    measured: Mapping[str, Measured],
    wrong_elsewhere: Collection[str] = (),
) -> dict[str, Runner]:
    """``runners`` with each peer standing only for a plan not measured over its tolerance.

    A library compiles the model as given, and the plan a peer stands for compiles autopart's
    import of it: in reduced precision the two round differently (densenet121 in bf16:
    5.0e-3 alone, 6.4e-3 as the plan). A peer whose plan measured over the tolerance may
    still lead, but keeping it would keep that plan, so it stands for none. The race's
    measurement of the plan decides; a plan the race did not time is over the tolerance
    when it is in ``wrong_elsewhere`` (the screen measured it so).
    """
    kept = dict(runners)
    for name, runner in runners.items():
        plan = runner.stands_for
        if not runner.peer or plan is None:
            continue
        over = not measured[plan].correct if plan in measured else plan in wrong_elsewhere
        if over:
            kept[name] = Runner(runner.partitions, None, peer=True)
    return kept


@dataclass(frozen=True)
class Decision:
    """What :func:`decide` found: the runner kept, the leader, who tied, and the evidence.

    ``interval`` compares ``chosen`` with the quickest other correct runner (None when
    there is no other); ``tied`` lists the runners not clearly slower than the leader.
    """

    chosen: str
    leader: str
    tied: list[str]
    interval: Interval | None
    rival: str | None


def decide(measured: Mapping[str, Measured], runners: Mapping[str, Runner]) -> Decision | None:
    """The runner to keep among the correct ones in ``measured`` (None if none is correct).

    Only runners that stand for a plan may be kept; see the module docstring for the rule.
    """
    correct = {n: m for n, m in measured.items() if m.correct and n in runners}
    if not correct:
        return None
    tied = _tied_with_the_quickest(correct)
    leader = tied[0]
    keepable = [n for n in tied if runners[n].stands_for is not None]
    if not keepable:  # only peers without a plan of their own lead: the plans race alone
        keepable = _tied_with_the_quickest(
            {n: m for n, m in correct.items() if runners[n].stands_for is not None}
        ) or [leader]
    as_installed = {r.stands_for for r in runners.values() if r.peer and r.stands_for}
    plan_median: dict[str | None, float] = {}
    for name in keepable:  # a plan's quickest runner: itself, or the peer that stands for it
        plan = runners[name].stands_for
        plan_median[plan] = min(plan_median.get(plan, math.inf), correct[name].median_s)
    chosen = min(
        keepable,
        key=lambda n: (
            runners[n].partitions,
            runners[n].stands_for not in as_installed,
            plan_median[runners[n].stands_for],
            runners[n].peer,
        ),
    )
    others = [n for n in correct if runners[n].stands_for != runners[chosen].stands_for]
    rival = min(others, key=lambda n: correct[n].median_s) if others else None
    interval = None if rival is None else ratio_interval(correct[chosen], correct[rival])
    return Decision(chosen, leader, tied, interval, rival)


def _tied_with_the_quickest(measured: Mapping[str, Measured]) -> list[str]:
    """The runners of ``measured`` not measurably slower than its quickest, quickest first.

    The leader's ties among every correct runner; and, where a peer that stands for no
    plan leads, the plans' ties among themselves, so that the simpler within the noise is
    kept there too: a text recogniser kept a plan on three libraries, 0.1% quicker by
    median than one OpenVINO partition, both behind NNCF's int8; the next race timed it at
    1.15x OpenVINO as installed.
    """
    order = sorted(measured, key=lambda n: measured[n].median_s)
    return [
        name
        for name in order
        if name == order[0] or ratio_interval(measured[name], measured[order[0]]).low <= 1.0
    ]


def contested(measured: Mapping[str, Measured], runners: Mapping[str, Runner]) -> list[str]:
    """The runners to race on: those tied with the leader, while they stand for 2+ plans."""
    decision = decide(measured, runners)
    if decision is None:
        return []
    plans = {runners[n].stands_for for n in decision.tied}
    return decision.tied if len(plans) > 1 else []


def behind(measured: Mapping[str, Measured], runners: Mapping[str, Runner]) -> list[str]:
    """The runners in ``measured`` that can no longer be kept, nor change what is kept.

    Those whose outputs are beyond their tolerance, and those measurably slower than the
    runner :func:`decide` keeps now (their ratio's interval lies above 1), but never that
    runner itself; none while nothing is kept.
    """
    decision = decide(measured, runners)
    if decision is None:
        return []
    kept = measured[decision.chosen]
    return [
        name
        for name, result in measured.items()
        if name != decision.chosen
        and (not result.correct or ratio_interval(result, kept).low > 1.0)
    ]


def explain(decision: Decision, measured: Mapping[str, Measured]) -> str:
    """One sentence: what was kept, against what, with the interval."""
    kept = measured[decision.chosen]
    text = f"kept {decision.chosen} ({kept.median_s * 1e3:.3f} ms)"
    if decision.rival is None or decision.interval is None:
        same = sorted(n for n, m in measured.items() if n != decision.chosen and m.correct)
        if same:  # every other correct runner stands for the same plan
            return f"{text}, the only plan among the correct runners ({', '.join(same)}: its plan)"
        return text + ", the only correct runner"
    rival = measured[decision.rival]
    versus = f" against {decision.rival} ({rival.median_s * 1e3:.3f} ms): {decision.interval}"
    if decision.interval.excludes_one:
        verdict = "measurably quicker" if decision.interval.high < 1.0 else "measurably slower"
    elif math.isinf(decision.interval.high):
        verdict = "too few rounds to tell them apart, the simpler kept"
    else:
        verdict = "within the noise, the simpler kept"
    tied = [n for n in decision.tied if n != decision.chosen]
    if decision.chosen not in decision.tied:
        also = f"; {decision.leader} leads, and no plan on these targets stands for it"
    else:
        also = f"; tied with it: {', '.join(tied)}" if tied else ""
    return f"{text}{versus}, {verdict}{also}"


@dataclass(frozen=True)
class BudgetedRace:
    """The race's rules under a tune's wall-time budget ``clock``.

    :func:`contested` and :func:`behind` while the budget left covers another round and
    what follows the race
    (:attr:`~autopart.tuning.settings.VerifySettings.finish_s`); then the race is over, and
    every runner but the one :func:`decide` keeps is behind, the race noted as cut short.
    ``compiled``: the codegens known to compile the whole model within the budget (those
    the screen compiled whole; None: no screen ran, and no compile is bounded).
    """

    runners: Mapping[str, Runner]
    clock: Clock
    compiled: Collection[str] | None = None

    def racing(self) -> bool:
        """Whether the budget left covers another round and what follows the race."""
        return self.clock.covers(VERIFY.finish_s)

    def contested(self, so_far: Mapping[str, Measured]) -> list[str]:
        """:func:`contested` while racing, else none."""
        return contested(so_far, self.runners) if self.racing() else []

    def behind(self, so_far: Mapping[str, Measured]) -> list[str]:
        """:func:`behind` while racing, else every runner but the one kept."""
        if self.racing():
            return behind(so_far, self.runners)
        decision = decide(so_far, self.runners)
        if "the race" not in self.clock.cut:
            self.clock.cut.append("the race")
        return [name for name in so_far if decision is None or name != decision.chosen]

    def entering(
        self, plans: Mapping[str, Plan], measured_whole: Collection[str], failures: dict[str, str]
    ) -> dict[str, Plan]:
        """The ``plans`` that enter the race: all while the budget has time left.

        Once it is spent, only those the screen measured whole (``measured_whole``) and
        those a racing peer stands for: any other, the search's pick included, would be
        compiled and timed past the budget on a prediction alone (a video transformer's
        245-partition pick took 60 s and 15 GiB to compile after the budget ran out, and
        measured 1.16x the plan kept). With none of those (no screen ran: pins, forbids or
        another objective), the first plan in the order given enters, so that a plan is
        always measured. Those left wait in ``failures`` with
        :data:`~autopart.tuning.verify.BUDGET_SPENT`.
        """
        if self.clock.budget_s is None or self.admitting(0.0):
            return dict(plans)
        stood_for = {r.stands_for for r in self.runners.values() if r.peer}
        keep = (set(measured_whole) | stood_for) & set(plans) or set(list(plans)[:1])
        for name in plans:
            if name not in keep:
                failures[name] = BUDGET_SPENT
        return {name: plan for name, plan in plans.items() if name in keep}

    def admitting(self, heat_s: float) -> bool:
        """Whether a heat of ``heat_s`` seconds fits the budget left (:class:`Heats`)."""
        return self.clock.covers(heat_s + VERIFY.finish_s)

    def compile_within(self, plan: Plan) -> float | None:
        """The seconds ``plan`` may take to compile: what the budget leaves after the race.

        None (no deadline) with no budget or no screen, and for a plan whose every codegen
        the screen saw compile the whole model: that compile is known to end. A codegen
        the screen never compiled whole (its share of the budget ran out first) may take
        minutes on a large model (OpenVINO, a 50,000-node chain: over 4 minutes), so it is
        stopped where its library can be, and the plan fails with the reason.
        """
        if self.compiled is None or self.clock.budget_s is None:
            return None
        codegens = {VirtualDevice.parse(spec.target).codegen for spec in plan.partitions}
        if codegens <= set(self.compiled):
            return None
        return self.clock.until(VERIFY.finish_s)


def runners_of(
    candidates: Mapping[str, Candidate], twins: Mapping[str, str], peer_names: Iterable[str]
) -> dict[str, Runner]:
    """What the choice knows of each distinct plan and each peer.

    A peer stands for the candidate plan compiled as its library compiles the whole model
    alone (:func:`autopart.tuning.peers.peer_equivalents`), when the tune has one.
    """
    runners = {
        name: Runner(len(c.plan.partitions), name)
        for name, c in candidates.items()
        if twins[name] == name
    }
    equivalents = peer_equivalents(candidates)
    for peer in peer_names:
        plan = equivalents.get(peer)
        runners[peer] = Runner(1, None if plan is None else twins[plan], peer=True)
    return runners


def final_choice(
    pick: str,
    candidates: Mapping[str, Candidate],
    twins: Mapping[str, str],
    measured: Mapping[str, Measured],
    peer_results: Mapping[str, Measured],
    notes: list[str],
    wrong_by_screen: Collection[str] = (),
) -> tuple[str, Decision | None]:
    """The candidate to keep: decided by the measurements alone (:func:`decide`).

    Nothing within the tolerance, or only peers that stand for no plan within it: the
    most accurate plan measured, said in a note (:func:`most_accurate`), never the
    search's pick for want of one; nothing measured (planned only): the search's ``pick``.
    A peer kept means the plan it stands for, never one measured over the tolerance: by
    the race, or, where the race did not time it, by the screen (``wrong_by_screen``: the
    candidates it measured wrong, :meth:`~autopart.tuning.screen.Screening.wrong_plans`;
    :func:`within_tolerance`). Notes say what was kept,
    against what, and the interval on the ratio; and when the search's pick failed its
    check.
    """
    wrong = {twins[n] for n in wrong_by_screen if n in twins}
    every = runners_of(candidates, twins, peer_results)
    runners = within_tolerance(every, measured, wrong)
    timed = {n: m for n, m in {**measured, **peer_results}.items() if n in runners}
    decision = decide(timed, runners)
    if pick in measured and not measured[pick].correct:
        notes.append(f"the search's pick {pick} failed its output check")
    if decision is None or runners[decision.chosen].stands_for is None:
        kept, note = most_accurate(measured, pick)
        if decision is not None:  # only peers that stand for no plan are within it
            chosen = decision.chosen
            note.append(no_plan_as_peer(chosen, timed[chosen], every[chosen].stands_for))
        notes.extend([*note, *cannot_judge(peer_results)])
        return kept, None
    kept = runners[decision.chosen].stands_for
    notes.append(explain(decision, timed))
    if decision.chosen in peer_results:
        notes.append(
            f"{decision.chosen} was kept, so the plan saved is {kept}: one partition, "
            "compiled as that library compiles the whole model alone"
        )
    return kept, decision
