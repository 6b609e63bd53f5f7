"""No silent wrong answers: what codegens refuse, and how, outside the node suite.

Rank-0 tensors on OpenCL, onnxruntime's run-time errors as one-line errors, attribute
values and training modes the OpenCL and onnxruntime codegens do not implement, and random
inputs of the narrow float types.
"""

from __future__ import annotations

import re
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import helper

from autopart.errors import AutopartError, ExecutionError, UnsupportedOpError
from autopart.ir import load_graph
from autopart.ir.graph import Graph, Node, Value
from autopart.plan.assign import plan_from_rules
from autopart.runtime import Executor, random_inputs
from autopart.runtime.plan_executor import PlanExecutor
from autopart.targets.codegen import Placement
from autopart.targets.devices import discover
from autopart.targets.onnxruntime.codegen import HAVE_ONNXRUNTIME
from autopart.targets.opencl import discover_opencl_devices
from autopart.targets.opencl.attributes import ATTRIBUTES
from autopart.targets.registry import get_codegen
from tests.conftest import make_model

needs_opencl = pytest.mark.skipif(not discover_opencl_devices(), reason="no OpenCL device")
needs_onnxruntime = pytest.mark.skipif(not HAVE_ONNXRUNTIME, reason="onnxruntime is missing")
F32 = np.dtype(np.float32)


def one_node(
    op: str,
    attrs: dict[str, Any] | None = None,
    inputs: dict[str, tuple[tuple[int, ...], Any]] | None = None,
    opset: int = 17,
    constants: dict[str, np.ndarray] | None = None,
) -> Graph:
    """y = op(inputs...) with float32 ``x`` of shape (2, 3) unless ``inputs`` says otherwise."""
    inputs = inputs or {"x": ((2, 3), F32)}
    values = {name: Value(name, shape, np.dtype(dtype)) for name, (shape, dtype) in inputs.items()}
    for name, data in (constants or {}).items():
        values[name] = Value(name, data.shape, data.dtype, const=data)
    values["y"] = Value("y", (2, 3), F32)
    node = Node("n0", op, [*inputs, *(constants or {})], ["y"], attrs or {})
    return Graph("one", [node], values, list(inputs), ["y"], {"": opset})


# -- rank 0 on OpenCL ------------------------------------------------------------------------
@needs_opencl
def test_a_scalar_keeps_shape_zero_on_an_opencl_device() -> None:
    device = discover_opencl_devices()[0]
    tensor = device.from_host(np.asarray(np.float32(2.5)))
    assert tensor.shape == ()
    back = device.to_host(tensor)
    assert back.shape == () and back == np.float32(2.5)


@needs_opencl
def test_a_rank_0_input_is_copied_into_an_opencl_partition() -> None:
    """y = x * s with a scalar graph input s: the copy onto the device keeps shape ()."""
    graph_proto = helper.make_graph(
        [helper.make_node("Mul", ["x", "s"], ["y"], name="mul")],
        "scalar",
        [
            helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("s", onnx.TensorProto.FLOAT, []),
        ],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])],
    )
    graph = load_graph(make_model(graph_proto))
    machine = discover()
    plan = plan_from_rules(graph, ["Mul=opencl:0@opencl"], "cpu@numpy", "test", machine)
    assert plan.assignment["mul"] == "opencl:0@opencl"
    feeds = {"x": np.arange(6, dtype=F32).reshape(2, 3), "s": np.asarray(np.float32(-1.5))}
    with PlanExecutor(plan, graph, machine) as executor:
        got = executor.run(feeds, concurrent=False).outputs["y"]
    np.testing.assert_allclose(got, feeds["x"] * feeds["s"], rtol=1e-6)


@needs_opencl
def test_a_rank_0_constant_output_of_an_opencl_subgraph_keeps_shape_zero() -> None:
    graph = one_node("Relu", constants={})
    graph.values["c"] = Value("c", (), F32, const=np.asarray(np.float32(4.0)))
    graph.outputs.append("c")
    device = discover_opencl_devices()[0]
    compiled = get_codegen("opencl").compile(
        graph, graph.nodes, ["x"], ["y", "c"], Placement(device)
    )
    env: dict[str, Any] = {"x": device.from_host(np.ones((2, 3), F32))}
    compiled.run(env)
    constant = device.to_host(env["c"])
    assert constant.shape == () and constant == np.float32(4.0)


# -- attributes on OpenCL ----------------------------------------------------------------------
@needs_opencl
@pytest.mark.parametrize(
    ("op", "attrs", "opset", "said"),
    [
        ("Gelu", {"approximate": "erf"}, 20, "attribute approximate=erf is not implemented"),
        ("Relu", {"alpha": 0.5}, 17, "attribute alpha=0.5 is not implemented"),
        ("Softmax", {"axis": 1, "extra": 2}, 17, "attribute extra=2 is not implemented"),
        ("Add", {"axis": 1, "broadcast": 1}, 6, "attribute axis=1 is not implemented"),
    ],
)
def test_opencl_refuses_attributes_it_does_not_implement(
    op: str, attrs: dict[str, Any], opset: int, said: str
) -> None:
    inputs = {"x": ((2, 3), F32), "z": ((2, 3), F32)} if op == "Add" else None
    graph = one_node(op, attrs, inputs, opset)
    codegen = get_codegen("opencl")
    assert not codegen.supports(graph.nodes[0], graph)
    assert codegen.reason(graph.nodes[0], graph) == said
    with pytest.raises(UnsupportedOpError, match=rf"{op} \(node n0\): {re.escape(said)}$"):
        codegen.check_supported(graph)


@needs_opencl
def test_opencl_still_supports_the_values_it_implements() -> None:
    codegen = get_codegen("opencl")
    graph = one_node("Gelu", {"approximate": "tanh"}, opset=20)
    assert codegen.supports(graph.nodes[0], graph)
    assert codegen.reason(graph.nodes[0], graph) is None


def _batch_norm(attrs: dict[str, Any], opset: int) -> Graph:
    params = {name: np.ones(3, F32) for name in ("scale", "bias", "mean", "var")}
    return one_node("BatchNormalization", attrs, {"x": ((2, 3), F32)}, opset, params)


TRAINING = [
    (_batch_norm({"training_mode": 1}, 15), "attribute training_mode=1"),
    (_batch_norm({}, 6), "attribute is_test=0 (training)"),
    (one_node("Dropout", {}, opset=6), "attribute is_test=0 (training)"),
    (
        one_node(
            "Dropout", {}, opset=13, constants={"r": np.asarray(0.5, F32), "t": np.asarray(True)}
        ),
        "input training_mode=true",
    ),
    (
        one_node("Dropout", {}, {"x": ((2, 3), F32), "r": ((), F32), "t": ((), np.bool_)}, 13),
        "input training_mode is not a constant",
    ),
]


@pytest.mark.parametrize("codegen", ["opencl", "onnxruntime"])
@pytest.mark.parametrize(("graph", "said"), TRAINING)
def test_training_modes_are_refused(codegen: str, graph: Graph, said: str) -> None:
    if codegen == "opencl" and not discover_opencl_devices():
        pytest.skip("no OpenCL device")
    if codegen == "onnxruntime" and not HAVE_ONNXRUNTIME:
        pytest.skip("onnxruntime is missing")
    generator = get_codegen(codegen)
    assert not generator.supports(graph.nodes[0], graph)
    assert said in (generator.reason(graph.nodes[0], graph) or "")


@pytest.mark.parametrize("codegen", ["opencl", "onnxruntime"])
def test_inference_dropout_is_still_supported(codegen: str) -> None:
    if codegen == "opencl" and not discover_opencl_devices():
        pytest.skip("no OpenCL device")
    if codegen == "onnxruntime" and not HAVE_ONNXRUNTIME:
        pytest.skip("onnxruntime is missing")
    graph = one_node(
        "Dropout", {}, opset=13, constants={"r": np.asarray(0.5, F32), "t": np.asarray(False)}
    )
    assert get_codegen(codegen).supports(graph.nodes[0], graph)


def test_every_opencl_op_lists_real_attributes() -> None:
    """The table covers every lowered op and names only attributes its ONNX schemas have."""
    pytest.importorskip("pyopencl")
    from autopart.targets.opencl.lowering import OPS

    assert set(OPS) <= set(ATTRIBUTES)
    for op, accepted in ATTRIBUTES.items():
        known = {
            name
            for schema in onnx.defs.get_all_schemas_with_history()
            if schema.name == op and schema.domain == ""
            for name in schema.attributes
        }
        assert set(accepted) <= known, (op, set(accepted) - known)


# -- onnxruntime -------------------------------------------------------------------------------
@needs_onnxruntime
def test_onnxruntime_run_errors_are_one_line_errors_naming_the_node() -> None:
    graph_proto = helper.make_graph(
        [helper.make_node("Gather", ["table", "index"], ["y"], name="lookup")],
        "gather",
        [
            helper.make_tensor_value_info("table", onnx.TensorProto.FLOAT, [3, 2]),
            helper.make_tensor_value_info("index", onnx.TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 2])],
    )
    graph = load_graph(make_model(graph_proto))
    executor = Executor(graph, "onnxruntime")
    feeds = {"table": np.ones((3, 2), F32), "index": np.array([7, 0], np.int64)}
    with pytest.raises(ExecutionError) as raised:
        executor.run(feeds)
    message = str(raised.value)
    assert isinstance(raised.value, AutopartError) and "\n" not in message
    assert message.startswith("onnxruntime failed running node lookup: ")


@needs_onnxruntime
@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.int4])
def test_onnxruntime_refuses_dtypes_its_numpy_api_cannot_pass(dtype: Any) -> None:
    values = {"x": Value("x", (2, 3), F32), "y": Value("y", (2, 3), np.dtype(dtype))}
    to = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = Graph(
        "cast", [Node("n0", "Cast", ["x"], ["y"], {"to": to})], values, ["x"], ["y"], {"": 21}
    )
    codegen = get_codegen("onnxruntime")
    assert not codegen.supports(graph.nodes[0], graph)
    assert np.dtype(dtype).name in (codegen.reason(graph.nodes[0], graph) or "")


# -- random inputs -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "dtype",
    [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float8_e8m0fnu],
)
def test_random_inputs_draw_narrow_floats_as_floats(dtype: Any) -> None:
    graph = one_node("Relu", inputs={"x": ((64,), dtype)})
    drawn = random_inputs(graph, seed=1)["x"]
    assert drawn.dtype == np.dtype(dtype) and drawn.shape == (64,)
    wide = drawn.astype(np.float32)
    assert np.isfinite(wide).all()
    assert (wide != np.round(wide)).any(), "drawn as integers"
    assert len(np.unique(wide)) > 8


@needs_onnxruntime
def test_a_graph_whose_outputs_are_all_folded_runs_on_onnxruntime() -> None:
    """Shape of a static input is a constant after import: no session, the value passes on."""
    graph_proto = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["y"], name="shape")],
        "folded",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 5])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.INT64, [2])],
    )
    graph = load_graph(make_model(graph_proto))
    outputs = Executor(graph, "onnxruntime").run({"x": np.zeros((2, 5), F32)}).outputs
    np.testing.assert_array_equal(outputs["y"], [2, 5])
