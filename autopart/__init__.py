"""autopart: cost-model-driven partitioning of ONNX models across heterogeneous compute."""

from autopart.api import info, load, run
from autopart.errors import AutopartError
from autopart.ir import Graph, Node, Value, VirtualDevice
from autopart.zoo import load_zoo_model, zoo_names

__version__ = "0.1.0"

__all__ = [
    "AutopartError",
    "Graph",
    "Node",
    "Value",
    "VirtualDevice",
    "info",
    "load",
    "load_zoo_model",
    "run",
    "zoo_names",
]
