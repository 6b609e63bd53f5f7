"""Measuring how much each node's reduced precision perturbs a model's outputs.

A reduced-precision target (bf16) computes with its inputs and weights rounded to bf16,
accumulates in f32 and rounds its outputs; an int8 one computes a weighted op on its
activation and weight quantised with the calibrated ranges and keeps its output float
(:class:`~autopart.targets.qdq.FakeQuantisation`). The reference codegen emulates exactly
that for chosen nodes (:class:`~autopart.targets.codegen.Emulating`), which needs no device
and no compile, and gives the same answer on every machine (int8: for the same
calibration samples). A node's sensitivity is the relative
output error of the model (the largest error over the largest magnitude, over outputs)
when it alone runs reduced. That takes one run of the model from that node on; where those
runs would exceed ``budget_s`` the node's *local* error (its own output's relative error,
its inputs exact) stands in, from one run. Both are scaled so that every node reduced
predicts the error measured with every node reduced
(:class:`~autopart.costmodel.accuracy.AccuracyBudget`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

import ml_dtypes
import numpy as np

from autopart.costmodel.accuracy import AccuracyBudget
from autopart.errors import TargetError
from autopart.ir.graph import Graph
from autopart.targets import qdq
from autopart.targets.codegen import Emulating, Reduction, Rounding, reference_codegen
from autopart.targets.quant_ranges import tensor_ranges

# How each rounded precision is emulated on f32 values: the rounding of its storage type.
ROUNDED = {"bf16": ml_dtypes.bfloat16}
# Every precision the reference emulates: rounded ones, and int8 by fake quantisation.
EMULATED = (*ROUNDED, qdq.PRECISION)


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
    """The largest relative error of ``got`` against ``expected`` over their float outputs."""
    worst = 0.0
    for name, want in expected.items():
        if name not in got or not np.issubdtype(np.asarray(want).dtype, np.floating):
            continue
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

    def kept(self) -> dict[str, Any]:
        """Every value of one exact run (nothing freed)."""
        values = dict(self.feeds)
        self.compiled.run_rounded(values, (), self.reduction, keep=True)
        return values


def measure_budget(
    graph: Graph,
    feeds: Mapping[str, np.ndarray],
    precision: str,
    tolerance: float | None,
    budget_s: float = 10.0,
    progress: Callable[[int, int], None] | None = None,
) -> AccuracyBudget:
    """The :class:`AccuracyBudget` of ``graph`` in ``precision`` on ``feeds``.

    ``tolerance`` None takes the error of every node reduced (the budget then binds
    nothing: reduced precision everywhere is within it). Sensitivities are whole-model
    errors when one run per node fits ``budget_s``, else local errors (see the module).
    """
    runs = _Runs(graph, feeds, precision)
    names = runs.compiled.node_names
    floats = [i for i, name in enumerate(names) if reduces(graph, name, precision)]
    reference = runs.outputs(())
    started = time.perf_counter()  # the first run warmed the kernels up: time the second
    all_reduced = output_error(runs.outputs({names[i] for i in floats}), reference)
    run_s = time.perf_counter() - started
    if run_s * len(floats) / 2 <= budget_s:  # a run from a node on takes half one on average
        method, raw = "whole", {}
        values = runs.kept()
        for done, index in enumerate(floats):
            again = runs.outputs({names[index]}, values, start=index)
            raw[names[index]] = output_error(again, reference)
            if progress is not None:
                progress(done + 1, len(floats))
    else:
        method, chosen = "local", {names[i] for i in floats}
        raw = {
            name: output_error(dict(enumerate(rounded)), dict(enumerate(exact)))
            for name, exact, rounded in runs.compiled.rounded_outputs(
                dict(feeds), chosen, runs.reduction
            )
        }
    total = sum(value * value for value in raw.values())
    scale = all_reduced**2 / total if total > 0 else 0.0
    weights = {(name, precision): value * value * scale for name, value in raw.items()}
    limit = all_reduced if tolerance is None else tolerance
    return AccuracyBudget(weights, limit, all_reduced, method)


def _computes_floats(graph: Graph, name: str) -> bool:
    """Whether the node makes a float32 output (only those are rounded)."""
    return any(out and graph.value(out).dtype == np.float32 for out in graph.node(name).outputs)
