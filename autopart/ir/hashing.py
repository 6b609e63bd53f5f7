"""A content hash of an imported graph, so that plans and profiles name their model."""

from __future__ import annotations

import hashlib

import numpy as np
import onnx

from autopart.ir.graph import Graph


def graph_hash(graph: Graph) -> str:
    """SHA-256 over the graph's structure, static shapes, attributes and constant bytes.

    Two imports of the same model with the same input shapes hash alike; any change to an
    op, an attribute, a shape or a weight changes the hash. The result is cached in
    ``graph.meta["hash"]``.
    """
    cached = graph.meta.get("hash")
    if isinstance(cached, str):
        return cached
    digest = hashlib.sha256()

    def feed(*parts: object) -> None:
        for part in parts:
            digest.update(repr(part).encode())
            digest.update(b"\x00")

    feed("inputs", graph.inputs, "outputs", graph.outputs, sorted(graph.opsets.items()))
    for node in graph.nodes:
        attrs = sorted((k, _attr_repr(v)) for k, v in node.attrs.items())
        feed("node", node.name, node.op_type, node.domain, node.inputs, node.outputs, attrs)
    for name in sorted(graph.values):
        value = graph.values[name]
        feed("value", name, value.shape, str(value.dtype))
        if value.const is not None:
            digest.update(_const_bytes(value.const))
    result = digest.hexdigest()
    graph.meta["hash"] = result
    return result


def _attr_repr(value: object) -> object:
    if isinstance(value, onnx.GraphProto):
        return ("graph", hashlib.sha256(value.SerializeToString(deterministic=True)).hexdigest())
    if isinstance(value, list) and any(isinstance(item, onnx.GraphProto) for item in value):
        return [_attr_repr(item) for item in value]
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, hashlib.sha256(value.tobytes()).hexdigest())
    return value


def _const_bytes(data: np.ndarray) -> bytes | memoryview:
    """A constant's bytes for hashing: in place where contiguous (a weight is never copied).

    Strings (object arrays) hash as their serialised tensor: an object array's own bytes
    are pointers, which differ from one load to the next.
    """
    if data.dtype.hasobject:
        from onnx import numpy_helper

        return numpy_helper.from_array(data).SerializeToString()
    return memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8))
