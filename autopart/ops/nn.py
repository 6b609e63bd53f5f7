"""Reference kernels for convolution, pooling, normalisation and matrix products.

Convolution is im2col into a single batched BLAS matmul; depthwise convolution and
pooling accumulate one vectorised slice per kernel tap. No kernel loops over pixels.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from autopart.ops.registry import register


@dataclass(frozen=True, slots=True)
class WindowGeometry:
    """Padding and output size of a sliding-window op over the spatial dims."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pad_begin: tuple[int, ...]
    pad_end: tuple[int, ...]
    out: tuple[int, ...]


def window_geometry(
    in_sizes: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    auto_pad: str = "NOTSET",
    ceil_mode: int = 0,
) -> WindowGeometry:
    """Resolve ONNX ``pads``/``auto_pad``/``ceil_mode`` into explicit padding and output size."""
    d = len(in_sizes)
    strides = tuple(strides or [1] * d)
    dilations = tuple(dilations or [1] * d)
    effective = [(k - 1) * dl + 1 for k, dl in zip(kernel, dilations, strict=True)]
    begin, end, out = [], [], []
    for i in range(d):
        size, stride, eff = in_sizes[i], strides[i], effective[i]
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-size // stride)
            total = max(0, (o - 1) * stride + eff - size)
            b = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            begin.append(b)
            end.append(total - b)
        elif auto_pad == "VALID":
            o = (size - eff) // stride + 1
            begin.append(0)
            end.append(0)
        else:
            b, e = (pads[i], pads[i + d]) if pads else (0, 0)
            span = size + b + e - eff
            o = (-(-span // stride) if ceil_mode else span // stride) + 1
            if ceil_mode and (o - 1) * stride >= size + b:
                o -= 1  # the last window must start inside the input or its begin padding
            begin.append(b)
            end.append(e)
        out.append(o)
    return WindowGeometry(tuple(kernel), strides, dilations, tuple(begin), tuple(end), tuple(out))


def _pad_spatial(x: np.ndarray, geo: WindowGeometry, fill: float) -> np.ndarray:
    """Pad the spatial dims so that every window of ``geo`` lies inside the array."""
    widths = [(0, 0), (0, 0)]
    for i, size in enumerate(x.shape[2:]):
        needed = (geo.out[i] - 1) * geo.strides[i] + (geo.kernel[i] - 1) * geo.dilations[i] + 1
        extra = max(0, needed - (size + geo.pad_begin[i] + geo.pad_end[i]))
        widths.append((geo.pad_begin[i], geo.pad_end[i] + extra))
    if all(b == 0 and e == 0 for b, e in widths):
        return x
    crop = tuple(
        slice(max(-b, 0), x.shape[i] - max(-e, 0)) for i, (b, e) in enumerate(widths)
    )  # negative pads crop
    widths = [(max(b, 0), max(e, 0)) for b, e in widths]
    return np.pad(x[crop], widths, mode="constant", constant_values=fill)


def _tap(xp: np.ndarray, geo: WindowGeometry, offsets: Sequence[int]) -> np.ndarray:
    """The strided slice of ``xp`` that kernel tap ``offsets`` reads for every output."""
    index = [slice(None), slice(None)]
    for i, k in enumerate(offsets):
        start = k * geo.dilations[i]
        index.append(slice(start, start + (geo.out[i] - 1) * geo.strides[i] + 1, geo.strides[i]))
    return xp[tuple(index)]


def _taps(geo: WindowGeometry) -> itertools.product:
    return itertools.product(*(range(k) for k in geo.kernel))


def _im2col(xp: np.ndarray, geo: WindowGeometry) -> np.ndarray:
    """View ``xp`` as (N, C, *kernel, *out) windows without copying."""
    spatial = xp.strides[2:]
    shape = (*xp.shape[:2], *geo.kernel, *geo.out)
    strides = (
        *xp.strides[:2],
        *(s * d for s, d in zip(spatial, geo.dilations, strict=True)),
        *(s * st for s, st in zip(spatial, geo.strides, strict=True)),
    )
    return as_strided(xp, shape, strides, writeable=False)


@register("Conv")
def conv(
    X: np.ndarray,
    W: np.ndarray,
    B: np.ndarray | None = None,
    auto_pad: str = "NOTSET",
    dilations: Sequence[int] | None = None,
    group: int = 1,
    kernel_shape: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
) -> np.ndarray:
    """ONNX Conv for any number of spatial dims, groups, dilations, strides and padding.

    float16 accumulates in float32, as onnx's reference does.
    """
    if X.dtype == np.float16:
        wide = [None if a is None else a.astype(np.float32) for a in (X, W, B)]
        out = conv(*wide, auto_pad, dilations, group, kernel_shape, pads, strides)
        return out.astype(np.float16)
    n, c = X.shape[:2]
    m = W.shape[0]
    geo = window_geometry(X.shape[2:], W.shape[2:], strides, dilations, pads, auto_pad)
    xp = _pad_spatial(X, geo, 0.0)
    c_per_group, m_per_group = c // group, m // group
    pixels = math.prod(geo.out)
    if c_per_group == 1 and group > 1:
        out = np.zeros((n, group, m_per_group, pixels), dtype=X.dtype)
        weights = W.reshape(group, m_per_group, -1)
        for t, offsets in enumerate(_taps(geo)):
            tap = _tap(xp, geo, offsets).reshape(n, group, 1, pixels)
            out += tap * weights[:, :, t, None]
    else:
        if all(k == 1 for k in geo.kernel) and all(s == 1 for s in geo.strides):
            cols = xp.reshape(n, group, c_per_group, pixels)
        else:
            cols = _im2col(xp, geo).reshape(n, group, c_per_group * math.prod(geo.kernel), pixels)
        out = np.matmul(W.reshape(group, m_per_group, -1), cols)
    out = out.reshape(n, m, *geo.out)
    if B is not None:
        out += B.reshape(1, m, *([1] * len(geo.out)))
    return out


def transpose_geometry(
    in_sizes: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    auto_pad: str = "NOTSET",
    output_padding: Sequence[int] | None = None,
    output_shape: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
) -> tuple[list[int], list[int], list[int]]:
    """A ConvTranspose's spatial sizes per dim: full canvas, output begin, output length.

    The taps scatter into the full canvas; the output is the window of it that starts at
    the begin offset (past the canvas's end the output is zero).
    """
    d = len(kernel)
    output_padding = list(output_padding or [0] * d)
    full = [
        strides[i] * (in_sizes[i] - 1) + output_padding[i] + (kernel[i] - 1) * dilations[i] + 1
        for i in range(d)
    ]
    if output_shape is not None:
        target = list(output_shape)[-d:]
        totals = [max(full[i] - target[i], 0) for i in range(d)]  # a larger shape pads the end
        upper = auto_pad == "SAME_UPPER"
        begin = [t // 2 if upper else t - t // 2 for t in totals]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = [in_sizes[i] * strides[i] for i in range(d)]
        totals = [full[i] - target[i] for i in range(d)]
        upper = auto_pad == "SAME_UPPER"
        begin = [t // 2 if upper else t - t // 2 for t in totals]
    else:
        pads = list(pads or [0] * (2 * d))
        begin = pads[:d]
        target = [full[i] - pads[i] - pads[i + d] for i in range(d)]
    return full, begin, target


@register("ConvTranspose")
def conv_transpose(
    X: np.ndarray,
    W: np.ndarray,
    B: np.ndarray | None = None,
    auto_pad: str = "NOTSET",
    dilations: Sequence[int] | None = None,
    group: int = 1,
    kernel_shape: Sequence[int] | None = None,
    output_padding: Sequence[int] | None = None,
    output_shape: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
) -> np.ndarray:
    """ONNX ConvTranspose: a matmul to columns, then one scatter-add per kernel tap."""
    n, c, *in_sizes = X.shape
    kernel = W.shape[2:]
    d = len(kernel)
    strides = list(strides or [1] * d)
    dilations = list(dilations or [1] * d)
    m_per_group = W.shape[1]
    full, begin, target = transpose_geometry(
        in_sizes, kernel, strides, dilations, auto_pad, output_padding, output_shape, pads
    )
    c_per_group = c // group
    weights = W.reshape(group, c_per_group, m_per_group * math.prod(kernel))
    cols = np.matmul(
        np.swapaxes(weights, 1, 2), X.reshape(n, group, c_per_group, math.prod(in_sizes))
    ).reshape(n, group * m_per_group, *kernel, *in_sizes)
    out = np.zeros((n, group * m_per_group, *full), dtype=X.dtype)
    for offsets in itertools.product(*(range(k) for k in kernel)):
        index = [slice(None), slice(None)]
        for i, k in enumerate(offsets):
            start = k * dilations[i]
            index.append(slice(start, start + (in_sizes[i] - 1) * strides[i] + 1, strides[i]))
        out[tuple(index)] += cols[(slice(None), slice(None), *offsets)]
    short = [max(b + t - f, 0) for b, t, f in zip(begin, target, full, strict=True)]
    if any(short):
        out = np.pad(out, [(0, 0), (0, 0), *((0, extra) for extra in short)])
    out = out[
        (slice(None), slice(None), *(slice(b, b + t) for b, t in zip(begin, target, strict=True)))
    ]
    if B is not None:
        out = out + B.reshape(1, -1, *([1] * d))
    return out.copy()


def _pool(
    X: np.ndarray,
    geo: WindowGeometry,
    fill: float,
    combine: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> np.ndarray:
    xp = _pad_spatial(X, geo, fill)
    out: np.ndarray | None = None
    for offsets in _taps(geo):
        tap = _tap(xp, geo, offsets)
        out = tap.copy() if out is None else combine(out, tap, out=out)  # type: ignore[call-arg]
    assert out is not None
    return out


def max_pool(
    X: np.ndarray,
    auto_pad: str = "NOTSET",
    ceil_mode: int = 0,
    dilations: Sequence[int] | None = None,
    kernel_shape: Sequence[int] = (),
    pads: Sequence[int] | None = None,
    storage_order: int = 0,
    strides: Sequence[int] | None = None,
) -> np.ndarray:
    """ONNX MaxPool's values (registered with its Indices output in ``ops.pooling``)."""
    geo = window_geometry(X.shape[2:], kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    lowest = -np.inf if np.issubdtype(X.dtype, np.floating) else np.iinfo(X.dtype).min
    return _pool(X, geo, lowest, np.maximum)


@register("AveragePool")
def average_pool(
    X: np.ndarray,
    auto_pad: str = "NOTSET",
    ceil_mode: int = 0,
    count_include_pad: int = 0,
    dilations: Sequence[int] | None = None,
    kernel_shape: Sequence[int] = (),
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
) -> np.ndarray:
    """ONNX AveragePool; padding counts in the divisor only with ``count_include_pad``."""
    geo = window_geometry(X.shape[2:], kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    total = _pool(X, geo, 0.0, np.add)
    ones = np.ones((1, 1, *X.shape[2:]), dtype=X.dtype)
    if count_include_pad:
        ones = np.pad(
            ones, [(0, 0), (0, 0), *zip(geo.pad_begin, geo.pad_end, strict=True)], constant_values=1
        )
        geo = WindowGeometry(
            geo.kernel,
            geo.strides,
            geo.dilations,
            (0,) * len(geo.out),
            (0,) * len(geo.out),
            geo.out,
        )
    counts = _pool(ones, geo, 0.0, np.add)
    return (total / counts).astype(X.dtype, copy=False)


@register("LpPool")
def lp_pool(
    X: np.ndarray,
    auto_pad: str = "NOTSET",
    ceil_mode: int = 0,
    dilations: Sequence[int] | None = None,
    kernel_shape: Sequence[int] = (),
    p: int = 2,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
) -> np.ndarray:
    """ONNX LpPool: the p-norm of each window (padding counts as zeros)."""
    geo = window_geometry(X.shape[2:], kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    total = _pool(np.power(np.abs(X), p), geo, 0.0, np.add)
    return np.power(total, 1.0 / p).astype(X.dtype, copy=False)


@register("GlobalAveragePool")
def global_average_pool(X: np.ndarray) -> np.ndarray:
    """ONNX GlobalAveragePool."""
    return X.mean(axis=tuple(range(2, X.ndim)), keepdims=True)


@register("GlobalMaxPool")
def global_max_pool(X: np.ndarray) -> np.ndarray:
    """ONNX GlobalMaxPool."""
    return X.max(axis=tuple(range(2, X.ndim)), keepdims=True)


@register("LRN")
def lrn(
    X: np.ndarray, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0
) -> np.ndarray:
    """ONNX LRN across channels, via a cumulative sum of squares."""
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    squares = np.square(X)
    widths = [(0, 0), (before + 1, after)] + [(0, 0)] * (X.ndim - 2)
    cumulative = np.cumsum(np.pad(squares, widths), axis=1)
    channels = X.shape[1]
    window = cumulative[:, size : size + channels] - cumulative[:, :channels]
    return (X / (bias + alpha / size * window) ** beta).astype(X.dtype, copy=False)


def _channel(param: np.ndarray, rank: int) -> np.ndarray:
    return param.reshape(1, -1, *([1] * (rank - 2)))


def legacy_test_mode(attrs: Mapping[str, Any]) -> str | None:
    """Before opset 7, ``is_test`` defaults to 0: training. Only ``is_test=1`` is inference."""
    if attrs.get("is_test", 0) != 1:
        return f"attribute is_test={attrs.get('is_test', 0)} (training) is not implemented"
    return None


@register("BatchNormalization", accepts={"spatial": (1,)}, check=legacy_test_mode)
@register("BatchNormalization", since=7, accepts={"training_mode": (0,), "spatial": (1,)})
def batch_normalization(
    X: np.ndarray,
    scale: np.ndarray,
    B: np.ndarray,
    input_mean: np.ndarray,
    input_var: np.ndarray,
    epsilon: float = 1e-5,
    momentum: float = 0.9,
    training_mode: int = 0,
    spatial: int = 1,
    is_test: int = 0,
    consumed_inputs: Sequence[int] | None = None,
) -> np.ndarray:
    """ONNX BatchNormalization in inference mode (running statistics)."""
    rank = X.ndim
    inv = (scale / np.sqrt(input_var + epsilon)).astype(X.dtype)
    shift = (B - input_mean * inv).astype(X.dtype)
    return X * _channel(inv, rank) + _channel(shift, rank)


@register("InstanceNormalization")
def instance_normalization(
    input: np.ndarray, scale: np.ndarray, B: np.ndarray, epsilon: float = 1e-5
) -> np.ndarray:
    """ONNX InstanceNormalization."""
    axes = tuple(range(2, input.ndim))
    mean = input.mean(axis=axes, keepdims=True)
    var = input.var(axis=axes, keepdims=True)
    normed = (input - mean) / np.sqrt(var + epsilon)
    return (normed * _channel(scale, input.ndim) + _channel(B, input.ndim)).astype(input.dtype)


@register("LayerNormalization", accepts={"stash_type": (1,)})
def layer_normalization(
    X: np.ndarray,
    Scale: np.ndarray,
    B: np.ndarray | None = None,
    axis: int = -1,
    epsilon: float = 1e-5,
    stash_type: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ONNX LayerNormalization over the dims from ``axis`` on; returns Y, Mean, InvStdDev.

    Statistics are computed in float32 (``stash_type`` 1), also for 16-bit inputs.
    """
    axes = tuple(range(axis % X.ndim, X.ndim))
    wide = X.astype(np.float32) if X.dtype.itemsize < 4 else X
    mean = wide.mean(axis=axes, keepdims=True)
    centred = wide - mean
    inv_std = 1 / np.sqrt(np.mean(np.square(centred), axis=axes, keepdims=True) + epsilon)
    out = centred * inv_std * Scale.astype(wide.dtype, copy=False)
    if B is not None:
        out = out + B.astype(wide.dtype, copy=False)
    return out.astype(X.dtype, copy=False), mean, inv_std


@register("Gemm")
def gemm(
    A: np.ndarray,
    B: np.ndarray,
    C: np.ndarray | None = None,
    alpha: float = 1.0,
    beta: float = 1.0,
    transA: int = 0,
    transB: int = 0,
    broadcast: int = 0,
) -> np.ndarray:
    """ONNX Gemm: ``alpha * A' @ B' + beta * C``."""
    out = (A.T if transA else A) @ (B.T if transB else B)
    if alpha != 1.0:
        out *= alpha
    if C is not None:
        out += C if beta == 1.0 else beta * C
    return out


@register("MatMul")
def matmul(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """ONNX MatMul with numpy's batching rules."""
    return np.matmul(A, B)


@register("Einsum")
def einsum(*Inputs: np.ndarray, equation: str) -> np.ndarray:
    """ONNX Einsum."""
    return np.einsum(equation, *Inputs, optimize=True)
