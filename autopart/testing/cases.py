"""Hypothesis strategies that build single-op ONNX models with valid random attributes.

Each strategy draws an :class:`OpCase`: a ModelProto with one node, its feeds, and a
label. The numpy reference codegen defines the expected result.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from hypothesis import assume
from hypothesis import strategies as st
from onnx import helper, numpy_helper


@dataclass
class OpCase:
    """One single-node model and the inputs to feed it."""

    label: str
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]


def single_node_case(
    op: str,
    attrs: dict,
    inputs: dict[str, np.ndarray],
    constants: dict[str, np.ndarray] | None = None,
    opset: int = 17,
    outputs: int = 1,
) -> OpCase:
    """A model of one ``op`` node reading ``inputs`` (fed) and ``constants`` (initializers)."""
    constants = constants or {}
    names = [*inputs, *constants]
    out_names = [f"y{i}" for i in range(outputs)]
    node = helper.make_node(op, names, out_names, **attrs)
    graph = helper.make_graph(
        [node],
        f"{op.lower()}_case",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in inputs.items()
        ],
        [onnx.ValueInfoProto(name=n) for n in out_names],
        initializer=[numpy_helper.from_array(a, n) for n, a in constants.items()],
    )
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = helper.find_min_ir_version_for(opsets)
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    return OpCase(f"{op}{attrs}", model, dict(inputs))


def drawn_array(
    draw: st.DrawFn, shape: tuple[int, ...], low: float = -2.0, high: float = 2.0
) -> np.ndarray:
    """A float32 array of ``shape``, uniform in [``low``, ``high``), from a drawn seed."""
    seed = draw(st.integers(0, 2**31 - 1))
    return np.random.default_rng(seed).uniform(low, high, shape).astype(np.float32)


@st.composite
def broadcast_shapes(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two shapes that broadcast together (numpy rules), ranks 1 to 4."""
    rank = draw(st.integers(1, 4))
    full = [draw(st.integers(1, 5)) for _ in range(rank)]
    other_rank = draw(st.integers(1, rank))
    other = [1 if draw(st.booleans()) else d for d in full[rank - other_rank :]]
    if draw(st.booleans()):
        return tuple(full), tuple(other)
    return tuple(other), tuple(full)


UNARY = ["Relu", "Sigmoid", "Tanh", "Neg", "Abs", "Exp", "Erf", "Softsign", "Softplus"]
BINARY = ["Add", "Sub", "Mul", "Div", "Max", "Min"]


@st.composite
def elementwise_cases(draw: st.DrawFn) -> OpCase:
    """Unary, binary (with broadcasting), variadic Sum, and parameterised activations."""
    kind = draw(st.sampled_from(["unary", "binary", "sum", "activation"]))
    if kind == "unary":
        shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=4)))
        return single_node_case(draw(st.sampled_from(UNARY)), {}, {"x": drawn_array(draw, shape)})
    if kind == "binary":
        a, b = draw(broadcast_shapes())
        op = draw(st.sampled_from(BINARY))
        second = drawn_array(draw, b, 0.5, 2.0) if op == "Div" else drawn_array(draw, b)
        if draw(st.booleans()):
            return single_node_case(op, {}, {"a": drawn_array(draw, a)}, {"b": second})
        return single_node_case(op, {}, {"a": drawn_array(draw, a), "b": second})
    if kind == "sum":
        a, b = draw(broadcast_shapes())
        return single_node_case(
            "Sum",
            {},
            {"a": drawn_array(draw, a), "b": drawn_array(draw, b), "c": drawn_array(draw, a)},
        )
    op, attrs = draw(
        st.sampled_from(
            [
                ("LeakyRelu", {"alpha": 0.1}),
                ("Clip", {}),
                ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
                ("Elu", {"alpha": 0.5}),
            ]
        )
    )
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=4)))
    if op == "Clip":
        bounds = {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)}
        return single_node_case(op, attrs, {"x": drawn_array(draw, shape)}, bounds)
    return single_node_case(op, attrs, {"x": drawn_array(draw, shape)})


@st.composite
def conv_cases(draw: st.DrawFn) -> OpCase:
    """Conv over 2-D images: groups, depthwise, dilations, strides, pads or auto_pad, bias."""
    group = draw(st.sampled_from([1, 1, 2]))
    channels = group * draw(st.integers(1, 4))
    if draw(st.booleans()):
        group = channels  # depthwise
    out_channels = group * draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 3)) for _ in range(2)]
    strides = [draw(st.integers(1, 2)) for _ in range(2)]
    auto_pad = draw(st.sampled_from(["NOTSET", "NOTSET", "SAME_UPPER", "VALID"]))
    dilations = [draw(st.integers(1, 2)) for _ in range(2)] if auto_pad != "SAME_UPPER" else [1, 1]
    sizes = [draw(st.integers(4, 12)) for _ in range(2)]
    attrs: dict = {
        "group": group,
        "kernel_shape": kernel,
        "strides": strides,
        "dilations": dilations,
    }
    if auto_pad == "NOTSET":
        attrs["pads"] = [draw(st.integers(0, 2)) for _ in range(4)]
    else:
        attrs["auto_pad"] = auto_pad
    for size, k, d in zip(sizes, kernel, dilations, strict=True):
        assume(size >= (k - 1) * d + 1)
    return conv_case(draw, attrs, (draw(st.integers(1, 2)), channels, *sizes), out_channels)


def conv_case(draw: st.DrawFn, attrs: dict, shape: tuple[int, ...], out_channels: int) -> OpCase:
    """A Conv of ``attrs`` (its ``group`` and ``kernel_shape``) on a drawn input of ``shape``.

    Its weights are drawn in [-0.5, 0.5), and a bias is drawn half the time.
    """
    group, kernel = attrs.get("group", 1), attrs["kernel_shape"]
    x = drawn_array(draw, shape)
    constants = {"w": drawn_array(draw, (out_channels, shape[1] // group, *kernel), -0.5, 0.5)}
    if draw(st.booleans()):
        constants["b"] = drawn_array(draw, (out_channels,))
    return single_node_case("Conv", attrs, {"x": x}, constants)


@st.composite
def pool_cases(draw: st.DrawFn) -> OpCase:
    """MaxPool, AveragePool (count_include_pad, ceil_mode) and GlobalAveragePool."""
    op = draw(st.sampled_from(["MaxPool", "AveragePool", "GlobalAveragePool"]))
    x = drawn_array(
        draw, (1, draw(st.integers(1, 4)), draw(st.integers(4, 10)), draw(st.integers(4, 10)))
    )
    if op == "GlobalAveragePool":
        return single_node_case(op, {}, {"x": x})
    kernel = [draw(st.integers(1, 3)) for _ in range(2)]
    attrs: dict = {
        "kernel_shape": kernel,
        "strides": [draw(st.integers(1, 2)) for _ in range(2)],
        "pads": [draw(st.integers(0, k - 1)) for k in kernel] * 2,
        "ceil_mode": int(draw(st.booleans())),
    }
    if op == "AveragePool":
        attrs["count_include_pad"] = int(draw(st.booleans()))
    return single_node_case(op, attrs, {"x": x})


@st.composite
def matmul_cases(draw: st.DrawFn) -> OpCase:
    """Gemm (transposes, alpha, beta, C broadcast) and batched MatMul."""
    m, k, n = (draw(st.integers(1, 40)) for _ in range(3))
    if draw(st.booleans()):
        trans_a, trans_b = int(draw(st.booleans())), int(draw(st.booleans()))
        a = drawn_array(draw, (k, m) if trans_a else (m, k))
        b = drawn_array(draw, (n, k) if trans_b else (k, n))
        attrs = {
            "transA": trans_a,
            "transB": trans_b,
            "alpha": draw(st.sampled_from([1.0, 0.5])),
            "beta": 1.0,
        }
        constants = {"b": b, "c": drawn_array(draw, draw(st.sampled_from([(n,), (m, n), (1, n)])))}
        return single_node_case("Gemm", attrs, {"a": a}, constants)
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    a = drawn_array(draw, (*batch, m, k))
    b_batch = batch[draw(st.integers(0, len(batch))) :] if batch else ()
    return single_node_case("MatMul", {}, {"a": a, "b": drawn_array(draw, (*b_batch, k, n))})


@st.composite
def layout_cases(draw: st.DrawFn) -> OpCase:
    """Softmax, LayerNormalization, Concat, Transpose, Reshape, Flatten, BatchNorm, LRN."""
    kind = draw(
        st.sampled_from(
            [
                "softmax",
                "layernorm",
                "concat",
                "transpose",
                "reshape",
                "flatten",
                "batchnorm",
                "lrn",
            ]
        )
    )
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=2, max_size=4)))
    x = drawn_array(draw, shape)
    rank = len(shape)
    if kind == "softmax":
        opset = draw(st.sampled_from([11, 13, 17]))
        return single_node_case(
            "Softmax", {"axis": draw(st.integers(-rank, rank - 1))}, {"x": x}, opset=opset
        )
    if kind == "layernorm":
        axis = draw(st.integers(-rank, rank - 1))
        scale = drawn_array(draw, shape[axis:] if axis >= 0 else shape[rank + axis :])
        return single_node_case(
            "LayerNormalization", {"axis": axis}, {"x": x}, {"s": scale, "b": scale * 0.5}
        )
    if kind == "concat":
        axis = draw(st.integers(0, rank - 1))
        other = list(shape)
        other[axis] = draw(st.integers(1, 4))
        return single_node_case(
            "Concat", {"axis": axis}, {"a": x, "b": drawn_array(draw, tuple(other))}
        )
    if kind == "transpose":
        perm = draw(st.permutations(list(range(rank))))
        return single_node_case("Transpose", {"perm": list(perm)}, {"x": x})
    if kind == "reshape":
        target = np.array([shape[0], -1], dtype=np.int64)
        return single_node_case("Reshape", {}, {"x": x}, {"shape": target})
    if kind == "flatten":
        return single_node_case("Flatten", {"axis": draw(st.integers(0, rank))}, {"x": x})
    image = drawn_array(
        draw, (1, draw(st.integers(1, 6)), draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    )
    channels = image.shape[1]
    if kind == "batchnorm":
        params = {
            "scale": drawn_array(draw, (channels,)),
            "bias": drawn_array(draw, (channels,)),
            "mean": drawn_array(draw, (channels,)),
            "var": drawn_array(draw, (channels,), 0.5, 2.0),
        }
        return single_node_case("BatchNormalization", {"epsilon": 1e-5}, {"x": image}, params)
    size = draw(st.sampled_from([1, 3, 5]))
    return single_node_case(
        "LRN", {"size": size, "alpha": 1e-3, "beta": 0.75, "bias": 1.0}, {"x": image}
    )


def any_case() -> st.SearchStrategy[OpCase]:
    """Every family of cases."""
    return st.one_of(
        elementwise_cases(), conv_cases(), pool_cases(), matmul_cases(), layout_cases()
    )
