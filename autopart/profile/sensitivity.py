"""Measuring how much each node's reduced precision perturbs a model's outputs.

A reduced-precision target (bf16) computes with its inputs and weights rounded to bf16,
accumulates in f32 and rounds its outputs; an int8 one computes a weighted op on its
activation and weight quantised with the calibrated ranges and keeps its output float
(:class:`~autopart.targets.qdq.FakeQuantisation`). The reference codegen emulates exactly
that for chosen nodes (:class:`~autopart.targets.codegen.Emulating`), which needs no device
and no compile, and gives the same answer on every machine (int8: for the same
calibration samples). A node's sensitivity is the relative
output error of the model (the largest error over the largest magnitude, over outputs)
when it alone runs reduced. That takes one run of the model from that node on. Where
those runs would exceed ``budget_s``, the nodes are cut in run order into as many groups
as runs fit: each group's error is measured with the whole model (its nodes reduced
together), and shared among its nodes in proportion to their squared *local* errors (a
node's own output's relative error, its inputs exact; one run for all). A local error
alone misleads: a LayerNormalization of a near-constant input has a huge one (rounding
swamps the variance), and scaled against the rest it took all of a small Swin's budget,
leaving 344 other nodes priced at nothing. A group's measured error bounds what its
nodes are charged. Both are scaled so that every node reduced predicts the error
measured with every node reduced
(:class:`~autopart.costmodel.accuracy.ErrorModel`).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from autopart.costmodel.accuracy import ErrorModel
from autopart.errors import TargetError
from autopart.ir.graph import Graph
from autopart.targets import qdq
from autopart.targets.codegen import Emulating, Reduction, Rounding
from autopart.targets.quant_ranges import tensor_ranges
from autopart.targets.registry import reference_codegen

# How each rounded precision is emulated on f32 values: the rounding of its storage type.
ROUNDED = {"bf16": ml_dtypes.bfloat16}
# Every precision the reference emulates: rounded ones, and int8 by fake quantisation.
EMULATED = (*ROUNDED, qdq.PRECISION)


SENSITIVITY_BUDGET_S = 10.0  # seconds of whole-model runs per precision, unless given


def round_to(precision: str, value: Any) -> Any:
    """``value`` rounded through ``precision``'s storage type if it is a float32 array."""
    if isinstance(value, np.ndarray) and value.dtype == np.float32:
        return value.astype(ROUNDED[precision]).astype(np.float32)
    return value


def reduction_for(graph: Graph, precision: str) -> Reduction:
    """How ``graph``'s nodes emulate ``precision`` (int8: with the graph's calibration)."""
    if precision == qdq.PRECISION:
        return qdq.FakeQuantisation(graph, tensor_ranges(graph))
    return Rounding(functools.partial(round_to, precision))


def reduces(graph: Graph, name: str, precision: str) -> bool:
    """Whether node ``name`` computes differently in ``precision`` (only those are measured).

    bf16: a node making a float32 output; int8: a node rewritten to int8
    (:func:`~autopart.targets.qdq.quantisable`).
    """
    if precision == qdq.PRECISION:
        return qdq.quantisable(graph.node(name), graph)
    return _computes_floats(graph, name)


def output_error(got: Mapping[str, Any], expected: Mapping[str, Any]) -> float:
    """The largest relative error of ``got`` against ``expected`` over their float outputs.

    An output of another shape (a detector keeping another count of boxes once some nodes
    compute in reduced precision) differs wholly: an infinite error.
    """
    worst = 0.0
    for name, want in expected.items():
        if name not in got or not np.issubdtype(np.asarray(want).dtype, np.floating):
            continue
        if np.shape(got[name]) != np.shape(want):
            return math.inf
        want64 = np.asarray(want, np.float64)
        scale = float(np.abs(want64).max(initial=0.0)) or 1.0
        diff = np.abs(np.asarray(got[name], np.float64) - want64)
        worst = max(worst, float(np.nan_to_num(diff, nan=np.inf).max(initial=0.0)) / scale)
    return worst


class _Runs:
    """The reference compiled once, run with chosen nodes reduced to one precision."""

    def __init__(self, graph: Graph, feeds: Mapping[str, np.ndarray], precision: str) -> None:
        compiled = reference_codegen().compile(graph, graph.nodes, graph.inputs, graph.outputs)
        if not isinstance(compiled, Emulating):
            raise TargetError("the reference codegen cannot emulate reduced precision")
        self.compiled, self.graph, self.feeds = compiled, graph, dict(feeds)
        self.reduction = reduction_for(graph, precision)

    def outputs(
        self, reduced: Collection[str], env: Mapping[str, Any] | None = None, start: int = 0
    ) -> dict[str, Any]:
        """The graph's outputs with ``reduced`` nodes emulated, from ``env`` at step ``start``."""
        values = dict(self.feeds if env is None else env)
        self.compiled.run_rounded(values, reduced, self.reduction, start)
        return {name: values[name] for name in self.graph.outputs if name in values}

    def live_at(self, starts: Sequence[int]) -> Iterator[dict[str, Any]]:
        """For each step of ``starts`` (ascending), what a run from it reads of one exact run.

        That is the values made before the step and read at or after it; one exact run
        yields them all, holding no more than its live values and the one yielded.
        """
        values, at = dict(self.feeds), 0
        for start in starts:
            self.compiled.run_rounded(values, (), self.reduction, at, start)
            yield dict(values)
            at = start


def measure_error_model(
    graph: Graph,
    feeds: Mapping[str, np.ndarray],
    precision: str,
    tolerance: float | None,
    budget_s: float = SENSITIVITY_BUDGET_S,
    progress: Callable[[int, int], None] | None = None,
    groups: int | None = None,
) -> ErrorModel:
    """The :class:`ErrorModel` of ``graph`` in ``precision`` on ``feeds``.

    ``tolerance`` None takes the error of every node reduced (the bound then binds
    nothing: reduced precision everywhere is within it). The nodes are cut, in run order,
    into as many groups as whole-model runs fit ``budget_s``, or ``groups`` when given (one
    node each when there are enough: method ``whole``; else ``grouped``); each group's
    error is measured with the whole model, and shared among its nodes by their local
    errors (see the module).
    """
    runs = _Runs(graph, feeds, precision)
    names = runs.compiled.node_names
    floats = [i for i, name in enumerate(names) if reduces(graph, name, precision)]
    reference = runs.outputs(())
    started = time.perf_counter()  # the first run warmed the kernels up: time the second
    all_reduced = output_error(runs.outputs({names[i] for i in floats}), reference)
    run_s = time.perf_counter() - started
    if groups is None:
        groups = int(budget_s / max(run_s / 2, 1e-9))  # a run from a node on: half one
    parts = [
        part
        for part in np.array_split(np.asarray(floats, dtype=int), max(min(groups, len(floats)), 1))
        if len(part)
    ]
    cut = [[names[i] for i in part] for part in parts]
    starts = [int(part[0]) for part in parts]
    whole: list[float] = []
    for done, (group, start, live) in enumerate(
        zip(cut, starts, runs.live_at(starts), strict=True)
    ):
        again = runs.outputs(set(group), live, start=start)
        whole.append(output_error(again, reference))
        if progress is not None:
            progress(done + 1, len(cut))
    singletons = all(len(group) == 1 for group in cut)
    local = {} if singletons else _local_errors(runs, feeds, {names[i] for i in floats})
    squared = _shared(cut, whole, local)
    total = sum(squared.values())
    scale = _scale(all_reduced, total)
    weights = {(name, precision): value * scale for name, value in squared.items()}
    limit = all_reduced if tolerance is None else tolerance
    return ErrorModel(weights, limit, all_reduced, "whole" if singletons else "grouped")


def every_node_reduced(
    graph: Graph,
    samples: Sequence[Mapping[str, np.ndarray]],
    precisions: Sequence[str],
    budget_s: float,
) -> Iterator[tuple[dict[str, Any], dict[str, dict[str, Any]]]]:
    """For each of ``samples``: the exact outputs, and by precision those of every node reduced.

    Emulated on the reference codegen, as the sensitivities are. Stops before a sample once
    ``budget_s`` seconds are spent, after the first whatever it took.
    """
    if not samples:
        return
    runs = {p: _Runs(graph, samples[0], p) for p in precisions}
    reduced = {
        p: {name for name in run.compiled.node_names if reduces(graph, name, p)}
        for p, run in runs.items()
    }
    started = time.perf_counter()
    for index, sample in enumerate(samples):
        if index and time.perf_counter() - started > budget_s:
            return
        exact = next(iter(runs.values())).outputs((), sample)
        yield exact, {p: run.outputs(reduced[p], sample) for p, run in runs.items()}


def _scale(all_reduced: float, total: float) -> float:
    """What the groups' squared errors are scaled by so that they add up to ``all_reduced``'s.

    1 when a group's outputs overflowed (its nodes' weights stay infinite: never within a
    tolerance), 0 when no group erred.
    """
    if total == math.inf:
        return 1.0
    return all_reduced * all_reduced / total if total > 0 else 0.0


def _local_errors(
    runs: _Runs, feeds: Mapping[str, np.ndarray], chosen: set[str]
) -> dict[str, float]:
    """Each chosen node's local error: its own outputs' relative error, its inputs exact."""
    return {
        name: output_error(dict(enumerate(rounded)), dict(enumerate(exact)))
        for name, exact, rounded in runs.compiled.rounded_outputs(
            dict(feeds), chosen, runs.reduction
        )
    }


def _shared(
    groups: list[list[str]], errors: list[float], local: Mapping[str, float]
) -> dict[str, float]:
    """Each node's share of its group's squared error, by node name.

    In proportion to the nodes' squared local errors; evenly where a group's are all 0;
    among the nodes whose local error is not finite where there are any. Each local error
    is taken relative to the group's largest before squaring, so that a local error near
    the float's range (a quantised model's integer outputs, 1e200 off) cannot overflow.
    """
    shares: dict[str, float] = {}
    for group, error in zip(groups, errors, strict=True):
        own = [local.get(name, 1.0) for name in group]
        if not all(math.isfinite(value) for value in own):
            parts = [0.0 if math.isfinite(value) else 1.0 for value in own]
        else:
            largest = max(own, default=0.0)
            parts = [(value / largest) * (value / largest) if largest > 0 else 0.0 for value in own]
        total = sum(parts)
        for name, part in zip(group, parts, strict=True):
            shares[name] = error * error * (part / total if total > 0 else 1 / len(group))
    return shares


def _computes_floats(graph: Graph, name: str) -> bool:
    """Whether the node makes a float32 output (only those are rounded)."""
    return any(out and graph.value(out).dtype == np.float32 for out in graph.node(name).outputs)
