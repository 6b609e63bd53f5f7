"""Sliding-window kernels against onnxruntime on hypothesis-generated shapes and attributes."""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import autopart
from tests.conftest import make_model, run_onnxruntime


def _single_node_model(node, inputs, output_rank, initializers=(), opset=17):  # type: ignore[no-untyped-def]
    graph = helper.make_graph(
        [node],
        "single",
        [
            helper.make_tensor_value_info(name, TensorProto.FLOAT, list(a.shape))
            for name, a in inputs.items()
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * output_rank)],
        initializer=[numpy_helper.from_array(a, n) for n, a in initializers],
    )
    return make_model(graph, opset)


def _compare(model, feeds) -> None:  # type: ignore[no-untyped-def]
    expected = run_onnxruntime(model, feeds)[0]
    got = autopart.run(model, feeds).outputs["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@st.composite
def conv_cases(draw: st.DrawFn) -> tuple:
    spatial = draw(st.integers(1, 3))
    group = draw(st.sampled_from([1, 2, 3]))
    depthwise = draw(st.booleans())
    channels = group * draw(st.integers(1, 3))
    if depthwise:
        group = channels
    out_channels = group * draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 3)) for _ in range(spatial)]
    dilations = [draw(st.integers(1, 2)) for _ in range(spatial)]
    strides = [draw(st.integers(1, 3)) for _ in range(spatial)]
    sizes = [draw(st.integers(3, 9 if spatial < 3 else 6)) for _ in range(spatial)]
    auto_pad = draw(st.sampled_from(["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    pads = [draw(st.integers(0, 2)) for _ in range(2 * spatial)]
    attrs = {"group": group, "dilations": dilations, "strides": strides, "kernel_shape": kernel}
    if auto_pad == "NOTSET":
        attrs["pads"] = pads
    else:
        attrs["auto_pad"] = auto_pad
    if auto_pad.startswith("SAME"):
        attrs["dilations"] = dilations = [1] * spatial  # onnxruntime refuses dilated SAME padding
    for size, k, d, p0, p1 in zip(
        sizes, kernel, dilations, pads[:spatial], pads[spatial:], strict=True
    ):
        assume(size + (p0 + p1 if auto_pad == "NOTSET" else 0) >= (k - 1) * d + 1)
    batch = draw(st.integers(1, 2))
    return batch, channels, out_channels, sizes, attrs, draw(st.booleans())


@settings(max_examples=60, deadline=None)
@given(conv_cases(), st.integers(0, 1000))
def test_conv_matches_onnxruntime(case: tuple, seed: int) -> None:
    batch, channels, out_channels, sizes, attrs, with_bias = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, channels, *sizes)).astype(np.float32)
    w = rng.standard_normal((out_channels, channels // attrs["group"], *attrs["kernel_shape"]))
    inits = [("w", w.astype(np.float32))]
    if with_bias:
        inits.append(("b", rng.standard_normal(out_channels).astype(np.float32)))
    node = helper.make_node("Conv", ["x", "w", "b"] if with_bias else ["x", "w"], ["y"], **attrs)
    _compare(_single_node_model(node, {"x": x}, x.ndim, inits), {"x": x})


@st.composite
def pool_cases(draw: st.DrawFn) -> tuple:
    op = draw(st.sampled_from(["MaxPool", "AveragePool"]))
    spatial = draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 3)) for _ in range(spatial)]
    strides = [draw(st.integers(1, 3)) for _ in range(spatial)]
    sizes = [draw(st.integers(3, 8)) for _ in range(spatial)]
    pads = [draw(st.integers(0, k - 1)) for k in kernel] * 2
    attrs = {"kernel_shape": kernel, "strides": strides, "ceil_mode": int(draw(st.booleans()))}
    auto_pad = draw(st.sampled_from(["NOTSET", "NOTSET", "SAME_UPPER", "VALID"]))
    if auto_pad == "NOTSET":
        attrs["pads"] = pads
    else:
        attrs["auto_pad"] = auto_pad
        attrs["ceil_mode"] = 0
    if op == "AveragePool":
        attrs["count_include_pad"] = int(draw(st.booleans()))
    elif draw(st.booleans()) and auto_pad != "SAME_UPPER":  # onnxruntime: no dilated SAME
        attrs["dilations"] = [draw(st.integers(1, 2)) for _ in range(spatial)]
    if auto_pad == "SAME_UPPER":  # onnxruntime computes negative pads when stride > kernel
        assume(all(s <= k for s, k in zip(strides, kernel, strict=True)))
    for size, k in zip(sizes, kernel, strict=True):
        assume(size >= (k - 1) * max(attrs.get("dilations", [1])) + 1)
    return op, sizes, attrs


@settings(max_examples=60, deadline=None)
@given(pool_cases(), st.integers(0, 1000))
def test_pools_match_onnxruntime(case: tuple, seed: int) -> None:
    op, sizes, attrs = case
    x = np.random.default_rng(seed).standard_normal((1, 2, *sizes)).astype(np.float32)
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    _compare(_single_node_model(node, {"x": x}, x.ndim, opset=19), {"x": x})


@settings(max_examples=25, deadline=None)
@given(
    size=st.sampled_from([1, 3, 5]),
    alpha=st.floats(1e-5, 1e-2),
    beta=st.floats(0.5, 1.0),
    bias=st.floats(0.5, 2.0),
    channels=st.integers(1, 7),
)
def test_lrn_matches_onnxruntime(
    size: int, alpha: float, beta: float, bias: float, channels: int
) -> None:
    x = np.random.default_rng(channels).standard_normal((1, channels, 4, 4)).astype(np.float32)
    node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=alpha, beta=beta, bias=bias)
    _compare(_single_node_model(node, {"x": x}, 4), {"x": x})
