"""Running candidate plans side by side on the real targets, with their outputs checked.

Plans are compiled once, then run in interleaved rounds (one block of runs of each plan per
round, in an order shuffled afresh every round), so that the machine's drift and each
runner's after-effects spread over every plan alike; medians are reported. A quick plan's
block settles the caches with untimed runs first (:func:`block_for`).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from autopart.costmodel.measurements import Latencies
from autopart.errors import AutopartError
from autopart.host_memory import release_freed_memory
from autopart.ir.graph import Graph
from autopart.limits import check_fits
from autopart.plan.schema import MeasuredRun, Plan, ScheduleStep
from autopart.profile.core_sharing import CoreSharing
from autopart.progress import Progress
from autopart.runtime.executor import Executor
from autopart.runtime.plan_executor import PlanExecutor, StepTiming
from autopart.settings import COMMON
from autopart.targets.deadline import compiling_within
from autopart.tuning.blocks import (
    WARMUP_ROUNDS,
    Block,
    block_for,
    round_order,
    stretched,
)
from autopart.tuning.finite import check_reference_finite
from autopart.tuning.heats import Heats
from autopart.tuning.judge import Judge
from autopart.tuning.metrics import Tally
from autopart.tuning.settings import VERIFY


@dataclass
class Measured(Latencies):
    """Measured latencies of one plan, its last run's step timings and its output error.

    ``latencies`` holds every timed run; ``round_medians`` one median per round (a block of
    back-to-back runs), the independent samples that comparisons pair by ``round_indices``
    (the rounds they were taken in: contenders race on in rounds the others sit out).
    """

    steps: list[StepTiming] = field(default_factory=list)
    max_error: float = 0.0
    max_rel_error: float = 0.0
    round_medians: list[float] = field(default_factory=list)
    round_indices: list[int] = field(default_factory=list)
    tolerance: float = COMMON.check_tolerance
    shared_rounds: int = 0  # its timed rounds dropped: the cores shared one core's speed

    @property
    def samples(self) -> list[float]:
        """One latency per round (every timed run where rounds were not recorded)."""
        return self.round_medians or self.latencies

    @property
    def correct(self) -> bool:
        """Whether every output matched the f32 reference within ``tolerance`` (relative)."""
        return self.max_error <= self.tolerance

    def run_record(self, judge: Judge | None = None) -> MeasuredRun:
        """The record a plan keeps of this measurement (the one writer of ``plan.measured``).

        ``judge`` names the metric and the samples it was judged on (None: not recorded).
        """
        return MeasuredRun(
            metric=None if judge is None else judge.metric.label,
            samples=None if judge is None else judge.describe(),
            median_s=self.median_s,
            runs=len(self.latencies),
            max_error=self.max_error,
            tolerance=self.tolerance,
            round_medians_s=list(self.round_medians),
            schedule=[ScheduleStep(s.step, s.lane, s.start, s.end) for s in self.steps],
        )


Runner = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]
# A tolerance, or how to choose one from every runner's error on the evaluation samples.
Tolerance = float | Callable[[Mapping[str, float]], float]
BUDGET_SPENT = "the wall budget left could not cover their heat"  # a plan left waiting
RACE_MIN_TIMED_S = 2.0  # the race's timed rounds last at least this, in all (stretched)
_RunResult = tuple[dict[str, np.ndarray], list[float], list[StepTiming]]
_Timed = tuple[list[float], list[StepTiming]]  # a round's timed runs of one runner


def _peer_block(
    peer: Runner, linger_s: float
) -> Callable[[Mapping[str, np.ndarray], Block], _RunResult]:
    def run(feeds: Mapping[str, np.ndarray], block: Block) -> _RunResult:
        latencies, outputs = [], {}
        for index in range(block.settle + block.timed):
            start = time.perf_counter()
            outputs = peer(feeds)
            if index >= block.settle:
                latencies.append(time.perf_counter() - start)
        if block.linger:
            time.sleep(linger_s)
        return outputs, latencies, []

    return run


def _plan_block(executor: PlanExecutor) -> Callable[[Mapping[str, np.ndarray], Block], _RunResult]:
    def run(feeds: Mapping[str, np.ndarray], block: Block) -> _RunResult:
        result = executor.run(feeds, repeat=block.timed, warmup=block.settle)
        if block.linger:
            time.sleep(executor.linger_s)
        return result.outputs, result.latencies, result.steps

    return run


def measure_plans(
    graph: Graph,
    plans: Mapping[str, Plan],
    feeds: Mapping[str, np.ndarray],
    rounds: int = 10,
    warmup: int = WARMUP_ROUNDS,
    progress: Progress | None = None,
    peers: dict[str, Runner] | None = None,
    peer_linger_s: Mapping[str, float] | None = None,
    min_timed_s: float = RACE_MIN_TIMED_S,
    race: Callable[[Mapping[str, Measured]], Sequence[str]] | None = None,
    race_batches: int = 3,
    failures: dict[str, str] | None = None,
    judge: Judge | None = None,
    tolerance: Tolerance = COMMON.check_tolerance,
    probe: CoreSharing | None = None,
    reference: Mapping[str, np.ndarray] | None = None,
    eliminate: Callable[[Mapping[str, Measured]], Sequence[str]] | None = None,
    heats: Heats | None = None,
    compile_within: Callable[[Plan], float | None] | None = None,
) -> dict[str, Measured]:
    """Run every plan in ``warmup`` + ``rounds`` rounds or more, interleaved; check outputs once.

    ``reference``: the numpy reference's outputs on ``feeds`` (None: computed here).
    ``eliminate`` names, from the results so far, runners that can no longer win: after each
    round from ``VERIFY.min_paired_rounds`` timed rounds on, those leave the rounds (keeping
    what they measured, their plans closed); with fewer than two left, the rounds stop.

    Warm-up rounds run each plan once (twice in the last, timing the second); then each
    round runs each plan in a :func:`block_for` that run's time: a quick plan settles with
    untimed runs and is timed several times back to back, as a user's loop would see it.
    Rounds under ``min_timed_s`` seconds (as the first timed round shows) are stretched
    to it, to at most ``VERIFY.max_round_stretch`` times ``rounds``. ``heats`` compile so
    many plans at once; ``compile_within`` gives each a compile deadline (s; None: none).

    ``peers``, runners from feeds to outputs by name (onnxruntime alone), are timed in every
    round; ``peers`` is emptied, so one leaving the rounds is freed then. After a block of
    a runner whose library keeps cores busy once it returns (a plan's ``linger_s``, a
    peer's ``peer_linger_s``), the next runner waits that long, not to be timed on them.

    ``race`` names, given the results so far, the plans still in contention (none, or
    fewer than two: the race is over). Those race on alone, ``rounds`` more rounds at a
    time, at most ``race_batches`` times, each followed by another look at ``race``.

    A plan or peer that fails to compile or to run with an :class:`AutopartError` (a
    library that rejects a partition at run time, memory that the plans compiled before
    it already hold) is dropped from the rounds and left out of the result; ``failures``,
    when given, receives its one-line reason by name. An :class:`InputError` when the
    reference itself computes NaN on the inputs (:mod:`autopart.tuning.finite`). A
    KeyboardInterrupt propagates: the plans compiled so far are closed and nothing measured
    is returned, so that no plan timed over fewer rounds than asked is taken for measured.

    Accuracy: each runner's ``max_error`` is its drop on ``judge``'s metric against the
    numpy reference (f32) over its samples, each run once before the timed rounds (None:
    the relative error on ``feeds``), ``max_rel_error`` its largest relative error there;
    it is ``correct`` within ``tolerance``: a number, or a function of every drop.

    Spells (:mod:`autopart.profile.core_sharing`): with a ``probe``, each timed round is
    followed by one probe of the cores; a round after which they shared one core's speed
    is dropped for every runner (counted in its ``shared_rounds``) and run again, at most
    as many times as rounds were planned; later ones are kept.
    """
    handed = {name: peers.pop(name) for name in list(peers)} if peers else {}
    results = {name: Measured() for name in [*plans, *handed]}
    if reference is None:
        reference = Executor(graph).run(feeds).outputs
    check_reference_finite(graph, reference, "the inputs timed")
    state = _Rounds(graph, feeds, reference, results, warmup, warmup + rounds, progress)
    state.failures, state.probe = failures if failures is not None else {}, probe
    state.eliminate, state.heats, state.compile_within = eliminate, heats, compile_within
    state.judge = judge or state.judge
    with contextlib.ExitStack() as stack:
        for name in list(handed):  # the rounds' own reference is the only one left
            linger = (peer_linger_s or {}).get(name, 0.0)
            state.runners[name] = _peer_block(handed.pop(name), linger)
        state.compile(plans, stack)
        state.check_samples(list(state.runners))
        state.hold_to(tolerance)
        state.run_rounds(list(results), rounds, min_timed_s, race, race_batches)
    return {name: result for name, result in results.items() if result.latencies}


class _Rounds:
    """The state of :func:`measure_plans`: runners, their blocks, results and the count."""

    def __init__(
        self,
        graph: Graph,
        feeds: Mapping[str, np.ndarray],
        reference: Mapping[str, np.ndarray],
        results: dict[str, Measured],
        warmup: int,
        planned: int,
        progress: Progress | None,
    ) -> None:
        self.graph, self.feeds, self.reference = graph, feeds, reference
        self.results, self.warmup, self.planned = results, warmup, planned
        self.progress = progress
        self.runners: dict[str, Callable[[Mapping[str, np.ndarray], Block], _RunResult]] = {}
        self.blocks = {name: Block() for name in results}
        self.compiled = 0
        self.done = 0
        self.failures: dict[str, str] = {}
        self.probe: CoreSharing | None = None
        self.dropped = 0
        self.executors: dict[str, PlanExecutor] = {}
        self.eliminate: Callable[[Mapping[str, Measured]], Sequence[str]] | None = None
        self.heats: Heats | None = None
        self.compile_within: Callable[[Plan], float | None] | None = None
        self.judge = Judge(graph)
        self.tallies: dict[str, list[Tally]] = {}
        self.pending: list[tuple[str, Plan]] = []  # plans waiting for their heat
        self.entered: dict[str, int] = {}  # the round each late plan entered in
        self.timed_rounds = planned - warmup
        self.heat_started = time.perf_counter()  # when the last heat's first plan compiled

    def fail(self, name: str, error: AutopartError) -> None:
        """Drop ``name`` from the rounds, keeping why (its error's first line)."""
        self.failures[name] = (str(error).splitlines() or [type(error).__name__])[0]
        self.retire(name)
        self.results[name].latencies.clear()

    def report(self, label: str) -> None:
        """Tell ``progress`` how far the runs are."""
        if self.progress is not None:
            total = self.compiled + len(self.results) * self.planned
            self.progress(self.done, total, label)

    def compile(self, plans: Mapping[str, Plan], stack: contextlib.ExitStack) -> None:
        """Compile the plans of the first heat (every plan without heats), closed by ``stack``."""
        self.compiled = len(plans)
        self.pending = list(plans.items())
        stack.callback(self.close_all)
        self.admit(0)

    def admit(self, round_index: int) -> list[str]:
        """Compile waiting plans, in order, while the heat has room; those that entered.

        A plan stays compiled while it races, so one is compiled only while
        :attr:`~autopart.settings.CommonSettings.compile_headroom` times the model's
        weights are free; the others fail with a one-line reason, as a plan a library
        rejects does, instead of the kernel's OOM killer ending the tune. A plan whose
        compile deadline is already spent is not compiled: it is left out as the plans the
        budget left waiting are (:data:`BUDGET_SPENT`), not failed as if its library had
        been stopped.
        """
        needed = int(COMMON.compile_headroom * self.graph.parameter_bytes())
        entered: list[str] = []
        while self.pending and (self.heats is None or len(self.executors) < self.heats.held):
            name, plan = self.pending.pop(0)
            self.report(f"compiling {name}")
            self.done += 1
            try:
                held = len(self.runners)
                check_fits(needed, f"compiling {name} beside the {held} runners compiled before it")
                bound = None if self.compile_within is None else self.compile_within(plan)
                if bound is not None and bound <= 0:  # no time to compile: it waited in vain
                    self.failures[name] = BUDGET_SPENT
                    continue
                with compiling_within(bound):
                    executor = PlanExecutor(plan, self.graph)
            except AutopartError as error:
                self.fail(name, error)
                continue
            self.executors[name] = executor
            self.runners = {name: _plan_block(executor), **self.runners}
            self.entered[name] = round_index
            entered.append(name)
            release_freed_memory()  # what compiling it left behind
        return entered

    def next_heat(self, round_index: int) -> None:
        """Make room (:meth:`make_room`) and let waiting plans in, or end the heats.

        A plan entering late is checked on the samples, held to the tolerance chosen
        before, and gets as many rounds as the first heat's plans got.
        """
        assert self.heats is not None
        if self.heats.admitting(0.0):
            self.make_room()
            if len(self.executors) >= self.heats.held:
                return
            if self.heats.admitting(time.perf_counter() - self.heat_started):
                self.heat_started = time.perf_counter()
                self.enter_late(self.admit(round_index), round_index)
                return
        for name, _ in self.pending:
            self.failures[name] = BUDGET_SPENT
        self.pending.clear()

    def enter_late(self, entered: Sequence[str], round_index: int) -> None:
        """Check the plans ``entered`` at ``round_index`` and give them the first heat's rounds."""
        if entered:
            tolerance = next(iter(self.results.values())).tolerance
            self.check_samples(entered)
            for name in entered:
                self.results[name].tolerance = tolerance
            self.planned = max(self.planned, round_index + self.warmup + self.timed_rounds)

    def make_room(self) -> None:
        """With the heat full, retire the plans done with their rounds but the quickest.

        The quickest within its tolerance stays, as the bar the next plans race against;
        what the others measured stays in the results, paired by round with every runner
        that ran beside them.
        """
        assert self.heats is not None
        held = {name: self.results[name] for name in self.executors}
        timed = {name: result for name, result in held.items() if result.round_medians}
        if len(held) < self.heats.held or not timed:
            return
        quickest = min(timed, key=lambda name: (not timed[name].correct, timed[name].median_s))
        for name, result in timed.items():
            if name != quickest and len(result.round_medians) >= self.timed_rounds:
                self.retire(name)

    def hold_to(self, tolerance: Tolerance) -> None:
        """Set every result's tolerance: ``tolerance``, or what it chooses from the errors."""
        chosen = tolerance(_errors(self.results)) if callable(tolerance) else tolerance
        for result in self.results.values():
            result.tolerance = chosen

    def retire(self, name: str, release: bool = True) -> None:
        """Take ``name`` out of the rounds, keeping what it measured; free what it compiled.

        With ``release``, the freed memory is handed back at once (the race goes on).
        """
        self.runners.pop(name, None)
        executor = self.executors.pop(name, None)
        if executor is not None:
            executor.close()
            if release:
                release_freed_memory()

    def close_all(self) -> None:
        """Close every plan still compiled, then hand the memory back once."""
        for name in list(self.executors):
            self.retire(name, release=False)
        release_freed_memory()

    def run_rounds(
        self,
        order: Sequence[str],
        rounds: int,
        min_timed_s: float,
        race: Callable[[Mapping[str, Measured]], Sequence[str]] | None,
        race_batches: int,
    ) -> None:
        """The rounds of :func:`measure_plans`: stretched to ``min_timed_s``, then raced."""
        round_index, round_started, batches = 0, time.perf_counter(), 0
        while True:
            if self.pending:
                self.next_heat(round_index)
            if round_index >= self.planned:
                if race is None or batches >= race_batches:
                    return
                so_far = {name: result for name, result in self.results.items() if result.latencies}
                contenders = [n for n in race(so_far) if n in self.runners]
                if len(contenders) < 2:
                    return
                order, batches = contenders, batches + 1
                self.planned += rounds
            timed = self.run_round([name for name in order if name in self.runners], round_index)
            if round_index == self.warmup:
                spent = time.perf_counter() - round_started
                self.timed_rounds = stretched(rounds, spent, min_timed_s)
                self.planned = max(self.planned, self.warmup + self.timed_rounds)
            self.keep_unless_shared(timed, round_index, rounds)
            round_index += 1
            round_started = time.perf_counter()
            if self.decided(round_index, race):
                return

    def decided(
        self, round_index: int, race: Callable[[Mapping[str, Measured]], Sequence[str]] | None
    ) -> bool:
        """Retire the runners :attr:`eliminate` names; whether the rounds can stop.

        Only with :attr:`eliminate`, and once every runner has
        :attr:`~autopart.tuning.settings.VerifySettings.min_paired_rounds` timed rounds kept (a
        round dropped for shared cores counts for none). They can stop, with no plan waiting
        for its heat, when fewer than two runners are left, or ``race`` names fewer than two
        contenders (the leader is clear).
        """
        if self.eliminate is None or round_index - self.warmup < VERIFY.min_paired_rounds:
            return False
        kept = min((len(self.results[name].round_medians) for name in self.runners), default=0)
        if kept < VERIFY.min_paired_rounds:
            return False
        so_far = {name: result for name, result in self.results.items() if result.latencies}
        for name in self.eliminate(so_far):
            self.retire(name)
        if self.pending:
            return False
        return len(self.runners) < 2 or (race is not None and len(race(so_far)) < 2)

    def check_samples(self, names: Sequence[str]) -> None:
        """Run the runners ``names`` once on each sample the judge judges, and judge them.

        Every drop is in before a tolerance is chosen from them (:meth:`hold_to`). No run
        waits out its library's spinning threads: none is timed, and the warm-up rounds
        come before the first timed one (onnxruntime's 0.15 s wait after each of 60
        validation samples took 9 s a runner, 36 s of a 60 s tune on magika).
        """
        judged = [(self.feeds, self.reference)] if self.judge.feeds_judged else []
        for index, sample in enumerate(self.judge.samples):
            judged.append((sample, self.judge.reference(index)))
        judged_run = Block(settle=0, timed=1, linger=False)
        for sample, reference in judged:
            for name in [name for name in names if name in self.runners]:
                try:
                    outputs, _, _ = self.runners[name](sample, judged_run)
                except AutopartError as error:
                    self.fail(name, error)
                    continue
                tally, relative = self.judge.tally(reference, outputs)
                self.tallies.setdefault(name, []).append(tally)
                result = self.results[name]
                result.max_error = self.judge.drop(self.tallies[name])
                result.max_rel_error = max(result.max_rel_error, relative)

    def keep_unless_shared(self, timed: dict[str, _Timed], round_index: int, rounds: int) -> None:
        """Record a timed round's runs, unless the cores shared one core's speed after it.

        A dropped round is run again (``planned`` grows by one) while fewer rounds were
        dropped than were planned (at least ``rounds``); from then on rounds are kept
        whatever the probe says.
        """
        if not timed:
            return
        cap = max(rounds, self.planned - self.warmup - self.dropped)
        if self.probe is not None and self.dropped < cap and self.probe.shared():
            self.dropped += 1
            self.planned += 1
            for name in timed:
                self.results[name].shared_rounds += 1
            return
        for name, (latencies, steps) in timed.items():
            result = self.results[name]
            result.latencies.extend(latencies)
            result.round_medians.append(statistics.median(latencies))
            result.round_indices.append(round_index)
            result.steps = steps

    def run_round(self, order: Sequence[str], round_index: int) -> dict[str, _Timed]:
        """One block of each runner in ``order``, shuffled by the round: what it timed.

        A runner's last warm-up round times a run that follows its own to choose its
        block; later rounds are timed, and their runs returned by runner for
        :meth:`keep_unless_shared` (none from warm-up rounds). A plan that entered in a
        later heat counts its rounds from there.
        """
        timed: dict[str, _Timed] = {}
        for name in round_order(order, round_index):
            self.report(f"running {name}")
            block = self.blocks[name]
            own = round_index - self.entered.get(name, 0)
            if own == self.warmup - 1:
                block = Block(settle=1, timed=1)  # time a run that follows its own
            try:
                _, latencies, steps = self.runners[name](self.feeds, block)
            except AutopartError as error:
                self.fail(name, error)
                continue
            self.done += 1
            if own >= self.warmup:
                timed[name] = (latencies, steps)
            elif own == self.warmup - 1:
                self.blocks[name] = block_for(statistics.median(latencies))
        return timed


def _errors(results: Mapping[str, Measured]) -> dict[str, float]:
    """Each runner's largest output error so far, by name."""
    return {name: result.max_error for name, result in results.items()}
