"""The If, Loop and Scan reference kernels against onnxruntime: attributes, nesting, refusals."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from autopart.errors import AutopartError
from autopart.ir import load_graph
from autopart.ir.hashing import graph_hash
from autopart.ir.signature import op_signature
from autopart.runtime import Executor

ort = pytest.importorskip("onnxruntime")

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
info = helper.make_tensor_value_info


def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    constants: dict[str, np.ndarray] | None = None,
    opset: int = 17,
) -> onnx.ModelProto:
    initializers = [numpy_helper.from_array(v, k) for k, v in (constants or {}).items()]
    graph = helper.make_graph(nodes, "m", inputs, outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _agree(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    want = dict(zip(names, session.run(names, feeds), strict=True))
    graph = load_graph(model, {name: array.shape for name, array in feeds.items()})
    got = Executor(graph).run(feeds).outputs
    for name in names:
        assert got[name].shape == want[name].shape, name
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)


def _scan_body() -> onnx.GraphProto:
    """state (4,) += row_a * g + row_b; emits the new state and row_b."""
    return helper.make_graph(
        [
            helper.make_node("Mul", ["ra", "g"], ["rag"]),
            helper.make_node("Add", ["s_in", "rag"], ["s1"]),
            helper.make_node("Add", ["s1", "rb"], ["s_out"]),
            helper.make_node("Identity", ["s_out"], ["st"]),
            helper.make_node("Identity", ["rb"], ["e"]),
        ],
        "scan_body",
        [info("s_in", F, [4]), info("ra", F, [4]), info("rb", F, [4])],
        [info("s_out", F, [4]), info("st", F, [4]), info("e", F, [4])],
    )


@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"scan_input_directions": [1, 0], "scan_output_directions": [0, 1]},
        {"scan_input_axes": [1, 0], "scan_output_axes": [1, 0]},
        {"scan_input_axes": [-1, 0], "scan_output_axes": [-1, -2], "scan_input_directions": [0, 1]},
    ],
    ids=["plain", "directions", "axes", "negative-axes"],
)
def test_scan_attributes_match_onnxruntime(attrs: dict[str, Any]) -> None:
    rng = np.random.default_rng(0)
    a_shape = (4, 3) if attrs.get("scan_input_axes", [0])[0] in (1, -1) else (3, 4)
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["g"]),  # read by the body from the outer graph
        helper.make_node(
            "Scan",
            ["s0", "a", "b"],
            ["s_last", "states", "echo"],
            body=_scan_body(),
            num_scan_inputs=2,
            **attrs,
        ),
    ]
    out_axes = attrs.get("scan_output_axes", [0, 0])
    outputs = [
        info("s_last", F, [4]),
        info("states", F, [4, 3] if out_axes[0] in (1, -1) else [3, 4]),
        info("echo", F, [4, 3] if out_axes[1] in (1, -1) else [3, 4]),
    ]
    inputs = [info("x", F, [4]), info("s0", F, [4]), info("a", F, a_shape), info("b", F, [3, 4])]
    feeds = {
        "x": rng.standard_normal(4).astype(np.float32),
        "s0": rng.standard_normal(4).astype(np.float32),
        "a": rng.standard_normal(a_shape).astype(np.float32),
        "b": rng.standard_normal((3, 4)).astype(np.float32),
    }
    _agree(_model(nodes, inputs, outputs), feeds)


def test_loop_stopped_by_its_body_and_a_nested_if_reading_the_outermost_graph() -> None:
    """No trip count: the body's condition ends it; an If inside the body reads ``k``."""
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["v_in", "k"], ["t"])], "then", [], [info("t", F, [3])]
    )
    else_g = helper.make_graph(
        [helper.make_node("Add", ["v_in", "k"], ["e"])], "else", [], [info("e", F, [3])]
    )
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["i"], ["i_f"], to=F),
            helper.make_node("Less", ["i_f", "two"], ["early"]),
            helper.make_node("If", ["early"], ["v_out"], then_branch=then_g, else_branch=else_g),
            helper.make_node("ReduceSum", ["v_out"], ["total"], keepdims=0),
            helper.make_node("Less", ["total", "limit"], ["c_out"]),
        ],
        "body",
        [info("i", I64, []), info("c_in", B, []), info("v_in", F, [3])],
        [info("c_out", B, []), info("v_out", F, [3])],
    )
    nodes = [
        helper.make_node("Abs", ["x"], ["k"]),
        helper.make_node("Loop", ["", "go", "x"], ["v_last"], body=body),
    ]
    constants = {"two": np.array(2.0, np.float32), "limit": np.array(50.0, np.float32)}
    model = _model(
        nodes, [info("x", F, [3]), info("go", B, [])], [info("v_last", F, [3])], constants
    )
    x = np.array([1.5, 2.0, 0.5], np.float32)
    _agree(model, {"x": x, "go": np.array(True)})
    _agree(model, {"x": x, "go": np.array(False)})  # never runs: the input comes back


def test_loop_without_trip_count_or_condition_is_refused_in_one_line() -> None:
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Neg", ["v"], ["w"])],
        "body",
        [info("i", I64, []), info("c_in", B, []), info("v", F, [2])],
        [info("c_out", B, []), info("w", F, [2])],
    )
    model = _model(
        [helper.make_node("Loop", ["", "", "x"], ["y"], body=body)],
        [info("x", F, [2])],
        [info("y", F, [2])],
    )
    with pytest.raises(AutopartError, match="never ends") as error:
        Executor(load_graph(model)).run({"x": np.ones(2, np.float32)})
    assert "\n" not in str(error.value)


def test_scan_with_an_unimplemented_body_op_is_refused_by_name() -> None:
    body = helper.make_graph(
        [helper.make_node("Frobnicate", ["s_in", "r"], ["s_out"], domain="com.example")],
        "body",
        [info("s_in", F, [2]), info("r", F, [2])],
        [info("s_out", F, [2])],
    )
    model = _model(
        [helper.make_node("Scan", ["s0", "x"], ["s"], body=body, num_scan_inputs=1)],
        [info("s0", F, [2]), info("x", F, [3, 2])],
        [info("s", F, [2])],
    )
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(AutopartError, match=r"com\.example::Frobnicate"):
        Executor(load_graph(model, simplify_graph=False))


def test_hash_and_signature_see_the_subgraph() -> None:
    """Two Ifs that differ only inside a branch hash and sign differently."""

    def model(op: str) -> onnx.ModelProto:
        then_g = helper.make_graph(
            [helper.make_node(op, ["x"], ["t"])], "then", [], [info("t", F, [2])]
        )
        else_g = helper.make_graph(
            [helper.make_node("Neg", ["x"], ["e"])], "else", [], [info("e", F, [2])]
        )
        node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
        return _model([node], [info("x", F, [2]), info("c", B, [])], [info("y", F, [2])])

    first, second = load_graph(model("Relu")), load_graph(model("Abs"))
    assert graph_hash(first) != graph_hash(second)
    assert op_signature(first.nodes[0], first) != op_signature(second.nodes[0], second)
    assert "\n" not in op_signature(first.nodes[0], first)


def test_scan_whose_body_yields_too_few_outputs_is_refused_in_one_line() -> None:
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "r"], ["s_out"])],
        "body",
        [info("s_in", F, [2]), info("r", F, [2])],
        [info("s_out", F, [2])],
    )
    model = _model(
        [helper.make_node("Scan", ["s0", "x"], ["s", "extra"], body=body, num_scan_inputs=1)],
        [info("s0", F, [2]), info("x", F, [3, 2])],
        [info("s", F, [2]), info("extra", F, [3, 2])],
    )
    feeds = {"s0": np.zeros(2, np.float32), "x": np.ones((3, 2), np.float32)}
    with pytest.raises(AutopartError, match="yields 1 outputs for the node's 2") as error:
        Executor(load_graph(model, simplify_graph=False)).run(feeds)
    assert "\n" not in str(error.value)


def test_loop_output_disagreeing_with_its_declared_shape_is_an_error() -> None:
    """A fed trip count fixes nothing; the declared shape is trusted, and checked on running."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c_in"], ["c_out"]),
            helper.make_node("Neg", ["v"], ["w"]),
            helper.make_node("Identity", ["w"], ["s"]),
        ],
        "body",
        [info("i", I64, []), info("c_in", B, []), info("v", F, [2])],
        [info("c_out", B, []), info("w", F, [2]), info("s", F, [2])],
    )
    model = _model(
        [helper.make_node("Loop", ["m", "", "x"], ["y", "scans"], body=body)],
        [info("m", I64, []), info("x", F, [2])],
        [info("y", F, [2]), info("scans", F, [4, 2])],
    )
    executor = Executor(load_graph(model))
    x = np.ones(2, np.float32)
    assert executor.run({"m": np.array(4), "x": x}).outputs["scans"].shape == (4, 2)
    with pytest.raises(AutopartError, match="static shape is") as error:
        executor.run({"m": np.array(3), "x": x})
    assert "\n" not in str(error.value)
