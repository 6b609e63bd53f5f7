"""Candidate plans: what kind of search made each, and the one place their names are built."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from autopart.ir.target import VirtualDevice
from autopart.plan.schema import Plan
from autopart.search.options import Objective
from autopart.search.simulator import Simulation

Assignment = dict[str, VirtualDevice]


class CandidateKind(Enum):
    """What made a candidate assignment.

    The first five are the peer baselines (:mod:`autopart.search.baselines`): every node on
    one target, ONNX Runtime's execution-provider rule, each node on its cheapest target,
    HEFT, and a peer's library running the whole model as shipped (nodes its one-node probe
    refuses included). Then the exact ILP, the optuna search's best, and a point of its
    Pareto front. ``ilp-on`` is the ILP's precision per node with every node on one
    library that mixes precisions in one subgraph (:mod:`autopart.search.one_library`).
    """

    SINGLE = "single"
    WHOLE = "whole"
    ORT_EP_RULE = "ort-ep-rule"
    PER_OP_BEST = "per-op-best"
    HEFT = "heft"
    ILP = "ilp"
    ILP_ON_ONE = "ilp-on"
    TUNED = "tuned"
    PARETO = "pareto"

    @property
    def is_baseline(self) -> bool:
        """Whether a peer baseline makes this kind."""
        return self in _BASELINES

    @property
    def one_target(self) -> bool:
        """Whether this kind puts every node on one target (its fallback aside)."""
        return self in _ONE_TARGET


_BASELINES = frozenset(
    {
        CandidateKind.SINGLE,
        CandidateKind.ORT_EP_RULE,
        CandidateKind.PER_OP_BEST,
        CandidateKind.HEFT,
        CandidateKind.WHOLE,
    }
)
_ONE_TARGET = frozenset({CandidateKind.SINGLE, CandidateKind.WHOLE})


def candidate_name(
    kind: CandidateKind, target: VirtualDevice | None = None, index: int | None = None
) -> str:
    """The name tables, reports and study seeds show for a candidate.

    ``single:<target>`` for a single target, ``whole:<target>`` for a library running the
    whole model, ``ilp-on:<target>`` for the ILP's precisions on that library alone,
    ``pareto-<index>`` for a point of the front, else the kind's value
    (``ilp``, ``heft``, ...). Names are only ever built here and never parsed: read a
    candidate's ``kind`` and ``target`` instead.
    """
    if kind.one_target or kind is CandidateKind.ILP_ON_ONE:
        if target is None:
            raise ValueError(f"a {kind.value} candidate needs its target")
        return f"{kind.value}:{target}"
    if kind is CandidateKind.PARETO:
        if index is None:
            raise ValueError("a Pareto candidate needs its index on the front")
        return f"pareto-{index}"
    return kind.value


@dataclass
class Candidate:
    """One assignment, its plan and its simulated cost.

    ``target`` is the target of a one-target candidate (:attr:`CandidateKind.one_target`,
    else None), ``index`` a :attr:`CandidateKind.PARETO` candidate's position on the front;
    ``name`` is built from them by :func:`candidate_name`. ``fits_accuracy`` says whether
    its predicted output error is within the search's tolerance (true without one).
    ``stand_in`` is the plan that prices it while its own cannot be priced op by op (a
    :attr:`CandidateKind.WHOLE` plan holds nodes its target has no op cost for) and it has
    not been timed whole.
    """

    kind: CandidateKind
    assignment: Assignment
    plan: Plan
    simulation: Simulation
    fits_memory: bool = True
    target: VirtualDevice | None = None
    index: int | None = None
    fits_accuracy: bool = True
    stand_in: Plan | None = None
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = candidate_name(self.kind, self.target, self.index)

    @property
    def off_target_nodes(self) -> int:
        """How many nodes a single-target candidate runs off its target; 0 for other kinds.

        Those are the nodes its target cannot run. Such a plan is not really one target: its
        label alone would hide the fallback.
        """
        if self.kind is not CandidateKind.SINGLE:
            return 0
        return sum(where != self.target for where in self.assignment.values())

    def value(self, objective: Objective) -> float:
        """The predicted seconds ``objective`` ranks by (sequential or concurrent)."""
        if objective == Objective.LATENCY:
            return self.simulation.sequential_s
        return self.simulation.makespan_s
