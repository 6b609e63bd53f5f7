"""Choosing a plan: the exact ILP, the optuna search and the peer baselines, compared alike.

Every candidate assignment (ILP answer, optuna's answer, each baseline) becomes a plan and is
costed by the same simulator, so the comparison is fair. Constraints restrict the costs
before any method runs, so every candidate honours pins and forbids; candidates that break
a memory cap are kept for comparison but never chosen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from autopart.costmodel.costs import Costs
from autopart.ir.target import VirtualDevice
from autopart.plan.schema import IlpSummary, Plan, Prediction, ScheduleStep
from autopart.progress import Progress
from autopart.search.baselines import Baseline, baselines, default_fallback, whole_models
from autopart.search.candidates import Candidate, CandidateKind, candidate_name
from autopart.search.constraints import ConstraintError, Constraints, apply, keep_precisions
from autopart.search.ilp import IlpResult, Known, memory_estimate, solve_ilp
from autopart.search.one_library import one_library_assignments
from autopart.search.options import Objective, SearchOptions
from autopart.search.optuna_search import OptunaResult, SearchProgress, optuna_search
from autopart.search.simulator import Simulation, SimulationError, plan_for, simulate
from autopart.search.simulator import stand_in as standing_in
from autopart.settings import tuned

Assignment = dict[str, VirtualDevice]


@dataclass(frozen=True)
class SearchSettings:
    """Bounds of the search (search.planner)."""

    ilp_time_limit_s: float = tuned(
        60.0,
        "the ILP's time limit when no budget is given, and its cap: densenet121 (609 nodes, "
        "7 targets) solved in 0.36 s, a 3000-node layered graph hit 60 s with a 0.3% gap "
        "(experiments/results/ilp_scaling.csv)",
    )
    default_trials: int = tuned(300, "optuna trials without a budget")


SEARCH = SearchSettings()


@dataclass
class SearchOutcome:
    """The chosen candidate, every candidate by name, and what the ILP and optuna reported.

    ``method`` says what ran: ``ilp``, or ``ilp+optuna``; ``optuna`` is the optuna search's
    result (its best is the ``tuned`` candidate), ``pareto`` its front as candidates;
    ``options`` are those the search ran with; ``notes`` say what it had to give up.
    """

    objective: Objective
    method: str
    chosen: Candidate
    candidates: dict[str, Candidate]
    ilp: IlpResult | None = None
    optuna: OptunaResult | None = None
    pareto: list[Candidate] = field(default_factory=list)
    options: SearchOptions = field(default_factory=SearchOptions)
    notes: list[str] = field(default_factory=list)


def search(
    costs: Costs,
    options: SearchOptions | None = None,
    *,
    progress: Callable[[SearchProgress], None] | None = None,
    steps: Progress | None = None,
) -> SearchOutcome:
    """Find the best plan of ``costs.graph`` for ``options.objective`` under its constraints.

    Method ``auto`` solves the ILP (exact for ``latency``) and, for ``makespan`` and
    ``pareto``, runs the optuna search seeded by the ILP answer and every baseline that fits
    memory; ``ilp`` and ``optuna`` force one. Only targets computing in a precision of
    ``options.precision`` are used. Every baseline is a candidate too, as are the ILP's
    precisions on each library that mixes them (``ilp-on:<target>``); the chosen one is
    the best that fits memory, ties going to the method's own answer. ``progress`` is
    called after every optuna trial; ``steps`` before each candidate is priced and each ILP
    solve. Raises :class:`ConstraintError` when the constraints cannot hold.
    """
    options = options or SearchOptions()
    if options.objective == Objective.THROUGHPUT:
        raise ConstraintError("the throughput objective plans a stream across the hosts of a "
                              "cluster: tune with --cluster")  # fmt: skip
    constraints = options.constraints or Constraints()
    restricted = apply(keep_precisions(costs, options.precision), constraints)
    named = constraints.fallback
    fallback = VirtualDevice.parse(named) if named else default_fallback(restricted)

    def candidate(
        kind: CandidateKind,
        assignment: Assignment,
        target: VirtualDevice | None = None,
        index: int | None = None,
        stand_in: Candidate | None = None,
        built: Plan | None = None,
    ) -> Candidate:
        if steps is not None:
            steps(len(candidates), 0, f"pricing {kind.value} plan")
        other = None if stand_in is None else stand_in.plan
        plan, simulation = builds.priced(assignment, other, built)
        fits = _fits(restricted, assignment, constraints.memory)
        accurate = options.accuracy is None or options.accuracy.fits(assignment)
        made = Candidate(
            kind, dict(assignment), plan, simulation, fits, target, index,
            fits_accuracy=accurate, stand_in=other,
        )  # fmt: skip
        if kind is not CandidateKind.PARETO:  # the front is kept apart
            candidates[made.name] = made
        return made

    builds = _Builds(restricted, options.source, fallback)
    candidates: dict[str, Candidate] = {}
    for baseline in baselines(restricted, fallback):
        candidate(baseline.kind, baseline.assignment, baseline.target)
    ilp, notes = _solve(restricted, constraints.memory, options, steps, _known(candidates))
    candidate(CandidateKind.ILP, ilp.assignment, built=_as_planned(ilp.plan, options, fallback))
    for library, assignment in one_library_assignments(restricted, ilp.assignment):
        candidate(CandidateKind.ILP_ON_ONE, assignment, library)
    optuna: OptunaResult | None = None
    pareto: list[Candidate] = []
    if options.uses_optuna:
        seeds = {name: c.assignment for name, c in candidates.items() if c.fits_memory}
        optuna = _optuna(restricted, seeds, options, progress)
        candidate(CandidateKind.TUNED, optuna.assignment)
        pareto = [
            candidate(CandidateKind.PARETO, assignment, index=i)
            for i, (assignment, _, _) in enumerate(optuna.pareto)
        ]
    if not constraints.pins and not constraints.forbids:  # after optuna: nothing to seed
        for whole, single in _whole_models(restricted, candidates):
            candidate(whole.kind, whole.assignment, whole.target, stand_in=single)
    fitting = [c for c in candidates.values() if c.fits_memory]
    if not fitting:
        raise ConstraintError("no plan found fits the memory caps " + str(constraints.memory))
    used = "ilp" if optuna is None else "ilp+optuna"
    outcome = SearchOutcome(
        options.objective, used, fitting[0], candidates, ilp, optuna, pareto, options, notes
    )
    outcome.chosen = _best(outcome)
    return outcome


class _Builds:
    """Each distinct assignment's plan, built and priced once: baselines often repeat one another.

    On a 50,000-node chain the single-target plans, ONNX Runtime's rule, HEFT and the
    ILP's answer were three assignments of six; each plan took about 1 s to build and
    0.3 s to simulate. A repeat gets its own copy of the plan (its notes and record its
    own), sharing the partitions, and the same simulation (the costs are the search's).
    """

    def __init__(self, costs: Costs, source: str, fallback: VirtualDevice) -> None:
        self.costs, self.source, self.fallback = costs, source, fallback
        self.built: list[tuple[Assignment, Plan, Plan | None, Simulation]] = []

    def priced(
        self, assignment: Assignment, stand_in: Plan | None, built: Plan | None = None
    ) -> tuple[Plan, Simulation]:
        """The plan of ``assignment`` and its :func:`price` (with ``stand_in``), each once.

        ``built`` is the plan already built for ``assignment`` (the ILP's), used when the
        assignment is new. The plan is :func:`~autopart.search.simulator.plan_for`'s.
        """
        for seen, plan, seen_stand_in, simulation in self.built:
            if seen == assignment:
                copied = replace(plan, notes=list(plan.notes))
                if seen_stand_in is stand_in:
                    return copied, simulation
                return copied, price(copied, self.costs, stand_in)
        plan = built or plan_for(assignment, self.costs, self.source, self.fallback)
        simulation = price(plan, self.costs, stand_in)
        self.built.append((dict(assignment), plan, stand_in, simulation))
        return plan, simulation


def _solve(
    costs: Costs,
    memory: dict[str, int],
    options: SearchOptions,
    steps: Progress | None,
    known: Known = (),
) -> tuple[IlpResult, list[str]]:
    """The ILP's answer within ``options``' time, and a note if it dropped the accuracy row.

    ``known`` are the baselines' assignments with their simulated latency on ``costs``.

    A tolerance that no assignment keeps (as predicted) must not refuse a model the
    race could still check: the ILP is then solved without it, and a note says so. Memory
    caps that nothing fits still raise :class:`ConstraintError`.
    """
    cap = SEARCH.ilp_time_limit_s
    time_limit = min(options.budget_s or cap, options.cap_s or cap, cap)
    accuracy = options.accuracy
    try:
        return solve_ilp(
            costs, memory, time_limit_s=time_limit, progress=steps, accuracy=accuracy,
            known=known,
        ), []  # fmt: skip
    except ConstraintError:
        if accuracy is None:
            raise
    ilp = solve_ilp(costs, memory, time_limit_s=time_limit, progress=steps, known=known)
    return ilp, [
        "no assignment keeps the predicted error within the tolerance "
        f"({accuracy.tolerance:.3g}), so the ILP was solved without it; every plan's "
        "error is measured in the race"
    ]


def _known(candidates: dict[str, Candidate]) -> Known:
    """Each candidate's assignment with its simulated sequential latency."""
    return [(c.assignment, c.simulation.sequential_s) for c in candidates.values()]


def _as_planned(plan: Plan | None, options: SearchOptions, fallback: VirtualDevice) -> Plan | None:
    """``plan`` as :func:`plan_for` builds it with the search's source and fallback.

    The solver builds its answer's plan with :func:`plan_for`'s defaults; the two differ
    in nothing else, so the plan need not be built again.
    """
    if plan is None:
        return None
    model = plan.model if not options.source else replace(plan.model, source=options.source)
    return replace(plan, model=model, fallback=str(fallback))


def _whole_models(
    costs: Costs, candidates: dict[str, Candidate]
) -> list[tuple[Baseline, Candidate]]:
    """Each whole-model baseline (:func:`whole_models`) and the single plan that prices it.

    Its op costs cannot seed optuna nor price it: it is priced as its target's single plan
    until timed whole, and left out where there is none.
    """
    pairs = []
    for whole in whole_models(costs):
        single = candidates.get(candidate_name(CandidateKind.SINGLE, whole.target))
        if single is not None:
            pairs.append((whole, single))
    return pairs


def _best(outcome: SearchOutcome) -> Candidate:
    """The fitting candidate predicted best, ties going to the method's own answer.

    Candidates within the tolerance come first; the others only when none is.
    """
    preferred = CandidateKind.TUNED if outcome.optuna is not None else CandidateKind.ILP
    fitting = [c for c in outcome.candidates.values() if c.fits_memory]
    return min(
        fitting,
        key=lambda c: (not c.fits_accuracy, c.value(outcome.objective), c.kind != preferred),
    )


def reprice(outcome: SearchOutcome, costs: Costs) -> None:
    """Simulate every candidate again with ``costs`` and choose afresh (in place).

    For costs that learnt more since the search, such as partitions measured whole
    (:attr:`Costs.measured`): the candidates stay, their predictions and the pick move.
    """
    for candidate in [*outcome.candidates.values(), *outcome.pareto]:
        candidate.simulation = price(candidate.plan, costs, candidate.stand_in)
    outcome.chosen = _best(outcome)


def price(plan: Plan, costs: Costs, stand_in: Plan | None = None) -> Simulation:
    """``plan`` simulated with ``costs``; priced as ``stand_in`` where its op costs cannot.

    A plan holding nodes its target has no op cost for (a library running the whole model)
    is simulated once its partition was timed whole (:attr:`Costs.measured`); until then
    it costs what ``stand_in`` simulates to (:func:`~autopart.search.simulator.stand_in`).
    Raises :class:`SimulationError` when neither can be priced.
    """
    try:
        return simulate(plan, costs)
    except SimulationError:
        if stand_in is None:
            raise
        return standing_in(plan, simulate(stand_in, costs))


def _optuna(
    costs: Costs,
    seeds: dict[str, Assignment],
    options: SearchOptions,
    progress: Callable[[SearchProgress], None] | None,
) -> OptunaResult:
    """The optuna search for ``options``: the front for ``pareto``, else the makespan."""
    return optuna_search(
        costs,
        Objective.PARETO if options.objective == Objective.PARETO else Objective.MAKESPAN,
        seeds,
        budget_s=_capped(options.budget_s, options.cap_s),
        n_trials=None if options.budget_s else SEARCH.default_trials,
        seed=options.seed,
        storage=options.storage,
        study_name=options.study_name,
        progress=progress,
    )


def _capped(budget_s: float | None, cap_s: float | None) -> float | None:
    """``budget_s`` within ``cap_s`` (either None: the other)."""
    if budget_s is None or cap_s is None:
        return cap_s if budget_s is None else budget_s
    return min(budget_s, cap_s)


def _fits(costs: Costs, assignment: Assignment, memory: dict[str, int]) -> bool:
    """Whether ``assignment`` fits the caps, by the same estimate the ILP's caps use."""
    if not memory:
        return True
    used = memory_estimate(costs, assignment)
    return all(used.get(device, 0) <= cap for device, cap in memory.items())


def annotate(
    plan: Plan,
    simulation: Simulation,
    costs: Costs,
    objective: str,
    *,
    profile: str | None = None,
    method: str | None = None,
    candidate: str | None = None,
    ilp: IlpSummary | None = None,
    error: float | None = None,
    error_metric: str | None = None,
) -> None:
    """Record the prediction in ``plan.predicted`` (what ``autopart show`` draws).

    The one writer of :class:`Prediction`: the simulated totals and schedule, every node's
    costs, what the search reported, and the predicted output ``error`` if known (the drop
    in ``error_metric`` where one is named, else the largest relative error).
    """
    plan.predicted = Prediction(
        objective=objective,
        sequential_s=simulation.sequential_s,
        makespan_s=simulation.makespan_s,
        schedule=[ScheduleStep(s.step, s.lane, s.start_s, s.end_s) for s in simulation.schedule],
        node_costs={
            node: {str(target): seconds for target, seconds in entry.items()}
            for node, entry in costs.node_cost.items()
        },
        profile=profile,
        method=method,
        candidate=candidate,
        ilp=ilp,
        error=error,
        error_metric=error_metric,
    )
