"""Subgraphs (the bodies of If, Loop and Scan): their outer-scope names, and running them.

A subgraph is kept as the ``onnx.GraphProto`` its node carries in an attribute. It may read
values of enclosing graphs by name; :func:`outer_names` lists them (nested subgraphs
included), and :func:`rename_outer` renames them when a pass renames an outer value.

:class:`Body` runs a subgraph with the reference kernels: every node is bound once (nested
control flow included) and run in order on an environment that starts from the captured
outer values, the subgraph's initializers and its inputs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper

from autopart.errors import UnsupportedOpError


def attribute_value(attribute: AttributeProto) -> Any:
    """An attribute as a Python value: str for strings, numpy arrays for tensors.

    Graph attributes stay ``onnx.GraphProto`` (a list of them for ``GRAPHS``).
    """
    value = helper.get_attribute_value(attribute)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode() for v in value]
    if isinstance(value, list) and value and isinstance(value[0], onnx.TensorProto):
        return [numpy_helper.to_array(v) for v in value]
    return value


def subgraphs(attrs: Mapping[str, Any]) -> Iterator[tuple[str, onnx.GraphProto]]:
    """Every graph-valued attribute of a node, as (attribute name, graph)."""
    for name, value in attrs.items():
        for item in value if isinstance(value, list | tuple) else [value]:
            if isinstance(item, onnx.GraphProto):
                yield name, item


def _proto_subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for attribute in node.attribute:
        if attribute.type == AttributeProto.GRAPH:
            yield attribute.g
        elif attribute.type == AttributeProto.GRAPHS:
            yield from attribute.graphs


def _local_names(graph: onnx.GraphProto) -> set[str]:
    names = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    names |= {t.values.name for t in graph.sparse_initializer}
    names |= {o for node in graph.node for o in node.output if o}
    return names


def outer_names(graph: onnx.GraphProto) -> list[str]:
    """Names ``graph`` (or a subgraph nested in it) reads from enclosing scopes, first use first."""
    local = _local_names(graph)
    found: dict[str, None] = {}
    for node in graph.node:
        for name in node.input:
            if name and name not in local:
                found[name] = None
        for inner in _proto_subgraphs(node):
            found.update((name, None) for name in outer_names(inner) if name not in local)
    found.update((o.name, None) for o in graph.output if o.name and o.name not in local)
    return list(found)


def node_outer_names(attrs: Mapping[str, Any]) -> list[str]:
    """The outer-scope names every subgraph attribute of a node reads, first use first."""
    found: dict[str, None] = {}
    for _, graph in subgraphs(attrs):
        found.update((name, None) for name in outer_names(graph))
    return list(found)


def rename_outer(graph: onnx.GraphProto, mapping: Mapping[str, str]) -> onnx.GraphProto:
    """A copy of ``graph`` reading outer value ``old`` as ``new`` for every pair of ``mapping``."""
    renamed = onnx.GraphProto()
    renamed.CopyFrom(graph)
    _rename_in_place(renamed, mapping)
    return renamed


def _rename_in_place(graph: onnx.GraphProto, mapping: Mapping[str, str]) -> None:
    todo = {old: new for old, new in mapping.items() if old not in _local_names(graph)}
    if not todo:
        return
    for node in graph.node:
        for index, name in enumerate(node.input):
            if name in todo:
                node.input[index] = todo[name]
        for inner in _proto_subgraphs(node):
            _rename_in_place(inner, todo)
    for output in graph.output:
        if output.name in todo:
            output.name = todo[output.name]


def subgraph_refusal(graph: onnx.GraphProto, opset: int, refuse: Any) -> str | None:
    """Why some node of ``graph`` (or of a graph nested in it) cannot run, or None.

    ``refuse(op_type, domain, opset, attrs, num_inputs)`` is the registry's refusal.
    """
    if graph.sparse_initializer:
        return f"subgraph {graph.name!r} has sparse initializers"
    for node in graph.node:
        if node.domain not in ("", "ai.onnx"):
            return f"subgraph {graph.name!r} uses op {node.domain}::{node.op_type}"
        attrs = {a.name: attribute_value(a) for a in node.attribute}
        reason = refuse(node.op_type, "", opset, attrs, len(node.input))
        if reason:
            return f"subgraph {graph.name!r}, {node.op_type} node: {reason}"
    return None


class _Step:
    __slots__ = ("args", "kernel", "outputs")

    def __init__(self, kernel: Any, args: list[str], outputs: list[str]) -> None:
        self.kernel = kernel
        self.args = args
        self.outputs = outputs


class Body:
    """A subgraph bound to the reference kernels, ready to run many times.

    ``binder(op_type, domain, attrs, num_outputs, captures)`` binds one node's kernel (the
    registry's ``bind`` at the model's opsets).
    """

    def __init__(self, graph: onnx.GraphProto, binder: Any) -> None:
        self.name = graph.name
        self.inputs = [i.name for i in graph.input]
        self.outputs = [o.name for o in graph.output]
        self.output_types = [_static_type(o) for o in graph.output]
        self.constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        self.steps = []
        for node in graph.node:
            attrs = {a.name: attribute_value(a) for a in node.attribute}
            captures = node_outer_names(attrs)
            kernel = binder(node.op_type, node.domain, attrs, len(node.output), captures)
            self.steps.append(_Step(kernel, [*node.input, *captures], list(node.output)))

    def run(self, inputs: Sequence[Any], outer: Mapping[str, Any]) -> list[np.ndarray]:
        """The subgraph's outputs given its ``inputs`` and the ``outer`` values it reads."""
        if len(inputs) != len(self.inputs):
            raise UnsupportedOpError(
                f"subgraph {self.name!r} takes {len(self.inputs)} inputs, got {len(inputs)}"
            )
        env: dict[str, Any] = {
            **outer,
            **self.constants,
            **dict(zip(self.inputs, inputs, strict=True)),
        }
        for step in self.steps:
            results = step.kernel(*[env[name] if name else None for name in step.args])
            env.update((name, r) for name, r in zip(step.outputs, results, strict=False) if name)
        return [np.asarray(env[name]) for name in self.outputs]

    def empty_output(self, index: int, context: str) -> np.ndarray:
        """An array of zero ``index``-th outputs stacked on a new first axis, as declared."""
        shape, dtype = self.output_types[index]
        if shape is None or dtype is None:
            raise UnsupportedOpError(
                f"{context} ran no iteration and subgraph {self.name!r} does not declare "
                f"the static shape of output {self.outputs[index]!r}"
            )
        return np.zeros((0, *shape), dtype)


def _static_type(info: onnx.ValueInfoProto) -> tuple[tuple[int, ...] | None, np.dtype | None]:
    tensor = info.type.tensor_type
    if not info.type.HasField("tensor_type") or tensor.elem_type == 0:
        return None, None
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type))
    if not tensor.HasField("shape") or not all(d.HasField("dim_value") for d in tensor.shape.dim):
        return None, dtype
    return tuple(d.dim_value for d in tensor.shape.dim), dtype
