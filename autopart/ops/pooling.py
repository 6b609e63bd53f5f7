"""MaxPool's optional Indices output, and MaxUnpool which consumes it."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from autopart.ops import nn
from autopart.ops.nn import WindowGeometry, _pad_spatial, _tap, _taps, window_geometry
from autopart.ops.registry import register


def _positions(geo: WindowGeometry, offsets: Sequence[int]) -> list[np.ndarray]:
    """Per spatial dim, the input coordinate tap ``offsets`` reads for every output."""
    return [
        np.arange(geo.out[i]) * geo.strides[i] - geo.pad_begin[i] + k * geo.dilations[i]
        for i, k in enumerate(offsets)
    ]


def max_pool_with_indices(
    X: np.ndarray, geo: WindowGeometry, storage_order: int
) -> tuple[np.ndarray, np.ndarray]:
    """Max of each window and the flat index (row- or column-major) of where it was."""
    n, c, *sizes = X.shape
    lowest = -np.inf if np.issubdtype(X.dtype, np.floating) else np.iinfo(X.dtype).min
    xp = _pad_spatial(X, geo, lowest)
    best = np.full((n, c, *geo.out), lowest, dtype=X.dtype)
    where = np.zeros((n, c, *geo.out), dtype=np.int64)
    order = list(range(len(sizes)))[::-1] if storage_order else list(range(len(sizes)))
    for offsets in _taps(geo):
        coords = np.meshgrid(*_positions(geo, offsets), indexing="ij")
        inside = np.ones(geo.out, bool)
        for dim, coord in enumerate(coords):
            inside &= (coord >= 0) & (coord < sizes[dim])
        flat = np.zeros(geo.out, dtype=np.int64)
        for dim in order:
            flat = flat * sizes[dim] + coords[dim]
        values = _tap(xp, geo, offsets)
        better = (values > best) & inside
        best = np.where(better, values, best)
        where = np.where(better, flat, where)
    plane = math.prod(sizes)
    base = (np.arange(n)[:, None] * c + np.arange(c)[None, :]) * plane
    return best, where + base.reshape(n, c, *([1] * len(sizes)))


@register("MaxUnpool")
def max_unpool(
    X: np.ndarray,
    I: np.ndarray,  # noqa: E741 - the ONNX input name
    output_shape: np.ndarray | None = None,
    kernel_shape: Sequence[int] = (),
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
) -> np.ndarray:
    """ONNX MaxUnpool: zeros with each value of ``X`` put back at its flat index ``I``.

    Indices address the shape the pooling came from; a larger ``output_shape`` pads its end.
    """
    d = len(kernel_shape)
    strides = list(strides or [1] * d)
    pads = list(pads or [0] * (2 * d))
    spatial = [
        (X.shape[2 + i] - 1) * strides[i] + kernel_shape[i] - pads[i] - pads[i + d]
        for i in range(d)
    ]
    inferred = [*X.shape[:2], *spatial]
    unpooled = np.zeros(math.prod(inferred), dtype=X.dtype)
    unpooled[I.ravel()] = X.ravel()
    if output_shape is None:
        return unpooled.reshape(inferred)
    out = np.zeros([int(v) for v in np.asarray(output_shape).ravel()], dtype=X.dtype)
    out[tuple(slice(0, size) for size in inferred)] = unpooled.reshape(inferred)
    return out


@register("MaxPool", accepts={"storage_order": (0, 1)})
def max_pool(
    X: np.ndarray,
    auto_pad: str = "NOTSET",
    ceil_mode: int = 0,
    dilations: Sequence[int] | None = None,
    kernel_shape: Sequence[int] = (),
    pads: Sequence[int] | None = None,
    storage_order: int = 0,
    strides: Sequence[int] | None = None,
    _num_outputs: int = 1,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """ONNX MaxPool; the Indices output is computed only when the node has one."""
    if _num_outputs < 2:
        return nn.max_pool(X, auto_pad, ceil_mode, dilations, kernel_shape, pads, 0, strides)
    geo = window_geometry(X.shape[2:], kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    return max_pool_with_indices(X, geo, storage_order)
