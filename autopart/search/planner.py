"""Choosing a plan: the exact ILP, the optuna tuner and the peer baselines, compared alike.

Every candidate assignment (ILP answer, tuned answer, each baseline) becomes a plan and is
costed by the same simulator, so the comparison is fair. Constraints restrict the costs
before any method runs, so every candidate honours pins and forbids; candidates that break
a memory cap are kept for comparison but never chosen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from autopart.costmodel.costs import Costs
from autopart.errors import AutopartError
from autopart.ir.target import VirtualDevice
from autopart.plan.schema import IlpSummary, Plan, Prediction, ScheduleStep
from autopart.search.baselines import all_baselines, default_fallback
from autopart.search.constraints import ConstraintError, Constraints, apply
from autopart.search.ilp import IlpResult, memory_estimate, solve_ilp
from autopart.search.simulator import Simulation, plan_for, simulate
from autopart.search.tuner import TuneProgress, TuneResult, tune

Objective = Literal["latency", "makespan", "pareto"]
Method = Literal["auto", "ilp", "optuna"]
Assignment = dict[str, VirtualDevice]
DEFAULT_TRIALS = 300


@dataclass
class Candidate:
    """One assignment, its plan and its simulated cost."""

    name: str
    assignment: Assignment
    plan: Plan
    simulation: Simulation
    fits_memory: bool = True

    @property
    def off_target_nodes(self) -> int:
        """How many nodes a ``single:T`` candidate runs off ``T`` (T cannot run them); else 0.

        Such a plan is not really one target: its label alone would hide the fallback.
        """
        if not self.name.startswith("single:"):
            return 0
        target = self.name.removeprefix("single:")
        return sum(str(where) != target for where in self.assignment.values())

    def value(self, objective: Objective) -> float:
        """The predicted seconds ``objective`` ranks by (sequential or concurrent)."""
        if objective == "latency":
            return self.simulation.sequential_s
        return self.simulation.makespan_s


@dataclass
class SearchOutcome:
    """The chosen candidate, every candidate by name, and what the ILP and tuner reported."""

    objective: Objective
    method: str
    chosen: Candidate
    candidates: dict[str, Candidate]
    ilp: IlpResult | None = None
    tuned: TuneResult | None = None
    pareto: list[Candidate] = field(default_factory=list)


def search(
    costs: Costs,
    constraints: Constraints | None = None,
    objective: Objective = "latency",
    method: Method = "auto",
    budget_s: float | None = None,
    seed: int = 0,
    storage: str | None = None,
    study_name: str | None = None,
    source: str = "",
    progress: Callable[[TuneProgress], None] | None = None,
) -> SearchOutcome:
    """Find the best plan of ``costs.graph`` for ``objective`` under ``constraints``.

    ``method="auto"`` solves the ILP (exact for ``latency``) and, for ``makespan`` and
    ``pareto``, tunes with optuna seeded by the ILP answer and every baseline. ``ilp`` and
    ``optuna`` force one. ``budget_s`` bounds the ILP and the tuner; ``storage`` is the
    optuna study's RDB URL (resumable). Raises :class:`ConstraintError` when the
    constraints cannot hold.
    """
    if objective not in ("latency", "makespan", "pareto"):
        raise AutopartError(f"unknown objective {objective!r}: use latency, makespan or pareto")
    if method not in ("auto", "ilp", "optuna"):
        raise AutopartError(f"unknown search {method!r}: use ilp, optuna or auto")
    constraints = constraints or Constraints()
    restricted = apply(costs, constraints)
    fallback = (
        VirtualDevice.parse(constraints.fallback)
        if constraints.fallback
        else default_fallback(restricted)
    )

    def candidate(name: str, assignment: Assignment) -> Candidate:
        plan = plan_for(assignment, restricted, source, fallback)
        return Candidate(
            name, dict(assignment), plan, simulate(plan, restricted),
            _fits(restricted, assignment, constraints.memory),
        )  # fmt: skip

    candidates = {
        name: candidate(name, assignment)
        for name, assignment in all_baselines(restricted, fallback).items()
    }
    ilp = solve_ilp(restricted, constraints.memory, time_limit_s=min(budget_s or 60.0, 60.0))
    candidates["ilp"] = candidate("ilp", ilp.assignment)
    tuned: TuneResult | None = None
    pareto: list[Candidate] = []
    if method == "optuna" or (method == "auto" and objective != "latency"):
        seeds = {name: c.assignment for name, c in candidates.items() if c.fits_memory}
        tuned = tune(
            restricted,
            "pareto" if objective == "pareto" else "makespan",
            seeds,
            budget_s=budget_s,
            n_trials=None if budget_s else DEFAULT_TRIALS,
            seed=seed,
            storage=storage,
            study_name=study_name,
            progress=progress,
        )
        candidates["tuned"] = candidate("tuned", tuned.assignment)
        pareto = [
            candidate(f"pareto-{i}", assignment)
            for i, (assignment, _, _) in enumerate(tuned.pareto)
        ]
    fitting = [c for c in candidates.values() if c.fits_memory]
    if not fitting:
        raise ConstraintError("no plan found fits the memory caps " + str(constraints.memory))
    preferred = "ilp" if method == "ilp" else ("tuned" if tuned is not None else "ilp")
    ranked = sorted(fitting, key=lambda c: (c.value(objective), c.name != preferred))
    used = "ilp" if tuned is None else "ilp+optuna"
    return SearchOutcome(objective, used, ranked[0], candidates, ilp, tuned, pareto)


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
) -> None:
    """Record the prediction in ``plan.predicted`` (what ``autopart show`` draws).

    The one writer of :class:`Prediction`: the simulated totals and schedule, every node's
    costs, and what the search reported.
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
    )
