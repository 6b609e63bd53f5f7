"""autopart: cost-model-driven partitioning of ONNX models across heterogeneous compute."""

import os

# OpenBLAS threads spin for ~2^28 cycles after each call; on a machine whose cores other
# lanes use (onnxruntime, OpenCL), that spin slowed the next lane's run by up to 1.7x.
# Effective only when numpy was not imported before autopart; the user's setting wins.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

from autopart.api import BenchOptions, TuneOptions, bench, info, load, run, tune
from autopart.errors import AutopartError
from autopart.ir import Graph, Node, Value, VirtualDevice
from autopart.runtime.host_memory import retain_freed_memory
from autopart.zoo import load_zoo_model, zoo_names

retain_freed_memory()

__version__ = "0.1.0"

__all__ = [
    "AutopartError",
    "BenchOptions",
    "Graph",
    "Node",
    "TuneOptions",
    "Value",
    "VirtualDevice",
    "bench",
    "info",
    "load",
    "load_zoo_model",
    "run",
    "tune",
    "zoo_names",
]
