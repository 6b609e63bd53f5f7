"""The PyTorch-exported transformer encoder fixture imports, folds and matches onnxruntime."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import onnx
import pytest

import autopart
from autopart.runtime import random_inputs
from tests.conftest import max_relative_error, run_onnxruntime

REQUIRED_OPS = {
    "MatMul",
    "Gemm",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Sqrt",
    "Erf",
    "Tanh",
    "Sigmoid",
    "Softmax",
    "LayerNormalization",
    "ReduceMean",
    "Reshape",
    "Transpose",
    "Slice",
    "Gather",
    "Concat",
    "Split",
    "Squeeze",
    "Unsqueeze",
    "Cast",
    "Where",
    "Expand",
}


def test_fixture_exercises_the_transformer_ops(transformer_path: Path) -> None:
    model = onnx.load(str(transformer_path))
    assert model.opset_import[0].version == 17
    assert {node.op_type for node in model.graph.node} >= REQUIRED_OPS


def test_shape_chains_fold_away(transformer_path: Path) -> None:
    graph = autopart.load(transformer_path)
    ops = Counter(node.op_type for node in graph.nodes)
    assert ops["Shape"] == 0 and ops["Constant"] == 0 and ops["Identity"] == 0
    assert ops["Concat"] == 0  # every Concat built a reshape target from shapes
    reshapes = [n for n in graph.nodes if n.op_type == "Reshape"]
    assert reshapes and all(graph.value(n.inputs[1]).is_const for n in reshapes)


@pytest.mark.parametrize("seed", [0, 1])
def test_transformer_matches_onnxruntime(transformer_path: Path, seed: int) -> None:
    graph = autopart.load(transformer_path)
    feeds = random_inputs(graph, seed=seed)
    assert feeds["attention_mask"].min() == 0  # the mask really masks something
    result = autopart.run(graph, feeds)
    expected = run_onnxruntime(transformer_path, feeds)
    for output, reference in zip(graph.outputs, expected, strict=True):
        assert max_relative_error(reference, result.outputs[output]) <= 1e-3
