"""Checking outputs: the relative error against the numpy reference, and an independent oracle.

A plan's outputs are checked against the numpy reference on the same inputs
(:func:`check_outputs`); ``autopart run --check`` checks against an oracle that is not the
plan itself (:func:`oracle_outputs`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from autopart.errors import AutopartError, TargetError
from autopart.ir.graph import Graph
from autopart.ir.target import VirtualDevice
from autopart.plan.schema import Plan
from autopart.runtime.executor import Executor
from autopart.targets.codegen import HOST, Codegen, Role
from autopart.targets.registry import codegen_for, reference_codegen
from autopart.tuning.ties import tie_reorderings


def check_outputs(
    graph: Graph,
    inputs: Mapping[str, np.ndarray],
    outputs: Mapping[str, np.ndarray],
    reference: Mapping[str, np.ndarray] | None = None,
) -> dict[str, float]:
    """Max relative error of each output against the numpy reference on the same inputs.

    ``reference`` passes outputs of the numpy reference computed earlier on ``inputs``.
    A NaN or an infinity where the reference has the same is no error; anywhere else it is
    an infinite error, so that it always fails a check (never a NaN that compares false).
    """
    if reference is None:
        reference = Executor(graph).run(inputs).outputs
    return _errors(outputs, reference)


def _errors(
    outputs: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray]
) -> dict[str, float]:
    """Each expected output's :func:`relative_error`, by name."""
    return {
        name: relative_error(np.asarray(outputs[name]), np.asarray(want))
        for name, want in expected.items()
    }


def errors_up_to_ties(
    outputs: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray], tolerance: float
) -> tuple[dict[str, float], str | None]:
    """Each output's relative error, and the sort key whose ties had to be reordered.

    In order first; where an error passes ``tolerance``, the outputs reordered within the
    ties of a sorted score (:func:`least_error_order`) are tried, and where that brings
    every output within ``tolerance`` it gives the errors, with its key's name. Else the
    errors in order, and None.
    """
    errors = _errors(outputs, expected)
    if max(errors.values(), default=0.0) <= tolerance:
        return errors, None
    reordered, key, worst = least_error_order(outputs, expected, tolerance)
    if key is not None and worst <= tolerance:
        return _errors(reordered, expected), key
    return errors, None


def least_error_order(
    outputs: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray], tolerance: float
) -> tuple[dict[str, np.ndarray], str | None, float]:
    """``outputs`` in the order of least largest relative error, the key moved, that error.

    As given, or with rows moved within the ties of a sorted score
    (:func:`autopart.tuning.ties.tie_reorderings`, ties ``tolerance`` wide), whichever has
    the least error over ``expected``'s outputs; the key is None where the order as given
    is kept. Rows never leave their tie, so outputs that differ in anything but the order
    of tied rows keep their error.
    """
    got = {name: np.asarray(value) for name, value in outputs.items()}
    want = {name: np.asarray(value) for name, value in expected.items()}
    best, key = got, None
    error = max(_errors(got, want).values(), default=0.0)
    if error == 0.0:
        return best, key, error
    for name, reordered in tie_reorderings(got, want, tolerance):
        again = max(_errors(reordered, want).values(), default=0.0)
        if again < error:
            best, key, error = reordered, name, again
    return best, key, error


def relative_error(got: np.ndarray, expected: np.ndarray) -> float:
    """``max |got - expected| / max |expected|`` over finite values (see :func:`check_outputs`).

    Outputs of another shape than the reference's differ wholly (an infinite error): a
    model whose output sizes depend on the data (a detector's count of boxes over a
    threshold) may keep another count on another target.
    """
    if got.shape != expected.shape:
        return math.inf
    if not expected.size:
        return 0.0
    got = got.astype(np.float64, copy=False)
    expected = expected.astype(np.float64, copy=False)
    finite = np.isfinite(expected)
    same = (np.isnan(got) & np.isnan(expected)) | (got == expected)
    if not np.all(same | (finite & np.isfinite(got))):
        return math.inf
    if not finite.any():
        return 0.0
    scale = float(np.abs(expected[finite]).max()) or 1.0
    return float(np.abs(got[finite] - expected[finite]).max()) / scale


def oracle_outputs(
    graph: Graph, feeds: Mapping[str, np.ndarray], plan: Plan | None = None
) -> tuple[str, dict[str, np.ndarray]]:
    """Outputs to check a run of ``plan`` against, from an oracle independent of it.

    That is the :attr:`~autopart.targets.codegen.Role.ORACLE` codegen (onnxruntime) running
    the whole model alone, where it can, unless ``plan`` is exactly that (every node on one
    whole-device partition of it); else the :attr:`~autopart.targets.codegen.Role.REFERENCE`
    codegen (numpy), unless ``plan`` runs every node on it. Returns the oracle's name and
    its outputs. Raises :class:`AutopartError` when no independent oracle can run the
    model: a run is never checked against itself.
    """
    codegens = {VirtualDevice.parse(p.target).codegen for p in plan.partitions} if plan else set()
    oracle, reference = codegen_for(Role.ORACLE), reference_codegen()
    why = "no codegen is an oracle of whole models"
    if oracle is not None:
        alone = plan is not None and len(plan.partitions) == 1 and codegens == {oracle.name}
        why = f"the plan is {oracle.name} alone"
        if not alone:
            try:
                return f"{oracle.name} (whole model)", _whole_model(oracle, graph, feeds)
            except AutopartError as error:
                first = (str(error).splitlines() or [""])[0]
                why = f"{oracle.name} cannot run the model ({first})"
    if codegens == {reference.name}:
        raise AutopartError(f"no independent oracle to check against: {why[:200]}")
    return f"the {reference.name} reference", Executor(graph).run(feeds).outputs


def _whole_model(
    oracle: Codegen, graph: Graph, feeds: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Every output of ``graph`` from ``oracle`` compiling it whole, as its library alone.

    Raises :class:`AutopartError` when its library is missing or refuses a node or the model.
    """
    if not oracle.available():
        raise TargetError(f"{oracle.name} is not installed")
    compiled = oracle.compile(
        graph, graph.nodes, [*graph.inputs, *graph.constants], graph.outputs,
        replace(HOST, alone=True),
    )  # fmt: skip
    env: dict[str, Any] = dict(feeds)
    compiled.run(env)
    return {name: np.asarray(env[name]) for name in graph.outputs}
