"""Reference kernels over spatial grids: Col2Im, AffineGrid, CenterCropPad, causal conv."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from autopart.errors import UnsupportedOpError
from autopart.ops.nn import conv
from autopart.ops.registry import register


def _ints(values: np.ndarray | Sequence[int] | None) -> list[int]:
    return [] if values is None else [int(v) for v in np.asarray(values).ravel()]


@register("Col2Im", since=18)
def col2im(
    input: np.ndarray,
    image_shape: np.ndarray,
    block_shape: np.ndarray,
    dilations: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
) -> np.ndarray:
    """ONNX Col2Im: sum each column of sliding blocks back into its place in the image."""
    image, block = _ints(image_shape), _ints(block_shape)
    d = len(image)
    dilations = list(dilations or [1] * d)
    strides = list(strides or [1] * d)
    pads = list(pads or [0] * (2 * d))
    padded = [image[i] + pads[i] + pads[i + d] for i in range(d)]
    blocks = [(padded[i] - dilations[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(d)]
    n = input.shape[0]
    channels = input.shape[1] // math.prod(block)
    columns = input.reshape(n, channels, *block, *blocks)
    out = np.zeros((n, channels, *padded), dtype=input.dtype)
    for offsets in itertools.product(*(range(k) for k in block)):
        index = [slice(None), slice(None)]
        for i, k in enumerate(offsets):
            start = k * dilations[i]
            index.append(slice(start, start + (blocks[i] - 1) * strides[i] + 1, strides[i]))
        out[tuple(index)] += columns[(slice(None), slice(None), *offsets)]
    crop = tuple(slice(pads[i], pads[i] + image[i]) for i in range(d))
    return out[(slice(None), slice(None), *crop)]


def _grid_axis(size: int, align_corners: int) -> np.ndarray:
    """Normalised coordinates in [-1, 1] of ``size`` points (pixel centres or corners)."""
    if align_corners:
        return np.linspace(-1.0, 1.0, size) if size > 1 else np.array([-1.0])
    return (np.arange(size) * 2 + 1) / size - 1


@register("AffineGrid", since=20, accepts={"align_corners": (0, 1)})
def affine_grid(theta: np.ndarray, size: np.ndarray, align_corners: int = 0) -> np.ndarray:
    """ONNX AffineGrid: sampling coordinates (x, y[, z]) of ``theta`` over the output grid."""
    spatial = _ints(size)[2:]
    axes = [_grid_axis(s, align_corners) for s in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")
    # Homogeneous points list x first: (x, y, 1) in 2-D and (x, y, z, 1) in 3-D.
    points = np.stack([*reversed(mesh), np.ones(spatial)], axis=-1).reshape(-1, len(spatial) + 1)
    grid = np.einsum("nij,pj->npi", theta.astype(np.float64), points)
    return grid.reshape(theta.shape[0], *spatial, len(spatial)).astype(theta.dtype)


@register("CenterCropPad", since=18)
def center_crop_pad(
    input_data: np.ndarray, shape: np.ndarray, axes: Sequence[int] | None = None
) -> np.ndarray:
    """ONNX CenterCropPad: crop or zero-pad ``axes`` to ``shape``, centred (extra at the end)."""
    rank = input_data.ndim
    axis_list = [a % rank for a in axes] if axes is not None else list(range(rank))
    target = list(input_data.shape)
    source = [slice(None)] * rank
    place = [slice(None)] * rank
    for axis, want in zip(axis_list, _ints(shape), strict=False):
        have = input_data.shape[axis]
        target[axis] = want
        if want < have:
            start = (have - want) // 2
            source[axis] = slice(start, start + want)
        elif want > have:
            start = (want - have) // 2
            place[axis] = slice(start, start + have)
    out = np.zeros(target, dtype=input_data.dtype)
    out[tuple(place)] = input_data[tuple(source)]
    return out


@register("CausalConvWithState", since=27, accepts={"activation": ("none", "silu", "swish")})
def causal_conv_with_state(
    input: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    past_state: np.ndarray | None = None,
    activation: str = "none",
) -> tuple[np.ndarray, np.ndarray]:
    """ONNX CausalConvWithState: depthwise causal 1-D conv after the carried state."""
    batch, channels, _ = input.shape
    taps = weight.shape[2]
    if past_state is None:
        past_state = np.zeros((batch, channels, taps - 1), dtype=input.dtype)
    padded = np.concatenate([past_state, input], axis=2)
    out = conv(padded, weight, bias, group=channels).astype(input.dtype)
    if activation != "none":
        wide = out.astype(np.float32)
        out = (wide * special.expit(wide)).astype(input.dtype)
    return out, padded[:, :, padded.shape[2] - (taps - 1) :]


def _reflect(x: np.ndarray, low: float, high: float) -> np.ndarray:
    """Coordinates mirrored at ``low`` and ``high`` until they lie between them."""
    span = high - low
    below, above = low - x, x - high
    folds_below, folds_above = np.floor(below / span), np.floor(above / span)
    rest_below, rest_above = below - folds_below * span, above - folds_above * span
    from_below = np.where(folds_below % 2 == 0, low + rest_below, high - rest_below)
    from_above = np.where(folds_above % 2 == 0, high - rest_above, low + rest_above)
    return np.where(x < low, from_below, np.where(x > high, from_above, x))


def _cubic_weights(t: np.ndarray) -> np.ndarray:
    a = -0.75
    distances = np.stack([t + 1, t, 1 - t, 2 - t], axis=-1)
    near = ((a + 2) * distances - (a + 3)) * distances * distances + 1
    far = ((a * distances - 5 * a) * distances + 8 * a) * distances - 4 * a
    return np.where(distances <= 1, near, far)


@dataclass(frozen=True)
class _Taps:
    """Per output point and tap along one dim: the index to read and its weight."""

    index: np.ndarray
    weight: np.ndarray


def _dim_taps(coords: np.ndarray, size: int, mode: str, padding: str, align: int) -> _Taps:
    low, high = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
    x = (coords + 1) / 2 * (size - 1) if align else ((coords + 1) * size - 1) / 2
    if mode == "nearest":
        x = np.rint(x)
    if padding == "border":
        x = np.where((x < low) | (x > high), np.clip(x, 0, size - 1), x)
    elif padding == "reflection":
        x = _reflect(x, low, high)
    if mode == "nearest":
        return _Taps(x.astype(np.int64)[:, None], np.ones((len(x), 1)))
    start = np.floor(x)
    fraction = x - start
    if mode == "linear":
        offsets, weights = np.arange(2), np.stack([1 - fraction, fraction], axis=-1)
    else:
        offsets, weights = np.arange(-1, 3), _cubic_weights(fraction)
    return _Taps(start.astype(np.int64)[:, None] + offsets, weights)


GRID_CHUNK = 1 << 22  # samples (batch x channel x point) read at once: bounds the memory


def _read(
    image: np.ndarray,
    batch: np.ndarray,
    taps: Sequence[np.ndarray],
    padding: str,
    lows: Sequence[float],
    highs: Sequence[float],
) -> np.ndarray:
    """``image[batch, :, taps...]`` as (points, channels), by ``padding``.

    Out-of-range reads are zero, clamped or mirrored.
    """
    valid = np.ones(taps[0].shape, bool)
    fixed = []
    for index, size, low, high in zip(taps, image.shape[2:], lows, highs, strict=True):
        if padding == "zeros":
            valid &= (index >= 0) & (index < size)
            index = np.clip(index, 0, size - 1)
        elif padding == "border":
            index = np.clip(index, 0, size - 1)
        else:
            index = _reflect(index.astype(np.float64), low, high).astype(np.int64)
        fixed.append(index)
    return np.where(valid[:, None], image[(batch, slice(None), *fixed)], 0)


def _grid_sample(
    X: np.ndarray, grid: np.ndarray, mode: str, padding_mode: str, align_corners: int
) -> np.ndarray:
    """``X`` sampled at ``grid``: every batch entry at once, in chunks of :data:`GRID_CHUNK`.

    A model that samples a small window per pixel (RAFT's correlation lookup: a batch of
    256) runs as a few array operations, not a loop per entry.
    """
    spatial = X.shape[2:]
    lows = [0.0 if align_corners else -0.5] * len(spatial)
    highs = [s - (1.0 if align_corners else 0.5) for s in spatial]
    count, channels = X.shape[:2]
    points = math.prod(grid.shape[1:-1])
    out = np.empty((count, channels, points), dtype=X.dtype)
    step = max(GRID_CHUNK // max(channels * points, 1), 1)
    for first in range(0, count, step):
        entries = np.arange(first, min(first + step, count))
        coords = grid[entries].reshape(-1, grid.shape[-1])[:, ::-1].astype(np.float64)
        taps = [
            _dim_taps(coords[:, d], size, mode, padding_mode, align_corners)
            for d, size in enumerate(spatial)
        ]
        batch = np.repeat(entries, points)
        total = np.zeros((len(coords), channels))
        for combo in itertools.product(*(range(t.index.shape[1]) for t in taps)):
            weight = np.prod([t.weight[:, k] for t, k in zip(taps, combo, strict=True)], axis=0)
            indices = [t.index[:, k] for t, k in zip(taps, combo, strict=True)]
            total += weight[:, None] * _read(X, batch, indices, padding_mode, lows, highs)
        out[entries] = total.reshape(len(entries), points, channels).transpose(0, 2, 1)
    return out.reshape(*X.shape[:2], *grid.shape[1:-1])


_GRID_OPTIONS = {"padding_mode": ("zeros", "border", "reflection"), "align_corners": (0, 1)}
_LEGACY_GRID_MODES = {"bilinear": "linear", "bicubic": "cubic", "nearest": "nearest"}


@register("GridSample", since=16, accepts={"mode": tuple(_LEGACY_GRID_MODES), **_GRID_OPTIONS})
def grid_sample_16(
    X: np.ndarray,
    grid: np.ndarray,
    align_corners: int = 0,
    mode: str = "bilinear",
    padding_mode: str = "zeros",
) -> np.ndarray:
    """ONNX GridSample-16 (4-D, modes bilinear, nearest and bicubic)."""
    return _grid_sample(X, grid, _LEGACY_GRID_MODES[mode], padding_mode, align_corners)


@register("GridSample", since=20, accepts={"mode": ("linear", "nearest", "cubic"), **_GRID_OPTIONS})
def grid_sample(
    X: np.ndarray,
    grid: np.ndarray,
    align_corners: int = 0,
    mode: str = "linear",
    padding_mode: str = "zeros",
) -> np.ndarray:
    """ONNX GridSample (opset 20 on): N-D sampling of ``X`` at the normalised ``grid``."""
    return _grid_sample(X, grid, mode, padding_mode, align_corners)


def _bilinear_zero_padded(planes: np.ndarray, h: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Sample ``planes`` (C, H, W) at real coordinates ``h``, ``w`` (any equal shape).

    Neighbours outside the plane read as zero. Returns (C, *h.shape).
    """
    height, width = planes.shape[1:]
    top, left = np.floor(h).astype(np.int64), np.floor(w).astype(np.int64)
    dh, dw = h - top, w - left
    total = np.zeros((planes.shape[0], *h.shape), dtype=np.float64)
    for row, row_weight in ((top, 1 - dh), (top + 1, dh)):
        for col, col_weight in ((left, 1 - dw), (left + 1, dw)):
            inside = (row >= 0) & (row < height) & (col >= 0) & (col < width)
            values = planes[:, np.clip(row, 0, height - 1), np.clip(col, 0, width - 1)]
            total += np.where(inside, row_weight * col_weight, 0.0) * values
    return total


@register("DeformConv", since=19)
def deform_conv(
    X: np.ndarray,
    W: np.ndarray,
    offset: np.ndarray,
    B: np.ndarray | None = None,
    mask: np.ndarray | None = None,
    dilations: Sequence[int] | None = None,
    group: int = 1,
    kernel_shape: Sequence[int] | None = None,
    offset_group: int = 1,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
) -> np.ndarray:
    """ONNX DeformConv (2-D): each tap samples bilinearly at its learned offset, masked."""
    if X.ndim != 4:
        raise UnsupportedOpError("DeformConv is implemented for 2-D images only")
    n, channels, _, _ = X.shape
    kh, kw = W.shape[2:]
    out_h, out_w = offset.shape[2:]
    sh, sw = strides or (1, 1)
    dh, dw = dilations or (1, 1)
    top, left = (pads or (0, 0, 0, 0))[:2]
    shifts = offset.reshape(n, offset_group, kh, kw, 2, out_h, out_w)
    weights = np.ones((n, offset_group, kh, kw, out_h, out_w)) if mask is None else mask
    weights = weights.reshape(n, offset_group, kh, kw, out_h, out_w)
    base_h = (np.arange(out_h) * sh - top)[None, :, None] + (np.arange(kh) * dh)[:, None, None]
    base_w = (np.arange(out_w) * sw - left)[None, None, :] + (np.arange(kw) * dw)[:, None, None]
    per_group = channels // offset_group
    columns = np.empty((n, channels, kh, kw, out_h, out_w))
    for b in range(n):
        for g in range(offset_group):
            h = base_h[:, None, :, :] + shifts[b, g, :, :, 0]
            w = base_w[None, :, :, :] + shifts[b, g, :, :, 1]
            planes = X[b, g * per_group : (g + 1) * per_group].astype(np.float64)
            sampled = _bilinear_zero_padded(planes, h, w) * weights[b, g]
            columns[b, g * per_group : (g + 1) * per_group] = sampled
    grouped = columns.reshape(n, group, channels // group, kh, kw, out_h, out_w)
    kernels = W.reshape(group, W.shape[0] // group, W.shape[1], kh, kw).astype(np.float64)
    out = np.einsum("gocij,ngcijhw->ngohw", kernels, grouped).reshape(n, -1, out_h, out_w)
    if B is not None:
        out = out + B.reshape(1, -1, 1, 1)
    return out.astype(X.dtype)
