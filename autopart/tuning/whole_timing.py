"""The screen's whole-model timings: each single-target plan and peer, most needed first.

A tune's screen (:mod:`autopart.tuning.screen`) times every whole device's single-target
plan and every peer whole, one compiled at a time: but a peer is held while the plan it
stands for is timed next, as the two share one compile or session (OpenVINO as installed
and its default-precision plan, onnxruntime alone and its plan's one partition,
:mod:`autopart.targets.held`). Where they do not share it, the two are held at once as the
race holds them anyway (a racing peer keeps its plan in the race), so the tune's peak is
no higher. The peer that sets the tolerance and its own plan come first, then each other
library as installed and its own plan, the other peers, then the other plans; under a
budget, the least needed are skipped once the screen's share of it is spent. The bar is
the libraries as installed: a variant peer (``openvino alone f32``) and its plan are not
needed, unless a plan of that library is measured beyond the tolerance or the accuracy
budget: then its plans at more exact precisions come next and are needed
(:func:`promote_exact`), so that a budget never skips OpenVINO in f32 for onnxruntime where
OpenVINO as installed (bf16) changes too many answers.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from autopart.host_memory import release_freed_memory
from autopart.ir.graph import Graph
from autopart.ir.target import HOST_DEVICE, PRECISIONS, REFERENCE_PRECISION, VirtualDevice
from autopart.loader import ModelLike
from autopart.plan.schema import Plan
from autopart.profile.core_sharing import process_probe
from autopart.progress import StageProgress
from autopart.search.baselines import more_exact
from autopart.targets.deadline import compile_deadline, compiling_within
from autopart.targets.registry import declared_peers, reference_codegen
from autopart.tuning.clock import SCREEN_WARMUP, Clock
from autopart.tuning.compile_forecast import CompileForecast, forecast_peer, forecast_plan
from autopart.tuning.judge import Judge
from autopart.tuning.peers import Peer, PeerInputs, Runner, peer_lingers, peers
from autopart.tuning.settings import SCREEN
from autopart.tuning.single_plans import SinglePlans, single_name
from autopart.tuning.verify import Measured, measure_plans


@dataclass(frozen=True)
class WholeJob:
    """One runner the screen times whole: a single-target plan, or a peer built when due.

    A ``needed`` job runs whatever the budget: the peer that sets the tolerance, the plans
    the libraries as installed stand for (a peer gives way only to its own plan), and the
    more exact plans of a library measured beyond the tolerance (:func:`promote_exact`). A
    job with a ``build`` and no ``plan`` builds its plan when due (None: it repeats
    another's), for a target whose support is learnt only then
    (:mod:`~autopart.tuning.single_plans`). A peer's ``own_plan`` names the plan it
    stands for, if any; a plan's ``target`` is the target it puts the model on.
    """

    name: str
    codegen: str
    plan: Plan | None = None
    peer: Peer | None = None
    needed: bool = False
    build: Callable[[], Plan | None] | None = None
    own_plan: str | None = None
    target: VirtualDevice | None = None


def whole_jobs(single: SinglePlans, with_peers: bool, tools: bool = True) -> list[WholeJob]:
    """The screen's runners, most needed first.

    The peer that sets the tolerance, then its own plan, the other peers that are their
    library as installed, not a variant, each right before its own plan, so that the two
    share one compile or session (these are ``needed``), the other peers,
    the other single-target plans (those of ``single``'s deferred targets last, each built
    when due), and the peers that run a tool on the model first (an int8 quantiser, tens
    of seconds; only with ``tools``): a budget that runs out skips from the end. A
    deferred target that a peer as installed stands for is learnt now.
    """
    available = [
        peer for peer in (declared_peers(available=True) if with_peers else ())
        if tools or not peer.tool
    ]  # fmt: skip
    bar = [peer for peer in available if not peer.variant]
    later = dict.fromkeys(single.due_later())
    if any(stands_for(peer.name, later) is not None for peer in bar):
        for target in later:  # a peer's own plan is needed: built now
            single.plan_of(target)
        later = {}
    assignments = single.assignments
    own_plan = {  # a peer's name -> the name of the plan it stands for
        peer.name: single_name(target)
        for peer in available
        if (target := stands_for(peer.name, assignments)) is not None
    }
    equivalent = {own_plan[p.name]: p for p in bar if p.name in own_plan}  # plan -> peer
    paired = {peer.name: index for index, peer in enumerate(equivalent.values())}

    def rank(job: WholeJob) -> int:
        if job.peer is not None:
            if job.peer.sets_tolerance:
                return 0
            return 5 if job.peer.tool else 2 if job.peer.name in paired else 3
        peer = equivalent.get(job.name)
        return 4 if peer is None else 1 if peer.sets_tolerance else 2

    def order(job: WholeJob) -> tuple[int, int, int]:  # each peer right before its own plan
        peer = job.peer or equivalent.get(job.name)
        return rank(job), paired.get(peer.name, 0) if peer else 0, job.peer is None

    due = set(single.due_now())
    jobs = [
        *(  # in the asked order: those built already, the others built when due
            WholeJob(single_name(t), str(t.codegen), plan=single.plans[single_name(t)], target=t)
            if t not in due
            else WholeJob(
                single_name(t), str(t.codegen), build=functools.partial(single.built, t), target=t
            )
            for t in assignments
            if t in due or single_name(t) in single.plans
        ),
        *(
            WholeJob(
                single_name(t), str(t.codegen), build=functools.partial(single.plan_of, t), target=t
            )
            for t in later
        ),
        *(
            WholeJob(peer.name, peer.codegen, peer=peer, own_plan=own_plan.get(peer.name))
            for peer in available
        ),
    ]
    return [dataclasses.replace(job, needed=rank(job) <= 2) for job in sorted(jobs, key=order)]


@dataclass
class WholeTimings:
    """What the screen's whole timings found.

    ``whole``: each runner measured, by name; ``notes``: why any other was not, one line
    each; ``too_slow``: each codegen that did not compile the whole model within its
    deadline, with the deadline in seconds (its other runners were skipped);
    ``abandoned_s``: the seconds spent on those compiles and on forecasts; ``compiled``:
    the codegens that compiled a whole model and ran it; ``forecasts``: each codegen's
    forecast compile time (:mod:`~autopart.tuning.compile_forecast`), where one was made;
    ``promise``: the quickest runner timed per (codegen, precision)
    (:func:`promote_promising`).
    """

    whole: dict[str, Measured] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    too_slow: dict[str, float] = field(default_factory=dict)
    abandoned_s: float = 0.0
    compiled: set[str] = field(default_factory=set)
    forecasts: dict[str, CompileForecast] = field(default_factory=dict)
    promise: dict[tuple[str, str], float] = field(default_factory=dict)

    def missed(self, codegen: str) -> str:
        """Why ``codegen``, in ``too_slow``, runs no job: its missed or forecast deadline."""
        seconds = self.too_slow[codegen]
        forecast = self.forecasts.get(codegen)
        if forecast is not None and forecast.beyond(seconds):
            return f"{codegen} is forecast to compile the whole model far past {seconds:.3g} s"
        return f"{codegen} did not compile the whole model within {seconds:.3g} s"


def time_whole(
    model: ModelLike,
    graph: Graph,
    jobs: Sequence[WholeJob],
    feeds: Mapping[str, np.ndarray],
    reference: Mapping[str, np.ndarray],
    clock: Clock,
    progress: StageProgress | None,
    judge: Judge,
    tolerance: Callable[[Mapping[str, Measured]], float] | None = None,
) -> WholeTimings:
    """Each job timed whole, one compiled at a time, within the clock (see the module).

    Once a runner has run with a finite error, a job not ``needed`` starts only while
    the clock has its share for the screen left
    (:attr:`~autopart.tuning.settings.ScreenSettings.whole_share`); the rest are named in
    ``clock.cut``. Under a budget, a model of at least
    :attr:`~autopart.tuning.settings.ScreenSettings.deadline_nodes` nodes is compiled by each
    codegen's first job within the whole budget (:func:`compiling_within`): a codegen that
    misses it gets no further job, nor does one whose compile is forecast far past it
    (:mod:`~autopart.tuning.compile_forecast`, before its first job).
    ``judge`` judges the outputs. A plan measured beyond ``tolerance`` (of the runners
    measured so far: the verify stage's rule) brings its library's plans at more exact
    precisions next, as needed (:func:`promote_exact`).
    """
    queue = list(jobs)
    failures: dict[str, str] = {}
    found = WholeTimings()
    reserve = (clock.budget_s or 0.0) * (1.0 - SCREEN.whole_share)
    large = clock.budget_s is not None and len(graph.nodes) >= SCREEN.deadline_nodes
    compiled = found.compiled
    held: dict[str, Runner] = {}  # a peer's runner, kept for the job of its own plan
    held_for: str | None = None
    for done, job in enumerate(queue):  # promote_exact reorders only the jobs after ``done``
        if job.name != held_for:
            held.clear()
        left = clock.until(reserve)
        if (
            not job.needed
            and left is not None
            and left <= 0
            and any(m.correct for m in found.whole.values())
        ):
            clock.cut.append(
                "the screen's whole timings ("
                + ", ".join(j.name for j in queue[done:]) + " not timed whole)"
            )  # fmt: skip
            break
        if job.codegen in found.too_slow:
            found.notes.append(f"{job.name} was not timed: {found.missed(job.codegen)}")
            continue
        if progress is not None:
            progress("screen", done, len(jobs), f"{job.name} whole")
        deadline = clock.budget_s if large and job.codegen not in compiled else None
        if deadline is not None and _forecast_beyond(graph, job, deadline, found):
            found.notes.append(f"{job.name} was not timed: {found.missed(job.codegen)}")
            continue
        job_started = time.perf_counter()
        with compiling_within(deadline):
            held_for = job.own_plan if job.own_plan == _name_of(queue, done + 1) else None
            timed, kept = _time_job(
                model, graph, job, (feeds, reference), judge, (failures, found.notes),
                held_for is not None,
            )  # fmt: skip
            held.clear()  # a held peer's plan has run, sharing its compile
            held.update(kept)
            del kept
            if timed:
                compiled.add(job.codegen)
            elif deadline is not None and compile_deadline() == 0.0:
                found.too_slow[job.codegen] = deadline
                found.abandoned_s += time.perf_counter() - job_started
        _reorder_after(queue, done + 1, job, timed, found, tolerance)
        release_freed_memory()  # this job's runner, before the next is compiled
    if progress is not None:
        progress("screen", len(queue), len(queue), f"{len(found.whole)} timed whole")
    found.notes[:0] = [f"{name} was not timed: {why}" for name, why in failures.items()]
    return found


def _beyond(timed: Mapping[str, Measured], tolerance: float) -> bool:
    """Whether a job's ``timed`` runners all measured beyond ``tolerance`` (none timed: no)."""
    return bool(timed) and min(result.max_error for result in timed.values()) > tolerance


def _computes_in(job: WholeJob) -> str:
    """The precision ``job``'s runner computes in: its target's, or its peer's."""
    if job.target is not None:
        return job.target.computes_in
    return (job.peer.precision() if job.peer is not None else None) or REFERENCE_PRECISION


def _reorder_after(
    queue: list[WholeJob],
    start: int,
    job: WholeJob,
    timed: Mapping[str, Measured],
    found: WholeTimings,
    tolerance: Callable[[Mapping[str, Measured]], float] | None,
) -> None:
    """Record ``job``'s ``timed`` runners in ``found``, then order ``queue[start:]``.

    A plan beyond ``tolerance`` brings its library's more exact plans next
    (:func:`promote_exact`); the plans not needed then go by their promise
    (:func:`promote_promising`).
    """
    found.whole.update(timed)
    _record_promise(found.promise, job, timed)
    if tolerance is not None and _beyond(timed, tolerance(found.whole)):
        promote_exact(queue, start, job)
    promote_promising(queue, start, found.promise)


def _record_promise(
    promise: dict[tuple[str, str], float], job: WholeJob, timed: Mapping[str, Measured]
) -> None:
    """Keep in ``promise`` the quickest runner of ``job``'s codegen and precision.

    Speed is what it promises, so any runner with finite outputs counts (accuracy is
    judged apart); a tool peer's does not, for it runs a model no plan compiles.
    """
    medians = [r.median_s for r in timed.values() if math.isfinite(r.max_error)]
    if not medians or (job.peer is not None and job.peer.tool):
        return
    key = (job.codegen, _computes_in(job))
    promise[key] = min(promise.get(key, math.inf), *medians)


def promote_promising(
    queue: list[WholeJob], start: int, promise: Mapping[tuple[str, str], float]
) -> None:
    """Order the plans not ``needed`` from ``queue[start]`` on by what they promise.

    A plan promises the quickest runner timed so far on its codegen at its own
    precision or a more exact one (a library computing in int8 where the CPU has the
    units for it is seldom slower than in bf16): plans on the quickest libraries and their
    reduced precisions are timed before a budget cuts the rest, as Ansor gives tuning time
    to the tasks with the most to gain. Plans whose codegen has no such runner yet follow
    in their order. Peers and needed jobs keep their places. Measured on a VGG16
    classifier under ``--budget 30``: its int8 plan, 0.51x OpenVINO as installed, came
    after numpy's, OpenVINO's f32 and OpenCL's plans and was cut; it now comes first.
    """
    slots = [i for i in range(start, len(queue)) if queue[i].peer is None and not queue[i].needed]

    def expected(job: WholeJob) -> float:
        if job.target is None:
            return math.inf
        exact = PRECISIONS[: PRECISIONS.index(job.target.computes_in) + 1]
        return min((promise.get((job.codegen, p), math.inf) for p in exact), default=math.inf)

    ordered = sorted((queue[i] for i in slots), key=expected)  # stable: unknowns keep order
    for index, job in zip(slots, ordered, strict=True):
        queue[index] = job


def promote_exact(queue: list[WholeJob], start: int, beyond: WholeJob) -> None:
    """Bring forward, as needed, ``beyond``'s library at each more exact precision.

    ``beyond`` is a plan measured beyond its tolerance or accuracy budget. Its library's
    single-target plans on the same target at more exact precisions (nearest first) move to
    ``queue[start]`` onward, each ``needed``: where a library as installed computes too
    inexactly, the same library more exactly is a user's next choice (OpenVINO in f32 where
    its bf16 changes too many answers), so a budget must not skip it for the plans behind.
    Nothing moves for a peer, whose own plan comes right after it.
    """
    if beyond.target is None:
        return
    later = {job.target: index for index, job in enumerate(queue) if index >= start}
    siblings = more_exact(beyond.target, [t for t in later if t is not None])
    moved = [dataclasses.replace(queue[later[target]], needed=True) for target in siblings]
    for index in sorted((later[target] for target in siblings), reverse=True):
        del queue[index]
    queue[start:start] = moved


def _forecast_beyond(graph: Graph, job: WholeJob, deadline_s: float, found: WholeTimings) -> bool:
    """Whether ``job``'s compile of the whole model is forecast far past ``deadline_s``.

    Made for a codegen's first job (:mod:`~autopart.tuning.compile_forecast`): a peer's
    build, or the compile of its plan (built if due). A job forecast past marks its codegen
    too slow in ``found``, as a missed deadline does. The prefixes' compile time is added to
    ``found.abandoned_s`` (no race compiles them). A codegen already forecast within the
    deadline (its first job then failed for another reason) is not forecast again.
    """
    if job.codegen in found.forecasts:
        return False
    if job.peer is not None:
        forecast = forecast_peer(graph, job.peer, deadline_s)
    else:
        plan = job.plan if job.build is None else job.build()
        forecast = None if plan is None else forecast_plan(graph, plan, job.codegen, deadline_s)
    if forecast is None:
        return False
    found.forecasts[job.codegen] = forecast
    found.abandoned_s += forecast.spent_s
    if not forecast.beyond(deadline_s):
        return False
    found.too_slow[job.codegen] = deadline_s
    return True


def _time_job(
    model: ModelLike,
    graph: Graph,
    job: WholeJob,
    timed_on: tuple[Mapping[str, np.ndarray], Mapping[str, np.ndarray]],
    judge: Judge,
    said: tuple[dict[str, str], list[str]],
    hold: bool,
) -> tuple[dict[str, Measured], dict[str, Runner]]:
    """One job's runner compiled (a peer: built) and timed; with ``hold``, a peer's runner.

    The timings are empty when the runner could not be built or run. ``said`` holds the
    failures by name and the notes, each appended to.

    A plan built when due that repeats another's is not timed again. A round timed while
    the cores shared one core's speed is run again (:mod:`~autopart.profile.core_sharing`),
    as in the race: the screen times one runner at a time, so a spell of it would slow
    that runner alone (a 12,400-node stack's onnxruntime plan: 40 ms in the screen, 23.9
    in the race).

    ``timed_on`` holds the feeds and the reference's outputs on them.
    """
    feeds, reference = timed_on
    failures, notes = said
    runners: dict[str, Runner] = {}
    plan = job.build() if job.build is not None else job.plan
    if job.peer is not None:
        runners, failed = peers(model, PeerInputs.of(graph), only=job.peer.name)
        notes.extend(failed)
        if not runners:
            return {}, {}
    elif plan is None:  # it repeats another's plan
        return {}, {}
    kept = dict(runners) if hold else {}  # the rounds empty ``runners`` as each leaves them
    return measure_plans(
        graph, {} if plan is None else {job.name: plan}, feeds, SCREEN.rounds,
        warmup=SCREEN_WARMUP, peers=runners, peer_linger_s=peer_lingers(),
        min_timed_s=SCREEN.min_timed_s, failures=failures, tolerance=math.inf,
        reference=reference, judge=judge, probe=process_probe(),
    ), kept  # fmt: skip


def _name_of(jobs: Sequence[WholeJob], index: int) -> str | None:
    """The name of ``jobs[index]`` (None past the end)."""
    return jobs[index].name if index < len(jobs) else None


def reference_stand_in(
    single: SinglePlans, whole: Mapping[str, Measured], reference_s: float
) -> tuple[dict[str, Measured], list[str]]:
    """The reference codegen's whole plan, timed by the reference run, where the screen was not.

    The screen computes the reference's outputs with the reference codegen running the whole
    model (``reference_s`` seconds, one cold run), before any whole timing. When the budget
    then leaves that codegen's own single-target plan untimed, that one run is its timing:
    a cold run overstates a settled one, but op timings alone miss what the reference
    executor spends on each node beyond its kernels (about 6 us a node: 0.4 s measured
    against a 0.1 s op sum on a 50,000-node chain). Its outputs are the reference's, so its
    error is 0. Returns the stand-in (empty when the plan was timed, or is not one
    partition) and a note saying so.
    """
    codegen = reference_codegen().name
    for target in single.assignments:
        name = single_name(target)
        if target.codegen != codegen or target.unit is not None or name in whole:
            continue
        plan = single.built(target)
        if plan is not None and len(plan.partitions) == 1:
            note = (
                f"{name} is timed by the reference run alone ({reference_s * 1e3:.3g} ms, one "
                "cold run): the budget left no time for its settled timing"
            )
            return {name: Measured(latencies=[reference_s])}, [note]
    return {}, []


def quickest_plan(
    timed: Mapping[str, Measured], assignments: Collection[VirtualDevice]
) -> VirtualDevice | None:
    """The target of the quickest of ``timed`` that stands for a single-target plan here.

    A tool peer (NNCF's int8) may be quicker, but no plan stands for it: a tune keeps
    plans, so the screen prices first the quickest plan it could keep. None: none does.
    """
    standing = {name: stands_for(name, assignments) for name in timed}
    plans = [name for name, target in standing.items() if target is not None]
    return standing[min(plans, key=lambda n: timed[n].median_s)] if plans else None


def stands_for(name: str, assignments: Collection[VirtualDevice]) -> VirtualDevice | None:
    """The target whose single-target plan the runner ``name`` is (a peer: its equivalent).

    ``assignments`` are the targets (or their single-target assignments, by target).
    """
    for target in assignments:
        if single_name(target) == name:
            return target
    for peer in declared_peers():
        if peer.name == name and peer.stands_for_plan:
            precision = peer.precision()
            return next(
                (
                    target
                    for target in assignments
                    if target.codegen == peer.codegen
                    and target.precision == precision
                    and target.unit is None
                    and str(target.device) == HOST_DEVICE
                ),
                None,
            )
    return None
