"""Empty tensors (a detector with nothing detected) through the reference, against onnxruntime.

``reshape(n, -1)`` cannot infer -1 when a known dim is 0; the kernels that flatten compute
both sides instead. Scalars through NonZero follow onnxruntime: one row.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from autopart.ir.onnx_import import load_graph
from autopart.runtime.executor import Executor
from tests.conftest import make_model, run_onnxruntime

CASES = [
    ("Flatten", {"axis": 1}, (0, 4, 5), 13),
    ("Flatten", {"axis": 2}, (3, 0, 2), 13),
    ("Flatten", {"axis": 0}, (0, 3), 13),
    ("Softmax", {"axis": 1}, (0, 6), 11),
    ("LogSoftmax", {"axis": 1}, (0, 2, 3), 11),
    ("NonZero", {}, (0, 3), 13),
    ("NonZero", {}, (), 13),
]


@pytest.mark.parametrize(("op", "attrs", "shape", "opset"), CASES)
def test_empty_and_scalar_inputs_give_onnxruntimes_shapes(
    op: str, attrs: dict[str, int], shape: tuple[int, ...], opset: int
) -> None:
    out_type = TensorProto.INT64 if op == "NonZero" else TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], **attrs)], "empty",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", out_type, None)],
    )  # fmt: skip
    model = make_model(graph, opset=opset)
    x = np.ones(shape, np.float32)
    (expected,) = run_onnxruntime(model, {"x": x})
    ours = Executor(load_graph(model)).run({"x": x}).outputs["y"]
    assert ours.shape == expected.shape
    np.testing.assert_array_equal(ours, expected)
