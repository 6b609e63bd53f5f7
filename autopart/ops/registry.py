"""Reference operator registry: one numpy function per ONNX operator version.

A kernel is called as ``fn(*inputs, **attributes)``. Inputs are numpy arrays in ONNX order,
with ``None`` for an absent optional input; attributes are spelled exactly as in the ONNX
spec. Because old opsets pass some operands as attributes (``axes`` of Squeeze, ``pads`` of
Pad, ``min`` of Clip) and new opsets as inputs of the same name, one Python signature usually
serves every version. Where semantics really changed, a kernel is registered with the opset
version it applies ``since``, and lookup picks the newest version no later than the model's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from autopart.errors import UnsupportedOpError

Kernel = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class OpKernel:
    """A reference implementation of ``domain::op_type`` valid from opset ``since``."""

    op_type: str
    domain: str
    since: int
    fn: Kernel


_REGISTRY: dict[tuple[str, str], list[OpKernel]] = {}


def register(op_type: str, since: int = 1, domain: str = "") -> Callable[[Kernel], Kernel]:
    """Register the decorated function as the kernel of ``op_type`` from opset ``since``."""

    def decorate(fn: Kernel) -> Kernel:
        versions = _REGISTRY.setdefault((_canonical_domain(domain), op_type), [])
        versions.append(OpKernel(op_type, _canonical_domain(domain), since, fn))
        versions.sort(key=lambda kernel: kernel.since)
        return fn

    return decorate


def _canonical_domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def has_kernel(op_type: str, domain: str, opset: int) -> bool:
    """Whether a reference kernel exists for ``op_type`` at ``opset``."""
    versions = _REGISTRY.get((_canonical_domain(domain), op_type), [])
    return any(kernel.since <= opset for kernel in versions)


def lookup(op_type: str, domain: str, opset: int) -> Kernel:
    """Return the newest kernel of ``op_type`` no later than ``opset``.

    Raises :class:`UnsupportedOpError` naming the versions that do exist.
    """
    versions = _REGISTRY.get((_canonical_domain(domain), op_type), [])
    usable = [kernel for kernel in versions if kernel.since <= opset]
    if usable:
        return usable[-1].fn
    if versions:
        known = ", ".join(str(kernel.since) for kernel in versions)
        raise UnsupportedOpError(
            f"op {op_type} has no reference kernel for opset {opset} (versions since: {known})"
        )
    raise UnsupportedOpError(f"op {_qualified(op_type, domain)} has no reference kernel")


def bind(
    op_type: str, domain: str, opset: int, attrs: dict[str, Any], num_outputs: int
) -> Callable[..., tuple[np.ndarray, ...]]:
    """The kernel of a node with its attributes bound: ``f(*inputs) -> tuple of outputs``.

    Some ops take their output count from the node itself (an equal Split before opset 18
    has only its outputs to say how many parts); ``num_outputs`` carries it.
    """
    kernel = lookup(op_type, domain, opset)
    extra = {"_num_outputs": num_outputs} if op_type == "Split" else {}
    bound_attrs = {**attrs, **extra}

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
