"""Static analysis of a graph: FLOP estimates and summaries."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from autopart.ir.graph import Graph, Node
from autopart.ir.observe import describe_region

_ELEMENTWISE_COST = {"Erf": 8, "Tanh": 8, "Sigmoid": 4, "Exp": 4, "Log": 4, "Pow": 4, "Gelu": 10}


def _numel(shape: tuple[int, ...] | None) -> int:
    return math.prod(shape) if shape is not None else 0


def node_flops(graph: Graph, node: Node) -> int:
    """Estimated floating-point operations of ``node`` (multiply-add counts as 2)."""
    out = graph.value(node.outputs[0]) if node.outputs and node.outputs[0] else None
    out_elems = _numel(out.shape) if out is not None else 0
    shapes = [graph.value(name).shape for name in node.present_inputs]
    op = node.op_type
    if op == "Conv":
        return 2 * out_elems * math.prod((shapes[1] or ())[1:])
    if op == "ConvTranspose":
        return 2 * _numel(shapes[0]) * math.prod((shapes[1] or ())[1:])
    if op in ("MatMul", "Gemm"):
        a = shapes[0] or (1,)
        inner = a[0] if op == "Gemm" and node.attrs.get("transA", 0) else a[-1]
        return 2 * out_elems * inner
    if op in ("MaxPool", "AveragePool", "LpPool"):
        return out_elems * math.prod(node.attrs.get("kernel_shape", [1]))
    if op in ("GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceSum", "ReduceMax"):
        return _numel(shapes[0])
    if op in (
        "BatchNormalization",
        "LayerNormalization",
        "InstanceNormalization",
        "Softmax",
        "LRN",
    ):
        return 5 * out_elems
    if op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Shape", "Identity", "Dropout"):
        return 0
    return out_elems * _ELEMENTWISE_COST.get(op, 1)


@dataclass(frozen=True)
class GraphSummary:
    """What ``autopart info`` reports about a model."""

    name: str
    nodes: int
    op_histogram: dict[str, int]
    parameter_bytes: int
    flops: int
    inputs: dict[str, tuple[str, tuple[int, ...]]]
    outputs: dict[str, tuple[str, tuple[int, ...]]]
    dynamic: str = ""  # the region whose shapes depend on data, in one phrase ("" if none)


def summarise(graph: Graph) -> GraphSummary:
    """Op histogram, parameter bytes, FLOPs and the boundary values of ``graph``."""

    def signature(name: str) -> tuple[str, tuple[int, ...]]:
        value = graph.value(name)
        return str(value.dtype), tuple(value.shape or ())

    histogram = Counter(node.op_type for node in graph.nodes)
    return GraphSummary(
        name=graph.name,
        nodes=len(graph.nodes),
        op_histogram=dict(histogram.most_common()),
        parameter_bytes=graph.parameter_bytes(),
        flops=sum(node_flops(graph, node) for node in graph.nodes),
        inputs={name: signature(name) for name in graph.inputs},
        outputs={name: signature(name) for name in graph.outputs},
        dynamic=describe_region(graph),
    )
