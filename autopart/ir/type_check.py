"""Element types against the ONNX schemas: refuse a node fed a type its op does not take.

Once import has typed every value, :func:`check_types` holds each node of a domain ONNX
defines (the default one, ``ai.onnx.ml`` and the preview domains) to the schema in force at
the model's opset: every present input and output must be of an element type the formal
parameter's type constraint allows, and the values that share a type parameter must share
one type (``Add(float, double)`` and ``Sum`` over float and double are refused; the
heterogeneous variadics of ``If``, ``Loop``, ``Scan`` and the training ops bind nothing).
A violation is one :class:`ModelError` line, before any kernel meets the type.

Left alone: nodes of other domains (custom ops are refused by name elsewhere), ops with
no schema at the opset, absent optional inputs, values without a known element type, the
nodes inside control-flow subgraphs, and formals whose constraint holds no tensor type
(sequences and maps: the IR records no element type for them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx.defs import OpSchema

from autopart.errors import ModelError
from autopart.ir.graph import Graph, Node

ONNX_DOMAINS = frozenset(
    {"", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview", "ai.onnx.preview.training"}
)

# A tensor, or an optional tensor: the IR types both by their element type alone.
_TENSOR_TYPE = re.compile(r"(?:optional\()?tensor\((\w+)\)\)?")
_ELEMENT_ORDER = {
    TensorProto.DataType.Name(code).lower(): code for code in TensorProto.DataType.values()
}


@dataclass(frozen=True)
class _Formal:
    """One formal parameter: its type parameter and the element types it allows.

    ``allowed`` is None when the constraint names no tensor type (nothing to check).
    ``binds`` is whether the values it stands for must share their parameter's one type.
    """

    param: str
    allowed: frozenset[str] | None
    variadic: bool
    binds: bool


@dataclass(frozen=True)
class _Signature:
    """An op's schema, reduced to what the check needs."""

    label: str
    inputs: tuple[_Formal, ...]
    outputs: tuple[_Formal, ...]


def check_types(graph: Graph) -> None:
    """Raise :class:`ModelError` (one line) at the first node fed a type its schema forbids.

    Linear in the nodes and their inputs and outputs; schemas are looked up once per
    (op, domain, opset).
    """
    for node in graph.nodes:
        domain = "" if node.domain == "ai.onnx" else node.domain
        if domain not in ONNX_DOMAINS:
            continue
        signature = _signature(node.op_type, domain, graph.opset_of(node))
        if signature is not None:
            _check_node(graph, node, signature)


def _check_node(graph: Graph, node: Node, signature: _Signature) -> None:
    bound: dict[str, tuple[str, str, str]] = {}  # parameter -> (element, role, value name)
    for role, names, formals in (
        ("input", node.inputs, signature.inputs),
        ("output", node.outputs, signature.outputs),
    ):
        for index, name in enumerate(names):
            formal = _formal_at(formals, index)
            value = graph.values.get(name) if name else None
            if formal is None or formal.allowed is None or value is None or value.dtype is None:
                continue
            element = _element(np.dtype(value.dtype))
            if element is None:
                continue
            where = f"node {node.name!r} ({node.op_type}): {role} {name!r} is {element}"
            if element not in formal.allowed:
                verb = "takes" if role == "input" else "makes"
                raise ModelError(f"{where}, but {signature.label} {verb} {_listed(formal.allowed)}")
            if not formal.binds:
                continue
            first = bound.setdefault(formal.param, (element, role, name))
            if first[0] != element:
                raise ModelError(
                    f"{where}, but {signature.label} needs one type {formal.param} for it "
                    f"and {first[1]} {first[2]!r} ({first[0]})"
                )


def _formal_at(formals: tuple[_Formal, ...], index: int) -> _Formal | None:
    """The formal parameter the ``index``-th actual binds to (a last variadic takes the rest)."""
    if index < len(formals):
        return formals[index]
    return formals[-1] if formals and formals[-1].variadic else None


def _listed(elements: frozenset[str]) -> str:
    return ", ".join(sorted(elements, key=_ELEMENT_ORDER.__getitem__))


@cache
def _signature(op_type: str, domain: str, opset: int) -> _Signature | None:
    """The schema of ``op_type`` in force at ``opset`` (None when ONNX has none)."""
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return None
    constraints = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
    prefix = f"{domain}::" if domain else ""
    return _Signature(
        f"{prefix}{op_type}-{schema.since_version}",
        tuple(_formal(f, constraints) for f in schema.inputs),
        tuple(_formal(f, constraints) for f in schema.outputs),
    )


def _formal(parameter: OpSchema.FormalParameter, constraints: dict[str, list[str]]) -> _Formal:
    type_strs = constraints.get(parameter.type_str, [parameter.type_str])
    elements = {m.group(1) for t in type_strs if (m := _TENSOR_TYPE.fullmatch(t))}
    variadic = parameter.option == OpSchema.FormalParameterOption.Variadic
    return _Formal(
        parameter.type_str,
        frozenset(elements) & _ELEMENT_ORDER.keys() or None,
        variadic,
        parameter.type_str in constraints and (parameter.is_homogeneous or not variadic),
    )


@cache
def _element(dtype: np.dtype) -> str | None:
    """The ONNX element type name of a numpy dtype (``float``, ``int64``...), None if none."""
    if dtype.kind in "OSU":
        return "string"
    try:
        code = helper.np_dtype_to_tensor_dtype(dtype)
    except (KeyError, TypeError, ValueError):
        return None
    return TensorProto.DataType.Name(code).lower()
