"""The packed-weight GEMM shared by Conv, Gemm and MatMul; Gemm and MatMul themselves.

Every product with constant weights is ``Y[m, p] = epilogue(W[m, k] X[k, p])`` per (batch
item, group): for a convolution ``m`` are output channels, ``p`` pixels and ``k`` = (c, kh,
kw); Gemm and MatMul with a constant right operand are the same with rows and columns
swapped (``m`` = output features, ``p`` = rows of A). The weights are packed on the host
once, with every per-output-channel Mul/Add the planner fused folded in; the epilogue adds
the bias, an optional same-shape residual and an optional Relu. Two register-blocked
kernels cover the shapes: ``gemm_pvec`` (vectors along many pixels) and ``gemm_mvec``
(vectors along output rows, for few columns and any strides). Products of two activations
use a plain batched kernel.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from autopart.ir.graph import Graph, Node
from autopart.targets.opencl.elementwise import broadcast_shape
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

PVEC = ("gemm_pvec", 4, 16)  # kernel, rows per work-item (packing tile), columns per work-item
MVEC = ("gemm_mvec", 16, 4)
MVEC24 = ("gemm_mvec", 24, 4)  # faster per row; used unless it pads many more rows
PVEC_MIN_COLUMNS = 256  # below this many pixels, vectors along output channels win
i32 = np.int32


PACK_BLOCK_BYTES = 16 << 20


def pack(weights: np.ndarray, tile: int) -> np.ndarray:
    """[G, M, K] weights -> [G, ceil(M / tile), K, tile], zero rows padding M.

    Packed a block of tiles at a time (about :data:`PACK_BLOCK_BYTES`) into the one array
    returned, from ``weights`` of any layout: vgg19's 411 MB FC6 took two whole copies
    besides, padded then transposed.
    """
    groups, rows, depth = weights.shape
    tiles = -(-rows // tile)
    out = np.zeros((groups, tiles, depth, tile), np.float32)
    step = max(1, PACK_BLOCK_BYTES // (groups * tile * depth * 4))
    for start in range(0, tiles, step):
        stop = min(tiles, start + step)
        low, high = start * tile, min(rows, stop * tile)
        block = np.zeros((groups, (stop - start) * tile, depth), np.float32)
        block[:, : high - low] = weights[:, low:high]
        out[:, start:stop] = block.reshape(groups, stop - start, tile, depth).swapaxes(2, 3)
    return out


def gemm_kernel(builder: Builder, name: str, node: Node, vectors: int = 2) -> Any:
    """A kernel of ``kernels/gemm.cl``; ``vectors`` sets gemm_mvec's rows (8 per vector)."""
    return builder.kernel("gemm", name, node, f"#define MV_VECS {vectors}\n")


def power_of_two_below(limit: int, cap: int = 16) -> int:
    """The largest power of two no larger than ``limit`` nor ``cap`` (1 at least)."""
    size = 1
    while size * 2 <= min(limit, cap):
        size *= 2
    return size


def epilogue_args(builder: Builder, group: Group, bias: np.ndarray, inputs: list[str]) -> list:
    """bias, R, has_res, relu arguments; the residual (if any) becomes a step input."""
    residual: Any = None
    if group.residual is not None:
        residual = IN[len(inputs)]
        inputs.append(group.residual)
    return [
        builder.upload(bias.astype(np.float32)),
        residual,
        i32(residual is not None),
        i32(group.relu),
    ]


def folded(group: Group, weights: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fold the group's per-output-channel scale and shift into [M, ...] weights and bias."""
    if group.scale is not None:
        weights = weights * group.scale.reshape(-1, *([1] * (weights.ndim - 1)))
        bias = bias * group.scale
    if group.shift is not None:
        bias = bias + group.shift
    return weights.astype(np.float32, copy=False), bias.astype(np.float32)


def gemm_launches(
    builder: Builder,
    node: Node,
    weights: np.ndarray,
    columns: int,
    batch: int,
    x: Any,
    x_strides: tuple[int, int, int, int],
    y_strides: tuple[int, int, int, int],
    epilogue: list,
    force_mvec: bool = False,
) -> Launch:
    """The GEMM launch for [G, M, K] weights over ``columns`` columns and ``batch`` items.

    ``x_strides`` = (batch, group, k, p) and ``y_strides`` = (batch, group, m, p) in elements.
    """
    groups, rows, depth = weights.shape
    contiguous = x_strides[3] == 1 and y_strides[3] == 1 and y_strides[2] == columns
    use_pvec = contiguous and columns >= PVEC_MIN_COLUMNS and not force_mvec
    if use_pvec:
        name, tile, width = PVEC
    else:
        wide = -(-rows // 24) * 24 <= 1.08 * (-(-rows // 16) * 16)
        name, tile, width = MVEC24 if wide else MVEC
    packed = builder.upload(pack(weights, tile))
    kernel = gemm_kernel(builder, name, node, 3 if tile == 24 else 2)
    head = [
        i32(rows),
        i32(depth),
        i32(columns),
        i32(groups),
        packed,
        i32(packed.size // groups),
        x,
        i32(x_strides[0]),
        i32(x_strides[1]),
    ]
    tiles = -(-rows // tile)
    if use_pvec:
        args = [*head, i32(x_strides[2]), OUT[0], i32(y_strides[0]), i32(y_strides[1])]
        local = power_of_two_below(tiles)
        global_size = (-(-columns // width), -(-tiles // local) * local, batch * groups)
        return Launch(kernel, global_size, (1, local, 1), args + epilogue)
    args = [
        *head,
        i32(x_strides[2]),
        i32(x_strides[3]),
        OUT[0],
        i32(y_strides[0]),
        i32(y_strides[1]),
        i32(y_strides[2]),
        i32(y_strides[3]),
    ]
    global_size = (-(-columns // width), tiles, batch * groups)
    return Launch(kernel, global_size, (1, 1, 1), args + epilogue)


# -- Gemm and MatMul ------------------------------------------------------------------------------
def _gemm_c(node: Node, graph: Graph) -> str:
    return node.inputs[2] if len(node.inputs) > 2 else ""


def packed_gemm(node: Node, graph: Graph) -> bool:
    """Whether a Gemm/MatMul takes the packed-weight path (constant 2-D right operand)."""
    right = const(graph, node.inputs[1])
    if right is None or right.dtype != F32 or right.ndim != 2:
        return False
    if node.op_type == "MatMul":
        return True
    c = _gemm_c(node, graph)
    if not c or const(graph, c) is not None:
        return True
    return float(node.attrs.get("beta", 1.0)) == 1.0 and shape(graph, c) == shape(
        graph, node.outputs[0]
    )


def _supports_gemm(node: Node, graph: Graph) -> bool:
    a, b, c = node.inputs[0], node.inputs[1], _gemm_c(node, graph)
    if not single_f32_output(node, graph) or not is_f32(graph, a) or not is_f32(graph, b):
        return False
    if len(shape(graph, a)) != 2 or len(shape(graph, b)) != 2:
        return False
    a_shape, b_shape = shape(graph, a), shape(graph, b)
    rows = a_shape[1] if node.attrs.get("transA", 0) else a_shape[0]
    depth = a_shape[0] if node.attrs.get("transA", 0) else a_shape[1]
    depth_b, cols = b_shape[::-1] if node.attrs.get("transB", 0) else b_shape
    if depth != depth_b or shape(graph, node.outputs[0]) != (rows, cols):
        return False
    return not c or (
        is_f32(graph, c) and broadcast_shape([shape(graph, c), (rows, cols)]) == (rows, cols)
    )


@register("Gemm", supports=_supports_gemm, kind="gemm")
def lower_gemm(builder: Builder, group: Group) -> list[Step]:
    """``alpha * A' B' + beta * C``: packed path for constant B, batched kernel otherwise."""
    node = group.head
    graph = builder.graph
    if not group.meta.get("packed", False):
        return _general(builder, node)
    alpha = float(node.attrs.get("alpha", 1.0))
    beta = float(node.attrs.get("beta", 1.0))
    b = np.asarray(const(graph, node.inputs[1]), np.float32)
    weights = b if node.attrs.get("transB", 0) else b.T  # [N, K]: views, not copies
    if alpha != 1.0:
        weights = weights * np.float32(alpha)
    a_shape = shape(graph, node.inputs[0])
    trans_a = bool(node.attrs.get("transA", 0))
    rows, depth = (a_shape[1], a_shape[0]) if trans_a else a_shape
    cols = weights.shape[0]
    bias = np.zeros(cols, np.float32)
    c = _gemm_c(node, graph)
    inputs = [node.inputs[0]]
    residual: Any = None
    c_data = const(graph, c) if c else None
    if c_data is not None:
        full = np.broadcast_to(np.float32(beta) * c_data.astype(np.float32), (rows, cols))
        if np.all(full == full[:1]):
            bias = full[0].copy()
        else:
            residual = builder.upload(np.ascontiguousarray(full))
    elif c:
        residual = IN[len(inputs)]
        inputs.append(c)
    weights, bias = folded(group, weights, bias)
    if residual is not None and group.residual is not None:
        raise AssertionError("a Gemm with a matrix C takes no fused residual")
    epilogue = epilogue_args(builder, group, bias, inputs)
    if residual is not None:
        epilogue[1:3] = [residual, i32(1)]
    x_strides = (0, 0, rows, 1) if trans_a else (0, 0, 1, depth)
    launch = gemm_launches(
        builder, node, weights[None], rows, 1, IN[0], x_strides, (0, 0, 1, cols), epilogue
    )
    return [Step(node.name, inputs, [group.output], [(rows, cols)], launches=[launch])]


def _supports_matmul(node: Node, graph: Graph) -> bool:
    a, b = node.inputs[0], node.inputs[1]
    if not single_f32_output(node, graph) or not is_f32(graph, a) or not is_f32(graph, b):
        return False
    a_shape, b_shape = shape(graph, a), shape(graph, b)
    if not a_shape or not b_shape:
        return False
    if matmul_shape(a_shape, b_shape) != shape(graph, node.outputs[0]):
        return False
    return max(len(a_shape), len(b_shape)) <= 5 or packed_gemm(node, graph)


def matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """The shape of numpy's matmul of ``a`` and ``b``; None when they do not multiply."""
    a2 = a if len(a) > 1 else (1, *a)
    b2 = b if len(b) > 1 else (*b, 1)
    batch = broadcast_shape([a2[:-2], b2[:-2]])
    if batch is None or a2[-1] != b2[-2]:
        return None
    rows = (a2[-2],) if len(a) > 1 else ()
    cols = (b2[-1],) if len(b) > 1 else ()
    return (*batch, *rows, *cols)


@register("MatMul", supports=_supports_matmul, kind="gemm")
def lower_matmul(builder: Builder, group: Group) -> list[Step]:
    """Numpy matmul: packed path for a constant 2-D B, batched kernel otherwise."""
    node = group.head
    graph = builder.graph
    if not group.meta.get("packed", False):
        return _general(builder, node)
    b = np.asarray(const(graph, node.inputs[1]), np.float32)
    a_shape = shape(graph, node.inputs[0])
    depth, cols = b.shape
    rows = math.prod(a_shape[:-1])
    inputs = [node.inputs[0]]
    weights, bias = folded(group, b.T, np.zeros(cols, np.float32))
    epilogue = epilogue_args(builder, group, bias, inputs)
    launch = gemm_launches(
        builder, node, weights[None], rows, 1, IN[0], (0, 0, 1, depth), (0, 0, 1, cols), epilogue
    )
    out = shape(graph, group.output)
    return [Step(node.name, inputs, [group.output], [out], launches=[launch])]


def _batch_strides(full: tuple[int, ...], batch: tuple[int, ...], matrix: int) -> list[int]:
    """Strides of an operand's (broadcast) batch dims over the 3 padded output batch dims."""
    padded = (1,) * (len(batch) - len(full)) + full
    strides, step = [0] * len(batch), matrix
    for axis in range(len(batch) - 1, -1, -1):
        strides[axis] = 0 if padded[axis] == 1 else step
        step *= padded[axis]
    return [0] * (3 - len(strides)) + strides


def _general(builder: Builder, node: Node) -> list[Step]:
    """Batched matmul of two activations (MatMul, or Gemm with a non-constant B)."""
    graph = builder.graph
    a_shape, b_shape = shape(graph, node.inputs[0]), shape(graph, node.inputs[1])
    out = shape(graph, node.outputs[0])
    alpha, beta = 1.0, 1.0
    inputs = [node.inputs[0], node.inputs[1]]
    if node.op_type == "Gemm":
        alpha, beta = float(node.attrs.get("alpha", 1.0)), float(node.attrs.get("beta", 1.0))
        ta, tb = node.attrs.get("transA", 0), node.attrs.get("transB", 0)
        rows, depth = (a_shape[1], a_shape[0]) if ta else a_shape
        cols = b_shape[0] if tb else b_shape[1]
        a_strides = (1, a_shape[1]) if ta else (a_shape[1], 1)  # (m, k)
        b_strides = (1, b_shape[1]) if tb else (b_shape[1], 1)  # (k, n)
        batch: tuple[int, ...] = ()
        a_batch, b_batch = [0, 0, 0], [0, 0, 0]
    else:
        a2 = a_shape if len(a_shape) > 1 else (1, *a_shape)
        b2 = b_shape if len(b_shape) > 1 else (*b_shape, 1)
        rows, depth, cols = a2[-2], a2[-1], b2[-1]
        batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
        while len(batch) > 3:  # leading dims of size 1 cannot be broadcast: fold them
            batch = (batch[0] * batch[1], *batch[2:])
        a_strides, b_strides = (depth, 1), (cols, 1)
        a_batch = _batch_strides(a2[:-2], batch, rows * depth)
        b_batch = _batch_strides(b2[:-2], batch, depth * cols)
    padded = (1,) * (3 - len(batch)) + batch
    c_args: list[Any] = [None, i32(0), i32(0), i32(0), i32(0), i32(0), np.float32(beta), i32(0)]
    c = _gemm_c(node, graph) if node.op_type == "Gemm" else ""
    if c:
        c_shape = (1,) * (2 - len(shape(graph, c))) + shape(graph, c)
        c_strides = broadcast_strides_2d(c_shape)
        c_data = const(graph, c)
        buffer: Any = builder.upload(c_data.astype(np.float32)) if c_data is not None else IN[2]
        if c_data is None:
            inputs.append(c)
        c_args = [
            buffer,
            i32(c_strides[0]),
            i32(c_strides[1]),
            i32(0),
            i32(0),
            i32(0),
            np.float32(beta),
            i32(1),
        ]
    kernel = gemm_kernel(builder, "matmul_general", node)
    args = [
        i32(rows),
        i32(cols),
        i32(depth),
        IN[0],
        i32(a_strides[0]),
        i32(a_strides[1]),
        *map(i32, a_batch),
        IN[1],
        i32(b_strides[0]),
        i32(b_strides[1]),
        *map(i32, b_batch),
        OUT[0],
        i32(padded[1]),
        i32(padded[2]),
        np.float32(alpha),
        *c_args,
    ]
    launch = Launch(kernel, (-(-cols // 8), -(-rows // 4), math.prod(padded)), None, args)
    return [Step(node.name, inputs, [node.outputs[0]], [out], launches=[launch])]


def broadcast_strides_2d(c_shape: tuple[int, ...]) -> tuple[int, int]:
    """(m, n) element strides of a 2-D C broadcast onto the output."""
    m, n = c_shape[-2], c_shape[-1]
    return (0 if m == 1 else n, 0 if n == 1 else 1)
