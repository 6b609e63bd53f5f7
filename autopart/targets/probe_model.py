"""One-node probe models: what a codegen that learns its support by probing compiles.

A codegen wrapping a library that can only be asked by trying (onnxruntime, OpenVINO)
exports a node alone as a model, hands it to its library and memoises the answer per
:func:`node_signature` (:class:`~autopart.targets.probe_cache.ProbeCache`). The model is
built here, once for every such codegen: :func:`probe_model` with typed inputs of unknown
shape, or with each input's static shape and its constant inputs embedded.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper

from autopart.ir.graph import Graph, Node
from autopart.ir.onnx_export import attribute_to_proto, to_onnx


def has_graph_attribute(node: Node) -> bool:
    """Whether any attribute of ``node`` holds a graph (If, Loop, Scan bodies)."""
    for value in node.attrs.values():
        for item in value if isinstance(value, list | tuple) else [value]:
            if isinstance(item, onnx.GraphProto):
                return True
            if isinstance(item, AttributeProto) and item.type in (
                AttributeProto.GRAPH,
                AttributeProto.GRAPHS,
            ):
                return True
    return False


def _attribute_key(value: Any) -> Any:
    """A hashable stand-in for an attribute value (tensors by dtype and shape only)."""
    if isinstance(value, np.ndarray):
        return ("tensor", value.dtype.str, value.shape)
    if isinstance(value, list | tuple):
        return tuple(_attribute_key(item) for item in value)
    if isinstance(value, AttributeProto):
        return ("proto", value.SerializeToString())
    if isinstance(value, onnx.GraphProto):
        return ("graph", hashlib.sha256(value.SerializeToString(deterministic=True)).hexdigest())
    if isinstance(value, int | float | str | bytes | bool) or value is None:
        return value
    return ("repr", type(value).__name__, repr(value))


def onnx_domain(node: Node) -> str:
    """``node``'s domain as an ONNX model spells it: ``""`` for the default domain."""
    return "" if node.domain in ("", "ai.onnx") else node.domain


def node_signature(node: Node, graph: Graph) -> tuple[Any, ...] | None:
    """The memoisation key of ``node``'s probe; ``None`` when an input dtype is unknown.

    It holds the domain, op type, opset in force, every input's dtype (``None`` for an
    absent optional input), every output's dtype and presence, and the attributes (names
    and values, tensors by dtype and shape). Shapes are deliberately left out: kernel
    selection in onnxruntime depends on types and attributes, not on shapes; a codegen
    whose library needs more (OpenVINO: ranks, small constants) extends the key.
    """
    inputs: list[str | None] = []
    for name in node.inputs:
        if not name:
            inputs.append(None)
            continue
        dtype = graph.value(name).dtype
        if dtype is None:
            return None
        inputs.append(np.dtype(dtype).str)
    for name in node.captures:  # outer values a subgraph reads, after the inputs
        dtype = graph.value(name).dtype
        if dtype is None:
            return None
        inputs.append(np.dtype(dtype).str)
    outputs: list[str | None] = []
    for name in node.outputs:
        dtype = graph.value(name).dtype if name else None
        outputs.append(np.dtype(dtype).str if dtype is not None else ("?" if name else None))
    attributes = tuple(sorted((k, _attribute_key(v)) for k, v in node.attrs.items()))
    domain = onnx_domain(node)
    return (domain, node.op_type, graph.opset_of(node), tuple(inputs), tuple(outputs), attributes)


def probe_model(node: Node, graph: Graph, static: bool = False) -> onnx.ModelProto:
    """A one-node model of ``node`` with its attributes, opset and typed inputs.

    Inputs are placeholders ``in0``, ``in1``, ... and outputs ``out0``, ... (an absent
    optional one stays absent). By default inputs have no shapes and outputs are typed
    where their dtype is known, and a node with subgraphs is exported as it is
    (:func:`~autopart.ir.onnx_export.to_onnx`), so that the outer values its subgraphs
    read keep their names. With ``static`` fed inputs have their static shapes, constant
    inputs are embedded as initializers, and outputs are left untyped. Every fed input's
    dtype must be known (:func:`node_signature` is None otherwise).
    """
    if not static and has_graph_attribute(node):
        return to_onnx(graph, [node], outputs=[name for name in node.outputs if name])
    inputs, initializers, input_names = [], [], []
    for index, name in enumerate(node.inputs):
        if not name:
            input_names.append("")
            continue
        value = graph.value(name)
        placeholder = f"in{index}"
        input_names.append(placeholder)
        if static and value.const is not None:
            initializers.append(numpy_helper.from_array(value.const, placeholder))
            continue
        elem = helper.np_dtype_to_tensor_dtype(value.dtype)
        shape = value.shape if static else None
        inputs.append(helper.make_tensor_value_info(placeholder, elem, shape))
    outputs, output_names = [], []
    for index, name in enumerate(node.outputs):
        if not name:
            output_names.append("")
            continue
        placeholder = f"out{index}"
        output_names.append(placeholder)
        dtype = None if static else graph.value(name).dtype
        outputs.append(
            helper.make_empty_tensor_value_info(placeholder)
            if dtype is None
            else helper.make_tensor_value_info(
                placeholder, helper.np_dtype_to_tensor_dtype(dtype), None
            )
        )
    domain = onnx_domain(node)
    proto = helper.make_node(node.op_type, input_names, output_names, domain=domain)
    proto.attribute.extend(attribute_to_proto(k, v) for k, v in node.attrs.items())
    opsets = {"": graph.opsets.get("", 1), domain: graph.opset_of(node)}
    opset_ids = [helper.make_opsetid(name, version) for name, version in opsets.items()]
    model = helper.make_model(
        helper.make_graph([proto], "probe", inputs, outputs, initializers), opset_imports=opset_ids
    )
    model.ir_version = max(helper.find_min_ir_version_for(opset_ids, ignore_unknown=True), 4)
    return model


def with_absolute_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` with every initializer replaced by its absolute value.

    Fed absolute inputs, a sum of products (Conv, MatMul, Gemm) then computes
    ``sum |x| |w|``: what a rounding of each term scales with, however the terms cancel.
    """
    absolute = onnx.ModelProto()
    absolute.CopyFrom(model)
    for index, tensor in enumerate(model.graph.initializer):
        weight = np.abs(numpy_helper.to_array(tensor))
        absolute.graph.initializer[index].CopyFrom(numpy_helper.from_array(weight, tensor.name))
    return absolute
