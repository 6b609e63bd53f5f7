"""What a tune or a benchmark is asked for, and how they report their stages."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from autopart.errors import AutopartError
from autopart.io import check_writable
from autopart.loader import FreezeValues, InputShapes
from autopart.search.constraints import Constraints
from autopart.search.options import Method, Objective
from autopart.tuning.accuracy import Budget, check_tolerance, parse_precisions


@dataclass(frozen=True)
class TuneOptions:
    """The options of a tune (``autopart tune``); every field has a default.

    ``targets`` are target specs (None: every target found here, or in ``profile_file``).
    ``objective`` and ``method`` are those of :class:`autopart.search.options.SearchOptions`
    (by name or value); ``budget_s`` bounds the search; ``constraints`` are pins, forbids,
    a fallback (which joins explicit ``targets``) and memory caps. ``profile_file`` plans
    from that profile instead of profiling here (another machine's: nothing runs);
    ``profiles_dir`` is where this machine's profile is kept (None: the default). The plan
    is saved under ``search_dir/<model>-<targets hash>/`` and also to ``output`` if given.
    ``rounds`` are the timed rounds per plan when verifying; ``seed`` seeds the inputs and
    the optuna sampler; ``storage`` is an optuna RDB URL (None: the study in the search
    folder); ``input_shapes`` fixes input shapes (an input's name to its shape, or a
    symbolic dim's name to its size) and ``freeze`` fixes inputs to values (see
    :func:`autopart.loader.load_model`). With ``peers`` (the default) onnxruntime alone and
    openvino alone, each at its library's defaults, run in the same rounds as the
    candidate plans on the original model (fed the frozen values), and the report gives
    the chosen plan's ratio to them. ``precision`` allows precisions (``auto`` or None:
    every one this machine offers; ``f32``: the exact plans; or a list such as
    ``f32,bf16``) and ``tolerance`` caps the largest relative output error against the f32
    reference (None: the default budget, see :mod:`autopart.tuning.accuracy`).
    ``calibration`` is an ``.npz`` of several samples (a leading sample axis) or a folder
    of ``.npz`` files that int8 is calibrated on (None: seeded random samples, a stand-in;
    see :mod:`autopart.targets.quant_ranges`).
    """

    targets: Sequence[str] | None = None
    objective: Objective = Objective.LATENCY
    method: Method = Method.AUTO
    budget_s: float | None = None
    constraints: Constraints | None = None
    profile_file: str | Path | None = None
    profiles_dir: str | Path | None = None
    output: str | Path | None = None
    search_dir: str | Path = "search"
    rounds: int = 10
    seed: int = 0
    storage: str | None = None
    input_shapes: InputShapes | None = None
    peers: bool = True
    freeze: FreezeValues | None = None
    precision: str | Sequence[str] | None = None
    tolerance: float | None = None
    calibration: str | Path | None = None

    def __post_init__(self) -> None:
        parse_precisions(self.precision)
        check_tolerance(self.tolerance)
        object.__setattr__(self, "objective", Objective.parse(self.objective))
        object.__setattr__(self, "method", Method.parse(self.method))
        if self.budget_s is not None:
            check_budget(self.budget_s, "budget")
        check_count(self.rounds, "rounds", 1)
        check_count(self.seed, "seed", 0, SEED_MAX)

    @property
    def budget(self) -> Budget:
        """The precisions allowed and the accuracy budget."""
        return Budget(parse_precisions(self.precision), self.tolerance)

    def check_outputs(self) -> None:
        """Raise :class:`~autopart.errors.InputError` for an output that cannot be written."""
        check_writable(self.search_dir, "search folder", directory=True)
        if self.output is not None:
            check_writable(self.output, "plan file")
        if self.profiles_dir is not None and self.profile_file is None:
            check_writable(self.profiles_dir, "profiles folder", directory=True)


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


SEED_MAX = 2**32 - 1  # numpy's and optuna's seeds are 32-bit


@dataclass(frozen=True)
class BenchOptions:
    """The options of a benchmark (``autopart bench``).

    ``targets`` are target specs (None: every target found); ``rounds`` the timed rounds
    per plan; the tuned plan is looked up under ``search_dir`` (as ``autopart tune`` saves
    it); ``profiles_dir`` is where this machine's profile is kept (None: the default).
    ``input_shapes``, ``freeze``, ``precision`` and ``tolerance`` are those of
    :class:`TuneOptions`, applied to every model benched.
    """

    targets: Sequence[str] | None = None
    rounds: int = 15
    search_dir: str | Path = "search"
    profiles_dir: str | Path | None = None
    input_shapes: InputShapes | None = None
    freeze: FreezeValues | None = None
    precision: str | Sequence[str] | None = None
    tolerance: float | None = None

    def __post_init__(self) -> None:
        check_count(self.rounds, "rounds", 1)
        parse_precisions(self.precision)
        check_tolerance(self.tolerance)

    @property
    def budget(self) -> Budget:
        """The precisions allowed and the accuracy budget."""
        return Budget(parse_precisions(self.precision), self.tolerance)
