"""Conv: im2col or implicit (shifted) GEMM on the packed-weight kernels, or depthwise.

Convolution is a GEMM per (batch item, group) over output channels, pixels and the
reduction ``k = (c, kh, kw)``. A 1x1 convolution with unit stride and no padding reads its
input directly. A stride-1 convolution with many output pixels pads its input planes once
and runs ``gemm_pvec_shift``, which reads every tap as a contiguous run of the padded plane
(no im2col). Any other convolution expands its input with ``im2col`` into a scratch buffer
first. Convolutions with one input channel per group (depthwise) use a direct kernel. All
of them share the GEMM epilogue (bias, folded per-channel scale and shift, residual, Relu).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from autopart.ir.graph import Graph, Node
from autopart.ops.nn import window_geometry
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
from autopart.targets.opencl.matmul import (
    PVEC,
    PVEC_MIN_COLUMNS,
    epilogue_args,
    folded,
    gemm_kernel,
    gemm_launches,
    pack,
    power_of_two_below,
)
from autopart.targets.opencl.subgraph import IN, OUT, TMP, Launch, Step

i32 = np.int32
AUTO_PADS = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")
MAX_ROW_GROUP = 256  # row kernels group a plane's rows into one work-group up to this many


def _supports_conv(node: Node, graph: Graph) -> bool:
    x, w, b = [*node.inputs, ""][:3]
    if not single_f32_output(node, graph) or not is_f32(graph, x):
        return False
    weights = const(graph, w)
    if weights is None or weights.dtype != F32 or weights.ndim not in (3, 4):
        return False
    x_shape = shape(graph, x)
    if len(x_shape) != weights.ndim:
        return False
    if b and (const(graph, b) is None or const(graph, b).size != weights.shape[0]):
        return False
    group = int(node.attrs.get("group", 1))
    channels, out_channels = x_shape[1], weights.shape[0]
    if group < 1 or channels % group or out_channels % group:
        return False
    if weights.shape[1] * group != channels:
        return False
    kernel = list(node.attrs.get("kernel_shape", weights.shape[2:]))
    if kernel != list(weights.shape[2:]):
        return False
    if node.attrs.get("auto_pad", "NOTSET") not in AUTO_PADS:
        return False
    if any(p < 0 for p in node.attrs.get("pads", [])):
        return False
    return _conv_geometry(node, graph) is not None


def _conv_geometry(node: Node, graph: Graph) -> tuple[Any, tuple[int, ...]] | None:
    x_shape = shape(graph, node.inputs[0])
    kernel = const(graph, node.inputs[1]).shape[2:]  # type: ignore[union-attr]
    geo = window_geometry(
        x_shape[2:],
        kernel,
        node.attrs.get("strides"),
        node.attrs.get("dilations"),
        node.attrs.get("pads"),
        node.attrs.get("auto_pad", "NOTSET"),
    )
    out = (x_shape[0], const(graph, node.inputs[1]).shape[0], *geo.out)  # type: ignore[union-attr]
    if any(size <= 0 for size in geo.out) or out != shape(graph, node.outputs[0]):
        return None
    return geo, out


def _as_2d(values: tuple[int, ...], fill: int) -> tuple[int, int]:
    return (fill, values[0]) if len(values) == 1 else (values[0], values[1])


@dataclass(frozen=True)
class Conv2d:
    """A convolution's geometry with one spatial dimension made two (H = 1)."""

    n: int
    c: int
    m: int
    groups: int
    h: int
    w: int
    oh: int
    ow: int
    kh: int
    kw: int
    sh: int
    sw: int
    ph: int
    pw: int
    ph_end: int
    pw_end: int
    dh: int
    dw: int

    @property
    def window(self) -> list[np.int32]:
        """H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW as kernel arguments."""
        values = (self.h, self.w, self.oh, self.ow, self.kh, self.kw, self.sh, self.sw)
        return [i32(v) for v in (*values, self.ph, self.pw, self.dh, self.dw)]


def conv2d(node: Node, graph: Graph) -> Conv2d:
    """The geometry of a supported Conv node."""
    geo, out = _conv_geometry(node, graph)  # type: ignore[misc]
    x_shape = shape(graph, node.inputs[0])
    return Conv2d(
        x_shape[0], x_shape[1], out[1], int(node.attrs.get("group", 1)),
        *_as_2d(x_shape[2:], 1), *_as_2d(geo.out, 1), *_as_2d(geo.kernel, 1),
        *_as_2d(geo.strides, 1), *_as_2d(geo.pad_begin, 0), *_as_2d(geo.pad_end, 0),
        *_as_2d(geo.dilations, 1),
    )  # fmt: skip


@register("Conv", supports=_supports_conv, kind="gemm")
def lower_conv(builder: Builder, group: Group) -> list[Step]:
    """Depthwise kernel, direct GEMM (1x1), shifted GEMM (stride 1) or im2col + GEMM."""
    node = group.head
    graph = builder.graph
    geo = conv2d(node, graph)
    w = np.asarray(const(graph, node.inputs[1]), np.float32)
    b = const(graph, node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    w, bias = folded(group, w, np.zeros(geo.m, np.float32) if b is None else np.asarray(b))
    inputs = [node.inputs[0]]
    epilogue = epilogue_args(builder, group, bias, inputs)
    step = Step(node.name, inputs, [group.output], [shape(graph, group.output)])
    n, c, m, g = geo.n, geo.c, geo.m, geo.groups
    if c // g == 1 and g > 1:
        kernel = builder.kernel("conv", "conv_depthwise", node)
        weights = builder.upload(w.reshape(m, geo.kh * geo.kw))
        args = [IN[0], weights, OUT[0], i32(c), i32(m), *geo.window, *epilogue]
        step.launches.append(Launch(kernel, (geo.oh, n * m), None, args))
        return [step]
    cg, mg, pixels = c // g, m // g, geo.oh * geo.ow
    depth = cg * geo.kh * geo.kw
    weights = w.reshape(g, mg, depth)
    padded = (geo.ph, geo.pw, geo.ph_end, geo.pw_end) != (0, 0, 0, 0)
    unit_stride = (geo.sh, geo.sw) == (1, 1)
    if unit_stride and (geo.kh, geo.kw) == (1, 1) and not padded:
        x, x_strides = IN[0], (c * pixels, cg * pixels, pixels, 1)
    elif unit_stride and geo.oh * (geo.w + geo.pw + geo.pw_end) >= PVEC_MIN_COLUMNS:
        step.launches += shifted_launches(builder, node, step, weights, geo, epilogue)
        return [step]
    else:
        step.tmp_shapes.append((n * g * depth * pixels,))
        im2col = builder.kernel("conv", "im2col", node)
        args = [IN[0], TMP[0], i32(cg), i32(g), *geo.window]
        local = (geo.oh, 1) if geo.oh <= MAX_ROW_GROUP else None
        step.launches.append(Launch(im2col, (geo.oh, n * g * depth), local, args))
        x, x_strides = TMP[0], (g * depth * pixels, depth * pixels, pixels, 1)
    y_strides = (m * pixels, mg * pixels, pixels, 1)
    step.launches.append(
        gemm_launches(builder, node, weights, pixels, n, x, x_strides, y_strides, epilogue)
    )
    return [step]


def shifted_launches(
    builder: Builder, node: Node, step: Step, weights: np.ndarray, geo: Conv2d, epilogue: list
) -> list[Launch]:
    """Pad the input planes into scratch, then ``gemm_pvec_shift`` over the padded width."""
    hp, wp = geo.h + geo.ph + geo.ph_end, geo.w + geo.pw + geo.pw_end
    plane, columns = hp * wp, geo.oh * wp
    step.tmp_shapes.append((geo.n * geo.c * plane + (geo.kw - 1) * geo.dw + 2 * PVEC[2],))
    pad = builder.kernel("conv", "pad_planes", node)
    pad_args = [IN[0], TMP[0], *(i32(v) for v in (geo.h, geo.w, hp, wp, geo.ph, geo.pw))]
    groups, rows, _ = weights.shape
    packed = builder.upload(pack(weights, PVEC[1]))
    tiles = -(-rows // PVEC[1])
    local = power_of_two_below(tiles)
    cg = geo.c // groups
    sizes = (rows, cg, geo.kh, geo.kw, geo.dh, geo.dw, wp, plane, geo.ow, columns)
    args = [
        *(i32(v) for v in (*sizes, geo.oh * geo.ow, groups)),
        packed, i32(packed.size // groups),
        TMP[0], i32(geo.c * plane), i32(cg * plane),
        OUT[0], i32(geo.m * geo.oh * geo.ow), i32(rows * geo.oh * geo.ow),
        *epilogue,
    ]  # fmt: skip
    global_size = (-(-columns // PVEC[2]), -(-tiles // local) * local, geo.n * groups)
    return [
        Launch(pad, (hp, geo.n * geo.c), (hp, 1) if hp <= MAX_ROW_GROUP else None, pad_args),
        Launch(gemm_kernel(builder, "gemm_pvec_shift", node), global_size, (1, local, 1), args),
    ]
