"""Optuna search over assignments, for objectives only the simulator can score.

The ILP optimises the sequential cost exactly; the makespan of a concurrent schedule and the
(makespan, peak memory) front are scored by :mod:`autopart.search.simulator` and searched
here: univariate TPE (on 200-node graphs it found better makespans per second than
multivariate TPE, which optuna 5 makes the default), NSGA-II for the front. The search space
(:mod:`autopart.search.optuna_space`) has one categorical parameter per group of nodes; the
grouping is fixed when a study is created and stored in it.

Seeds (the ILP answer, the baselines) are enqueued as the first trials with their exact
assignment in ``user_attrs``, so the result is never worse than the best seed. Studies can be
stored and shared by several workers (:mod:`autopart.search.optuna_study`); an interrupted
search keeps every finished trial there, and the next call resumes from them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import optuna
from optuna.trial import Trial, TrialState

from autopart.costmodel.costs import Costs
from autopart.ir.target import VirtualDevice
from autopart.search.options import Objective
from autopart.search.optuna_space import Assignment, Codes, SearchSpace, build_space
from autopart.search.optuna_study import (
    OptunaSearchError,
    StudyMirror,
    check_or_store,
    default_study_name,
    describe_storage,
    make_sampler,
    open_study,
    trial_codes,
)
from autopart.search.simulator import peak_memory_bytes, plan_for, simulate

__all__ = ["OptunaResult", "OptunaSearchError", "SearchProgress", "optuna_search"]


@dataclass(frozen=True)
class SearchProgress:
    """Where an optuna search stands after one finished trial.

    ``trial`` counts the study's finished trials, this one included (its 1-based position),
    ``new_trials`` this call's; ``values`` are the trial's, ``best_s`` the best first value
    this call has seen, ``elapsed_s`` the seconds since the search started.
    """

    trial: int
    new_trials: int
    values: tuple[float, ...]
    best_s: float
    elapsed_s: float


@dataclass
class OptunaResult:
    """What an optuna search found.

    ``assignment`` and ``value_s`` are the best trial (for ``pareto``, the front's point with
    the lowest makespan); ``trials`` counts the study's finished trials, ``new_trials`` those
    this call ran. ``best_seed_name``/``best_seed_value`` are the best seed given to this call
    (value = makespan for ``pareto``). ``pareto`` holds (assignment, makespan, peak bytes) of
    the non-dominated trials, by makespan (empty unless ``objective`` is ``pareto``).
    """

    assignment: Assignment
    value_s: float
    trials: int
    new_trials: int
    best_seed_name: str | None
    best_seed_value: float | None
    pareto: list[tuple[Assignment, float, int]] = field(default_factory=list)
    study_name: str = ""
    objective: Objective = Objective.MAKESPAN


def optuna_search(
    costs: Costs,
    objective: Objective | str,
    seeds: Mapping[str, Mapping[str, VirtualDevice]],
    *,
    budget_s: float | None = None,
    n_trials: int | None = None,
    seed: int = 0,
    storage: str | None = None,
    study_name: str | None = None,
    progress: Callable[[SearchProgress], None] | None = None,
    group_chains: bool = True,
) -> OptunaResult:
    """Search assignments of ``costs.graph`` for ``objective``; resume a stored study.

    ``makespan`` minimises ``simulate(plan).makespan_s`` (TPE, seeded with ``seed``);
    ``pareto`` minimises (makespan, peak memory bytes) with NSGA-II. Only targets in
    ``costs.supported(node)`` are ever chosen. ``seeds`` (name -> full assignment) run first,
    except those whose assignment the study already holds; they always run, whatever the
    budget. Then trials run until this call has run ``n_trials`` (seeds included) or
    ``budget_s`` seconds have passed, whichever comes first; with neither, until interrupted.
    ``storage`` is an optuna RDB URL (``sqlite:///search/<name>/study.db`` creates the
    folder); ``None`` keeps the study in memory. A KeyboardInterrupt, also one raised by
    ``progress`` (called after every finished trial), propagates once the trial under way
    is failed, with a note of the finished trials the stored study keeps (a later call
    resumes from them). ``group_chains=False`` gives every node its
    own parameter. Raises :class:`OptunaSearchError` for another objective, seeds that miss
    nodes or use unsupported targets, a stored study of another graph, targets or
    objective, or nothing to report.
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if objective not in (Objective.MAKESPAN, Objective.PARETO):
        raise OptunaSearchError(f"unknown objective {objective!r}: use makespan or pareto")
    objective = Objective(objective)
    seed_codes = {name: _seed_codes(costs, name, seed_map) for name, seed_map in seeds.items()}
    space = build_space(costs, list(seed_codes.values()), group_chains)
    meta = {"objective": str(objective), **space.to_attrs()}
    name = study_name or default_study_name(costs, objective)
    stored = open_study(storage, name, objective)
    where = f"{describe_storage(storage)} (study {name!r})" if storage else "study"
    if stored is not None:
        space = check_or_store(stored, space, meta, where)
    studies = StudyMirror(stored, space, objective, where)
    existing = studies.local.get_trials(deepcopy=False)
    studies.local.sampler = make_sampler(objective, seed + len(existing))

    scorer = _Scorer(costs, space, objective)
    held = {trial_codes(trial) for trial in existing}
    for seed_name, codes in seed_codes.items():
        if codes in held:
            continue
        held.add(codes)
        studies.local.enqueue_trial(
            space.encode(codes), user_attrs={"seed": seed_name, "seed_assignment": list(codes)}
        )
    waiting = len(studies.local.get_trials(deepcopy=False, states=(TrialState.WAITING,)))

    new_trials = _run(studies, scorer, waiting, budget_s, n_trials, progress)
    return _result(studies, scorer, space, seed_codes, objective, new_trials, name)


class _Scorer:
    """Scores target-index tuples through the simulator, caching repeats."""

    def __init__(self, costs: Costs, space: SearchSpace, objective: Objective) -> None:
        self.costs = costs
        self.space = space
        self.objective = objective
        self.source = str(costs.graph.meta.get("source", costs.graph.name))
        self.cache: dict[Codes, tuple[float, ...]] = {}

    def __call__(self, codes: Codes) -> tuple[float, ...]:
        if codes not in self.cache:
            plan = plan_for(self.space.assignment(codes), self.costs, self.source)
            values: tuple[float, ...]
            if self.objective == Objective.PARETO:
                values = (simulate(plan, self.costs).makespan_s, float(peak_memory_bytes(plan)))
            else:
                values = (simulate(plan, self.costs).makespan_s,)
            self.cache[codes] = values
        return self.cache[codes]

    def trial(self, trial: Trial) -> tuple[float, ...]:
        """Suggest every group's target, score the assignment and record it on ``trial``."""
        params = {
            self.space.name(g): trial.suggest_categorical(self.space.name(g), self.space.labels(g))
            for g in range(len(self.space.groups))
        }
        exact = trial.user_attrs.get("seed_assignment")
        codes = tuple(exact) if exact is not None else self.space.decode(params)
        trial.set_user_attr("assignment", list(codes))
        return self(codes)


def _run(
    studies: StudyMirror,
    scorer: _Scorer,
    waiting: int,
    budget_s: float | None,
    n_trials: int | None,
    progress: Callable[[SearchProgress], None] | None,
) -> int:
    """Ask, score and tell until the budget is spent; return the trials run.

    An interrupt propagates, noting what the stored study keeps.
    """
    start = time.perf_counter()
    new_trials = 0
    best = math.inf
    try:
        while True:
            elapsed = time.perf_counter() - start
            if new_trials >= waiting and (
                (n_trials is not None and new_trials >= n_trials)
                or (budget_s is not None and elapsed >= budget_s)
            ):
                return new_trials
            studies.pull()
            trial = studies.local.ask()
            try:
                values = scorer.trial(trial)
            except BaseException:
                studies.local.tell(trial, state=TrialState.FAIL)
                raise
            studies.tell(trial, values)
            new_trials += 1
            best = min(best, values[0])
            if progress is not None:
                elapsed = time.perf_counter() - start
                progress(SearchProgress(studies.finished(), new_trials, values, best, elapsed))
    except KeyboardInterrupt as interrupt:
        if studies.stored is not None:
            interrupt.add_note(f"kept {studies.finished()} finished trials in {studies.where}")
        raise


def _result(
    studies: StudyMirror,
    scorer: _Scorer,
    space: SearchSpace,
    seed_codes: Mapping[str, Codes],
    objective: Objective,
    new_trials: int,
    name: str,
) -> OptunaResult:
    """The best trial (or seed, should no seed trial have finished) and the Pareto front."""
    finished = studies.local.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    points: dict[Codes, tuple[float, ...]] = {}
    for trial in finished:
        codes = trial_codes(trial)
        if codes is not None and trial.values is not None:
            points[codes] = tuple(trial.values)
    seed_values = {seed_name: scorer(codes) for seed_name, codes in seed_codes.items()}
    for seed_name, codes in seed_codes.items():
        points.setdefault(codes, seed_values[seed_name])
    if not points:
        raise OptunaSearchError(f"study {name!r} has no finished trial and no seed was given")
    best_seed = min(seed_values, key=lambda s: seed_values[s][0], default=None)
    front: list[tuple[Assignment, float, int]] = []
    if objective == Objective.PARETO:
        keep = _non_dominated(points)
        front = [(space.assignment(c), points[c][0], int(points[c][1])) for c in keep]
        best_codes = keep[0]
    else:
        best_codes = min(points, key=lambda c: points[c][0])
    return OptunaResult(
        assignment=space.assignment(best_codes),
        value_s=points[best_codes][0],
        trials=studies.finished(),
        new_trials=new_trials,
        best_seed_name=best_seed,
        best_seed_value=None if best_seed is None else seed_values[best_seed][0],
        pareto=front,
        study_name=name,
        objective=objective,
    )


def _non_dominated(points: Mapping[Codes, tuple[float, ...]]) -> list[Codes]:
    """The points no other point beats on both values, by first value; one per value pair."""
    ordered = sorted(points, key=lambda c: (points[c][0], points[c][1]))
    keep: list[Codes] = []
    lowest = math.inf
    for codes in ordered:
        if points[codes][1] < lowest:
            keep.append(codes)
            lowest = points[codes][1]
    return keep


def _seed_codes(costs: Costs, name: str, seed: Mapping[str, VirtualDevice]) -> Codes:
    """Target indices of a seed; raise :class:`OptunaSearchError` for missed or misplaced nodes."""
    position = {target: i for i, target in enumerate(costs.targets)}
    missing = [node.name for node in costs.graph.nodes if node.name not in seed]
    bad = [
        node.name
        for node in costs.graph.nodes
        if node.name in seed and seed[node.name] not in costs.supported(node)
    ]
    if missing or bad:
        problem = (
            f"misses nodes {missing[:5]}" if missing else f"uses unsupported targets for {bad[:5]}"
        )
        raise OptunaSearchError(f"seed {name!r} {problem}")
    return tuple(position[seed[node.name]] for node in costs.graph.nodes)
