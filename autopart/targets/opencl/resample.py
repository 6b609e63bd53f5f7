"""Resize (opset 11 on) over the last two dims: one separable resampling kernel.

The taps come from the numpy reference (:func:`autopart.ops.resize.resize_taps`): per
output row and column, the input indices read and their weights, for every mode
(nearest, linear, cubic, antialiased), coordinate transformation and rounding the
reference implements. They are uploaded once; a run is one launch.
"""

from __future__ import annotations

import math

import numpy as np

from autopart.errors import UnsupportedOpError
from autopart.ir.graph import Graph, Node
from autopart.ops.resize import resize_taps
from autopart.targets.opencl.lowering import (
    Builder,
    Group,
    const,
    is_f32,
    register,
    shape,
    single_f32_output,
)
from autopart.targets.opencl.subgraph import IN, OUT, Launch, Step

i32 = np.int32


def _taps(node: Node, graph: Graph) -> dict[int, tuple[np.ndarray, np.ndarray]] | None:
    """The reference's taps per resampled axis, or None when they are not static."""
    operands = []
    for name in node.inputs[1:4]:
        data = const(graph, name) if name else None
        if name and data is None:
            return None
        operands.append(data)
    operands += [None] * (3 - len(operands))
    try:
        return resize_taps(shape(graph, node.inputs[0]), node.attrs, *operands)
    except (UnsupportedOpError, KeyError, ValueError):
        return None


def _supports_resize(node: Node, graph: Graph) -> bool:
    """Float32 Resize-11+ with constant operands resampling only the last two dims."""
    if graph.opset_of(node) < 11 or not single_f32_output(node, graph):
        return False
    if not is_f32(graph, node.inputs[0]):
        return False
    rank = len(shape(graph, node.inputs[0]))
    taps = _taps(node, graph)
    return rank >= 2 and taps is not None and all(axis >= rank - 2 for axis in taps)


def _axis_taps(
    taps: dict[int, tuple[np.ndarray, np.ndarray]], axis: int, size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Indices and weights of ``axis``; the identity when it is not resampled."""
    if axis in taps:
        return taps[axis]
    return np.arange(size)[:, None], np.ones((size, 1))


@register("Resize", supports=_supports_resize)
def lower_resize(builder: Builder, group: Group) -> list[Step]:
    """One resample2d launch over (out width, out height, leading planes)."""
    node = group.head
    x_shape, out = builder.shape(node.inputs[0]), builder.shape(node.outputs[0])
    taps = _taps(node, builder.graph)
    assert taps is not None
    rank = len(x_shape)
    rows, row_weights = _axis_taps(taps, rank - 2, x_shape[-2])
    cols, col_weights = _axis_taps(taps, rank - 1, x_shape[-1])
    args = [IN[0], OUT[0]]
    for indices, weights in ((rows, row_weights), (cols, col_weights)):
        args.append(builder.upload(np.ascontiguousarray(indices, dtype=np.int32)))
        args.append(builder.upload(np.ascontiguousarray(weights, dtype=np.float32)))
    args += [i32(x_shape[-2]), i32(x_shape[-1]), i32(out[-2]), i32(out[-1])]
    args += [i32(rows.shape[1]), i32(cols.shape[1])]
    kernel = builder.kernel("resample", "resample2d", node)
    launch = Launch(kernel, (out[-1], out[-2], math.prod(out[:-2])), None, args)
    return [Step(node.name, [node.inputs[0]], [node.outputs[0]], [out], launches=[launch])]
