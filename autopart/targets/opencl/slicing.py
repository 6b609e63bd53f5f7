"""Slice and constant-index Gather that cut one axis: one ``slice_rows`` launch each.

Exporters split fused projections with ``Slice`` (torch's dynamo exporter turns
``unbind`` of a QKV tensor into three of them) and take a class token with ``Gather`` of
a constant index (``x[:, 0]``). Both read a contiguous run of rows of the input along one
axis, which is the row copy that ``Split`` already uses.
"""

from __future__ import annotations

import math

import numpy as np

from autopart.ir.graph import Graph, Node
from autopart.targets.opencl.lowering import (
    Builder,
    Group,
    int_const,
    is_f32,
    register,
    shape,
    single_f32_output,
)
from autopart.targets.opencl.subgraph import IN, OUT, Launch, Step

i32 = np.int32


def _slice_bounds(node: Node, graph: Graph) -> list[tuple[int, int, int]] | None:
    """Per input axis (start, stop, step) of a Slice with constant operands, else None."""
    x_shape = shape(graph, node.inputs[0])
    if "starts" in node.attrs:  # opset < 10: attributes, step 1
        starts, ends = list(node.attrs["starts"]), list(node.attrs["ends"])
        axes = list(node.attrs.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        operands = [int_const(graph, name) if name else None for name in node.inputs[1:5]]
        operands += [None] * (4 - len(operands))
        starts, ends, axes_given, steps_given = operands
        present = [name for name in node.inputs[3:5] if name]
        if starts is None or ends is None or any(int_const(graph, n) is None for n in present):
            return None
        axes = axes_given if axes_given is not None else list(range(len(starts)))
        steps = steps_given if steps_given is not None else [1] * len(starts)
    bounds = [(0, size, 1) for size in x_shape]
    if not len(starts) == len(ends) == len(axes) == len(steps):
        return None
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        if not -len(x_shape) <= axis < len(x_shape) or step == 0:
            return None
        size = x_shape[axis % len(x_shape)]
        # ONNX clamps like Python slicing; INT64 extremes stand for "to the end"
        bounds[axis % len(x_shape)] = slice(start, end, step).indices(size)
    return bounds


def _one_axis_cut(bounds: list[tuple[int, int, int]], x_shape: tuple[int, ...]) -> bool:
    """Whether at most one axis is narrowed, with step 1, and the others are whole."""
    narrowed = [
        a for a, (b, size) in enumerate(zip(bounds, x_shape, strict=True)) if b != (0, size, 1)
    ]
    return len(narrowed) <= 1 and all(bounds[a][2] == 1 for a in narrowed)


def _supports_slice(node: Node, graph: Graph) -> bool:
    """A float32 Slice with constant bounds that narrows one axis with step 1."""
    if not single_f32_output(node, graph) or not is_f32(graph, node.inputs[0]):
        return False
    bounds = _slice_bounds(node, graph)
    x_shape = shape(graph, node.inputs[0])
    if bounds is None or not _one_axis_cut(bounds, x_shape):
        return False
    expected = tuple(len(range(*b)) for b in bounds)
    return expected == shape(graph, node.outputs[0])


def _rows_step(builder: Builder, node: Node, axis: int, start: int, length: int) -> list[Step]:
    """Rows ``start .. start + length`` of the input along ``axis``, copied out."""
    x_shape = builder.shape(node.inputs[0])
    outer, inner = math.prod(x_shape[:axis]), math.prod(x_shape[axis + 1 :])
    kernel = builder.kernel("data", "slice_rows", node)
    args = [IN[0], OUT[0], i32(length * inner), i32(x_shape[axis] * inner), i32(start * inner)]
    launch = Launch(kernel, (length * inner, outer), None, args)
    out = builder.shape(node.outputs[0])
    return [Step(node.name, [node.inputs[0]], [node.outputs[0]], [out], launches=[launch])]


@register("Slice", supports=_supports_slice)
def lower_slice(builder: Builder, group: Group) -> list[Step]:
    """One row copy of the narrowed axis (axis 0 in full when nothing is narrowed)."""
    node = group.head
    x_shape = builder.shape(node.inputs[0])
    bounds = _slice_bounds(node, builder.graph)
    assert bounds is not None
    axis = next((a for a, b in enumerate(bounds) if b != (0, x_shape[a], 1)), 0)
    start, stop, _ = bounds[axis]
    return _rows_step(builder, node, axis, start, stop - start)


def _gather_index(node: Node, graph: Graph) -> tuple[int, int] | None:
    """(axis, index) of a Gather of one constant in-range index, else None."""
    indices = int_const(graph, node.inputs[1]) if len(node.inputs) > 1 else None
    x_shape = shape(graph, node.inputs[0])
    axis = int(node.attrs.get("axis", 0))
    if indices is None or len(indices) != 1 or not -len(x_shape) <= axis < len(x_shape):
        return None
    axis %= len(x_shape)
    index = indices[0]
    if not -x_shape[axis] <= index < x_shape[axis]:
        return None
    return axis, index % x_shape[axis]


def _supports_gather(node: Node, graph: Graph) -> bool:
    """A float32 Gather of a single constant index: a one-row slice."""
    if not single_f32_output(node, graph) or not is_f32(graph, node.inputs[0]):
        return False
    return _gather_index(node, graph) is not None


@register("Gather", supports=_supports_gather)
def lower_gather(builder: Builder, group: Group) -> list[Step]:
    """The indexed row of the gathered axis, copied out."""
    node = group.head
    found = _gather_index(node, builder.graph)
    assert found is not None
    return _rows_step(builder, node, found[0], found[1], 1)
