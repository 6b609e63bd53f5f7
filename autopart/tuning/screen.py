"""Screening the targets before profiling them in full: the whole models are measured first.

Profiling every op on every target is a tune's longest stage, yet on most models one
target running the whole model wins. So, unless ``--thorough``, a tune first screens:

1. every whole device's single-target plan and every peer, compiled and timed whole for a
   few settled rounds, one at a time (so one is compiled at once), each checked against
   the numpy reference, most needed first and within the budget
   (:mod:`~autopart.tuning.whole_timing`); the quickest within the tolerance is the
   **incumbent**. The plans need only which target runs which node
   (:mod:`~autopart.tuning.single_plans`: a target whose codegen probes to answer, as
   OpenVINO's int8 does, is asked only when its plan is due); a unit's plan (one core) is
   not timed: its costs are scaled as its device's at the same codegen and
   precision are;
2. one pass of the op, launch and copy timings
   (:meth:`~autopart.profile.profiler.Profiler.profile_graph` with ``screen``): every node
   gets a price at a third of a full profile's passes, which the full profile later resumes
   instead of repeating. First, whatever the clock says, the incumbent's targets, the
   fallback, and the targets of the plans the racing peers stand for
   (:func:`racing_peers_plans`: a peer kept means its plan, so that plan is never dropped);
   then the others, the quickest whole device first (:func:`by_promise`), within what the
   tune's clock leaves after the race's reserve; a target the budget left unpriced is
   dropped;
3. what each other target could save against the incumbent: its nodes' one-pass costs,
   scaled so that its single-target plan's sum is that plan's measured whole time, less
   the incumbent's costs scaled alike, summed over the nodes where it is quicker, less the
   one launch any plan using it pays (:func:`could_save`). Further launches and copies
   only add to a mixed plan, so this overstates what a target could bring. A target that
   could save less than :attr:`~autopart.tuning.settings.ScreenSettings.min_gain` of the
   incumbent's time is dropped: the tune profiles, searches and races only the others,
   and says so in one note.

The bound is that of the ``latency`` objective (steps one after another). Screening is
left out for the concurrent objectives, where a unit that is slower alone can still
shorten the schedule, and under pins, forbids or a chosen fallback.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Mapping, Sequence

from autopart.costmodel import costs_from_profile
from autopart.costmodel.costs import Costs
from autopart.errors import ProfileError
from autopart.ir.feeds import random_inputs
from autopart.ir.graph import Graph
from autopart.ir.target import VirtualDevice
from autopart.loader import ModelLike
from autopart.progress import StageProgress
from autopart.runtime.executor import Executor
from autopart.search.baselines import more_exact
from autopart.search.options import Objective
from autopart.targets.registry import declared_peers, reference_codegen
from autopart.tuning.accuracy import tolerance_peer
from autopart.tuning.clock import Clock, race_reserve
from autopart.tuning.judge import Judge
from autopart.tuning.options import TuneOptions
from autopart.tuning.profile_model import profile_model
from autopart.tuning.screen_choice import (
    Screening,
    beyond_tolerance,
    choose_targets,
    could_save,
    device_timing,
    scaled_costs,
)
from autopart.tuning.settings import SCREEN, VERIFY
from autopart.tuning.single_plans import SinglePlans, single_name
from autopart.tuning.verify import Measured
from autopart.tuning.whole_timing import (
    WholeTimings,
    quickest_plan,
    reference_stand_in,
    stands_for,
    time_whole,
    whole_jobs,
)


def screens(options: TuneOptions, targets: Sequence[str]) -> bool:
    """Whether a tune with ``options`` over ``targets`` screens them first (see the module)."""
    constraints = options.search.constraints
    constrained = constraints is not None and bool(
        constraints.pins or constraints.forbids or constraints.fallback
    )
    return (
        not options.thorough
        and options.search.objective == Objective.LATENCY
        and not constrained
        and len(targets) > 1
    )


def screen_targets(
    model: ModelLike,
    graph: Graph,
    targets: Sequence[str],
    options: TuneOptions,
    clock: Clock,
    progress: StageProgress | None = None,
    judge: Judge | None = None,
) -> Screening:
    """Time every single-target plan and every peer whole; keep the targets that could win.

    ``judge`` judges their outputs (None: max-rel on the timing feeds alone).

    First the plans and peers are timed whole (their assignments need only which target
    runs which node), then the op pass is taken (:func:`_price`) within what ``clock``
    leaves after the race's reserve. Runners that fail to compile or run are left out of
    ``whole``, with a note. Raises :class:`~autopart.errors.InputError` when the reference
    computes NaN.
    """
    started = time.perf_counter()

    def step(label: str) -> None:
        if progress is not None:
            progress("screen", 0, 0, label)

    step(f"which nodes each of {len(targets)} targets runs")
    single = SinglePlans(graph, targets, str(graph.meta.get("source", graph.name)))
    fallback, assignments, plans = single.fallback, single.assignments, single.plans
    feeds = random_inputs(graph, options.search.seed)
    step("the numpy reference's outputs")
    computed = Executor(graph).run(feeds)
    reference, reference_s = computed.outputs, computed.latencies[0]
    timing = time.perf_counter()
    step("the single-target plans")
    judge = judge or Judge(graph)
    jobs = whole_jobs(single, options.peers, tools=judge.real)
    found = time_whole(
        model, graph, jobs, feeds, reference, clock, progress, judge,
        tolerance=lambda whole: _tolerance(options, graph, whole, judge),
    )  # fmt: skip
    stand_in, stand_in_notes = reference_stand_in(single, found.whole, reference_s)
    whole, untimed = {**found.whole, **stand_in}, [*found.notes, *stand_in_notes]
    timing_s = time.perf_counter() - timing - found.abandoned_s  # not compiled in the race
    tolerance = _tolerance(options, graph, whole, judge)
    for result in whole.values():
        result.tolerance = tolerance
    screening = Screening(list(targets), list(targets), whole, tolerance=tolerance)
    screening.tools = judge.real
    screening.timing_s, screening.plans = timing_s, plans
    # the reference codegen ran the whole model for the reference's outputs: it compiles
    screening.compiled = found.compiled | {reference_codegen().name}
    screening.notes.extend(f"screen: {note}" for note in [*untimed, *_redundant(options)])
    correct = {name: result for name, result in whole.items() if result.correct}
    if correct:
        screening.incumbent = min(correct, key=lambda name: correct[name].median_s)
        needed = {fallback, *assignments.get(quickest_plan(correct, assignments), {}).values()}
        for target in racing_peers_plans(screening, assignments, options.peers):
            needed.update(assignments[target].values())
        order = by_promise(targets, whole)
        later = list(single.deferred)
        costs, unpriced = _price(graph, order, needed, options, clock, timing_s, progress, later)
        if set(later) - set(unpriced):  # priced: what they run is learnt (probed) by now
            single.learn()
        priced = {  # plans that run only on priced targets
            t: a for t, a in assignments.items() if not {str(w) for w in a.values()} & set(unpriced)
        }
        choose_targets(screening, costs, priced, fallback, protect=needed)
        screening.kept = [t for t in screening.kept if t not in unpriced]
        screening.dropped = [t for t in screening.targets if t not in screening.kept]
        screening.unpriced, screening.priced = unpriced, True
    _drop_too_slow(screening, found, fallback)
    screening.elapsed_s = time.perf_counter() - started
    screening.notes.insert(0, _summary(screening))
    return screening


def peers_out_of_reach(screening: Screening) -> dict[str, float]:
    """The peers the screen timed whole beyond the race's reach, with their seconds.

    Those timed under their own name at more than
    :attr:`~autopart.tuning.settings.VerifySettings.race_within` times the quickest of the
    incumbent and the peers, but never the quickest peer nor the peer whose error sets the
    tolerance: the race leaves them out. Empty with no incumbent.
    """
    whole = screening.whole
    if screening.incumbent is None or screening.incumbent not in whole:
        return {}
    named = {peer.name for peer in declared_peers()}
    peers = {
        name: result.median_s for name, result in whole.items() if name in named and result.correct
    }
    if not peers:
        return {}
    quickest = min(peers, key=peers.__getitem__)
    reach = VERIFY.race_within * min(whole[screening.incumbent].median_s, peers[quickest])
    spared = (quickest, tolerance_peer())
    return {name: s for name, s in peers.items() if s > reach and name not in spared}


def racing_peers_plans(
    screening: Screening, assignments: Collection[VirtualDevice], with_peers: bool
) -> list[VirtualDevice]:
    """The targets of the plans the peers as installed that will race stand for.

    Each library as installed races after the screen as the bar (unless
    :func:`peers_out_of_reach`), and a peer kept means the plan it stands for, so that plan
    must stay keepable: its target is priced whatever the budget and never dropped. Not
    left to the screen's whole timing of the plan: those timings are taken one at a time,
    seconds apart, and a shared machine drifts by up to 2x between them (a 12,400-node
    stack's onnxruntime plan timed 40 ms in the screen and 23.9 ms in the race, where it
    led). Not a plan the screen measured beyond the tolerance; none without peers.
    """
    if not with_peers:
        return []
    out = peers_out_of_reach(screening)
    found: list[VirtualDevice] = []
    for peer in declared_peers(available=True):
        if not peer.stands_for_plan or peer.variant or peer.tool or peer.name in out:
            continue
        target = stands_for(peer.name, assignments)
        timed = None if target is None else screening.whole.get(single_name(target))
        if target is not None and target not in found and (timed is None or timed.correct):
            found.append(target)
    return found


def _redundant(options: TuneOptions) -> list[str]:
    """A line naming the peers not run because here they compile as another does."""
    if not options.peers:
        return []
    names = [peer.name for peer in declared_peers() if peer.redundant()]
    if not names:
        return []
    return [f"not run, the same configuration as its library as installed here: {', '.join(names)}"]


def _drop_too_slow(screening: Screening, found: WholeTimings, fallback: VirtualDevice) -> None:
    """Drop the targets whose codegen did not compile the whole model within its deadline.

    Or was forecast not to. Any plan running much of the model on them would compile as
    long in the race; the fallback stays. A note names them, and any forecast's reasons.
    """
    too_slow = found.too_slow
    if not too_slow:
        return
    slow = [
        t for t in screening.kept
        if VirtualDevice.parse(t).codegen in too_slow and VirtualDevice.parse(t) != fallback
    ]  # fmt: skip
    screening.too_slow = dict(too_slow)
    screening.kept = [t for t in screening.kept if t not in slow]
    screening.dropped = [t for t in screening.targets if t not in screening.kept]
    for codegen, seconds in too_slow.items():
        forecast = found.forecasts.get(codegen)
        why = f": {forecast.reason()}" if forecast and forecast.beyond(seconds) else ""
        screening.notes.append(
            f"screen: {found.missed(codegen)} (the budget){why}, so its targets are left out"
            + (f": {', '.join(slow)}" if slow else "")
        )


def _price(
    graph: Graph,
    targets: Sequence[str],
    needed: set[VirtualDevice],
    options: TuneOptions,
    clock: Clock,
    timing_s: float,
    progress: StageProgress | None,
    later: Collection[str] = (),
) -> tuple[Costs, list[str]]:
    """One pass of op timings: the costs of the targets priced, and those left unpriced.

    ``needed`` (the targets of the incumbent's plan, of the plans the peers stand for,
    and the fallback) are priced whatever the clock says; then the others in the order of
    ``targets`` (:func:`by_promise`), within what ``clock`` leaves after the race's reserve
    (:func:`~autopart.tuning.clock.race_reserve` of ``timing_s``). The op pass measures
    target by target in that order, so a budget cut short leaves the least promising
    unpriced.
    Targets whose support is not learnt yet (``later``, the ``deferred`` of
    :class:`~autopart.tuning.single_plans.SinglePlans`) come after all the others, and
    only while the clock has time left: planning their jobs runs their probes.
    """
    first = [t for t in targets if VirtualDevice.parse(t) in needed]
    rest = [t for t in targets if t not in first]
    stage = None if progress is None else lambda d, t, s: progress("screen", d, t, s)
    _, profile, _ = profile_model(graph, first, options.profiles_dir, screen=True, progress=stage)
    now, deferred = [t for t in rest if t not in later], [t for t in rest if t in later]
    for batch in (now, deferred):
        budget = clock.until(race_reserve(timing_s))
        if batch and (batch is now or budget is None or budget > 0):
            _, profile, _ = profile_model(
                graph, batch, options.profiles_dir, screen=True, budget_s=budget, progress=stage
            )
    try:  # every target priced, as a full pass mostly leaves them: one costing, not two
        return costs_from_profile(graph, profile, targets), []
    except ProfileError:
        pass
    priced, unpriced = list(first), []
    for target in rest:
        try:
            costs_from_profile(graph, profile, [target])
        except ProfileError:
            unpriced.append(target)
            continue
        priced.append(target)
    if unpriced:
        clock.cut.append(f"the screen's op pass ({', '.join(unpriced)} not priced, not profiled)")
    return costs_from_profile(graph, profile, [t for t in targets if t in priced]), unpriced


def by_promise(targets: Sequence[str], whole: Mapping[str, Measured]) -> list[str]:
    """``targets``, the most promising first: by their whole device's single-target time.

    A unit's device is timed whole, the unit is not, so a unit ranks right after its
    device. Targets whose device was not timed whole (the budget cut the timings short, or
    it failed) come last, in their order. The time counts whether or not it was within the
    tolerance: a target too coarse for the whole model may still run some nodes. A more
    exact precision of a target timed beyond the tolerance ranks as that target does: only
    mixed with it can that target be used (:func:`~autopart.tuning.screen_choice.choose_targets`
    keeps it so).
    """
    parsed = {t: VirtualDevice.parse(t) for t in targets}

    def rank(target: str) -> tuple[float, bool, bool]:
        measured = device_timing(whole, parsed[target])
        own = math.inf if measured is None else measured.median_s
        mixed = min(
            (found.median_s for reduced in parsed.values()
             if (found := beyond_tolerance(whole, reduced)) is not None
             and parsed[target] in more_exact(reduced, [parsed[target]])),
            default=math.inf,
        )  # fmt: skip
        return min(own, mixed), mixed < own, parsed[target].unit is not None

    return sorted(targets, key=rank)


def _tolerance(
    options: TuneOptions, graph: Graph, whole: Mapping[str, Measured], judge: Judge
) -> float:
    """The tolerance the verify stage would hold these runners to."""
    rule = options.accuracy_policy.tolerance_rule(graph, judge.metric)
    if not callable(rule):
        return float(rule)
    return float(rule({name: result.max_error for name, result in whole.items()}))


def _summary(screening: Screening) -> str:
    """The screen's one line: the incumbent, and what was kept and dropped with why."""
    took = f"screen ({screening.elapsed_s:.1f} s, {len(screening.whole)} timed whole)"
    if screening.incumbent is None:
        return f"{took}: nothing ran within the tolerance, so every target is profiled"
    base = screening.whole[screening.incumbent].median_s
    head = f"{took}: the incumbent is {screening.incumbent} at {base * 1e3:.3g} ms"
    if not screening.dropped:
        return f"{head}; every target could save {SCREEN.min_gain:.0%} of it, so all are profiled"

    def described(target: str) -> str:
        whole = screening.whole.get(single_name(VirtualDevice.parse(target)))
        alone = "" if whole is None else f"whole {whole.median_s * 1e3:.3g} ms, "
        if target in screening.unpriced:
            return f"{target} ({alone}not priced in the budget)"
        return f"{target} ({alone}could save {screening.could_save.get(target, 0.0) * 1e3:.2g} ms)"

    return (
        f"{head}; dropped {len(screening.dropped)} of {len(screening.targets)} targets, which "
        f"could not save {SCREEN.min_gain:.0%} of it (use --thorough to profile them): "
        + ", ".join(described(t) for t in screening.dropped)
    )


__all__ = [
    "Screening",
    "by_promise",
    "choose_targets",
    "could_save",
    "peers_out_of_reach",
    "racing_peers_plans",
    "scaled_costs",
    "screen_targets",
    "screens",
]  # choose_targets, could_save and scaled_costs live in screen_choice
