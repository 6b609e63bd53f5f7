"""Seeded random inputs that every runtime can run: integers that index draw in range."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from autopart.ir.feeds import random_inputs
from autopart.ir.onnx_import import load_graph
from tests.conftest import make_model


def _message_passing(nodes: int, edges: int, features: int) -> object:
    """Sum each edge's source features into its target: edge_index (2, E) picks the rows."""
    made = [
        helper.make_node("Gather", ["edge_index", "zero"], ["source"], axis=0),
        helper.make_node("Gather", ["edge_index", "one"], ["target"], axis=0),
        helper.make_node("Gather", ["x", "source"], ["messages"], axis=0),
        helper.make_node("Unsqueeze", ["target", "axis1"], ["column"]),
        helper.make_node("Expand", ["column", "spread"], ["slots"]),
        helper.make_node(
            "ScatterElements", ["base", "slots", "messages"], ["summed"], axis=0, reduction="add"
        ),
        helper.make_node("GatherND", ["summed", "picks"], ["picked"]),
    ]
    constants = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array([1], np.int64), "axis1"),
        numpy_helper.from_array(np.array([edges, features], np.int64), "spread"),
        numpy_helper.from_array(np.zeros((nodes, features), np.float32), "base"),
    ]
    graph = helper.make_graph(
        made,
        "message_passing",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [nodes, features]),
            helper.make_tensor_value_info("edge_index", TensorProto.INT64, [2, edges]),
            helper.make_tensor_value_info("picks", TensorProto.INT64, [4, 1]),
        ],
        [helper.make_tensor_value_info("picked", TensorProto.FLOAT, [4, features])],
        constants,
    )
    return make_model(graph)


@settings(max_examples=15, deadline=None)
@given(
    nodes=st.integers(1, 6),
    edges=st.integers(1, 40),
    features=st.integers(1, 5),
    seed=st.integers(0, 2**16),
)
def test_indices_reached_through_moves_draw_within_the_axis_they_index(
    nodes: int, edges: int, features: int, seed: int
) -> None:
    """A graph's connectivity (a GNN's edge_index) feeds Gather, ScatterElements, GatherND."""
    model = _message_passing(nodes, edges, features)
    graph = load_graph(model)
    feeds = random_inputs(graph, seed)
    assert feeds["edge_index"].min() >= 0 and feeds["edge_index"].max() < nodes
    assert feeds["picks"].max() < nodes
    session = ort.InferenceSession(model.SerializeToString())
    (picked,) = session.run(None, feeds)  # onnxruntime runs them: no index out of range
    assert picked.shape == (4, features)
