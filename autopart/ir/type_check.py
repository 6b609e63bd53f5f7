"""Element types against the ONNX schemas: refuse a node fed a type its op does not take.

Before import reads a model, :func:`check_declared_types` refuses element-type codes ONNX
does not define wherever the model states one: value declarations (subgraphs' too),
tensors, and the attributes that name a type (``Cast``'s ``to``, ``dtype``...).

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
# Every element-type code the installed onnx defines (0, UNDEFINED, is not one).
ELEMENT_CODES = frozenset(code for code in TensorProto.DataType.values() if code)
# Names ONNX schemas give integer attributes that hold an element-type code.
_TYPE_ATTRIBUTES = frozenset(
    {
        "to",
        "dtype",
        "output_dtype",
        "output_datatype",
        "stash_type",
        "softmax_precision",
        "precision",
    }
)


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
    """An op's schema, reduced to what the checks need.

    ``type_attributes`` maps each attribute holding an element-type code to whether 0
    means "not given" (its default) rather than an undefined type.
    """

    label: str
    inputs: tuple[_Formal, ...]
    outputs: tuple[_Formal, ...]
    type_attributes: tuple[tuple[str, bool], ...]


def check_declared_types(model: onnx.ModelProto) -> None:
    """Raise :class:`ModelError` (one line) at an element-type code ONNX does not define.

    Looks at every value declaration (0, "not stated", is allowed there), tensor and
    type-naming attribute of an ONNX-domain node, in the graph and all its subgraphs: one
    pass over the model's structure, tensor data untouched.
    """
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    graphs = [model.graph]
    while graphs:
        graph = graphs.pop()
        for info in [*graph.input, *graph.output, *graph.value_info]:
            _check_type_proto(info.type, f"value {info.name!r}")
        tensors = [*graph.initializer, *(sparse.values for sparse in graph.sparse_initializer)]
        for tensor in tensors:
            _check_code(tensor.data_type, f"tensor {tensor.name!r}")
        for node in graph.node:
            _check_node_attributes(node, opsets)
            for attribute in node.attribute:
                graphs += [attribute.g] if attribute.HasField("g") else attribute.graphs


def _check_node_attributes(node: onnx.NodeProto, opsets: dict[str, int]) -> None:
    where = f"node {node.name!r} ({node.op_type})" if node.name else f"a {node.op_type} node"
    for attribute in node.attribute:
        tensors = [*attribute.tensors, *(sparse.values for sparse in attribute.sparse_tensors)]
        tensors += [attribute.t] if attribute.HasField("t") else []
        tensors += [attribute.sparse_tensor.values] if attribute.HasField("sparse_tensor") else []
        for tensor in tensors:
            _check_code(tensor.data_type, f"attribute {attribute.name!r} of {where}")
    domain = "" if node.domain == "ai.onnx" else node.domain
    if domain not in ONNX_DOMAINS:
        return
    signature = _signature(node.op_type, domain, opsets.get(domain, opsets.get("", 1)))
    if signature is None:
        return
    given = {a.name: a for a in node.attribute if a.type == onnx.AttributeProto.INT}
    for name, zero_means_unset in signature.type_attributes:
        code = given[name].i if name in given else None
        if code is not None and code not in ELEMENT_CODES and not (code == 0 and zero_means_unset):
            raise ModelError(f"{where}: attribute {name}={code} is not an ONNX element type")


def _check_type_proto(kind: onnx.TypeProto, what: str) -> None:
    """Refuse undefined element-type codes in a value's type, through sequences and maps."""
    while True:
        field = kind.WhichOneof("value")
        if field in ("tensor_type", "sparse_tensor_type"):
            code = getattr(kind, field).elem_type
            if code:
                _check_code(code, what)
            return
        if field in ("sequence_type", "optional_type"):
            kind = getattr(kind, field).elem_type
        elif field == "map_type":
            kind = kind.map_type.value_type
        else:
            return


def _check_code(code: int, what: str) -> None:
    if code not in ELEMENT_CODES:
        raise ModelError(f"{what} has element type {code}, which ONNX does not define")


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
    type_attributes = tuple(
        (name, attribute.default_value.HasField("i") and attribute.default_value.i == 0)
        for name, attribute in schema.attributes.items()
        if name in _TYPE_ATTRIBUTES and attribute.type == OpSchema.AttrType.INT
    )
    return _Signature(
        f"{prefix}{op_type}-{schema.since_version}",
        tuple(_formal(f, constraints) for f in schema.inputs),
        tuple(_formal(f, constraints) for f in schema.outputs),
        type_attributes,
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
