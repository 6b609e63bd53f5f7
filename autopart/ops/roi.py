"""Reference kernel for RoiAlign: bilinear samples of each region, averaged or maxed per bin."""

from __future__ import annotations

import math

import numpy as np

from autopart.ops.registry import register


def _axis_samples(
    start: float, bin_size: float, bins: int, grid: int, size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Along one axis: validity, low and high neighbour, and the high neighbour's weight."""
    points = start + np.arange(bins)[:, None] * bin_size + (np.arange(grid) + 0.5) * bin_size / grid
    valid = (points >= -1.0) & (points <= size)
    clamped = np.maximum(points, 0.0)
    low = np.floor(clamped).astype(np.int64)
    at_edge = low >= size - 1
    low = np.where(at_edge, size - 1, low)
    high = np.where(at_edge, size - 1, low + 1)
    fraction = np.where(at_edge, 0.0, clamped - low)
    return valid, low, high, fraction


def _region(
    plane: np.ndarray,
    box: np.ndarray,
    out_h: int,
    out_w: int,
    ratio: int,
    half_pixel: bool,
    mode: str,
) -> np.ndarray:
    shift = 0.5 if half_pixel else 0.0
    x0, y0, x1, y1 = (float(v) for v in box)
    x0, y0, x1, y1 = x0 - shift, y0 - shift, x1 - shift, y1 - shift
    width, height = x1 - x0, y1 - y0
    if not half_pixel:
        width, height = max(width, 1.0), max(height, 1.0)
    grid_h = ratio if ratio > 0 else math.ceil(height / out_h)
    grid_w = ratio if ratio > 0 else math.ceil(width / out_w)
    vy, ly, hy, fy = _axis_samples(y0, height / out_h, out_h, grid_h, plane.shape[1])
    vx, lx, hx, fx = _axis_samples(x0, width / out_w, out_w, grid_w, plane.shape[2])
    valid = vy[:, :, None, None] & vx[None, None]
    terms = []
    for rows, row_weight in ((ly, 1 - fy), (hy, fy)):
        for cols, col_weight in ((lx, 1 - fx), (hx, fx)):
            weight = np.where(valid, row_weight[:, :, None, None] * col_weight[None, None], 0.0)
            terms.append(weight * plane[:, rows[:, :, None, None], cols[None, None]])
    if mode == "avg":
        total = sum(terms).sum(axis=(2, 4))  # type: ignore[union-attr]
        return total / max(grid_h * grid_w, 1)
    if grid_h * grid_w == 0:
        return np.zeros((plane.shape[0], out_h, out_w))
    return np.max(np.maximum.reduce(terms), axis=(2, 4))


def _roi_align(
    X: np.ndarray,
    rois: np.ndarray,
    batch_indices: np.ndarray,
    half_pixel: bool,
    mode: str,
    output_height: int,
    output_width: int,
    sampling_ratio: int,
    spatial_scale: float,
) -> np.ndarray:
    out = np.empty((len(rois), X.shape[1], output_height, output_width), dtype=X.dtype)
    for index, (box, batch) in enumerate(zip(rois, batch_indices.astype(np.int64), strict=True)):
        out[index] = _region(  # read in X's dtype, weighed in float64: exact, and no copy
            X[batch],
            box * spatial_scale,
            output_height,
            output_width,
            sampling_ratio,
            half_pixel,
            mode,
        )
    return out


_MODES = {"mode": ("avg", "max")}


@register("RoiAlign", since=10, accepts=_MODES)
def roi_align_10(
    X: np.ndarray,
    rois: np.ndarray,
    batch_indices: np.ndarray,
    mode: str = "avg",
    output_height: int = 1,
    output_width: int = 1,
    sampling_ratio: int = 0,
    spatial_scale: float = 1.0,
) -> np.ndarray:
    """ONNX RoiAlign-10: regions in output-half-pixel coordinates."""
    return _roi_align(
        X,
        rois,
        batch_indices,
        False,
        mode,
        output_height,
        output_width,
        sampling_ratio,
        spatial_scale,
    )


@register(
    "RoiAlign",
    since=16,
    accepts={**_MODES, "coordinate_transformation_mode": ("half_pixel", "output_half_pixel")},
)
def roi_align(
    X: np.ndarray,
    rois: np.ndarray,
    batch_indices: np.ndarray,
    coordinate_transformation_mode: str = "half_pixel",
    mode: str = "avg",
    output_height: int = 1,
    output_width: int = 1,
    sampling_ratio: int = 0,
    spatial_scale: float = 1.0,
) -> np.ndarray:
    """ONNX RoiAlign (opset 16 on): ``half_pixel`` shifts regions by half a pixel."""
    half_pixel = coordinate_transformation_mode == "half_pixel"
    return _roi_align(
        X,
        rois,
        batch_indices,
        half_pixel,
        mode,
        output_height,
        output_width,
        sampling_ratio,
        spatial_scale,
    )
