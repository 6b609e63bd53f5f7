"""The launch probe: a one-element Relu, so that entering a partition is all there is to time."""

from __future__ import annotations

from functools import cache

import onnx
from onnx import TensorProto, helper

from autopart.ir.graph import Graph
from autopart.ir.onnx_import import load_graph


@cache
def _probe_model() -> bytes:
    node = helper.make_node("Relu", ["x"], ["y"], name="launch_probe")
    graph = helper.make_graph(
        [node],
        "launch_probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
    )
    opsets = [helper.make_opsetid("", 13)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = helper.find_min_ir_version_for(opsets, ignore_unknown=True)
    return model.SerializeToString()


def launch_probe_graph() -> Graph:
    """A graph of one Relu on a float32[1, 1] input (every codegen supports it)."""
    return load_graph(onnx.load_from_string(_probe_model()))
