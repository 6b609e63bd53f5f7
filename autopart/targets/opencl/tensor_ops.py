"""Pooling, LRN, normalisations, reductions, Concat/Split, Transpose/Expand, and views.

Reshape, Flatten, Squeeze, Unsqueeze, Identity and (inference) Dropout never copy: their
output is a ``pyopencl.array.Array`` view of the input's buffer with the new shape.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from autopart.ir.graph import Graph, Node
from autopart.ops.nn import window_geometry
from autopart.targets.opencl.elementwise import MAX_ELEMENTS, Operand, broadcast_shape, fused_step
from autopart.targets.opencl.lowering import (
    Builder,
    Group,
    const,
    int_const,
    is_f32,
    register,
    shape,
    single_f32_output,
)
from autopart.targets.opencl.subgraph import IN, OUT, Launch, Step

i32 = np.int32
AUTO_PADS = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")


# -- pooling ------------------------------------------------------------------------------------
def _pool_geometry(node: Node, graph: Graph) -> Any:
    x_shape = shape(graph, node.inputs[0])
    return window_geometry(
        x_shape[2:],
        node.attrs["kernel_shape"],
        node.attrs.get("strides"),
        node.attrs.get("dilations"),
        node.attrs.get("pads"),
        node.attrs.get("auto_pad", "NOTSET"),
        int(node.attrs.get("ceil_mode", 0)),
    )


def _supports_pool(node: Node, graph: Graph) -> bool:
    """MaxPool (no Indices output) / AveragePool over 1 or 2 spatial dims."""
    if not single_f32_output(node, graph) or not is_f32(graph, node.inputs[0]):
        return False
    x_shape = shape(graph, node.inputs[0])
    kernel = node.attrs.get("kernel_shape")
    if len(x_shape) not in (3, 4) or kernel is None or len(kernel) != len(x_shape) - 2:
        return False
    if node.attrs.get("auto_pad", "NOTSET") not in AUTO_PADS:
        return False
    if node.op_type == "MaxPool" and node.attrs.get("storage_order", 0) not in (0, 1):
        return False
    if any(p < 0 for p in node.attrs.get("pads", [])):
        return False
    geo = _pool_geometry(node, graph)
    return all(o > 0 for o in geo.out) and (*x_shape[:2], *geo.out) == shape(graph, node.outputs[0])


def _pair(values: tuple[int, ...], fill: int) -> tuple[int, int]:
    return (fill, values[0]) if len(values) == 1 else (values[0], values[1])


@register("MaxPool", "AveragePool", supports=_supports_pool)
def lower_pool(builder: Builder, group: Group) -> list[Step]:
    """Direct windowed max / average, one work-item per output."""
    node = group.head
    x_shape = builder.shape(node.inputs[0])
    geo = _pool_geometry(node, builder.graph)
    average = 2 if node.attrs.get("count_include_pad", 0) else 1
    mode = 0 if node.op_type == "MaxPool" else average
    h, w = _pair(x_shape[2:], 1)
    oh, ow = _pair(geo.out, 1)
    sizes = (
        *_pair(geo.kernel, 1),
        *_pair(geo.strides, 1),
        *_pair(geo.pad_begin, 0),
        *_pair(geo.pad_end, 0),
        *_pair(geo.dilations, 1),
    )
    kernel = builder.kernel("pool", "pool2d", node)
    args = [IN[0], OUT[0], i32(h), i32(w), i32(oh), i32(ow), *map(i32, sizes), i32(mode)]
    launch = Launch(kernel, (oh, x_shape[0] * x_shape[1]), None, args)
    out = builder.shape(node.outputs[0])
    return [Step(node.name, [node.inputs[0]], [node.outputs[0]], [out], launches=[launch])]


def _supports_global_pool(node: Node, graph: Graph) -> bool:
    if not single_f32_output(node, graph) or not is_f32(graph, node.inputs[0]):
        return False
    x_shape = shape(graph, node.inputs[0])
    return len(x_shape) >= 3 and shape(graph, node.outputs[0]) == (
        *x_shape[:2],
        *([1] * (len(x_shape) - 2)),
    )


@register("GlobalAveragePool", "GlobalMaxPool", supports=_supports_global_pool)
def lower_global_pool(builder: Builder, group: Group) -> list[Step]:
    """One work-item per (n, c) channel."""
    node = group.head
    x_shape = builder.shape(node.inputs[0])
    kernel = builder.kernel("pool", "global_pool", node)
    mode = 0 if node.op_type == "GlobalMaxPool" else 1
    args = [IN[0], OUT[0], i32(math.prod(x_shape[2:])), i32(mode)]
    launch = Launch(kernel, (x_shape[0] * x_shape[1],), None, args)
    out = builder.shape(node.outputs[0])
    return [Step(node.name, [node.inputs[0]], [node.outputs[0]], [out], launches=[launch])]


def _supports_lrn(node: Node, graph: Graph) -> bool:
    return (
        single_f32_output(node, graph)
        and is_f32(graph, node.inputs[0])
        and len(shape(graph, node.inputs[0])) >= 3
        and int(node.attrs.get("size", 0)) >= 1
    )


@register("LRN", supports=_supports_lrn)
def lower_lrn(builder: Builder, group: Group) -> list[Step]:
    """Cross-channel LRN, one work-item per element."""
    node = group.head
    x_shape = builder.shape(node.inputs[0])
    n, c, hw = x_shape[0], x_shape[1], math.prod(x_shape[2:])
    size = int(node.attrs["size"])
    kernel = builder.kernel("pool", "lrn", node)
    args = [
        IN[0],
        OUT[0],
        i32(c),
        i32(hw),
        i32(size),
        np.float32(float(node.attrs.get("alpha", 1e-4)) / size),
        np.float32(node.attrs.get("beta", 0.75)),
        np.float32(node.attrs.get("bias", 1.0)),
    ]
    launch = Launch(kernel, (-(-hw // 8), n), None, args)
    return [Step(node.name, [node.inputs[0]], [node.outputs[0]], [x_shape], launches=[launch])]


# -- normalisations -------------------------------------------------------------------------------
def _supports_softmax(node: Node, graph: Graph) -> bool:
    if not single_f32_output(node, graph) or not is_f32(graph, node.inputs[0]):
        return False
    rank = len(shape(graph, node.inputs[0]))
    default = -1 if graph.opset_of(node) >= 13 else 1
    axis = int(node.attrs.get("axis", default))
    return rank >= 1 and -rank <= axis < rank


@register("Softmax", supports=_supports_softmax)
def lower_softmax(builder: Builder, group: Group) -> list[Step]:
    """Opset < 13: rows of the 2-D flattening at ``axis``; >= 13: along ``axis``."""
    node = group.head
    x_shape = builder.shape(node.inputs[0])
    legacy = builder.graph.opset_of(node) < 13
    axis = int(node.attrs.get("axis", 1 if legacy else -1)) % len(x_shape)
    outer = math.prod(x_shape[:axis])
    if legacy:
        length, inner = math.prod(x_shape[axis:]), 1
    else:
        length, inner = x_shape[axis], math.prod(x_shape[axis + 1 :])
    kernel = builder.kernel("norm", "softmax", node)
    launch = Launch(kernel, (inner, outer), None, [IN[0], OUT[0], i32(length), i32(inner)])
    return [Step(node.name, [node.inputs[0]], [node.outputs[0]], [x_shape], launches=[launch])]


def _supports_layer_norm(node: Node, graph: Graph) -> bool:
    present = [name for name in node.outputs if name]
    if present != [node.outputs[0]] or not is_f32(graph, node.outputs[0]):
        return False
    x, scale = node.inputs[0], node.inputs[1]
    bias = node.inputs[2] if len(node.inputs) > 2 else ""
    if not is_f32(graph, x) or not is_f32(graph, scale) or (bias and not is_f32(graph, bias)):
        return False
    x_shape = shape(graph, x)
    axis = int(node.attrs.get("axis", -1))
    if not -len(x_shape) <= axis < len(x_shape):
        return False
    normalised = x_shape[axis % len(x_shape) :]
    params = [scale] + ([bias] if bias else [])
    return all(
        (1,) * (len(normalised) - len(shape(graph, p))) + shape(graph, p) == normalised
        for p in params
    )


@register("LayerNormalization", supports=_supports_layer_norm)
def lower_layer_norm(builder: Builder, group: Group) -> list[Step]:
    """One work-item per normalised row (Mean and InvStdDev outputs are not produced)."""
    node = group.head
    x_shape = builder.shape(node.inputs[0])
    axis = int(node.attrs.get("axis", -1)) % len(x_shape)
    rows, length = math.prod(x_shape[:axis]), math.prod(x_shape[axis:])
    bias = node.inputs[2] if len(node.inputs) > 2 else ""
    inputs = [node.inputs[0], node.inputs[1]] + ([bias] if bias else [])
    kernel = builder.kernel("norm", "layer_norm", node)
    args = [
        IN[0],
        OUT[0],
        IN[1],
        IN[2] if bias else None,
        i32(length),
        np.float32(node.attrs.get("epsilon", 1e-5)),
        i32(bool(bias)),
    ]
    launch = Launch(kernel, (rows,), None, args)
    return [Step(node.name, inputs, [node.outputs[0]], [x_shape], launches=[launch])]


# -- reductions -------------------------------------------------------------------------------
REDUCE_MODES = {"ReduceSum": 0, "ReduceMean": 1, "ReduceMax": 2, "ReduceMin": 3}


def _reduce_axes(node: Node, graph: Graph) -> list[int] | None:
    """The reduced axes (sorted, non-negative), or None when they are not constant."""
    rank = len(shape(graph, node.inputs[0]))
    if len(node.inputs) > 1 and node.inputs[1]:
        axes = int_const(graph, node.inputs[1])
        if axes is None:
            return None
    else:
        axes = list(node.attrs.get("axes", []))
    if not axes:
        return None if node.attrs.get("noop_with_empty_axes", 0) else list(range(rank))
    return sorted({axis % rank for axis in axes})


def _supports_reduce(node: Node, graph: Graph) -> bool:
    """Reductions over one run of consecutive axes of a float32 tensor."""
    if not single_f32_output(node, graph) or not is_f32(graph, node.inputs[0]):
        return False
    axes = _reduce_axes(node, graph)
    if not axes or axes != list(range(axes[0], axes[-1] + 1)):
        return False
    x_shape = shape(graph, node.inputs[0])
    keep = bool(node.attrs.get("keepdims", 1))
    out = tuple(1 if a in axes else d for a, d in enumerate(x_shape) if keep or a not in axes)
    return out == shape(graph, node.outputs[0])


@register(*REDUCE_MODES, supports=_supports_reduce)
def lower_reduce(builder: Builder, group: Group) -> list[Step]:
    """One work-item per output element, reducing a strided run."""
    node = group.head
    x_shape = builder.shape(node.inputs[0])
    axes = _reduce_axes(node, builder.graph)
    assert axes
    outer = math.prod(x_shape[: axes[0]])
    length = math.prod(x_shape[axes[0] : axes[-1] + 1])
    inner = math.prod(x_shape[axes[-1] + 1 :])
    kernel = builder.kernel("norm", "reduce_rows", node)
    args = [IN[0], OUT[0], i32(length), i32(inner), i32(REDUCE_MODES[node.op_type])]
    launch = Launch(kernel, (inner, outer), None, args)
    out = builder.shape(node.outputs[0])
    return [Step(node.name, [node.inputs[0]], [node.outputs[0]], [out], launches=[launch])]


# -- Concat ---------------------------------------------------------------------------------------
def _supports_concat(node: Node, graph: Graph) -> bool:
    if not single_f32_output(node, graph) or not node.present_inputs:
        return False
    if not all(is_f32(graph, name) for name in node.present_inputs):
        return False
    out = shape(graph, node.outputs[0])
    axis = int(node.attrs.get("axis", 0 if graph.opset_of(node) < 4 else -999))
    if not -len(out) <= axis < len(out):
        return False
    return len(out) >= 1


@register("Concat", supports=_supports_concat)
def lower_concat(builder: Builder, group: Group) -> list[Step]:
    """One row copy per input into its slab of the output."""
    node = group.head
    out = builder.shape(node.outputs[0])
    axis = int(node.attrs.get("axis", 0)) % len(out)
    outer, inner = math.prod(out[:axis]), math.prod(out[axis + 1 :])
    step = Step(node.name, list(node.present_inputs), [node.outputs[0]], [out])
    offset = 0
    for index, name in enumerate(node.present_inputs):
        chunk = builder.shape(name)[axis] * inner
        if chunk and outer:
            kernel = builder.kernel("data", "copy_rows", node)
            args = [IN[index], OUT[0], i32(chunk), i32(out[axis] * inner), i32(offset)]
            step.launches.append(Launch(kernel, (chunk, outer), None, args))
        offset += chunk
    return [step]


def _supports_split(node: Node, graph: Graph) -> bool:
    """Split of a float32 tensor into float32 outputs whose shapes are known."""
    outputs = node.outputs
    if not outputs or not all(outputs) or not is_f32(graph, node.inputs[0]):
        return False
    if not all(is_f32(graph, name) for name in outputs):
        return False
    if len(node.inputs) > 1 and node.inputs[1] and int_const(graph, node.inputs[1]) is None:
        return False
    x_shape = shape(graph, node.inputs[0])
    axis = int(node.attrs.get("axis", 0))
    if not -len(x_shape) <= axis < len(x_shape):
        return False
    axis %= len(x_shape)
    sizes = [shape(graph, name)[axis] for name in outputs]
    for name in outputs:
        out = shape(graph, name)
        if len(out) != len(x_shape) or any(
            d != x for a, (d, x) in enumerate(zip(out, x_shape, strict=True)) if a != axis
        ):
            return False
    return sum(sizes) == x_shape[axis]


@register("Split", supports=_supports_split)
def lower_split(builder: Builder, group: Group) -> list[Step]:
    """One row copy per output from its slab of the input (the output shapes give sizes)."""
    node = group.head
    x_shape = builder.shape(node.inputs[0])
    axis = int(node.attrs.get("axis", 0)) % len(x_shape)
    outer, inner = math.prod(x_shape[:axis]), math.prod(x_shape[axis + 1 :])
    shapes = [builder.shape(name) for name in node.outputs]
    step = Step(node.name, [node.inputs[0]], list(node.outputs), shapes)
    offset = 0
    for index, out in enumerate(shapes):
        chunk = out[axis] * inner
        kernel = builder.kernel("data", "slice_rows", node)
        args = [IN[0], OUT[index], i32(chunk), i32(x_shape[axis] * inner), i32(offset)]
        step.launches.append(Launch(kernel, (chunk, outer), None, args))
        offset += chunk
    return [step]


# -- copies: Transpose and Expand, through the elementwise generator ---------------------------
def _supports_transpose(node: Node, graph: Graph) -> bool:
    if not single_f32_output(node, graph) or not is_f32(graph, node.inputs[0]):
        return False
    if math.prod(shape(graph, node.inputs[0])) > MAX_ELEMENTS:
        return False
    rank = len(shape(graph, node.inputs[0]))
    perm = node.attrs.get("perm", list(range(rank))[::-1])
    return sorted(perm) == list(range(rank))


@register("Transpose", supports=_supports_transpose)
def lower_transpose(builder: Builder, group: Group) -> list[Step]:
    """A strided copy: the input's strides permuted onto the output's dims."""
    node = group.head
    in_shape = builder.shape(node.inputs[0])
    rank = len(in_shape)
    perm = node.attrs.get("perm", list(range(rank))[::-1])
    contiguous = [math.prod(in_shape[axis + 1 :]) for axis in range(rank)]
    out_shape = tuple(in_shape[axis] for axis in perm)
    strides = tuple(contiguous[axis] if in_shape[axis] != 1 else 0 for axis in perm)
    source = Operand(in_shape, name=node.inputs[0], strides=strides)
    return [fused_step(builder, node, [source], ["v0"], node.outputs[0], out_shape)]


def _supports_expand(node: Node, graph: Graph) -> bool:
    if not single_f32_output(node, graph) or not is_f32(graph, node.inputs[0]):
        return False
    target = int_const(graph, node.inputs[1]) if len(node.inputs) > 1 else None
    if target is None or math.prod(shape(graph, node.outputs[0])) > MAX_ELEMENTS:
        return False
    out = broadcast_shape([shape(graph, node.inputs[0]), tuple(target)])
    return out == shape(graph, node.outputs[0])


@register("Expand", supports=_supports_expand)
def lower_expand(builder: Builder, group: Group) -> list[Step]:
    """A broadcasting copy."""
    node = group.head
    source = Operand(builder.shape(node.inputs[0]), name=node.inputs[0])
    out = node.outputs[0]
    return [fused_step(builder, node, [source], ["v0"], out, builder.shape(out))]


# -- views ----------------------------------------------------------------------------------------
VIEW_OPS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout")


def _supports_view(node: Node, graph: Graph) -> bool:
    """Shape-only ops on float32 whose shape operands are constants."""
    if not single_f32_output(node, graph) or not is_f32(graph, node.inputs[0]):
        return False
    x_shape, out = shape(graph, node.inputs[0]), shape(graph, node.outputs[0])
    if math.prod(x_shape) != math.prod(out):
        return False
    extra = [name for name in node.inputs[1:] if name]
    if node.op_type == "Dropout":
        if len(node.inputs) > 2 and node.inputs[2]:
            training = const(graph, node.inputs[2])
            return training is not None and not bool(np.asarray(training).ravel()[0])
        return not node.attrs.get("training_mode", 0)
    return all(int_const(graph, name) is not None for name in extra)


def _view(out_shape: tuple[int, ...]) -> Any:
    def view(inputs: list[Any]) -> list[Any]:
        return [inputs[0].reshape(out_shape)]

    return view


@register(*VIEW_OPS, supports=_supports_view)
def lower_view(builder: Builder, group: Group) -> list[Step]:
    """A reshape of the input's buffer: no kernel, no copy."""
    node = group.head
    out = builder.shape(node.outputs[0])
    return [Step(node.name, [node.inputs[0]], [node.outputs[0]], view=_view(out))]
