"""Export a :class:`Graph` (or a part of it) back to an ONNX ModelProto."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper

from autopart.ir.graph import Graph, Node


def attribute_to_proto(name: str, value: Any) -> AttributeProto:
    """Convert a Python attribute value (as stored on a :class:`Node`) to ONNX."""
    if isinstance(value, AttributeProto):
        return value
    if isinstance(value, np.ndarray):
        return helper.make_attribute(name, numpy_helper.from_array(value))
    if isinstance(value, list | tuple) and not value:
        return helper.make_attribute(name, [], attr_type=AttributeProto.INTS)
    return helper.make_attribute(name, value)


def value_info(graph: Graph, name: str) -> onnx.ValueInfoProto:
    """A ValueInfoProto for ``name`` with its static shape and dtype where known.

    A value whose shape depends on data (:mod:`autopart.ir.observe`) keeps its rank and
    the dims shape inference knew, and leaves the others unknown, so that a library
    compiles it for any size (and sees the rank of what it computes from it).
    """
    value = graph.value(name)
    if value.dtype is None:
        return helper.make_empty_tensor_value_info(name)
    elem = helper.np_dtype_to_tensor_dtype(value.dtype)
    if value.shape is not None and name in graph.meta.get("dynamic_values", ()):
        free = set(graph.meta.get("dynamic_dims", {}).get(name, range(len(value.shape))))
        dims = [None if i in free else dim for i, dim in enumerate(value.shape)]
        return helper.make_tensor_value_info(name, elem, dims)
    return helper.make_tensor_value_info(name, elem, value.shape)


def node_to_proto(node: Node) -> onnx.NodeProto:
    """Convert one IR node to a NodeProto (its virtual device is not part of ONNX)."""
    proto = helper.make_node(
        node.op_type, node.inputs, node.outputs, name=node.name, domain=node.domain
    )
    proto.attribute.extend(attribute_to_proto(k, v) for k, v in node.attrs.items())
    return proto


def to_onnx(
    graph: Graph,
    nodes: Sequence[Node] | None = None,
    inputs: Sequence[str] | None = None,
    outputs: Sequence[str] | None = None,
    embed_constants: bool | int = True,
    external: Callable[[str], onnx.TensorProto | None] | None = None,
) -> onnx.ModelProto:
    """Export ``nodes`` (default: all) as a model with the given boundary values.

    Constants consumed by the exported nodes become initializers; an output folded to a
    constant that no exported node makes is made by a ``Constant`` node. With ``embed_constants``
    an int, only constants of at most that many bytes are embedded and larger ones are
    declared as typed graph inputs instead, which keeps shape inference cheap.
    ``external(name)`` may give an embedded constant's initializer instead of its values
    (ONNX external data, :class:`~autopart.ir.weights.WeightFiles`), or None to embed it.
    """
    chosen = list(graph.nodes if nodes is None else nodes)
    produced = {name for node in chosen for name in node.outputs if name}
    consumed = [name for node in chosen for name in node.present_inputs]
    constants = [
        n for n in dict.fromkeys(consumed) if graph.value(n).is_const and n not in produced
    ]
    if inputs is None:
        inputs = [
            n for n in dict.fromkeys(consumed) if n not in produced and not graph.value(n).is_const
        ]
    if outputs is None:
        outputs = list(graph.outputs)
    limit = None if isinstance(embed_constants, bool) else embed_constants
    initializers, declared = [], []
    for name in constants:
        data = graph.value(name).const
        assert data is not None
        if embed_constants is True or (limit is not None and data.nbytes <= limit):
            elsewhere = None if external is None else external(name)
            initializers.append(elsewhere or numpy_helper.from_array(data, name))
        else:
            declared.append(name)
    # an output that import folded to a constant is made by a Constant node: every output
    # must be a node's, an input or an initializer
    folded = [
        helper.make_node("Constant", [], [name], value=numpy_helper.from_array(data, name))
        for name in dict.fromkeys(outputs)
        if name not in produced and name not in constants and name not in inputs
        and (data := graph.value(name).const) is not None
    ]  # fmt: skip
    boundary = set(inputs) | set(outputs) | set(constants)
    made = [name for node in chosen for name in node.outputs if name]  # in node order: a
    inner = [  # set's order changes from one process to the next, and so would the bytes
        n for n in dict.fromkeys(made) if n not in boundary and graph.value(n).dtype is not None
    ]
    proto_graph = helper.make_graph(
        [*folded, *(node_to_proto(node) for node in chosen)],
        graph.name,
        [value_info(graph, n) for n in [*inputs, *declared]],
        [value_info(graph, n) for n in outputs],
        initializer=initializers,
        value_info=[value_info(graph, n) for n in inner],
    )
    opsets = [helper.make_opsetid(domain, version) for domain, version in graph.opsets.items()]
    model = helper.make_model(proto_graph, opset_imports=opsets, producer_name="autopart")
    # The oldest IR version that carries these opsets: newer ones may be unknown to peers.
    model.ir_version = max(helper.find_min_ir_version_for(opsets, ignore_unknown=True), 4)
    return model
