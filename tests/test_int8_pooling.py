"""int8 beside its neighbours: a MaxPool at int8 pools u8 levels and computes what its
rounding gives; a partition of int8 and one float precision compiles under that one's hint."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import autopart
from autopart.ir.graph import Graph
from autopart.runtime import random_inputs
from autopart.targets import qdq
from autopart.targets.openvino import quantize
from autopart.targets.openvino.codegen import hinted_precision
from tests.test_int8 import (  # own_cache: each test its own cache folder
    AT_BF16,
    AT_INT8,
    BF16,
    F32,
    needs_int8,
    own_cache,  # noqa: F401
    run_mixed,
)


def conv_pool_conv(indices: bool = False) -> onnx.ModelProto:
    """Conv -> Relu -> MaxPool (2x2, stride 2) -> Conv on a 1x8x16x16 input, seeded weights.

    ``indices``: the MaxPool also writes its Indices output, read by the graph.
    """
    rng = np.random.default_rng(3)
    weights = [
        numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((8, 16, 3, 3)).astype(np.float32), "w2"),
    ]
    pool_outputs = ["pooled", "where"] if indices else ["pooled"]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node(
            "MaxPool", ["r1"], pool_outputs, name="pool", kernel_shape=[2, 2], strides=[2, 2]
        ),
        helper.make_node("Conv", ["pooled", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1]),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])]
    if indices:
        outputs.append(helper.make_tensor_value_info("where", TensorProto.INT64, [1, 16, 8, 8]))
    graph = helper.make_graph(
        nodes,
        "conv-pool-conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        outputs,
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_max_pool_is_quantisable_only_on_float_values_alone() -> None:
    graph = autopart.load(conv_pool_conv())
    assert qdq.quantisable(graph.node("pool"), graph)
    assert not qdq.quantisable(graph.node("relu1"), graph)
    with_indices = autopart.load(conv_pool_conv(indices=True))
    assert not qdq.quantisable(with_indices.node("pool"), with_indices)  # indices are no levels


def test_the_emulation_rounds_a_pools_input_and_reads_no_weight() -> None:
    graph = autopart.load(conv_pool_conv())
    ranges = {"r1": (0.0, 4.0)}
    emulation = qdq.FakeQuantisation(graph, ranges)
    value = np.linspace(-1.0, 5.0, 16 * 64, dtype=np.float32).reshape(1, 16, 8, 8)
    (rounded,) = emulation.inputs("pool", [value])
    zero, scale = qdq.activation_scale(0.0, 4.0)
    assert np.array_equal(rounded, qdq.fake_quantise(value, zero, scale, 0, 255))
    assert rounded.min() == 0.0 and rounded.max() == pytest.approx(4.0)  # clipped to the range
    assert emulation.covers("pool")


def max_pool_2x2(value: np.ndarray) -> np.ndarray:
    """A 2x2 max pool of stride 2 over the last two axes of ``value`` (even sizes)."""
    rows, cols = value.shape[-2] // 2, value.shape[-1] // 2
    return value.reshape(*value.shape[:-2], rows, 2, cols, 2).max(axis=(-3, -1))


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    low=st.floats(-8.0, 0.0),
    span=st.floats(1e-3, 16.0),
    spread=st.floats(0.1, 20.0),
)
def test_pooling_commutes_with_the_rounding_int8_applies(
    seed: int, low: float, span: float, spread: float
) -> None:
    value = (np.random.default_rng(seed).standard_normal((2, 3, 6, 8)) * spread).astype(np.float32)
    zero, scale = qdq.activation_scale(low, low + span)
    rounded_first = max_pool_2x2(qdq.fake_quantise(value, zero, scale, 0, 255))
    pooled_first = qdq.fake_quantise(max_pool_2x2(value), zero, scale, 0, 255)
    assert np.array_equal(rounded_first, pooled_first)


def pool_precisions(graph: Graph, at_int8: set[str]) -> tuple[set[str], dict[str, np.ndarray]]:
    """The runtime precisions of the pool with ``at_int8`` at int8 (the rest f32), and
    the plan's outputs on seeded inputs."""
    assignment = {n.name: AT_INT8 if n.name in at_int8 else F32 for n in graph.nodes}
    _, outputs, ops = run_mixed(graph, assignment, random_inputs(graph, 0))
    return quantize.computes_in(ops, graph.node("pool")), outputs


@needs_int8
def test_a_pool_at_int8_pools_u8_levels_and_changes_no_value() -> None:
    graph = autopart.load(conv_pool_conv())
    assert quantize.runs_in_int8(graph.node("pool"), graph)
    pooled_u8, with_pool = pool_precisions(graph, {"conv1", "pool", "conv2"})
    pooled_float, without = pool_precisions(graph, {"conv1", "conv2"})
    assert pooled_u8 & quantize.INT8_RUNTIME
    assert not pooled_float & quantize.INT8_RUNTIME
    # after a Relu both the pool's input and output are rounded over [0, max]: one scale,
    # so rounding before or after the pool gives conv2 the same levels
    scale = float(np.abs(without["y"]).max())
    assert float(np.abs(with_pool["y"] - without["y"]).max()) <= 1e-5 * scale


def test_int8_beside_one_float_precision_takes_that_ones_hint() -> None:
    assert hinted_precision(["int8", "bf16", "bf16"]) == "bf16"
    assert hinted_precision(["int8", None]) == "f32"
    assert hinted_precision(["int8", "f32", None]) == "f32"  # None is f32
    assert hinted_precision(["int8", "int8"]) == "int8"
    assert hinted_precision(["bf16", "bf16"]) == "bf16"
    assert hinted_precision(["int8", "bf16", "f32"]) is None  # bf16 in islands
    assert hinted_precision(["bf16", None]) is None


@needs_int8
@pytest.mark.skipif(not BF16, reason="this CPU has no bf16 units OpenVINO lists")
def test_an_int8_partition_with_bf16_around_fuses_its_activations_under_bf16s_hint() -> None:
    graph = autopart.load(conv_pool_conv())
    assignment = {n.name: AT_INT8 for n in graph.nodes} | {"relu1": AT_BF16}
    plan, outputs, ops = run_mixed(graph, assignment, random_inputs(graph, 0))
    assert [p.target for p in plan.partitions] == ["cpu@openvino"]  # one partition, mixed
    # under bf16's hint the Relu goes into the u8 Conv before it (or into the rounding
    # after it); in a Convert island it ran apart, in a Subgraph with its Converts
    apart = [op for op in ops if "relu1" in op.sources and "conv1" not in op.sources]
    assert not apart, apart
    reference = run_mixed(graph, dict.fromkeys(assignment, F32), random_inputs(graph, 0))[1]
    scale = float(np.abs(reference["y"]).max())
    assert float(np.abs(outputs["y"] - reference["y"]).max()) < 0.1 * scale  # int8's scale
