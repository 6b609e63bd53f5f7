"""The accuracy policy of a tune: which precisions it may use and how far outputs may drift.

A plan's error is the largest relative error of any output against the f32 reference (the
reference codegen), over the evaluation samples (:func:`evaluation_samples`). The tolerance
(``--tolerance REL``) caps it. By default it follows the ecosystem: OpenVINO as installed
computes in bf16 where the CPU has it, so the default tolerance is that peer's own error on
the same samples (the peer whose codegen declares it ``sets_tolerance``,
:func:`tolerance_peer`), plus :attr:`~autopart.tuning.settings.AccuracySettings.peer_allowance`
for rounding, and never below the f32 check tolerance. The default plan is then never less
accurate than OpenVINO at its defaults. ``--tolerance 0.5x`` (a
:class:`~autopart.search.options.PeerMultiple`) asks for that multiple of the same peer's
error instead, e.g. half of it. ``--precision f32`` allows f32 targets only and holds
plans to the f32 check tolerance: the exact plans of before. Neither is ever tighter than
the model's own f32 runtimes' error (:meth:`AccuracyPolicy.tolerance_rule`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from autopart.costmodel.accuracy import ErrorModel
from autopart.errors import InputError
from autopart.ir.feeds import random_inputs
from autopart.ir.graph import Graph
from autopart.ir.target import REFERENCE_PRECISION, VirtualDevice
from autopart.profile.sensitivity import (
    EMULATED,
    ROUNDED,
    SENSITIVITY_BUDGET_S,
    measure_error_model,
)
from autopart.search.candidates import Candidate, CandidateKind, candidate_name
from autopart.search.options import PeerMultiple, ToleranceSpec, parse_tolerance
from autopart.settings import COMMON
from autopart.targets import qdq, quant_ranges
from autopart.targets.codegen import Role
from autopart.targets.registry import codegen_for, declared_peers
from autopart.tuning.drop_model import in_metric_units, measured_drops
from autopart.tuning.judge import Judge
from autopart.tuning.metrics import MAX_REL, Metric
from autopart.tuning.settings import ACCURACY
from autopart.tuning.verify import Measured, Tolerance

DEFAULT_PEER_FACTOR = 1 + ACCURACY.peer_allowance  # the default tolerance: the peer's error, +10%


def tolerance_peer() -> str | None:
    """The name of the peer whose error sets the default tolerance (None: no codegen has one).

    That is the first declared peer marked ``sets_tolerance``
    (:class:`~autopart.targets.peer.Peer`): OpenVINO as installed.
    """
    return next((peer.name for peer in declared_peers() if peer.sets_tolerance), None)


@dataclass(frozen=True)
class AccuracyPolicy:
    """What a tune may trade for speed: ``precisions`` allowed and the ``tolerance``.

    ``precisions`` None allows every precision the machine offers. ``tolerance`` None is the
    default tolerance (:func:`follow_peer`), a :class:`PeerMultiple` that multiple of the same
    peer's error; with f32 alone either is the f32 check tolerance.
    """

    precisions: tuple[str, ...] | None = None
    tolerance: ToleranceSpec = None
    metric: Metric | None = None
    max_drop: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tolerance", parse_tolerance(self.tolerance))
        if self.max_drop is not None:
            object.__setattr__(self, "max_drop", check_max_drop(self.max_drop))
        named = self.metric is not None and self.metric.name != MAX_REL
        if self.tolerance is not None and (named or self.max_drop is not None):
            raise InputError(
                "--tolerance bounds max-rel alone: give the budget of another metric, or of "
                "max-rel instead of --tolerance, as --max-drop"
            )
        if self.metric is not None and self.metric.score is not None and self.max_drop is None:
            raise InputError("a metric of your own needs its budget: give max_drop too")

    @property
    def peer_factor(self) -> float:
        """The multiple of the tolerance peer's error allowed when no number is given."""
        if isinstance(self.tolerance, PeerMultiple):
            return self.tolerance.factor
        return DEFAULT_PEER_FACTOR

    @property
    def exact(self) -> bool:
        """Whether only f32 is allowed."""
        return self.precisions == (REFERENCE_PRECISION,)

    def allows(self, precision: str) -> bool:
        """Whether a target computing in ``precision`` may be used."""
        return self.precisions is None or precision in self.precisions

    def tolerance_rule(self, graph: Graph | None = None, metric: Metric | None = None) -> Tolerance:
        """The budget to verify with: on ``metric`` (None: max-rel), the drop allowed.

        A metric other than max-rel is held to ``max_drop``, else its default budget
        (:attr:`~autopart.tuning.metrics.Metric.default_budget`): it keeps the answers
        whatever OpenVINO as installed does. max-rel is held to ``max_drop`` where given;
        else the tolerance: the number given, else the peer's error times a factor.

        With a ``graph``, the rule never goes below its own f32 runtimes' error (the f32
        peers', :func:`own_runtimes`) plus the allowance, with f32 alone too: a plan as
        close to the reference as onnxruntime alone is as right as the user's own runtime.
        That floor is what judges a model that ships quantised (:data:`QUANTISED_MODEL_OPS`):
        its runtimes round its integer kernels a quantisation step from the reference, and
        the runtime it was quantised for (:func:`made_for_runtimes`) floors it however far
        off it is, so that runtime never fails its tolerance; and
        a detector whose f32 runtimes move its boxes by 1.8e-3 (onnxruntime alone on
        keypointrcnn), while OpenVINO as installed finds another number of them (error
        ``inf``, which sets nothing).
        """
        if metric is not None and metric.name != MAX_REL:
            budget = self.max_drop if self.max_drop is not None else metric.default_budget
            assert budget is not None  # a metric of the user's own has its max_drop
            return budget
        if self.max_drop is not None:
            return self.max_drop
        if isinstance(self.tolerance, float):
            return self.tolerance
        floor = own_runtimes() if graph is not None else ()
        made_for = made_for_runtimes() if graph is not None and ships_quantised(graph) else ()
        if self.exact:
            if not floor:
                return COMMON.check_tolerance
            return functools.partial(
                follow_peer, factor=0.0, floor_peers=floor, made_for_peers=made_for
            )
        factor = None if self.tolerance is None else self.tolerance.factor
        if factor is None and not floor:
            return follow_peer
        return functools.partial(
            follow_peer, factor=factor, floor_peers=floor, made_for_peers=made_for
        )

    def describe(self, metric: Metric | None = None) -> str:
        """One line: the precisions allowed and the budget on ``metric`` (None: max-rel)."""
        allowed = (
            "every precision offered" if self.precisions is None else "+".join(self.precisions)
        )
        if metric is not None and metric.name != MAX_REL:
            budget = self.tolerance_rule(None, metric)
            assert isinstance(budget, float)
            kind = "" if self.max_drop is not None else " (its default)"
            return f"{allowed}, {metric.label} held to {metric.describe(budget)}{kind}"
        if self.max_drop is not None:
            return f"{allowed}, max-rel drop at most {self.max_drop:.3g}"
        peer = None if self.exact else tolerance_peer()
        if isinstance(self.tolerance, float):
            bound = f"tolerance {self.tolerance:.3g}"
        elif peer is None:
            bound = f"tolerance {COMMON.check_tolerance:.3g} (f32)"
        elif self.tolerance is None:
            bound = f"tolerance: {peer}'s error on the same inputs"
        else:
            bound = f"tolerance: {self.tolerance} {peer}'s error on the same inputs"
        if not isinstance(self.tolerance, float):
            bound += ", never below the f32 runtimes' own error"
        return f"{allowed}, {bound}"


def follow_peer(
    errors: Mapping[str, float],
    factor: float | None = None,
    floor_peers: Sequence[str] = (),
    made_for_peers: Sequence[str] = (),
) -> float:
    """The budget from every runner's error: :func:`tolerance_peer`'s times ``factor``.

    ``factor`` None is the default tolerance's, the peer's error plus
    :attr:`~autopart.tuning.settings.AccuracySettings.peer_allowance` for rounding. Never
    below the f32 check tolerance (an f32 plan differs from the reference by the order of its
    sums); that tolerance where that peer did not run. Never below the error of any of
    ``floor_peers`` plus the allowance either, up to :data:`QUANTISATION_NOISE`: a runtime
    further off computes another model, not a rounding of this one (OpenVINO was 72% off
    onnxruntime on a quantised text decoder). The error of any of ``made_for_peers`` (the
    runtime a model that ships quantised was made for) floors it with no such cap: a
    dynamically quantised decoder's own onnxruntime is 1.04 off the reference, as far as
    every plan, because ulps flip whole quantisation steps. A non-finite error sets nothing.
    """
    name = tolerance_peer()
    peer = None if name is None else errors.get(name)
    chosen = COMMON.check_tolerance
    if peer is not None and np.isfinite(peer):
        chosen = max(chosen, peer * (DEFAULT_PEER_FACTOR if factor is None else factor))
    floors = [
        errors[p]
        for p in floor_peers
        if p in errors and np.isfinite(errors[p]) and errors[p] <= QUANTISATION_NOISE
    ]
    floors += [errors[p] for p in made_for_peers if p in errors and np.isfinite(errors[p])]
    return max([chosen, *(error * DEFAULT_PEER_FACTOR for error in floors)])


# How far a runtime may round a model's own 8-bit quantisation: 5 steps of its range.
QUANTISATION_NOISE = 5 / 255

# Ops that only a model shipped quantised holds: autopart's own int8 is added at compile time.
QUANTISED_MODEL_OPS = frozenset(
    {
        "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv",
        "QLinearMatMul", "MatMulInteger", "ConvInteger", "DynamicQuantizeLSTM",
        "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QLinearAdd", "QLinearMul",
    }
)  # fmt: skip


def check_max_drop(value: object) -> float:
    """``value`` as a budget: a finite number of at least 0; else raise :class:`InputError`."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value):
        raise InputError(f"--max-drop must be a finite number of at least 0, not {value}")
    if value < 0:
        raise InputError(f"--max-drop must be a finite number of at least 0, not {value}")
    return float(value)


def ships_quantised(graph: Graph) -> bool:
    """Whether ``graph`` holds an op only a model shipped quantised holds."""
    return any(node.op_type in QUANTISED_MODEL_OPS for node in graph.nodes)


def made_for_runtimes() -> tuple[str, ...]:
    """The peers a model shipped quantised was made for: the oracle's library alone.

    ONNX's integer and quantise ops are what onnxruntime's quantiser writes; the oracle
    codegen (:attr:`~autopart.targets.codegen.Role.ORACLE`) runs a whole model as its
    library does, so that peer, as installed and without a tool, is the model's own runtime.
    """
    oracle = codegen_for(Role.ORACLE)
    return tuple(
        peer.name
        for peer in declared_peers()
        if oracle is not None and peer.codegen == oracle.name and not peer.tool
        and not peer.variant and peer.precision() is None
    )  # fmt: skip


def own_runtimes() -> tuple[str, ...]:
    """The peers that run a model as shipped in f32: their error floors its tolerance."""
    return tuple(peer.name for peer in declared_peers() if peer.precision() is None)


def accuracy_notes(
    results: Mapping[str, Measured], policy: AccuracyPolicy, judge: Judge
) -> list[str]:
    """Notes on the budget the runners were held to, on what, and those over it, by name."""
    if not results:
        return []
    tolerance = next(iter(results.values())).tolerance
    notes = [
        f"accuracy: {policy.describe(judge.metric)}; held to {tolerance:.3g}, "
        f"{judge.metric.label} on {judge.describe()}"
    ]
    over = sorted(name for name, m in results.items() if not m.correct)
    if over:
        shown = ", ".join(
            f"{name} ({judge.metric.describe(results[name].max_error)})" for name in over[:8]
        )
        more = f" and {len(over) - 8} more" if len(over) > 8 else ""
        notes.append(f"outputs beyond the tolerance, so not kept: {shown}{more}")
    return notes


def search_error_model(
    graph: Graph,
    targets: Sequence[str],
    policy: AccuracyPolicy,
    seed: int,
    progress: Callable[[int, int], None] | None = None,
    metric: Metric | None = None,
    budget_s: float | None = None,
) -> ErrorModel | None:
    """The error model the search keeps to, from the nodes' measured sensitivities.

    The sensitivities are measured on the first calibration sample where the user gave
    samples, else on seeded random inputs, within ``budget_s`` seconds shared by the
    reduced precisions (None: :func:`~autopart.profile.sensitivity.measure_error_model`'s
    own budget for each; fewer whole-model runs measure groups of nodes, not single
    nodes). None when no target of ``targets`` computes in a
    reduced precision the reference can emulate. Under a task ``metric`` (not max-rel) the
    weights are scaled to the metric's drop with every node reduced on the calibration
    samples, and held to its budget (:mod:`autopart.tuning.drop_model`); where no scale is
    finite, the relative model with every node reduced as its bound stands in. Either
    way running judges the plan by the metric, and a plan over its budget is searched
    again under a bound shrunk by how far it overshot (:func:`tighter_error_model`). Else
    the tolerance is ``policy``'s number
    (``max_drop`` or ``tolerance``) when given; else the error of every node
    in bf16 (the default tolerance follows OpenVINO as installed, which computes every node it
    can in bf16, never in int8) times the budget's :attr:`AccuracyPolicy.peer_factor`: int8 nodes
    then fit only where their error stays within what bf16 everywhere would cost, and
    ``0.5x`` keeps the most sensitive nodes in f32.
    """
    reduced = sorted(
        {p for text in targets if (p := VirtualDevice.parse(text).precision) in EMULATED}
    )
    if not reduced:
        return None
    calibration = quant_ranges.calibration_of(graph)
    feeds = random_inputs(graph, seed) if calibration.stand_in else dict(calibration.samples[0])
    each_s = SENSITIVITY_BUDGET_S if budget_s is None else budget_s / len(reduced)
    found = {
        p: measure_error_model(graph, feeds, p, None, budget_s=each_s, progress=progress)
        for p in reduced
    }
    weights = {key: value for part in found.values() for key, value in part.weights.items()}
    worst = max(part.all_reduced for part in found.values())
    tolerance = policy.max_drop if policy.max_drop is not None else policy.tolerance
    if metric is not None and metric.name != MAX_REL:
        relative = ErrorModel(weights, worst, worst, next(iter(found.values())).method)
        drops = measured_drops(graph, calibration.samples, reduced, metric)
        budget = policy.tolerance_rule(graph, metric)
        assert not callable(budget)  # a task metric's budget is a number
        return in_metric_units(relative, found, drops, float(budget), metric) or relative
    if not isinstance(tolerance, float):  # what OpenVINO as installed reduces: bf16, not int8
        rounded = [part.all_reduced for p, part in found.items() if p in ROUNDED]
        tolerance = max(max(rounded, default=0.0) * policy.peer_factor,
                        COMMON.check_tolerance)  # fmt: skip
    return ErrorModel(weights, tolerance, worst, next(iter(found.values())).method)


def tighter_error_model(
    accuracy: ErrorModel | None, assignment: Mapping[str, VirtualDevice], measured: Measured
) -> ErrorModel | None:
    """The tightened error model to search again with, if the ILP's plan measured over its own.

    None when there was no error model, the plan was within the tolerance, or its error does
    not come from reduced precision (it predicts none).
    """
    if accuracy is None or measured.correct or accuracy.predicted_error(assignment) == 0:
        return None
    return accuracy.tightened(measured.max_error, measured.tolerance)


def plan_over_tolerance(
    accuracy: ErrorModel | None,
    candidates: Mapping[str, Candidate],
    measured: Mapping[str, Measured],
) -> tuple[str, ErrorModel] | None:
    """The first plan of the ILP's precisions measured over its tolerance, and its bound.

    Those plans are the ILP's own, then its precisions on one library (``ilp-on:<target>``,
    :mod:`~autopart.search.one_library`), which OpenVINO may compute less exactly than the
    ILP's partitions: on magika one measured 8.3% of answers changed where the ILP's own
    changed none. The bound is :func:`tighter_error_model`'s; None when none is over.
    """
    ilp = candidate_name(CandidateKind.ILP)
    derived = [ilp, *(n for n, c in candidates.items() if c.kind is CandidateKind.ILP_ON_ONE)]
    for name in derived:
        if name in candidates and name in measured:
            tighter = tighter_error_model(accuracy, candidates[name].assignment, measured[name])
            if tighter is not None:
                return name, tighter
    return None


def calibration_notes(graph: Graph, targets: Sequence[str]) -> list[str]:
    """The note that int8 was calibrated on random samples, when a target computes in int8.

    Random samples only stand in for real inputs: the ranges of real activations, and so
    int8's error on them, may differ (:mod:`autopart.targets.quant_ranges`).
    """
    if not any(VirtualDevice.parse(text).precision == qdq.PRECISION for text in targets):
        return []
    calibration = quant_ranges.calibration_of(graph)
    if not calibration.stand_in:
        return [f"int8: calibrated on {len(calibration.samples)} samples given"]
    return [
        f"int8: calibrated on {len(calibration.samples)} seeded random samples, only a "
        "stand-in for real inputs: give several with --inputs (an .npz with a leading "
        "sample axis, or a folder of .npz files)"
    ]
