"""What the IR knows about control-flow nodes (If, Loop, Scan)."""

from __future__ import annotations

from autopart.ir.graph import Graph

CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})


def unknown_shape_hint(graph: Graph, name: str) -> str:
    """Why a control-flow output may have no static shape (empty for other values)."""
    producer = graph.value(name).producer
    if producer is None or producer.op_type not in CONTROL_FLOW:
        return ""
    return (
        f" (an output of {producer.op_type} node {producer.name!r}: its size depends on "
        "data; declare the output's shape in the model)"
    )
