"""ConvTranspose over one or two spatial dims: one gathering kernel, weights resident.

Each output reads the input positions whose taps land on it (no scatter, no atomics), in
the geometry of the numpy reference (:func:`autopart.ops.nn.transpose_geometry`): strides,
dilations, groups, pads, ``auto_pad``, ``output_padding`` and ``output_shape``.
"""

from __future__ import annotations

import math

import numpy as np

from autopart.ir.graph import Graph, Node
from autopart.ops.nn import transpose_geometry
from autopart.targets.opencl.lowering import (
    F32,
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


def _geometry(node: Node, graph: Graph) -> tuple[list[int], list[int]]:
    """Output begin in the scattered canvas, and output sizes, per spatial dim."""
    x_shape = shape(graph, node.inputs[0])
    kernel = const(graph, node.inputs[1]).shape[2:]  # type: ignore[union-attr]
    d = len(kernel)
    _, begin, target = transpose_geometry(
        x_shape[2:],
        kernel,
        node.attrs.get("strides") or [1] * d,
        node.attrs.get("dilations") or [1] * d,
        node.attrs.get("auto_pad", "NOTSET"),
        node.attrs.get("output_padding"),
        node.attrs.get("output_shape"),
        node.attrs.get("pads"),
    )
    return begin, target


def _supports_conv_transpose(node: Node, graph: Graph) -> bool:
    """Float32 ConvTranspose over 1 or 2 dims with constant weights (and bias)."""
    x, w, b = [*node.inputs, ""][:3]
    if not single_f32_output(node, graph) or not is_f32(graph, x):
        return False
    weights = const(graph, w)
    if weights is None or weights.dtype != F32 or weights.ndim not in (3, 4):
        return False
    x_shape = shape(graph, x)
    group = int(node.attrs.get("group", 1))
    if len(x_shape) != weights.ndim or group < 1 or x_shape[1] != weights.shape[0]:
        return False
    channels = weights.shape[1] * group
    bias = const(graph, b) if b else None
    if x_shape[1] % group or (b and (bias is None or bias.shape != (channels,))):
        return False
    if node.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        return False
    begin, target = _geometry(node, graph)
    out = shape(graph, node.outputs[0])
    return min(begin, default=0) >= 0 and out == (x_shape[0], channels, *target)


@register("ConvTranspose", supports=_supports_conv_transpose)
def lower_conv_transpose(builder: Builder, group: Group) -> list[Step]:
    """One conv_transpose2d launch over (out width, out height, batch x channels)."""
    node = group.head
    x_shape, out = builder.shape(node.inputs[0]), builder.shape(node.outputs[0])
    weights = const(builder.graph, node.inputs[1])
    assert weights is not None
    bias_name = node.inputs[2] if len(node.inputs) > 2 else ""
    bias = const(builder.graph, bias_name) if bias_name else None
    channels = out[1]
    bias = np.zeros(channels, F32) if bias is None else np.asarray(bias, F32)
    begin, _ = _geometry(node, builder.graph)
    one_d = len(x_shape) == 3
    pad = (lambda values: [1, *values]) if one_d else (lambda values: list(values))
    d = len(x_shape) - 2
    in_h, in_w = pad(x_shape[2:])
    out_h, out_w = pad(out[2:])
    k_h, k_w = pad(weights.shape[2:])
    s_h, s_w = pad(node.attrs.get("strides") or [1] * d)
    d_h, d_w = pad(node.attrs.get("dilations") or [1] * d)
    b_h, b_w = [0, *begin] if one_d else begin
    sizes = [x_shape[1], in_h, in_w, channels, out_h, out_w, k_h, k_w, s_h, s_w, d_h, d_w]
    args = [IN[0], builder.upload(np.asarray(weights, F32)), builder.upload(bias), OUT[0]]
    args += [i32(v) for v in (*sizes, b_h, b_w, int(node.attrs.get("group", 1)))]
    kernel = builder.kernel("deconv", "conv_transpose2d", node)
    launch = Launch(kernel, (out_w, out_h, math.prod(out[:2])), None, args)
    return [Step(node.name, [node.inputs[0]], [node.outputs[0]], [out], launches=[launch])]
