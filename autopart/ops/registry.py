"""Reference operator registry: one numpy function per ONNX operator version.

A kernel is called as ``fn(*inputs, **attributes)``. Inputs are numpy arrays in ONNX order,
with ``None`` for an absent optional input; attributes are spelled exactly as in the ONNX
spec. Because old opsets pass some operands as attributes (``axes`` of Squeeze, ``pads`` of
Pad, ``min`` of Clip) and new opsets as inputs of the same name, one Python signature usually
serves every version. Where semantics really changed, a kernel is registered with the opset
version it applies ``since``, and lookup picks the newest version no later than the model's.

Nothing is computed with semantics a kernel does not implement. Every attribute of a node is
checked against the kernel's parameters and the values it ``accepts`` (plus an optional
``check`` for combinations), and a model whose opset selects an ONNX schema newer than the
ones the kernels were written against (:data:`REVIEWED_OPSET`) is refused unless that schema
differs from the reviewed one only in the element types it allows. Each refusal is one line.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np
import onnx

from autopart.errors import UnsupportedOpError
from autopart.ops.borrowed import borrowed_kernel, onnxruntime_runs
from autopart.ops.subgraph import Body, subgraph_refusal, subgraphs

Kernel = Callable[..., Any]
# Given a node's attributes, the reason the kernel cannot run it, or None.
AttributeCheck = Callable[[Mapping[str, Any]], str | None]

# The newest default-domain opset whose schemas every kernel was written against.
REVIEWED_OPSET = 21
# Attributes with no effect on a result (legacy optimiser hints).
_INERT_ATTRIBUTES = frozenset({"consumed_inputs"})
# Ops whose kernels are told how many outputs the node has (``_num_outputs``).
_COUNTS_OUTPUTS = frozenset({"Split", "MaxPool", "If", "Loop", "Scan"})
# What numpy raises when a kernel's operands are of types, shapes, indices or values it
# cannot compute with. Callers turn these into one line naming the node; others are bugs.
KERNEL_ERRORS: tuple[type[Exception], ...] = (TypeError, ValueError, IndexError, ArithmeticError)


@dataclass(frozen=True, slots=True)
class OpKernel:
    """A reference implementation of ``domain::op_type`` valid from opset ``since``.

    ``accepts`` maps an attribute to the only values the kernel implements; ``check`` refuses
    combinations a value set cannot express. ``params`` are the names the kernel takes;
    ``max_inputs`` how many inputs it takes (None: any number).
    """

    op_type: str
    domain: str
    since: int
    fn: Kernel
    accepts: Mapping[str, Collection[Any]] = field(default_factory=dict)
    check: AttributeCheck | None = None
    params: frozenset[str] = frozenset()
    max_inputs: int | None = None


_REGISTRY: dict[tuple[str, str], list[OpKernel]] = {}


def register(
    op_type: str,
    since: int = 1,
    domain: str = "",
    accepts: Mapping[str, Collection[Any]] | None = None,
    check: AttributeCheck | None = None,
) -> Callable[[Kernel], Kernel]:
    """Register the decorated function as the kernel of ``op_type`` from opset ``since``.

    ``accepts`` lists, per attribute, the values the kernel implements; ``check`` returns the
    reason a node's attributes cannot be run (or None).
    """

    def decorate(fn: Kernel) -> Kernel:
        params, max_inputs = _signature(fn)
        versions = _REGISTRY.setdefault((_canonical_domain(domain), op_type), [])
        kernel = OpKernel(
            op_type,
            _canonical_domain(domain),
            since,
            fn,
            dict(accepts or {}),
            check,
            params,
            max_inputs,
        )
        versions.append(kernel)
        versions.sort(key=lambda kernel: kernel.since)
        return fn

    return decorate


def _signature(fn: Kernel) -> tuple[frozenset[str], int | None]:
    parameters = inspect.signature(fn).parameters.values()
    names = frozenset(p.name for p in parameters if p.kind is not p.VAR_POSITIONAL)
    if any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return names, None
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return names, len(positional)


def _canonical_domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def _borrowed(op_type: str, domain: str, opset: int) -> bool:
    """Whether the registry has no kernel of the op at all and onnxruntime has one."""
    return not _REGISTRY.get((_canonical_domain(domain), op_type)) and onnxruntime_runs(
        op_type, domain, opset
    )


def has_kernel(op_type: str, domain: str, opset: int) -> bool:
    """Whether a reference kernel exists for ``op_type`` at ``opset``."""
    versions = _REGISTRY.get((_canonical_domain(domain), op_type), [])
    return any(kernel.since <= opset for kernel in versions)


def lookup(op_type: str, domain: str, opset: int) -> Kernel:
    """Return the newest kernel of ``op_type`` no later than ``opset``.

    Raises :class:`UnsupportedOpError` naming the versions that do exist, or the schema
    change at ``opset`` that the kernel does not implement.
    """
    return _kernel(op_type, domain, opset).fn


def _kernel(op_type: str, domain: str, opset: int) -> OpKernel:
    versions = _REGISTRY.get((_canonical_domain(domain), op_type), [])
    usable = [kernel for kernel in versions if kernel.since <= opset]
    if usable:
        changed = _unreviewed_schema(op_type, domain, usable[-1].since, opset)
        if changed:
            raise UnsupportedOpError(changed)
        return usable[-1]
    if versions:
        known = ", ".join(str(kernel.since) for kernel in versions)
        raise UnsupportedOpError(
            f"op {op_type} has no reference kernel for opset {opset} (versions since: {known})"
        )
    raise UnsupportedOpError(f"op {_qualified(op_type, domain)} has no reference kernel")


@cache
def _unreviewed_schema(op_type: str, domain: str, since: int, opset: int) -> str | None:
    """Why the schema ``opset`` selects is not the one a kernel ``since`` implements, or None.

    A default-domain schema newer than both :data:`REVIEWED_OPSET` and ``since`` is accepted
    only when it differs from the reviewed one in element types alone.
    """
    if _canonical_domain(domain) or opset <= REVIEWED_OPSET:
        return None
    try:
        current = onnx.defs.get_schema(op_type, opset, "")
        reviewed = onnx.defs.get_schema(op_type, max(since, REVIEWED_OPSET), "")
    except onnx.defs.SchemaError:
        return None
    if current.since_version <= reviewed.since_version:
        return None
    if _interface(current) == _interface(reviewed):
        return None
    return (
        f"op {op_type} at opset {opset} follows schema version {current.since_version}; "
        f"the numpy kernel implements version {reviewed.since_version}"
    )


def _interface(schema: onnx.defs.OpSchema) -> tuple:
    attributes = sorted(
        (a.name, int(a.type), str(a.default_value)) for a in schema.attributes.values()
    )
    inputs = [(p.name, int(p.option)) for p in schema.inputs]
    outputs = [(p.name, int(p.option)) for p in schema.outputs]
    return attributes, inputs, outputs, schema.min_input, schema.max_input


def refusal(
    op_type: str, domain: str, opset: int, attrs: Mapping[str, Any], num_inputs: int
) -> str | None:
    """Why the reference kernel cannot run this node (one line), or None when it can.

    Checks that a kernel exists for ``opset``, takes ``num_inputs`` inputs, knows every
    attribute, and implements each attribute's value. An op the registry has no kernel of
    at all runs when onnxruntime has one (:mod:`autopart.ops.borrowed`).
    """
    if _borrowed(op_type, domain, opset):
        return None
    try:
        kernel = _kernel(op_type, domain, opset)
    except UnsupportedOpError as error:
        return str(error)
    if kernel.max_inputs is not None and num_inputs > kernel.max_inputs:
        return f"{num_inputs} inputs (the kernel takes {kernel.max_inputs})"
    for name, value in attrs.items():
        if name in _INERT_ATTRIBUTES:
            continue
        if name not in kernel.params:
            return f"attribute {name}={_shown(value)} is not implemented"
        allowed = kernel.accepts.get(name)
        if allowed is not None and _hashable(value) not in allowed:
            return f"attribute {name}={_shown(value)} is not implemented"
    for _, graph in subgraphs(attrs):
        reason = subgraph_refusal(graph, opset, refusal)
        if reason:
            return reason
    return kernel.check(attrs) if kernel.check else None


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _shown(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"<{value.dtype} tensor {list(value.shape)}>"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def bind(
    op_type: str,
    domain: str,
    opset: int,
    attrs: dict[str, Any],
    num_outputs: int,
    captures: Sequence[str] = (),
) -> Callable[..., tuple[np.ndarray, ...]]:
    """The kernel of a node with its attributes bound: ``f(*inputs) -> tuple of outputs``.

    Some ops take their output count from the node itself (an equal Split before opset 18
    has only its outputs to say how many parts); ``num_outputs`` carries it. Attributes the
    kernel does not implement raise :class:`UnsupportedOpError`. A node with subgraphs
    (If, Loop, Scan) has them bound as :class:`~autopart.ops.subgraph.Body` objects, and
    is called with the values of the outer names they read (``captures``, in that order)
    after its own inputs.
    """
    if _borrowed(op_type, domain, opset):
        return borrowed_kernel(op_type, domain, opset, attrs, num_outputs)
    reason = refusal(op_type, domain, opset, attrs, 0)
    if reason:
        raise UnsupportedOpError(f"{op_type}: {reason}")
    kernel = lookup(op_type, domain, opset)
    extra: dict[str, Any] = {"_num_outputs": num_outputs} if op_type in _COUNTS_OUTPUTS else {}
    bound_attrs = {**attrs, **extra}
    if any(True for _ in subgraphs(attrs)):

        def binder(op: str, dom: str, a: dict[str, Any], n: int, caps: Sequence[str]) -> Any:
            return bind(op, dom, opset, a, n, caps)

        for name, graph in subgraphs(attrs):
            bound_attrs[name] = Body(graph, binder)
        bound_attrs["_captures"] = tuple(captures)

    def call(*inputs: np.ndarray | None) -> tuple[np.ndarray, ...]:
        return as_outputs(kernel(*inputs, **bound_attrs))

    return call


def supported_ops() -> list[str]:
    """Names of every registered op, qualified by domain where it is not the default."""
    return sorted(_qualified(op, domain) for domain, op in _REGISTRY)


def _qualified(op_type: str, domain: str) -> str:
    domain = _canonical_domain(domain)
    return f"{domain}::{op_type}" if domain else op_type


def as_outputs(result: Any) -> tuple[np.ndarray, ...]:
    """Normalise a kernel's return value to a tuple of arrays."""
    if isinstance(result, tuple):
        return tuple(np.asarray(item) for item in result)
    return (np.asarray(result),)


def kernel_failure(error: BaseException) -> str:
    """The first line of what a kernel raised (its type's name when the message is empty)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
