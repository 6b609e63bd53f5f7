"""Reference kernels that move, reshape, select or create tensors."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import numpy_helper

from autopart.errors import UnsupportedOpError
from autopart.ops.nn import legacy_test_mode
from autopart.ops.registry import register


def _ints(values: np.ndarray | Sequence[int] | None) -> list[int]:
    return [] if values is None else [int(v) for v in np.asarray(values).ravel()]


@register("Identity")
def identity(input: np.ndarray) -> np.ndarray:
    """ONNX Identity."""
    return input


@register("Dropout", check=legacy_test_mode)
@register("Dropout", since=7)
def dropout(
    data: np.ndarray,
    ratio: np.ndarray | float | None = None,
    training_mode: np.ndarray | None = None,
    seed: int | None = None,
    is_test: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """ONNX Dropout at inference: the data passes through and the mask is all true.

    Training mode with a non-zero ratio drops at random and is refused.
    """
    training = training_mode is not None and bool(np.asarray(training_mode).item())
    drop = 0.5 if ratio is None else float(np.asarray(ratio).item())
    if training and drop != 0:
        raise UnsupportedOpError("Dropout in training mode (random dropping) is not supported")
    return data, np.ones(data.shape, dtype=bool)


@register("Reshape")
def reshape(data: np.ndarray, shape: np.ndarray | None = None, allowzero: int = 0) -> np.ndarray:
    """ONNX Reshape: 0 copies the input dimension (unless ``allowzero``), -1 is inferred."""
    target = _ints(shape)
    if not allowzero:
        target = [data.shape[i] if dim == 0 else dim for i, dim in enumerate(target)]
    return data.reshape(target)


@register("Flatten")
def flatten(input: np.ndarray, axis: int = 1) -> np.ndarray:
    """ONNX Flatten into 2-D at ``axis``."""
    axis = axis + input.ndim if axis < 0 else axis  # axis == rank is valid: (N, 1)
    outer = int(np.prod(input.shape[:axis], dtype=np.int64))
    inner = int(np.prod(input.shape[axis:], dtype=np.int64))  # -1 cannot stand for it when empty
    return input.reshape(outer, inner)


@register("Transpose")
def transpose(data: np.ndarray, perm: Sequence[int] | None = None) -> np.ndarray:
    """ONNX Transpose; without ``perm`` the axes are reversed."""
    return np.transpose(data, perm)


@register("Squeeze")
def squeeze(data: np.ndarray, axes: np.ndarray | Sequence[int] | None = None) -> np.ndarray:
    """ONNX Squeeze of ``axes`` (attribute before opset 13, input after), or of all 1-dims."""
    if axes is None:
        return np.squeeze(data)
    return np.squeeze(data, axis=tuple(a % data.ndim for a in _ints(axes)))


@register("Unsqueeze")
def unsqueeze(data: np.ndarray, axes: np.ndarray | Sequence[int] | None = None) -> np.ndarray:
    """ONNX Unsqueeze: insert 1-dims at ``axes`` of the output."""
    rank = data.ndim + len(_ints(axes))
    return np.expand_dims(data, tuple(sorted(a % rank for a in _ints(axes))))


@register("Concat")
def concat(*inputs: np.ndarray, axis: int) -> np.ndarray:
    """ONNX Concat along ``axis``."""
    return np.concatenate(inputs, axis=axis)


@register("Split")
def split(
    input: np.ndarray,
    split: np.ndarray | Sequence[int] | None = None,
    axis: int = 0,
    num_outputs: int | None = None,
    _num_outputs: int | None = None,
) -> tuple[np.ndarray, ...]:
    """ONNX Split into given sizes, or into ``num_outputs`` (nearly) equal parts."""
    sizes = _ints(split)
    length = input.shape[axis]
    if not sizes:
        parts = num_outputs or _num_outputs or 1
        chunk = -(-length // parts)
        sizes = [min(chunk, length - i * chunk) for i in range(parts)]
    bounds = np.cumsum(sizes)[:-1]
    return tuple(np.split(input, bounds, axis=axis))


@register("Slice")
def slice_(
    data: np.ndarray,
    starts: np.ndarray | Sequence[int],
    ends: np.ndarray | Sequence[int],
    axes: np.ndarray | Sequence[int] | None = None,
    steps: np.ndarray | Sequence[int] | None = None,
) -> np.ndarray:
    """ONNX Slice; out-of-range starts and ends are clamped as the spec says."""
    start_list, end_list = _ints(starts), _ints(ends)
    axis_list = _ints(axes) or list(range(len(start_list)))
    step_list = _ints(steps) or [1] * len(start_list)
    index = [slice(None)] * data.ndim
    for start, end, axis, step in zip(start_list, end_list, axis_list, step_list, strict=True):
        dim = data.shape[axis]
        if step < 0:
            # Python slicing treats a clamped end of -1 as "from the back"; use None instead.
            end = None if end < -dim else end  # type: ignore[assignment]
        index[axis % data.ndim] = slice(_clamp(start, dim), _clamp(end, dim), step)
    return data[tuple(index)]


def _clamp(bound: int | None, dim: int) -> int | None:
    if bound is None:
        return None
    big = np.iinfo(np.int64).max
    if bound >= big // 2:
        return dim
    if bound <= -big // 2:
        return -dim - 1 if dim else 0
    return bound


@register("Gather")
def gather(data: np.ndarray, indices: np.ndarray, axis: int = 0) -> np.ndarray:
    """ONNX Gather; negative indices count from the end."""
    indices = indices.astype(np.int64)
    return np.take(data, np.where(indices < 0, indices + data.shape[axis], indices), axis=axis)


@register("GatherElements")
def gather_elements(data: np.ndarray, indices: np.ndarray, axis: int = 0) -> np.ndarray:
    """ONNX GatherElements."""
    indices = np.where(indices < 0, indices + data.shape[axis], indices)
    return np.take_along_axis(data, indices, axis=axis)


@register("Expand")
def expand(input: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """ONNX Expand with bidirectional broadcasting."""
    target = np.broadcast_shapes(input.shape, tuple(_ints(shape)))
    return np.broadcast_to(input, target).copy()


@register("Tile")
def tile(input: np.ndarray, repeats: np.ndarray) -> np.ndarray:
    """ONNX Tile."""
    return np.tile(input, _ints(repeats))


@register("Pad", accepts={"mode": ("constant", "reflect", "edge", "wrap")})
def pad(
    data: np.ndarray,
    pads: np.ndarray | Sequence[int] | None = None,
    constant_value: np.ndarray | None = None,
    axes: np.ndarray | None = None,
    mode: str = "constant",
    value: float = 0.0,
    paddings: Sequence[int] | None = None,
) -> np.ndarray:
    """ONNX Pad in constant, reflect, edge or wrap mode; negative pads crop."""
    amounts = _ints(pads if pads is not None else paddings)
    axis_list = [a % data.ndim for a in _ints(axes)] or list(range(data.ndim))
    count = len(axis_list)
    widths = [(0, 0)] * data.ndim
    for i, axis in enumerate(axis_list):
        widths[axis] = (amounts[i], amounts[i + count])
    crop = tuple(slice(max(-b, 0), data.shape[i] - max(-e, 0)) for i, (b, e) in enumerate(widths))
    data = data[crop]
    widths = [(max(b, 0), max(e, 0)) for b, e in widths]
    if mode == "constant":
        fill = value if constant_value is None or constant_value.size == 0 else constant_value
        return np.pad(data, widths, mode="constant", constant_values=np.asarray(fill).item())
    return np.pad(data, widths, mode={"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode])


@register("Shape")
def shape(data: np.ndarray, start: int = 0, end: int | None = None) -> np.ndarray:
    """ONNX Shape, optionally sliced to ``[start, end)``."""
    return np.array(data.shape[start:end], dtype=np.int64)


@register("Size")
def size(data: np.ndarray) -> np.ndarray:
    """ONNX Size."""
    return np.array(data.size, dtype=np.int64)


@register("ConstantOfShape")
def constant_of_shape(input: np.ndarray, value: np.ndarray | None = None) -> np.ndarray:
    """ONNX ConstantOfShape; the fill defaults to float32 zero."""
    fill = np.zeros(1, dtype=np.float32) if value is None else np.asarray(value)
    return np.full(_ints(input), fill.ravel()[0], dtype=fill.dtype)


@register("Constant")
def constant(
    value: np.ndarray | None = None,
    value_float: float | None = None,
    value_floats: Sequence[float] | None = None,
    value_int: int | None = None,
    value_ints: Sequence[int] | None = None,
    sparse_value: object | None = None,
    value_string: str | None = None,
    value_strings: Sequence[str] | None = None,
) -> np.ndarray:
    """ONNX Constant from whichever value attribute is set."""
    if value is not None:
        return np.asarray(value)
    if value_float is not None:
        return np.array(value_float, dtype=np.float32)
    if value_floats is not None:
        return np.array(value_floats, dtype=np.float32)
    if value_int is not None:
        return np.array(value_int, dtype=np.int64)
    if value_ints is not None:
        return np.array(value_ints, dtype=np.int64)
    if value_string is not None:
        return np.array(value_string, dtype=object)
    if value_strings is not None:
        return np.array(value_strings, dtype=object)
    if sparse_value is not None:
        return numpy_helper.to_array(sparse_value)  # type: ignore[arg-type]
    raise ValueError("Constant node has no supported value attribute")


@register("Range")
def range_(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """ONNX Range."""
    return np.arange(start.item(), limit.item(), delta.item()).astype(start.dtype)


@register("DepthToSpace", accepts={"mode": ("DCR", "CRD")})
def depth_to_space(input: np.ndarray, blocksize: int, mode: str = "DCR") -> np.ndarray:
    """ONNX DepthToSpace in DCR or CRD order."""
    n, c, h, w = input.shape
    b = blocksize
    if mode == "DCR":
        tmp = input.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        tmp = input.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return tmp.reshape(n, c // (b * b), h * b, w * b)


@register("SpaceToDepth", accepts={"mode": ("DCR", "CRD")})
def space_to_depth(input: np.ndarray, blocksize: int, mode: str = "DCR") -> np.ndarray:
    """ONNX SpaceToDepth, the inverse of DepthToSpace in the same ``mode`` (from opset 28)."""
    n, c, h, w = input.shape
    b = blocksize
    tmp = input.reshape(n, c, h // b, b, w // b, b)
    order = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    return tmp.transpose(order).reshape(n, c * b * b, h // b, w // b)


register("SpaceToDepth", since=28, accepts={"mode": ("DCR", "CRD")})(space_to_depth)


@register("CumSum")
def cumsum(x: np.ndarray, axis: np.ndarray, exclusive: int = 0, reverse: int = 0) -> np.ndarray:
    """ONNX CumSum."""
    ax = int(np.asarray(axis).item())
    data = np.flip(x, ax) if reverse else x
    out = np.cumsum(data, axis=ax, dtype=x.dtype)
    if exclusive:
        out = np.concatenate(
            [np.zeros_like(np.take(out, [0], axis=ax)), np.delete(out, -1, ax)], ax
        )
    return np.flip(out, ax) if reverse else out


@register("OneHot")
def one_hot(
    indices: np.ndarray, depth: np.ndarray, values: np.ndarray, axis: int = -1
) -> np.ndarray:
    """ONNX OneHot."""
    d = int(np.asarray(depth).item())
    idx = np.where(indices < 0, indices + d, indices).astype(np.int64)
    hot = np.arange(d) == idx[..., None]
    out = np.where(hot, values[1], values[0])
    return np.moveaxis(out, -1, axis if axis >= 0 else out.ndim + axis)
