"""Loading a model as the user names it: a zoo name, an ``.onnx`` path, a ModelProto or a Graph.

Every command that takes a model (run, info, profile, tune, bench) and the Python API load it
here. It sits above :mod:`autopart.zoo` (zoo names resolve to bundled models) and below
everything that runs or tunes a model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import onnx

from autopart.errors import ModelError
from autopart.ir.freeze import FreezeValues
from autopart.ir.graph import Graph
from autopart.ir.input_shapes import InputShapes
from autopart.ir.onnx_import import load_graph
from autopart.zoo import resolve_model

ModelLike = str | Path | onnx.ModelProto | Graph

__all__ = ["FreezeValues", "InputShapes", "ModelLike", "load_model"]


def load_model(
    model: ModelLike,
    input_shapes: InputShapes | None = None,
    freeze: FreezeValues | None = None,
    sample_shapes: Mapping[str, Sequence[int]] | None = None,
) -> Graph:
    """Import a zoo name, an ``.onnx`` path, a ModelProto (or pass a Graph through).

    ``input_shapes`` maps an input to its full shape or a symbolic dim's name to its size;
    ``freeze`` maps inputs to the values they are fixed to (see
    :func:`autopart.ir.onnx_import.load_graph`); ``sample_shapes``, the shapes of the
    user's samples, fix what ``input_shapes`` leaves symbolic. A name or path is recorded
    as the graph's ``meta["source"]``. A Graph is already imported: it takes neither option.
    """
    if isinstance(model, Graph):
        if input_shapes or freeze:  # sample shapes are checked against it when loaded
            raise ModelError("a Graph is already imported: load the model with its shapes")
        return model
    graph = load_graph(
        resolve_model(model), input_shapes, freeze=freeze, sample_shapes=sample_shapes
    )
    if isinstance(model, str | Path):
        graph.meta["source"] = str(model)
    return graph
