"""Optuna search over assignments, for objectives only the simulator can score.

The ILP optimises the sequential cost exactly; the makespan of a concurrent schedule, the
time of a burst of pipelined requests and the (makespan, peak memory) front are scored by
:mod:`autopart.search.simulator` and searched here: univariate TPE (on 200-node graphs it
found better makespans per second than multivariate TPE, which optuna 5 makes the default),
NSGA-II for the front.

Search space: one categorical parameter per *group* of nodes, over the group's supported
targets. A group is a maximal chain (each node's only consumer node is the next, whose only
producer node is it) whose nodes share their supported set and on which every seed agrees;
nodes with a single choice are fixed. Moving a whole chain at once avoids the two copies a
lone move inside a chain adds, halves the parameters of a transformer encoder, and splitting
chains wherever a seed does keeps every seed expressible. The grouping is fixed when a study
is created and stored in it; ``group_chains=False`` gives every node its own parameter.

Seeds (the ILP answer, the baselines) are enqueued as the first trials with their exact
assignment in ``user_attrs``, so the result is never worse than the best seed. Each trial
stores its assignment as target indices (``user_attrs["assignment"]``) against the node and
target lists kept in the study's ``user_attrs``, so any worker can rebuild the best plan
from storage. The sampler works on an in-memory study; finished trials go to the stored
study (any optuna RDB URL, so several processes can share one) as values and user
attributes only, and each worker pulls the others' finished trials before every trial. An
interrupted tune resumes with every finished trial kept.
"""

from __future__ import annotations

import math
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial, Trial, TrialState

from autopart.costmodel.costs import Costs
from autopart.errors import AutopartError
from autopart.ir.hashing import graph_hash
from autopart.ir.target import VirtualDevice
from autopart.search.simulator import peak_memory_bytes, plan_for, simulate, simulate_pipeline

Objective = Literal["makespan", "pipeline", "pareto"]
Assignment = dict[str, VirtualDevice]
Codes = tuple[int, ...]
_ATTR = "autopart"


class TuneError(AutopartError):
    """A tune cannot start or finish: bad seeds, a study of another model, no finished trial."""


@dataclass(frozen=True)
class TuneProgress:
    """Where a search stands after one finished trial.

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
class TuneResult:
    """What a tune found.

    ``assignment`` and ``value_s`` are the best trial (for ``pareto``, the front's point with
    the lowest makespan); ``trials`` counts the study's finished trials, ``new_trials`` those
    this call ran. ``best_seed_name``/``best_seed_value`` are the best seed given to this call
    (value = makespan for ``pareto``). ``pareto`` holds (assignment, makespan, peak bytes) of
    the non-dominated trials, by makespan (empty unless ``objective == "pareto"``).
    """

    assignment: Assignment
    value_s: float
    trials: int
    new_trials: int
    best_seed_name: str | None
    best_seed_value: float | None
    pareto: list[tuple[Assignment, float, int]] = field(default_factory=list)
    interrupted: bool = False
    study_name: str = ""
    objective: Objective = "makespan"


@dataclass(frozen=True)
class SearchSpace:
    """Nodes and targets by index, the parameter groups and their choices.

    ``groups[g]`` lists node indices that share parameter ``g`` (named after its first
    node); ``choices[g]`` the target indices it ranges over. ``fixed`` maps node index to
    target index for nodes with one supported target.
    """

    nodes: list[str]
    targets: list[VirtualDevice]
    groups: list[list[int]]
    choices: list[list[int]]
    fixed: dict[int, int]

    def name(self, group: int) -> str:
        """The optuna parameter name of ``group``."""
        return self.nodes[self.groups[group][0]]

    def labels(self, group: int) -> list[str]:
        """The categorical choices of ``group``, as target strings."""
        return [str(self.targets[t]) for t in self.choices[group]]

    def decode(self, params: Mapping[str, str]) -> Codes:
        """Target index of every node, from one value per group."""
        codes = [0] * len(self.nodes)
        index = {str(target): i for i, target in enumerate(self.targets)}
        for node, target in self.fixed.items():
            codes[node] = target
        for group, members in enumerate(self.groups):
            for node in members:
                codes[node] = index[params[self.name(group)]]
        return tuple(codes)

    def encode(self, codes: Codes) -> dict[str, str]:
        """The parameters nearest ``codes``: each group takes its most common target."""
        params = {}
        for group, members in enumerate(self.groups):
            votes = Counter(codes[node] for node in members)
            best = max(self.choices[group], key=lambda t: (votes[t], -t))
            params[self.name(group)] = str(self.targets[best])
        return params

    def assignment(self, codes: Sequence[int]) -> Assignment:
        """The assignment that ``codes`` spell."""
        return {node: self.targets[code] for node, code in zip(self.nodes, codes, strict=True)}

    def supported(self) -> list[list[int]]:
        """Every node's supported target indices."""
        sets = [[target] for target in (self.fixed.get(i, -1) for i in range(len(self.nodes)))]
        for group, members in enumerate(self.groups):
            for node in members:
                sets[node] = list(self.choices[group])
        return sets

    def to_attrs(self) -> dict[str, Any]:
        """The JSON form kept in the study's user attributes."""
        return {
            "nodes": self.nodes,
            "targets": [str(t) for t in self.targets],
            "supported": self.supported(),
            "groups": self.groups,
            "choices": self.choices,
        }


def build_space(costs: Costs, seeds: Sequence[Codes] = (), chains: bool = True) -> SearchSpace:
    """Group ``costs.graph``'s chains into parameters (see the module docstring).

    ``seeds`` are target-index tuples a group must not split; ``chains=False`` gives every
    node with a choice its own parameter.
    """
    graph = costs.graph
    targets = list(costs.targets)
    position = {target: i for i, target in enumerate(targets)}
    nodes = [node.name for node in graph.nodes]
    index = {name: i for i, name in enumerate(nodes)}
    supported = [tuple(position[t] for t in costs.supported(node)) for node in graph.nodes]
    preds: list[set[int]] = [set() for _ in nodes]
    succs: list[set[int]] = [set() for _ in nodes]
    for i, node in enumerate(graph.nodes):
        for value in node.present_inputs:
            producer = graph.value(value).producer
            if producer is not None:
                preds[i].add(index[producer.name])
                succs[index[producer.name]].add(i)
    fixed = {i: choice[0] for i, choice in enumerate(supported) if len(choice) == 1}
    group_of: dict[int, int] = {}
    groups: list[list[int]] = []
    for i in range(len(nodes)):
        if i in fixed:
            continue
        pred = next(iter(preds[i])) if len(preds[i]) == 1 else None
        joins = (
            chains
            and pred is not None
            and pred in group_of
            and succs[pred] == {i}
            and supported[pred] == supported[i]
            and all(seed[pred] == seed[i] for seed in seeds)
        )
        if joins:
            group_of[i] = group_of[pred]
            groups[group_of[i]].append(i)
        else:
            group_of[i] = len(groups)
            groups.append([i])
    choices = [list(supported[members[0]]) for members in groups]
    return SearchSpace(nodes, targets, groups, choices, fixed)


def tune(
    costs: Costs,
    objective: Objective,
    seeds: Mapping[str, Mapping[str, VirtualDevice]],
    budget_s: float | None,
    n_trials: int | None,
    seed: int = 0,
    storage: str | None = None,
    study_name: str | None = None,
    pipeline_requests: int = 4,
    progress: Callable[[TuneProgress], None] | None = None,
    group_chains: bool = True,
) -> TuneResult:
    """Search assignments of ``costs.graph`` for ``objective``; resume a stored study.

    ``makespan`` minimises ``simulate(plan).makespan_s``, ``pipeline`` minimises
    ``simulate_pipeline(plan, costs, pipeline_requests)`` (TPE, seeded with ``seed``);
    ``pareto`` minimises (makespan, peak memory bytes) with NSGA-II. Only targets in
    ``costs.supported(node)`` are ever chosen. ``seeds`` (name -> full assignment) run first,
    except those whose assignment the study already holds; they always run, whatever the
    budget. Then trials run until this call has run ``n_trials`` (seeds included) or
    ``budget_s`` seconds have passed, whichever comes first; with neither, until interrupted.
    ``storage`` is an optuna RDB URL (``sqlite:///search/<name>/study.db`` creates the
    folder); ``None`` keeps the study in memory. A KeyboardInterrupt, also one raised by
    ``progress`` (called after every finished trial), stops the search cleanly and returns
    the best so far with ``interrupted=True``. ``group_chains=False`` gives every node its
    own parameter. Raises :class:`TuneError` for seeds that miss nodes or use unsupported
    targets, a stored study of another graph, targets or objective, or nothing to report.
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if objective not in ("makespan", "pipeline", "pareto"):
        raise TuneError(f"unknown objective {objective!r}: use makespan, pipeline or pareto")
    seed_codes = {name: _seed_codes(costs, name, seed_map) for name, seed_map in seeds.items()}
    space = build_space(costs, list(seed_codes.values()), group_chains)
    requests = pipeline_requests if objective == "pipeline" else None
    meta = {"objective": objective, "pipeline_requests": requests, **space.to_attrs()}
    name = study_name or _default_name(costs, objective, pipeline_requests)
    stored = _open_study(storage, name, objective)
    if stored is not None:
        space = _check_or_store(stored, space, meta)
    studies = _Studies(stored, space, objective)
    existing = studies.local.get_trials(deepcopy=False)
    studies.local.sampler = _sampler(objective, seed + len(existing))

    scorer = _Scorer(costs, space, objective, pipeline_requests)
    held = {_trial_codes(trial) for trial in existing}
    for seed_name, codes in seed_codes.items():
        if codes in held:
            continue
        held.add(codes)
        studies.local.enqueue_trial(
            space.encode(codes), user_attrs={"seed": seed_name, "seed_assignment": list(codes)}
        )
    waiting = len(studies.local.get_trials(deepcopy=False, states=(TrialState.WAITING,)))

    new_trials, interrupted = _run(studies, scorer, waiting, budget_s, n_trials, progress)
    return _result(studies, scorer, space, seed_codes, objective, new_trials, interrupted, name)


class _Studies:
    """The in-memory study the sampler works on, mirroring the stored study (if any).

    Sampling against a database costs queries per parameter and trial; here only finished
    trials cross, as values and user attributes (the assignment) without optuna parameters,
    which cost a row each. Each trial is stored once told; finished trials of other workers
    (or earlier calls) are pulled in before every trial, their parameters rebuilt from the
    assignment.
    """

    def __init__(
        self, stored: optuna.Study | None, space: SearchSpace, objective: Objective
    ) -> None:
        self.stored = stored
        self.space = space
        self.distributions = {
            space.name(g): CategoricalDistribution(space.labels(g))
            for g in range(len(space.groups))
        }
        directions = ["minimize"] * (2 if objective == "pareto" else 1)
        self.local = optuna.create_study(directions=directions)
        self.objective = objective
        self.token = uuid.uuid4().hex
        self.seen: set[int] = set()
        self.pull()

    def pull(self) -> None:
        """Add the stored study's finished trials this worker has not seen yet."""
        if self.stored is None:
            return
        finished = self.stored.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        fresh = [
            trial
            for trial in finished
            if trial.number not in self.seen
            and trial.user_attrs.get("worker") != self.token
            and _trial_codes(trial) is not None
        ]
        self.seen.update(trial.number for trial in finished)
        for trial in fresh:
            codes = _trial_codes(trial)
            assert codes is not None
            self.local.add_trial(
                optuna.trial.create_trial(
                    values=trial.values,
                    params=self.space.encode(codes),
                    distributions=self.distributions,
                    user_attrs=trial.user_attrs,
                )
            )

    def tell(self, trial: Trial, values: tuple[float, ...]) -> None:
        """Finish ``trial`` with ``values`` and store it."""
        trial.set_user_attr("worker", self.token)
        told = self.local.tell(trial, list(values) if self.objective == "pareto" else values[0])
        if self.stored is not None:
            self.stored.add_trial(
                optuna.trial.create_trial(
                    values=told.values,
                    user_attrs={k: v for k, v in told.user_attrs.items() if k != "seed_assignment"},
                )
            )

    def finished(self) -> int:
        """Finished trials in the stored study (the local one without storage)."""
        study = self.stored if self.stored is not None else self.local
        return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))


# -- the search loop ---------------------------------------------------------------------------
class _Scorer:
    """Scores target-index tuples through the simulator, caching repeats."""

    def __init__(
        self, costs: Costs, space: SearchSpace, objective: Objective, requests: int
    ) -> None:
        self.costs = costs
        self.space = space
        self.objective = objective
        self.requests = requests
        self.source = str(costs.graph.meta.get("source", costs.graph.name))
        self.cache: dict[Codes, tuple[float, ...]] = {}

    def __call__(self, codes: Codes) -> tuple[float, ...]:
        if codes not in self.cache:
            plan = plan_for(self.space.assignment(codes), self.costs, self.source)
            if self.objective == "pipeline":
                values: tuple[float, ...] = (simulate_pipeline(plan, self.costs, self.requests),)
            elif self.objective == "pareto":
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
    studies: _Studies,
    scorer: _Scorer,
    waiting: int,
    budget_s: float | None,
    n_trials: int | None,
    progress: Callable[[TuneProgress], None] | None,
) -> tuple[int, bool]:
    """Ask, score and tell until the budget is spent; return (trials run, interrupted)."""
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
                return new_trials, False
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
                progress(TuneProgress(studies.finished(), new_trials, values, best, elapsed))
    except KeyboardInterrupt:
        return new_trials, True


def _result(
    studies: _Studies,
    scorer: _Scorer,
    space: SearchSpace,
    seed_codes: Mapping[str, Codes],
    objective: Objective,
    new_trials: int,
    interrupted: bool,
    name: str,
) -> TuneResult:
    """The best trial (or seed, should no seed trial have finished) and the Pareto front."""
    finished = studies.local.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    points: dict[Codes, tuple[float, ...]] = {}
    for trial in finished:
        codes = _trial_codes(trial)
        if codes is not None and trial.values is not None:
            points[codes] = tuple(trial.values)
    seed_values = {seed_name: scorer(codes) for seed_name, codes in seed_codes.items()}
    for seed_name, codes in seed_codes.items():
        points.setdefault(codes, seed_values[seed_name])
    if not points:
        raise TuneError(f"study {name!r} has no finished trial and no seed was given")
    best_seed = min(seed_values, key=lambda s: seed_values[s][0], default=None)
    front: list[tuple[Assignment, float, int]] = []
    if objective == "pareto":
        keep = _non_dominated(points)
        front = [(space.assignment(c), points[c][0], int(points[c][1])) for c in keep]
        best_codes = keep[0]
    else:
        best_codes = min(points, key=lambda c: points[c][0])
    return TuneResult(
        assignment=space.assignment(best_codes),
        value_s=points[best_codes][0],
        trials=studies.finished(),
        new_trials=new_trials,
        best_seed_name=best_seed,
        best_seed_value=None if best_seed is None else seed_values[best_seed][0],
        pareto=front,
        interrupted=interrupted,
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


# -- study plumbing ----------------------------------------------------------------------------
def _seed_codes(costs: Costs, name: str, seed: Mapping[str, VirtualDevice]) -> Codes:
    """Target indices of a seed; raise :class:`TuneError` when it misses or misplaces nodes."""
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
        raise TuneError(f"seed {name!r} {problem}")
    return tuple(position[seed[node.name]] for node in costs.graph.nodes)


def _trial_codes(trial: FrozenTrial) -> Codes | None:
    codes = trial.user_attrs.get("assignment")
    return tuple(codes) if codes is not None else None


def _default_name(costs: Costs, objective: Objective, requests: int) -> str:
    kind = f"pipeline{requests}" if objective == "pipeline" else objective
    return f"autopart-{kind}-{graph_hash(costs.graph)[:12]}"


def _open_study(storage: str | None, name: str, objective: Objective) -> optuna.Study | None:
    """The stored study ``name`` at the RDB URL ``storage``, created if new (None: no storage)."""
    if storage is None:
        return None
    engine: dict[str, Any] = {}
    if storage.startswith("sqlite:///"):
        path = storage.removeprefix("sqlite:///")
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = {"connect_args": {"timeout": 60}}
    backend = optuna.storages.RDBStorage(storage, engine_kwargs=engine)
    directions = ["minimize", "minimize"] if objective == "pareto" else ["minimize"]
    study = optuna.create_study(
        storage=backend, study_name=name, directions=directions, load_if_exists=True
    )
    if len(study.directions) != len(directions):
        raise TuneError(f"study {name!r} was made for another objective")
    return study


def _check_or_store(study: optuna.Study, space: SearchSpace, meta: dict[str, Any]) -> SearchSpace:
    """Store the search space in a new study; in a stored one, check it and use its groups."""
    stored = study.user_attrs.get(_ATTR)
    if stored is None:
        if study.get_trials(deepcopy=False):
            raise TuneError(f"study {study.study_name!r} was not made by autopart")
        study.set_user_attr(_ATTR, meta)
        return space
    for key in ("objective", "pipeline_requests", "nodes", "targets", "supported"):
        if stored.get(key) != meta[key]:
            what = "constraints" if key == "supported" else key.replace("_", " ")
            raise TuneError(
                f"study {study.study_name!r} was made for other {what}; use a new study name"
            )
    groups = [list(g) for g in stored["groups"]]
    choices = [list(c) for c in stored["choices"]]
    return SearchSpace(space.nodes, space.targets, groups, choices, space.fixed)


def _sampler(objective: Objective, seed: int) -> optuna.samplers.BaseSampler:
    if objective == "pareto":
        return optuna.samplers.NSGAIISampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, multivariate=False)
