"""Reference kernels over spatial grids: Col2Im, AffineGrid, CenterCropPad, causal conv."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
from scipy import special

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
