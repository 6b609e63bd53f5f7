"""What a search is asked for: the objective, the method and the other search options."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from autopart.costmodel.accuracy import AccuracyBudget
from autopart.errors import AutopartError
from autopart.search.constraints import Constraints


class Objective(StrEnum):
    """What a plan is ranked by.

    ``latency`` is the sequential time (every step one after another, the ILP's exact
    objective); ``makespan`` the end of the concurrent schedule, units running side by
    side; ``pareto`` the front of (makespan, peak memory).
    """

    LATENCY = "latency"
    MAKESPAN = "makespan"
    PARETO = "pareto"

    @classmethod
    def parse(cls, value: str) -> Objective:
        """The objective named ``value``; raise :class:`AutopartError` for an unknown name."""
        try:
            return cls(value)
        except ValueError:
            raise AutopartError(
                f"unknown objective {value!r}: use latency, makespan or pareto"
            ) from None


class Method(StrEnum):
    """How a search looks: the exact ILP, the optuna search, or ``auto`` (by objective)."""

    AUTO = "auto"
    ILP = "ilp"
    OPTUNA = "optuna"

    @classmethod
    def parse(cls, value: str) -> Method:
        """The method named ``value``; raise :class:`AutopartError` for an unknown name."""
        try:
            return cls(value)
        except ValueError:
            raise AutopartError(f"unknown search {value!r}: use ilp, optuna or auto") from None


@dataclass(frozen=True)
class SearchOptions:
    """The options of :func:`autopart.search.planner.search`.

    ``constraints`` restrict the targets (None: none); ``budget_s`` bounds the ILP (at most
    60 s) and the optuna search (None: the ILP gets 60 s and optuna a fixed number of
    trials); ``seed`` seeds the optuna sampler; ``storage`` is the optuna study's RDB URL
    (None: in memory) and ``study_name`` its name (None: derived from the graph);
    ``source`` is the model source recorded in the plans (empty: the graph's); ``accuracy``
    bounds the predicted output error of the ILP's plan (None: no bound). Objective and
    method may be given by name; an unknown name raises :class:`AutopartError`.
    """

    constraints: Constraints | None = None
    objective: Objective = Objective.LATENCY
    method: Method = Method.AUTO
    budget_s: float | None = None
    seed: int = 0
    storage: str | None = None
    study_name: str | None = None
    source: str = ""
    accuracy: AccuracyBudget | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "objective", Objective.parse(self.objective))
        object.__setattr__(self, "method", Method.parse(self.method))

    @property
    def uses_optuna(self) -> bool:
        """Whether the search runs optuna (and opens the study storage), not only the ILP."""
        return self.method == Method.OPTUNA or (
            self.method == Method.AUTO and self.objective != Objective.LATENCY
        )
