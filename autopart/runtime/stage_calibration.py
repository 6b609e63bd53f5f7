"""int8 calibration of a stage across hosts: what its inputs hold on the model's samples.

A stage of a plan across hosts is compiled on its host from a model of its nodes alone,
whose inputs are values inside the whole model. int8 on that host calibrates each
activation's range on samples of the stage's inputs; seeded random values in their place
(what a model with no calibration attached gets, :func:`~autopart.targets.quant_ranges.
calibration_of`) are nothing like a ReLU's or a softmax's outputs. So the driver computes
what the stage's inputs hold when the whole model runs its own calibration samples (the
user's, else seeded random inputs), with the numpy reference, and hands them to the stage.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from autopart.ir.graph import Graph
from autopart.ir.hashing import graph_hash
from autopart.ir.target import VirtualDevice
from autopart.targets import quant_ranges
from autopart.targets.codegen import HOST
from autopart.targets.registry import reference_codegen

INT8 = "int8"

_memo: dict[tuple[str, str, str], tuple[np.ndarray, ...]] = {}  # one model's values at a time
_lock = threading.Lock()


def calibrates(targets: Sequence[str]) -> bool:
    """Whether any of ``targets`` (target specs) computes in int8, and so calibrates."""
    return any(VirtualDevice.parse(target).computes_in == INT8 for target in targets)


def stage_calibration(graph: Graph, names: Sequence[str]) -> quant_ranges.CalibrationSamples:
    """The values ``names`` take on ``graph``'s calibration samples, one sample each.

    ``names`` are values of ``graph`` (inputs included, constants not). The samples are
    ``graph``'s own (:func:`~autopart.targets.quant_ranges.calibration_of`), and the result
    is a stand-in exactly when they are. Values are computed once per model and samples,
    by one reference run per sample for every value not yet known, and kept for the next
    stage or candidate until another model's are asked.
    """
    calibration = quant_ranges.calibration_of(graph)
    key = (graph_hash(graph), calibration.digest)
    with _lock:
        if any(k[:2] != key for k in _memo):
            _memo.clear()
        missing = [name for name in dict.fromkeys(names) if (*key, name) not in _memo]
    if missing:
        computed = _values(graph, calibration.samples, missing)
        with _lock:
            _memo.update({(*key, name): values for name, values in computed.items()})
    with _lock:
        columns = {name: _memo[(*key, name)] for name in names}
    samples = tuple(
        {name: column[index] for name, column in columns.items()}
        for index in range(len(calibration.samples))
    )
    return quant_ranges.CalibrationSamples(samples, calibration.stand_in)


def _values(
    graph: Graph, samples: Sequence[dict[str, np.ndarray]], names: Sequence[str]
) -> dict[str, tuple[np.ndarray, ...]]:
    """Each of ``names``' values on each of ``samples``, by the numpy reference."""
    inside = [name for name in names if name not in graph.inputs]
    compiled = None
    if inside:
        compiled = reference_codegen().compile(
            graph, graph.nodes, graph.inputs, inside, replace(HOST, alone=True)
        )
    found: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for sample in samples:
        env = dict(sample)
        if compiled is not None:
            compiled.run(env)
        for name in names:
            found[name].append(np.asarray(env[name]))
    return {name: tuple(values) for name, values in found.items()}
