"""Single-op models: each op the numpy codegen claims for transformers and activations,
against onnxruntime, on random inputs."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import autopart
from tests.conftest import make_model, run_onnxruntime

F, I64, B = np.float32, np.int64, np.bool_

# (op, attributes, inputs as (shape, dtype) or a constant array, opset)
CASES: list[tuple[str, dict[str, Any], list[Any], int]] = [
    ("LeakyRelu", {"alpha": 0.1}, [((3, 4), F)], 17),
    ("Clip", {}, [((3, 4), F), np.array(-0.5, F), np.array(0.7, F)], 17),
    ("Clip", {"min": -0.2, "max": 0.3}, [((3, 4), F)], 6),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, [((3, 4), F)], 17),
    ("HardSwish", {}, [((3, 4), F)], 17),
    ("Elu", {"alpha": 0.7}, [((3, 4), F)], 17),
    ("Selu", {}, [((3, 4), F)], 17),
    ("Celu", {"alpha": 1.5}, [((3, 4), F)], 17),
    ("Softplus", {}, [((3, 4), F)], 17),
    ("Softsign", {}, [((3, 4), F)], 17),
    ("Mish", {}, [((3, 4), F)], 18),
    ("ThresholdedRelu", {"alpha": 0.2}, [((3, 4), F)], 17),
    ("PRelu", {}, [((2, 3, 4), F), np.array([0.1, 0.2, 0.3], F).reshape(3, 1)], 17),
    ("Gelu", {}, [((3, 4), F)], 20),
    ("Gelu", {"approximate": "tanh"}, [((3, 4), F)], 20),
    ("Erf", {}, [((3, 4), F)], 17),
    ("Tanh", {}, [((3, 4), F)], 17),
    ("Sigmoid", {}, [((3, 4), F)], 17),
    ("Sqrt", {}, [np.abs(np.linspace(0.1, 3, 12, dtype=F)).reshape(3, 4)], 17),
    ("Pow", {}, [np.linspace(0.1, 3, 12, dtype=F).reshape(3, 4), np.array(3.0, F)], 17),
    ("Div", {}, [((3, 4), F), np.linspace(1, 2, 4, dtype=F)], 17),
    ("Sub", {}, [((2, 1, 4), F), ((3, 1), F)], 17),
    ("Softmax", {"axis": 1}, [((2, 3, 4), F)], 17),
    ("Softmax", {"axis": 1}, [((2, 3, 4), F)], 11),
    ("LogSoftmax", {"axis": -1}, [((2, 3, 4), F)], 17),
    (
        "LayerNormalization",
        {"axis": -1, "epsilon": 1e-5},
        [((2, 5, 8), F), ((8,), F), ((8,), F)],
        17,
    ),
    ("LayerNormalization", {"axis": 1}, [((2, 5, 8), F), ((5, 8), F)], 17),
    ("ReduceMean", {"axes": [-1], "keepdims": 1}, [((2, 3, 4), F)], 17),
    ("ReduceMean", {"keepdims": 0}, [((2, 3, 4), F), np.array([0, 2], I64)], 18),
    ("ReduceSum", {"keepdims": 1}, [((2, 3, 4), F), np.array([1], I64)], 13),
    ("ReduceMax", {"axes": [1], "keepdims": 0}, [((2, 3, 4), F)], 13),
    ("MatMul", {}, [((2, 3, 4, 5), F), ((5, 6), F)], 17),
    ("Gemm", {"transA": 1, "alpha": 0.5, "beta": 2.0}, [((4, 3), F), ((4, 5), F), ((5,), F)], 17),
    ("Gemm", {"transB": 1}, [((3, 4), F), ((5, 4), F)], 17),
    ("Transpose", {"perm": [2, 0, 1]}, [((2, 3, 4), F)], 17),
    ("Reshape", {}, [((2, 3, 4), F), np.array([0, -1], I64)], 17),
    (
        "Slice",
        {},
        [
            ((5, 6), F),
            np.array([1, -4], I64),
            np.array([100, -1], I64),
            np.array([0, 1], I64),
            np.array([2, 1], I64),
        ],
        17,
    ),
    (
        "Slice",
        {},
        [
            ((5, 6), F),
            np.array([-1], I64),
            np.array([-100], I64),
            np.array([1], I64),
            np.array([-2], I64),
        ],
        17,
    ),
    ("Gather", {"axis": 0}, [((10, 4), F), np.array([[0, 9], [-1, 3]], I64)], 17),
    ("Gather", {"axis": 1}, [((3, 5), F), np.array(2, I64)], 17),
    ("Concat", {"axis": -1}, [((2, 3), F), ((2, 5), F)], 17),
    ("Split", {"axis": 1}, [((2, 6), F), np.array([2, 4], I64)], 17),
    ("Split", {"axis": 1, "num_outputs": 3}, [((2, 7), F)], 18),
    ("Squeeze", {}, [((2, 1, 3, 1), F), np.array([1, -1], I64)], 17),
    ("Unsqueeze", {}, [((2, 3), F), np.array([0, 3], I64)], 17),
    ("Unsqueeze", {"axes": [1]}, [((2, 3), F)], 11),
    ("Cast", {"to": TensorProto.INT64}, [np.array([[1.7, -2.2]], F)], 17),
    ("Cast", {"to": TensorProto.FLOAT}, [np.array([[1, 0]], I64)], 17),
    ("Where", {}, [np.array([[True, False, True]]), ((2, 3), F), ((1, 3), F)], 17),
    ("Expand", {}, [((3, 1), F), np.array([2, 3, 4], I64)], 17),
    ("Tile", {}, [((2, 3), F), np.array([2, 1], I64)], 17),
    ("Pad", {"mode": "reflect"}, [((1, 2, 4, 4), F), np.array([0, 0, 1, 2, 0, 0, 2, 1], I64)], 17),
    ("Pad", {"mode": "edge"}, [((1, 2, 4, 4), F), np.array([0, 0, 1, 2, 0, 0, 2, 1], I64)], 17),
    (
        "Pad",
        {},
        [((1, 2, 4, 4), F), np.array([0, 0, 1, -1, 0, 0, 2, 1], I64), np.array(0.5, F)],
        17,
    ),
    ("Equal", {}, [np.array([1, 2, 3], I64), np.array([1, 0, 3], I64)], 17),
    ("ArgMax", {"axis": 1, "keepdims": 0}, [((3, 5), F)], 17),
    ("Flatten", {"axis": 2}, [((2, 3, 4, 5), F)], 17),
    ("InstanceNormalization", {}, [((2, 3, 4, 4), F), ((3,), F), ((3,), F)], 17),
    ("DepthToSpace", {"blocksize": 2, "mode": "CRD"}, [((1, 8, 2, 3), F)], 17),
    ("DepthToSpace", {"blocksize": 2}, [((1, 8, 2, 3), F)], 17),
    ("SpaceToDepth", {"blocksize": 2}, [((1, 2, 4, 6), F)], 17),
    (
        "ConvTranspose",
        {"strides": [2, 2], "pads": [1, 0, 0, 1], "output_padding": [1, 1]},
        [((1, 4, 3, 3), F), ((4, 2, 3, 3), F)],
        17,
    ),
    (
        "ConvTranspose",
        {"group": 2, "dilations": [2, 1]},
        [((1, 4, 3, 3), F), ((4, 3, 2, 2), F), ((6,), F)],
        17,
    ),
    ("CumSum", {"exclusive": 1, "reverse": 1}, [((3, 4), F), np.array(1, I64)], 17),
    ("Einsum", {"equation": "bij,bjk->bik"}, [((2, 3, 4), F), ((2, 4, 5), F)], 17),
    ("Range", {}, [np.array(1, I64), np.array(10, I64), np.array(3, I64)], 17),
]


def _case_id(case: tuple) -> str:
    op, attrs, _, opset = case
    return f"{op}-v{opset}-" + "-".join(f"{k}" for k in attrs) if attrs else f"{op}-v{opset}"


@pytest.mark.parametrize("case", CASES, ids=[f"{i}-{_case_id(c)}" for i, c in enumerate(CASES)])
def test_op_matches_onnxruntime(case: tuple) -> None:
    op, attrs, specs, opset = case
    rng = np.random.default_rng(7)
    feeds, inputs, inits, names = {}, [], [], []
    for index, spec in enumerate(specs):
        name = f"in{index}"
        names.append(name)
        if isinstance(spec, np.ndarray):
            inits.append(numpy_helper.from_array(spec, name))
            continue
        shape, dtype = spec
        feeds[name] = rng.standard_normal(shape).astype(dtype)
        inputs.append(
            helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape
            )
        )
    outputs = ["y0", "y1", "y2"][: attrs.get("num_outputs", 2 if op == "Split" else 1)]
    node = helper.make_node(op, names, outputs, **attrs)
    graph = helper.make_graph(
        [node], "op", inputs, [onnx.ValueInfoProto(name=o) for o in outputs], initializer=inits
    )
    model = onnx.shape_inference.infer_shapes(make_model(graph, opset), strict_mode=True)
    expected = run_onnxruntime(model, feeds)
    result = autopart.run(model, feeds).outputs
    for name, reference in zip(outputs, expected, strict=True):
        got = result[name]
        assert got.dtype == reference.dtype and got.shape == reference.shape
        np.testing.assert_allclose(got, reference, rtol=1e-5, atol=1e-5)
