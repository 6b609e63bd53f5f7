"""Graph IR with first-class virtual devices, ONNX import/export and simplifying passes."""

from autopart.ir.graph import Graph, Node, Value
from autopart.ir.onnx_export import to_onnx
from autopart.ir.onnx_import import load_graph, read_model
from autopart.ir.target import UNPLANNED, VirtualDevice

__all__ = [
    "UNPLANNED",
    "Graph",
    "Node",
    "Value",
    "VirtualDevice",
    "load_graph",
    "read_model",
    "to_onnx",
]
