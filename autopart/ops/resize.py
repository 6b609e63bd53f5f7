"""Reference kernels for Resize and Upsample: separable interpolation, one axis at a time.

Each output position along an axis maps to a source coordinate (the coordinate
transformation mode), whose neighbours are weighted by the mode's coefficients (nearest,
linear, cubic, or their antialiasing stretched versions); indices beyond the input clamp to
its edge. This follows the ONNX specification and its reference implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import numpy_helper

from autopart.errors import UnsupportedOpError
from autopart.ops.registry import register

Coefficients = Callable[[float, float], np.ndarray]

_COORDINATE_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
)
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


@dataclass(frozen=True)
class Interpolation:
    """How one Resize node samples: coefficients, coordinate mode and their options."""

    coefficients: Coefficients
    coordinates: str
    exclude_outside: bool = False
    extrapolation_value: float = 0.0


def _nearest(mode: str) -> Coefficients:
    def coefficients(ratio: float, scale: float) -> np.ndarray:
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        upper = {
            "round_prefer_floor": ratio > 0.5,
            "round_prefer_ceil": ratio >= 0.5,
            "floor": False,
            "ceil": True,
        }[mode]
        return np.array([0.0, 1.0]) if upper else np.array([1.0, 0.0])

    return coefficients


def _linear(ratio: float, scale: float) -> np.ndarray:
    return np.array([1 - ratio, ratio])


def _linear_antialias(ratio: float, scale: float) -> np.ndarray:
    scale = min(scale, 1.0)
    start = int(np.floor(-1 / scale) + 1)
    args = (np.arange(start, 2 - start) - ratio) * scale
    weights = np.clip(1 - np.abs(args), 0, 1)
    return weights / weights.sum()


def _cubic_weight(x: float, a: float) -> float:
    x = abs(x)
    if x <= 1:
        return ((a + 2) * x - (a + 3)) * x * x + 1
    if x < 2:
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return 0.0


def _cubic(a: float, antialias: bool) -> Coefficients:
    def coefficients(ratio: float, scale: float) -> np.ndarray:
        if not antialias:
            return np.array([_cubic_weight(ratio + d, a) for d in (1, 0, -1, -2)])
        stretch = min(scale, 1.0)
        start = int(np.floor(-2 / stretch) + 1)
        weights = np.array(
            [_cubic_weight(stretch * (i - ratio), a) for i in range(start, 2 - start)]
        )
        return weights / weights.sum()

    return coefficients


def _source_coordinates(
    mode: str, size_in: int, size_out: int, scale: float, roi: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray | None]:
    """Source coordinate of every output index, and which fall outside (crop and resize)."""
    y = np.arange(size_out, dtype=np.float64)
    width = scale * size_in
    if mode == "align_corners":
        return (np.zeros(size_out) if width == 1 else y * (size_in - 1) / (width - 1)), None
    if mode == "asymmetric":
        return y / scale, None
    if mode == "pytorch_half_pixel":
        return (np.full(size_out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5), None
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5, None
    if mode == "half_pixel_symmetric":
        offset = size_in / 2 * (1 - size_out / width)
        return offset + (y + 0.5) / scale - 0.5, None
    start, end = roi
    if width == 1:
        x = np.full(size_out, (end - start) * (size_in - 1) / 2)
    else:
        x = y * (end - start) * (size_in - 1) / (width - 1)
    x = x + start * (size_in - 1)
    return x, (x < 0) | (x > size_in - 1)


def _axis_taps(
    size_in: int, size_out: int, scale: float, sampling: Interpolation, roi: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Per output index, the input indices it reads, their weights, and which fall outside."""
    x, outside = _source_coordinates(sampling.coordinates, size_in, size_out, scale, roi)
    floor = np.floor(x)
    ratios = np.where(x == floor, 1.0, x - floor)
    weights = np.stack([sampling.coefficients(float(r), scale) for r in ratios])
    taps = weights.shape[1]
    # The window of `taps` indices nearest x (ties to the lower one) starts here.
    first = np.where(x == floor, floor - taps // 2, floor - taps // 2 + 1).astype(np.int64)
    neighbours = first[:, None] + np.arange(taps)[None, :]
    if sampling.exclude_outside:
        weights = np.where((neighbours < 0) | (neighbours >= size_in), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(neighbours, 0, size_in - 1), weights, outside


def _resize_axis(
    data: np.ndarray,
    axis: int,
    scale: float,
    size_out: int,
    sampling: Interpolation,
    roi: tuple[float, float],
) -> np.ndarray:
    if size_out == 0:
        return np.take(data, np.arange(0), axis=axis)
    neighbours, weights, outside = _axis_taps(data.shape[axis], size_out, scale, sampling, roi)
    if ((weights == 0.0) | (weights == 1.0)).all() and (weights.sum(axis=1) == 1.0).all():
        # each output is one input (nearest, or an exact ratio): selected, not summed, so
        # a NaN or infinite neighbour of weight 0 cannot spoil it
        chosen = neighbours[np.arange(len(neighbours)), weights.argmax(axis=1)]
        result = np.take(data, chosen, axis=axis)
    else:
        gathered = np.take(data, neighbours, axis=axis)
        shape = (1,) * axis + weights.shape + (1,) * (data.ndim - axis - 1)
        result = (gathered * weights.reshape(shape)).sum(axis=axis + 1)
    if outside is not None and outside.any():
        mask = outside.reshape((1,) * axis + (size_out,) + (1,) * (data.ndim - axis - 1))
        result = np.where(mask, sampling.extrapolation_value, result)
    return result


def _floats(values: np.ndarray | Sequence[float] | None) -> list[float]:
    return [] if values is None else [float(v) for v in np.asarray(values).ravel()]


def _target(
    shape: tuple[int, ...],
    axes: list[int],
    scales: list[float],
    sizes: list[int],
    policy: str,
) -> tuple[list[float], list[int]]:
    """Per-dim scale factors and output sizes from ``scales`` or ``sizes`` of ``axes``."""
    rank = len(shape)
    factor, out = [1.0] * rank, list(shape)
    if sizes:
        for axis, size in zip(axes, sizes, strict=True):
            factor[axis], out[axis] = size / shape[axis], size
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            common = pick(factor[axis] for axis in axes)
            for axis in axes:
                factor[axis], out[axis] = common, int(common * shape[axis] + 0.5)
        return factor, out
    for axis, scale in zip(axes, scales, strict=True):
        factor[axis], out[axis] = scale, int(scale * shape[axis])
    return factor, out


def _sampling(attrs: Mapping[str, Any]) -> Interpolation:
    mode = attrs.get("mode", "nearest")
    antialias = bool(attrs.get("antialias", 0))
    if mode == "nearest":
        if antialias:
            raise UnsupportedOpError("Resize: antialias is not defined for mode 'nearest'")
        coefficients = _nearest(attrs.get("nearest_mode", "round_prefer_floor"))
    elif mode == "linear":
        coefficients = _linear_antialias if antialias else _linear
    else:
        coefficients = _cubic(float(attrs.get("cubic_coeff_a", -0.75)), antialias)
    return Interpolation(
        coefficients,
        attrs.get("coordinate_transformation_mode", "half_pixel"),
        bool(attrs.get("exclude_outside", 0)),
        float(attrs.get("extrapolation_value", 0.0)),
    )


def interpolate(
    X: np.ndarray,
    sampling: Interpolation,
    axes: list[int],
    factors: list[float],
    sizes: list[int],
    roi: list[float],
) -> np.ndarray:
    """``X`` resampled to ``sizes`` along ``axes``; ``roi`` holds starts then ends per dim."""
    rank = X.ndim
    result = X.astype(np.float64)
    for axis in axes:
        window = (roi[axis], roi[axis + rank]) if roi else (0.0, 1.0)
        if factors[axis] == 1.0 and sizes[axis] == X.shape[axis] and window == (0.0, 1.0):
            continue
        result = _resize_axis(result, axis, factors[axis], sizes[axis], sampling, window)
    if np.issubdtype(X.dtype, np.integer):
        return numpy_helper.saturate_cast(result, X.dtype)
    return result.astype(X.dtype)


def _full_roi(roi: list[float], axes: list[int], rank: int) -> list[float]:
    if not roi or len(roi) == 2 * rank:
        return roi
    full = [0.0] * rank + [1.0] * rank
    for i, axis in enumerate(axes):
        full[axis], full[axis + rank] = roi[i], roi[i + len(axes)]
    return full


@register(
    "Resize",
    since=11,
    accepts={
        "mode": ("nearest", "linear", "cubic"),
        "coordinate_transformation_mode": _COORDINATE_MODES,
        "nearest_mode": _NEAREST_MODES,
        "keep_aspect_ratio_policy": ("stretch", "not_larger", "not_smaller"),
        "exclude_outside": (0, 1),
        "antialias": (0, 1),
    },
)
def resize(
    X: np.ndarray,
    roi: np.ndarray | None = None,
    scales: np.ndarray | None = None,
    sizes: np.ndarray | None = None,
    antialias: int = 0,
    axes: Sequence[int] | None = None,
    coordinate_transformation_mode: str = "half_pixel",
    cubic_coeff_a: float = -0.75,
    exclude_outside: int = 0,
    extrapolation_value: float = 0.0,
    keep_aspect_ratio_policy: str = "stretch",
    mode: str = "nearest",
    nearest_mode: str = "round_prefer_floor",
) -> np.ndarray:
    """ONNX Resize (opset 11 on): every mode, coordinate transformation and option."""
    rank = X.ndim
    axis_list = [int(a) % rank for a in (range(rank) if axes is None else axes)]
    size_list = [int(s) for s in _floats(sizes)]
    factors, out = _target(X.shape, axis_list, _floats(scales), size_list, keep_aspect_ratio_policy)
    sampling = _sampling(
        {
            "mode": mode,
            "antialias": antialias,
            "nearest_mode": nearest_mode,
            "cubic_coeff_a": cubic_coeff_a,
            "coordinate_transformation_mode": coordinate_transformation_mode,
            "exclude_outside": exclude_outside,
            "extrapolation_value": extrapolation_value,
        }
    )
    roi_list = _full_roi(_floats(roi), axis_list, rank)
    return interpolate(X, sampling, axis_list, factors, out, roi_list)


def resize_taps(
    shape: tuple[int, ...],
    attrs: Mapping[str, Any],
    roi: np.ndarray | None = None,
    scales: np.ndarray | None = None,
    sizes: np.ndarray | None = None,
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """How Resize-11+ (``attrs``, constant operands) reads an input of ``shape``.

    For each axis it resamples: per output index, the clamped input indices it reads
    (int64 ``[size_out, taps]``) and their weights (float64, same shape), exactly as
    :func:`resize` combines them. Raises :class:`UnsupportedOpError` when an output point
    takes the extrapolation value (``tf_crop_and_resize`` outside the region).
    """
    rank = len(shape)
    given = attrs.get("axes")
    axis_list = [int(a) % rank for a in (range(rank) if given is None else given)]
    size_list = [int(s) for s in _floats(sizes)]
    policy = attrs.get("keep_aspect_ratio_policy", "stretch")
    factors, out = _target(shape, axis_list, _floats(scales), size_list, policy)
    sampling = _sampling(attrs)
    full_roi = _full_roi(_floats(roi), axis_list, rank)
    taps: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for axis in axis_list:
        window = (full_roi[axis], full_roi[axis + rank]) if full_roi else (0.0, 1.0)
        if factors[axis] == 1.0 and out[axis] == shape[axis] and window == (0.0, 1.0):
            continue
        indices, weights, outside = _axis_taps(
            shape[axis], out[axis], factors[axis], sampling, window
        )
        if outside is not None and outside.any():
            raise UnsupportedOpError("Resize: points outside the crop take the extrapolation value")
        taps[axis] = (indices, weights)
    return taps


def _legacy_upsample(X: np.ndarray, scales: Sequence[float], mode: str) -> np.ndarray:
    """Upsample and Resize-10: asymmetric coordinates, nearest rounds down."""
    factors = [float(s) for s in scales]
    if mode == "nearest" and any(f < 1 for f in factors):
        raise UnsupportedOpError(f"{mode} downsampling before Resize-11 is not implemented")
    sampling = Interpolation(_nearest("floor") if mode == "nearest" else _linear, "asymmetric")
    sizes = [int(f * d) for f, d in zip(factors, X.shape, strict=True)]
    return interpolate(X, sampling, list(range(X.ndim)), factors, sizes, [])


_LEGACY_MODES = {"mode": ("nearest", "linear", "bilinear")}


@register("Resize", since=10, accepts=_LEGACY_MODES)
def resize_10(X: np.ndarray, scales: np.ndarray, mode: str = "nearest") -> np.ndarray:
    """ONNX Resize-10: scales only, asymmetric coordinates."""
    return _legacy_upsample(X, _floats(scales), "linear" if mode != "nearest" else mode)


@register("Upsample", accepts=_LEGACY_MODES)
def upsample(
    X: np.ndarray,
    scales: np.ndarray | Sequence[float] | None = None,
    mode: str = "nearest",
    height_scale: float | None = None,
    width_scale: float | None = None,
) -> np.ndarray:
    """ONNX Upsample: ``scales`` an attribute (opset 7-8) or an input (opset 9)."""
    if scales is None:
        scales = [1.0, 1.0, height_scale or 1.0, width_scale or 1.0]
    return _legacy_upsample(X, _floats(scales), "linear" if mode != "nearest" else mode)
