"""Op signatures: what makes two nodes cost the same on a target.

A signature spells the op type, its domain and opset, its attributes, and the shape and
dtype of every input and output, marking constant inputs. Two nodes with equal signatures
run the same kernel on the same data sizes, so one measurement serves both (resnet50's 53
convolutions have 24 signatures). Signatures are plain text so that profiles stay readable.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import onnx

from autopart.ir.graph import Graph, Node
from autopart.ir.memo import graph_memo, owns


def _tensor(graph: Graph, name: str) -> str:
    value = graph.value(name)
    dtype = np.dtype(value.dtype).name if value.dtype is not None else "?"
    shape = "?" if value.shape is None else "x".join(str(d) for d in value.shape)
    return f"{dtype}[{shape}]{'c' if value.is_const else ''}"


def _attribute(value: Any) -> Any:
    if isinstance(value, onnx.GraphProto):
        digest = hashlib.sha256(value.SerializeToString(deterministic=True)).hexdigest()
        return {"graph": value.name, "sha256": digest[:16]}
    if isinstance(value, np.ndarray):
        return {"tensor": value.dtype.name, "shape": list(value.shape), "data": value.tolist()}
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, list | tuple):
        return [_attribute(item) for item in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def op_signature(node: Node, graph: Graph) -> str:
    """The signature of ``node`` in ``graph``, e.g. ``Conv:11 {"pads":[1,1,1,1]} f32…``.

    Absent optional inputs are written as ``-`` so that positions keep their meaning.
    Signatures of ``graph``'s own nodes are memoised with the graph (:mod:`autopart.ir.memo`).
    """
    if not owns(graph, node):
        return _signature(node, graph)
    memo = graph_memo(graph)
    key = ("signature", node.name)
    found = memo.get(key)
    if found is None:
        found = memo[key] = _signature(node, graph)
    return str(found)


def _signature(node: Node, graph: Graph) -> str:
    domain = f"{node.domain}." if node.domain else ""
    attrs = json.dumps(
        {key: _attribute(node.attrs[key]) for key in sorted(node.attrs)},
        separators=(",", ":"),
        default=str,
    )
    inputs = ",".join(_tensor(graph, name) if name else "-" for name in node.inputs)
    if node.captures:  # a subgraph's outer values: their sizes change its cost too
        inputs += ";" + ",".join(_tensor(graph, name) for name in node.captures)
    outputs = ",".join(_tensor(graph, name) if name else "-" for name in node.outputs)
    return f"{domain}{node.op_type}:{graph.opset_of(node)} {attrs} ({inputs}) -> ({outputs})"
