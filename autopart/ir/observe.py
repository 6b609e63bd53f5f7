"""Shapes that depend on data: observed on one reference run, and marked dynamic.

A node whose output size depends on values (``NonZero``, ``NonMaxSuppression``,
``Unique``, ``TopK`` or ``Range`` with computed arguments, a ``Loop`` or an ``If`` on data)
leaves its outputs, and what follows from them, without a static shape. Such a model is
not refused: import runs it once on the reference kernels (the ONNX semantics of
:mod:`autopart.ops`) on its seeded random inputs, gives every such value the shape it had
there, and records the values as *dynamic* (``graph.meta["dynamic_values"]``).

The observed shapes are what planning prices and profiles with. At run time a dynamic
value may take any size: codegens that compile for fixed shapes refuse the nodes that
read or write one (:func:`touches_dynamic`), whole-subgraph codegens export them with
unknown dims (:func:`autopart.ir.onnx_export.value_info`), and the reference computes
whatever comes. The nodes touching dynamic values are the plan's *dynamic region*.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from autopart.errors import AutopartError, ModelError, ResourceError
from autopart.ir.feeds import random_inputs
from autopart.ir.graph import Graph, Node
from autopart.ops import KERNEL_ERRORS
from autopart.ops.registry import bind

DYNAMIC_VALUES = "dynamic_values"
DYNAMIC_DIMS = "dynamic_dims"  # value -> the dims that depend on data (the others are static)
PARTIAL_SHAPES = "partial_shapes"  # value -> the shape inference gave, None where unknown


def dynamic_dims(graph: Graph, name: str) -> list[int]:
    """The dims of ``name`` that depend on data (all of them when inference knew none)."""
    shape = graph.value(name).shape or ()
    return list(graph.meta.get(DYNAMIC_DIMS, {}).get(name, range(len(shape))))


def dynamic_values(graph: Graph) -> frozenset[str]:
    """The values of ``graph`` whose shapes depend on data (none for a static graph)."""
    return frozenset(graph.meta.get(DYNAMIC_VALUES, ()))


def touches_dynamic(graph: Graph, node: Node) -> bool:
    """Whether ``node`` reads or writes a value whose shape depends on data."""
    dynamic = graph.meta.get(DYNAMIC_VALUES)
    if not dynamic:
        return False
    return any(name in dynamic for name in [*node.present_inputs, *node.outputs] if name)


def dynamic_region(graph: Graph) -> list[Node]:
    """The nodes that read or write a dynamic value, in graph order."""
    if not graph.meta.get(DYNAMIC_VALUES):
        return []
    return [node for node in graph.nodes if touches_dynamic(graph, node)]


def describe_region(graph: Graph) -> str:
    """One phrase naming the dynamic region's size and the ops that start it ("" if none)."""
    region = dynamic_region(graph)
    if not region:
        return ""
    dynamic = dynamic_values(graph)
    sources = [
        node.op_type for node in region if not any(name in dynamic for name in node.present_inputs)
    ]
    starts = ", ".join(sorted(set(sources))) or "control flow"
    return (
        f"{len(region)} of {len(graph.nodes)} nodes have shapes that depend on data "
        f"(from {starts}); they are planned at the shapes seen on the seeded inputs"
    )


def observe_shapes(graph: Graph, names: Sequence[str]) -> None:
    """Give ``names`` (values without a static shape) the shapes of one reference run.

    The graph runs once on the reference kernels, on its seeded random inputs; each of
    ``names`` takes the shape it had and is recorded as dynamic. Raises
    :class:`ModelError` naming the node when the run fails, :class:`ResourceError` when
    it runs out of memory.
    """
    wanted = set(names)
    seen = _run(graph, random_inputs(graph, seed=0), wanted)
    partial = graph.meta.get(PARTIAL_SHAPES, {})
    dims = graph.meta.setdefault(DYNAMIC_DIMS, {})
    for name in names:
        if name in seen:
            value = graph.value(name)
            value.shape, dtype = seen[name]
            if value.dtype is None:
                value.dtype = dtype
            known = partial.get(name)
            rank = len(value.shape)
            dims[name] = (
                [i for i, dim in enumerate(known) if dim is None]
                if known is not None and len(known) == rank
                else list(range(rank))
            )
    known = set(graph.meta.get(DYNAMIC_VALUES, ()))
    graph.meta[DYNAMIC_VALUES] = sorted(known | (wanted & set(seen)))


def _run(graph: Graph, feeds: dict[str, np.ndarray], wanted: set[str]) -> dict[str, Any]:
    """Shapes and dtypes of the ``wanted`` tensors on one run of ``graph`` (freed after use).

    Values that are not tensors (sequences, optionals) are left out.
    """
    last = graph.last_uses()
    env: dict[str, Any] = dict(feeds)
    seen: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    with np.errstate(all="ignore"):
        for index, node in enumerate(graph.nodes):
            args = [_value(graph, env, name) for name in [*node.inputs, *node.captures]]
            try:
                kernel = bind(
                    node.op_type, node.domain, graph.opset_of(node), node.attrs,
                    len(node.outputs), node.captures,
                )  # fmt: skip
                results = kernel(*args)
            except MemoryError:
                raise ResourceError(
                    f"{node.op_type} node {node.name!r} ran out of memory while import observed "
                    "the shapes that depend on data"
                ) from None
            except (*KERNEL_ERRORS, AutopartError) as error:
                first = (str(error).splitlines() or [""])[0]
                raise ModelError(
                    f"could not run {node.op_type} node {node.name!r} to observe the shapes "
                    f"that depend on data: {first}"
                ) from None
            for name, result in zip(node.outputs, results, strict=False):
                if name:
                    env[name] = result
                    if name in wanted and isinstance(result, np.ndarray | np.generic):
                        seen[name] = (tuple(int(d) for d in np.shape(result)), result.dtype)
            _free(env, _done(last, index, node), graph.outputs)
    return seen


def _value(graph: Graph, env: dict[str, Any], name: str) -> Any:
    if not name:
        return None
    const = graph.value(name).const
    return const if const is not None else env[name]


def _done(last: dict[str, int], index: int, node: Node) -> Iterable[str]:
    return [name for name in node.present_inputs if last.get(name) == index]


def _free(env: dict[str, Any], names: Iterable[str], keep: Sequence[str]) -> None:
    for name in names:
        if name not in keep:
            env.pop(name, None)
