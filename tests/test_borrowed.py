"""Ops the numpy reference has no kernel of, but onnxruntime runs, are borrowed from it.

A scikit-learn converter's ``ai.onnx.ml::Scaler`` and onnxruntime's own
``com.microsoft::Gelu`` import, run on every whole-model f32 target, and match onnxruntime
on the whole model; an op neither knows is still refused in one line naming it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from autopart.ops.borrowed import borrowed_kernel, onnxruntime_runs
from tests.conftest import run_onnxruntime
from tests.test_errors import assert_one_line_error, invoke
from tests.test_partition_fuzz import f32_whole_targets


def foreign_model(op_domain: str = "com.microsoft", op_type: str = "Gelu") -> onnx.ModelProto:
    """x -> Scaler (ai.onnx.ml) -> Relu -> a contrib op -> MatMul by a constant -> y."""
    nodes = [
        helper.make_node(
            "Scaler", ["x"], ["scaled"], domain="ai.onnx.ml", offset=[0.5] * 8, scale=[2.0] * 8
        ),
        helper.make_node("Relu", ["scaled"], ["positive"]),
        helper.make_node(op_type, ["positive"], ["activated"], domain=op_domain),
        helper.make_node("MatMul", ["activated", "w"], ["y"]),
    ]
    weight = onnx.numpy_helper.from_array(
        np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4), "w"
    )
    graph = helper.make_graph(
        nodes, "foreign", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [weight],
    )  # fmt: skip
    imports = [helper.make_opsetid(d, v) for d, v in (("", 17), ("ai.onnx.ml", 3), (op_domain, 1))]
    return helper.make_model(graph, opset_imports=imports)


def test_onnxruntimes_kernels_are_known_by_domain_op_and_opset() -> None:
    assert onnxruntime_runs("DynamicQuantizeLSTM", "com.microsoft", 1)
    assert onnxruntime_runs("Scaler", "ai.onnx.ml", 3)
    assert not onnxruntime_runs("NoSuchOp", "com.example", 1)
    gelu = borrowed_kernel("Gelu", "com.microsoft", 1, {}, 1)
    x = np.linspace(-3, 3, 7, dtype=np.float32)
    (y,) = gelu(x)
    expected = 0.5 * x * (1 + np.vectorize(__import__("math").erf)(x / np.sqrt(2)))
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    (y64,) = gelu(x.reshape(7, 1))  # another rank: another session
    assert y64.shape == (7, 1)


def test_a_model_with_ops_only_onnxruntime_knows_runs_on_every_target(tmp_path: Path) -> None:
    path = tmp_path / "foreign.onnx"
    onnx.save(foreign_model(), str(path))
    for target in f32_whole_targets():
        code, output = invoke("run", str(path), "--assign", f"re:.*={target}", "--check")
        assert code == 0 and "(ok)" in output, (target, output)
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x)
    code, _ = invoke(
        "run", str(path), "--inputs", str(tmp_path / "x.npz"), "--out", str(tmp_path / "y.npz")
    )
    assert code == 0
    with np.load(tmp_path / "y.npz") as saved:
        np.testing.assert_allclose(
            saved["y"], run_onnxruntime(foreign_model(), {"x": x})[0], rtol=1e-5
        )


def test_an_op_neither_knows_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "unknown.onnx"
    onnx.save(foreign_model("com.example", "Frobnicate"), str(path))
    code, output = invoke("run", str(path))
    assert_one_line_error(code, output, "com.example::Frobnicate")
