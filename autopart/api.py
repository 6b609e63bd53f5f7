"""The Python API; each function mirrors one CLI command."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from autopart.ir.analysis import GraphSummary, summarise
from autopart.ir.graph import Graph
from autopart.ir.onnx_import import load_graph
from autopart.runtime.executor import Executor, RunResult
from autopart.runtime.feeds import random_inputs
from autopart.zoo import resolve_model

ModelLike = str | Path | onnx.ModelProto | Graph


def load(model: ModelLike, input_shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """Import a zoo name, an ``.onnx`` path, a ModelProto (or pass a Graph through)."""
    if isinstance(model, Graph):
        return model
    return load_graph(resolve_model(model), input_shapes)


def info(model: ModelLike, input_shapes: Mapping[str, Sequence[int]] | None = None) -> GraphSummary:
    """Op histogram, parameter bytes, FLOP estimate, inputs and outputs (``autopart info``)."""
    return summarise(load(model, input_shapes))


def run(
    model: ModelLike,
    inputs: Mapping[str, np.ndarray] | None = None,
    repeat: int = 1,
    warmup: int = 1,
    seed: int = 0,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> RunResult:
    """Run every node on ``cpu@numpy`` (``autopart run MODEL``).

    Without ``inputs``, seeded random inputs are used. Returns the outputs and the latency
    of each of the ``repeat`` timed runs.
    """
    graph = load(model, input_shapes)
    feeds = dict(inputs) if inputs is not None else random_inputs(graph, seed)
    return Executor(graph).run(feeds, repeat=repeat, warmup=warmup)
