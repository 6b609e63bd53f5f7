"""What a search is asked for: the objective, the method and the other search options.

:class:`SearchOptions` is the one statement of them: ``autopart tune`` holds one
(:attr:`autopart.tuning.options.TuneOptions.search`) from the command line to the search,
and adds only what it learns on the way (the source, the study name, the measured error
model). The checks of the values a user gives live here too, so that every caller raises
the same one-line :class:`AutopartError`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from autopart.costmodel.accuracy import ErrorModel
from autopart.errors import AutopartError
from autopart.ir.target import PRECISIONS, REFERENCE_PRECISION
from autopart.search.constraints import Constraints

SEED_MAX = 2**32 - 1  # numpy's and optuna's seeds are 32-bit


class Objective(StrEnum):
    """What a plan is ranked by.

    ``latency`` is the sequential time (every step one after another, the ILP's exact
    objective); ``makespan`` the end of the concurrent schedule, units running side by
    side; ``pareto`` the front of (makespan, peak memory); ``throughput`` a stream's rate
    across the hosts of a cluster (``tune --cluster`` only: :mod:`autopart.search.hosts`).
    """

    LATENCY = "latency"
    MAKESPAN = "makespan"
    PARETO = "pareto"
    THROUGHPUT = "throughput"

    @classmethod
    def parse(cls, value: str) -> Objective:
        """The objective named ``value``; raise :class:`AutopartError` for an unknown name."""
        try:
            return cls(value)
        except ValueError:
            raise AutopartError(
                f"unknown objective {value!r}: use latency, makespan, pareto or throughput"
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
    """The options of :func:`autopart.search.planner.search`; every field has a default.

    ``constraints`` restrict the targets (None: none); ``budget_s`` bounds the ILP (at most
    60 s) and the optuna search (None: the ILP gets 60 s and optuna a fixed number of
    trials); ``seed`` seeds the optuna sampler (and a tune's random inputs); ``storage`` is
    the optuna study's RDB URL (None: in memory; a tune's default is the study in its
    search folder) and ``study_name`` its name (None: derived from the graph); ``precision``
    the precisions a plan may compute in (None or ``auto``: every one; else a
    comma-separated string or a sequence, normalised to a tuple of :data:`PRECISIONS` that
    always holds f32), and the search keeps to targets computing in them; ``tolerance`` the
    largest relative output error against the f32 reference asked for: a number, or a
    :class:`PeerMultiple` of OpenVINO as installed's error (``"0.5x"`` as a string; None: a
    tune's default tolerance, see :mod:`autopart.tuning.accuracy`); ``source`` is the model source
    recorded in the plans (empty: the graph's); ``accuracy`` is the measured form of the
    tolerance, per-node error weights that bound the ILP's plan (None: no bound); ``cap_s``
    caps the search's time where a tune's wall budget leaves less (None: no cap): unlike
    ``budget_s`` it never makes optuna run longer than its trials without a budget.

    Objective and method may be given by name. An unknown objective, method or precision,
    a budget that is not a finite number of seconds above 0, a seed outside 0 to 2**32 - 1
    and a tolerance that is not a finite number (or multiple) above 0 raise
    :class:`AutopartError`.
    """

    constraints: Constraints | None = None
    objective: Objective = Objective.LATENCY
    method: Method = Method.AUTO
    budget_s: float | None = None
    seed: int = 0
    storage: str | None = None
    precision: tuple[str, ...] | None = None
    tolerance: ToleranceSpec = None
    study_name: str | None = None
    source: str = ""
    accuracy: ErrorModel | None = None
    cap_s: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "precision", parse_precisions(self.precision))
        object.__setattr__(self, "tolerance", parse_tolerance(self.tolerance))
        object.__setattr__(self, "objective", Objective.parse(self.objective))
        object.__setattr__(self, "method", Method.parse(self.method))
        if self.budget_s is not None:
            check_budget(self.budget_s, "budget")
        check_count(self.seed, "seed", 0, SEED_MAX)

    @property
    def uses_optuna(self) -> bool:
        """Whether the search runs optuna (and opens the study storage), not only the ILP."""
        return self.method == Method.OPTUNA or (
            self.method == Method.AUTO and self.objective != Objective.LATENCY
        )


def parse_precisions(text: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """``auto`` (or None): every precision; else a comma-separated subset of PRECISIONS.

    f32 is always allowed (the fallback computes in it). Raises :class:`AutopartError`
    naming an unknown precision and listing the known ones.
    """
    if text is None:
        return None
    names = text.split(",") if isinstance(text, str) else list(text)
    names = [name.strip().lower() for name in names if name.strip()]
    if names in ([], ["auto"]):
        return None
    unknown = [name for name in names if name not in PRECISIONS]
    if unknown:
        raise AutopartError(
            f"unknown precision {unknown[0]!r}; precisions: auto, {', '.join(PRECISIONS)}"
        )
    return tuple(p for p in PRECISIONS if p in names or p == REFERENCE_PRECISION)


@dataclass(frozen=True)
class PeerMultiple:
    """A tolerance relative to the budget peer's own error: ``factor`` times it.

    ``--tolerance 0.5x`` asks for half the error of OpenVINO as installed on the same
    inputs (:mod:`autopart.tuning.accuracy`); written back as ``0.5x``.
    """

    factor: float

    def __str__(self) -> str:
        return f"{self.factor:g}x"


ToleranceSpec = float | PeerMultiple | None


def parse_tolerance(value: float | str | PeerMultiple | None) -> ToleranceSpec:
    """A tolerance as given: a relative error (``1e-3``), or a multiple of the peer's (``0.5x``).

    None stays None (the default tolerance). A string is read as a number, or as a number
    followed by ``x``. Raises :class:`AutopartError` unless the number is finite and
    above 0.
    """
    if value is None:
        return None
    if isinstance(value, PeerMultiple):
        _check_positive(value.factor, value)
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        relative = text.endswith("x")
        try:
            number = float(text[:-1] if relative else text)
        except ValueError:
            raise AutopartError(
                f"--tolerance must be a relative error (1e-3) or a multiple of OpenVINO as "
                f"installed's error (0.5x), not {value!r}"
            ) from None
        _check_positive(number, value)
        return PeerMultiple(number) if relative else number
    _check_positive(value, value)
    return float(value)


def _check_positive(number: object, given: object) -> None:
    """Raise :class:`AutopartError` unless ``number`` is a finite number above 0."""
    if (
        isinstance(number, bool)
        or not isinstance(number, int | float)
        or not math.isfinite(number)
        or number <= 0
    ):
        raise AutopartError(
            f"--tolerance must be a finite relative error above 0, or a multiple above 0 "
            f"of OpenVINO as installed's error (0.5x), not {given}"
        )


def check_budget(seconds: float, name: str, allow_zero: bool = False) -> None:
    """Raise :class:`AutopartError` unless ``seconds`` is finite and positive (or 0)."""
    valid = isinstance(seconds, int | float) and math.isfinite(seconds)
    if not valid or seconds < 0 or (seconds == 0 and not allow_zero):
        least = "0 or more" if allow_zero else "more than 0"
        raise AutopartError(f"--{name} must be a finite number of seconds, {least}, not {seconds}")


def check_count(value: int, name: str, least: int, most: int | None = None) -> None:
    """Raise :class:`AutopartError` unless ``value`` is an integer in [least, most]."""
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or value < least
        or (most is not None and value > most)
    ):
        bounds = f"at least {least}" if most is None else f"from {least} to {most}"
        raise AutopartError(f"--{name} must be an integer {bounds}, not {value!r}")
