"""Measuring how much each node's reduced precision perturbs a model's outputs.

A reduced-precision target (bf16) computes with its inputs and weights rounded to bf16,
accumulates in f32 and rounds its outputs: the numpy reference emulates exactly that for
chosen nodes (:func:`run_reduced`), which needs no device and no compile, and gives the same
answer on every machine. A node's sensitivity is the relative output error of the model
(as :func:`autopart.tuning.verify.check_outputs` measures it: the largest error over the
largest magnitude, over outputs) when it alone runs reduced. That takes one run of the
model per node; where that would exceed ``budget_s`` the node's *local* error (its own
output's relative error, inputs exact) stands in, from one run. Both are scaled so that
every node reduced predicts the error measured with every node reduced
(:class:`~autopart.costmodel.accuracy.AccuracyBudget`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

import ml_dtypes
import numpy as np

from autopart.costmodel.accuracy import AccuracyBudget
from autopart.errors import ExecutionError
from autopart.ir.graph import Graph
from autopart.ops import KERNEL_ERRORS, kernel_failure
from autopart.targets.codegen import get_codegen
from autopart.targets.numpy_codegen import NumpyStep

# How each reduced precision is emulated on f32 values: the rounding of its storage type.
EMULATED = {"bf16": ml_dtypes.bfloat16}


def round_to(precision: str, value: Any) -> Any:
    """``value`` rounded through ``precision``'s storage type if it is a float32 array."""
    if isinstance(value, np.ndarray) and value.dtype == np.float32:
        return value.astype(EMULATED[precision]).astype(np.float32)
    return value


def run_reduced(
    steps: list[NumpyStep],
    feeds: Mapping[str, np.ndarray],
    reduced: Collection[str],
    precision: str,
    outputs: Collection[str],
    start: int = 0,
    keep: bool = False,
) -> dict[str, np.ndarray]:
    """Run the numpy ``steps`` with the nodes named in ``reduced`` emulating ``precision``.

    Returns ``outputs``, or with ``keep`` every value (nothing is freed). From ``start``
    on, ``feeds`` must hold every value the steps from there read (a kept run's values).
    """
    env: dict[str, Any] = dict(feeds)
    for step in steps[start:]:
        args = [
            bound if bound is not None or not name else env[name]
            for name, bound in zip(step.inputs, step.args, strict=True)
        ]
        lowered = step.name in reduced
        if lowered:
            args = [round_to(precision, arg) for arg in args]
        try:
            results = step.kernel(*args)
        except KERNEL_ERRORS as error:
            raise ExecutionError(
                f"node {step.name!r} ({step.op_type}) failed on numpy: {kernel_failure(error)}"
            ) from error
        for name, result in zip(step.outputs, results, strict=False):
            if name:
                env[name] = round_to(precision, result) if lowered else result
        if not keep:
            for name in step.free:
                env.pop(name, None)
    return env if keep else {name: env[name] for name in outputs if name in env}


def output_error(got: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray]) -> float:
    """The largest relative error of ``got`` against ``expected`` over their outputs."""
    worst = 0.0
    for name, want in expected.items():
        if name not in got or not np.issubdtype(np.asarray(want).dtype, np.floating):
            continue
        want64 = np.asarray(want, np.float64)
        scale = float(np.abs(want64).max(initial=0.0)) or 1.0
        diff = np.abs(np.asarray(got[name], np.float64) - want64)
        worst = max(worst, float(np.nan_to_num(diff, nan=np.inf).max(initial=0.0)) / scale)
    return worst


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
    compiled = get_codegen("numpy").compile(graph, graph.nodes, graph.inputs, graph.outputs)
    steps: list[NumpyStep] = compiled.steps  # type: ignore[attr-defined]
    outputs = list(graph.outputs)
    reference = run_reduced(steps, feeds, (), precision, outputs)
    floats = [index for index, step in enumerate(steps) if _computes_floats(graph, step)]
    started = time.perf_counter()  # the first run warms the kernels up: time the second
    every = run_reduced(steps, feeds, {steps[i].name for i in floats}, precision, outputs)
    run_s = time.perf_counter() - started
    all_reduced = output_error(every, reference)
    if run_s * len(floats) / 2 <= budget_s:  # a run from a node on takes half one on average
        method, raw = "whole", {}
        values = run_reduced(steps, feeds, (), precision, outputs, keep=True)
        for done, index in enumerate(floats):
            name = steps[index].name
            again = run_reduced(steps, values, {name}, precision, outputs, start=index)
            raw[name] = output_error(again, reference)
            if progress is not None:
                progress(done + 1, len(floats))
    else:
        chosen = {steps[i].name for i in floats}
        method, raw = "local", _local_errors(steps, feeds, chosen, precision)
    total = sum(value * value for value in raw.values())
    scale = all_reduced**2 / total if total > 0 else 0.0
    weights = {(name, precision): value * value * scale for name, value in raw.items()}
    limit = all_reduced if tolerance is None else tolerance
    return AccuracyBudget(weights, limit, all_reduced, method)


def _computes_floats(graph: Graph, step: NumpyStep) -> bool:
    """Whether the node makes a float32 output (only those are rounded)."""
    return any(name and graph.value(name).dtype == np.float32 for name in step.outputs)


def _local_errors(
    steps: list[NumpyStep], feeds: Mapping[str, np.ndarray], chosen: set[str], precision: str
) -> dict[str, float]:
    """Each chosen node's own output error when it alone is reduced, its inputs exact."""
    env: dict[str, Any] = dict(feeds)
    errors: dict[str, float] = {}
    for step in steps:
        args = [
            bound if bound is not None or not name else env[name]
            for name, bound in zip(step.inputs, step.args, strict=True)
        ]
        results = step.kernel(*args)
        if step.name in chosen:
            lowered = step.kernel(*[round_to(precision, arg) for arg in args])
            errors[step.name] = output_error(
                {str(i): round_to(precision, r) for i, r in enumerate(lowered)},
                {str(i): r for i, r in enumerate(results)},
            )
        for name, result in zip(step.outputs, results, strict=False):
            if name:
                env[name] = result
        for name in step.free:
            env.pop(name, None)
    return errors
