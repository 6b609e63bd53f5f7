"""Reference kernels that select, scatter or sort elements by index."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from autopart.ops.registry import register

_REDUCTIONS = ("none", "add", "mul", "max", "min")
_UFUNCS: dict[str, np.ufunc] = {
    "add": np.add,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}


def _positive(indices: np.ndarray, size: int) -> np.ndarray:
    indices = indices.astype(np.int64)
    return np.where(indices < 0, indices + size, indices)


@register("Trilu", accepts={"upper": (0, 1)})
def trilu(input: np.ndarray, k: np.ndarray | None = None, upper: int = 1) -> np.ndarray:
    """ONNX Trilu: keep the upper (or lower) triangle of the last two dims from diagonal k."""
    diagonal = 0 if k is None else int(np.asarray(k).item())
    return np.triu(input, diagonal) if upper else np.tril(input, diagonal)


@register("ScatterND", accepts={"reduction": _REDUCTIONS})
def scatter_nd(
    data: np.ndarray, indices: np.ndarray, updates: np.ndarray, reduction: str = "none"
) -> np.ndarray:
    """ONNX ScatterND: write (or combine) each update slice at its index tuple, in order.

    One array operation, not a step per tuple: a plain write keeps each position's last
    update (as writing them in order would), a reduction combines them in order
    (``ufunc.at``). An index outside ``data`` raises IndexError.
    """
    out = data.copy()
    depth = indices.shape[-1]
    leading = data.shape[:depth]
    rows = indices.reshape(-1, depth).astype(np.int64)
    bounds = np.array(leading, dtype=np.int64)
    rows = np.where(rows < 0, rows + bounds, rows)
    if rows.size and ((rows < 0) | (rows >= bounds)).any():
        raise IndexError(f"ScatterND: an index is outside the data's leading dims {leading}")
    positions = np.ravel_multi_index(tuple(rows.T), leading)
    flat = out.reshape(math.prod(leading), *data.shape[depth:])
    slices = updates.reshape(len(rows), *data.shape[depth:])
    combine = _UFUNCS.get(reduction)
    if combine is not None:
        combine.at(flat, positions, slices)
        return out
    last = len(positions) - 1 - np.unique(positions[::-1], return_index=True)[1]
    if len(last) == len(positions):  # no position twice: no copy of the updates needed
        flat[positions] = slices
    else:
        flat[positions[last]] = slices[last]
    return out


def _element_positions(data: np.ndarray, indices: np.ndarray, axis: int) -> tuple:
    axis = axis % data.ndim
    grid = list(np.indices(indices.shape, sparse=True))
    grid[axis] = _positive(indices, data.shape[axis])
    return tuple(grid)


@register("ScatterElements", accepts={"reduction": _REDUCTIONS})
def scatter_elements(
    data: np.ndarray,
    indices: np.ndarray,
    updates: np.ndarray,
    axis: int = 0,
    reduction: str = "none",
) -> np.ndarray:
    """ONNX ScatterElements: ``out[.., indices[i], ..] = updates[i]`` along ``axis``."""
    out = data.copy()
    positions = _element_positions(data, indices, axis)
    combine = _UFUNCS.get(reduction)
    if combine is None:
        out[positions] = updates
    else:
        combine.at(out, positions, updates)
    return out


@register("Scatter")
def scatter(
    data: np.ndarray, indices: np.ndarray, updates: np.ndarray, axis: int = 0
) -> np.ndarray:
    """ONNX Scatter (opsets 9-10): ScatterElements without a reduction."""
    return scatter_elements(data, indices, updates, axis)


@register("GatherND")
def gather_nd(data: np.ndarray, indices: np.ndarray, batch_dims: int = 0) -> np.ndarray:
    """ONNX GatherND with leading ``batch_dims`` shared by data and indices."""
    depth = indices.shape[-1]
    batches = math.prod(data.shape[:batch_dims])
    table = data.reshape(batches, *data.shape[batch_dims:])
    rows = indices.reshape(batches, -1, depth).astype(np.int64)
    picked = [table[b][tuple(rows[b].T)] for b in range(batches)]
    stacked = np.stack(picked) if picked else np.zeros((0,), data.dtype)
    return stacked.reshape(*indices.shape[:-1], *data.shape[batch_dims + depth :])


def _order(X: np.ndarray, axis: int, largest: int) -> np.ndarray:
    """Indices that sort ``X`` along ``axis``; equal values keep the lower index first."""
    keys = X.astype(np.int64) if X.dtype.kind == "u" and X.itemsize < 8 else X
    if not largest:
        return np.argsort(keys, axis=axis, kind="stable")
    if keys.dtype.kind == "u":
        keys = np.iinfo(keys.dtype).max - keys
        return np.argsort(keys, axis=axis, kind="stable")
    return np.argsort(np.negative(keys), axis=axis, kind="stable")


@register("TopK", accepts={"largest": (0, 1), "sorted": (0, 1)})
def top_k(
    X: np.ndarray,
    K: np.ndarray | None = None,
    axis: int = -1,
    largest: int = 1,
    sorted: int = 1,
    k: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """ONNX TopK: the ``k`` largest (or smallest) values along ``axis`` and their indices.

    ``k`` is an attribute before opset 10 and the input ``K`` after; results are always sorted.
    """
    count = int(np.asarray(K).ravel()[0]) if K is not None else int(k or 0)
    order = np.take(_order(X, axis, largest), np.arange(count), axis=axis)
    return np.take_along_axis(X, order, axis=axis), order.astype(np.int64)


@register("Compress")
def compress(input: np.ndarray, condition: np.ndarray, axis: int | None = None) -> np.ndarray:
    """ONNX Compress: the slices along ``axis`` (of the flattened input without one)."""
    return np.compress(condition.astype(bool), input, axis=axis)


@register("NonZero")
def non_zero(X: np.ndarray) -> np.ndarray:
    """ONNX NonZero: the indices of non-zero elements, one row per dim.

    A scalar is taken as one element, as onnxruntime does: (1, 0) or (1, 1).
    """
    X = np.atleast_1d(X)
    found = np.nonzero(X)
    return np.array(found, dtype=np.int64).reshape(X.ndim, len(found[0]))


@register("EyeLike")
def eye_like(input: np.ndarray, dtype: int | None = None, k: int = 0) -> np.ndarray:
    """ONNX EyeLike: ones on diagonal ``k`` of a 2-D tensor shaped like ``input``."""
    from onnx.helper import tensor_dtype_to_np_dtype

    out_type = input.dtype if dtype is None else tensor_dtype_to_np_dtype(dtype)
    return np.eye(*input.shape, k=k, dtype=out_type)


@register("ReverseSequence")
def reverse_sequence(
    input: np.ndarray, sequence_lens: np.ndarray, batch_axis: int = 1, time_axis: int = 0
) -> np.ndarray:
    """ONNX ReverseSequence: reverse the first ``sequence_lens[b]`` steps of each batch."""
    out = input.copy()
    for batch, length in enumerate(sequence_lens.astype(np.int64)):
        index: list[object] = [slice(None)] * input.ndim
        index[batch_axis] = batch
        index[time_axis] = slice(0, int(length))
        source = input[tuple(index)]
        out[tuple(index)] = np.flip(source, axis=time_axis - (batch_axis < time_axis))
    return out


def _cumulative(step: Callable[..., np.ndarray], identity: int) -> Callable[..., np.ndarray]:
    def kernel(x: np.ndarray, axis: np.ndarray, exclusive: int = 0, reverse: int = 0) -> np.ndarray:
        ax = int(np.asarray(axis).item())
        data = np.flip(x, ax) if reverse else x
        if exclusive:
            first = np.full_like(np.take(data, [0], axis=ax), identity)
            data = np.concatenate([first, np.delete(data, -1, ax)], ax)
        out = step(data, axis=ax, dtype=x.dtype)
        return np.flip(out, ax) if reverse else out

    return kernel


register("CumProd", since=26)(_cumulative(np.cumprod, 1))


@register("Unique", accepts={"sorted": (0, 1)})
def unique(
    X: np.ndarray, axis: int | None = None, sorted: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """ONNX Unique: values, first indices, inverse indices and counts.

    Without ``sorted`` the values keep the order of their first occurrence.
    """
    values, first, inverse, counts = np.unique(
        X, return_index=True, return_inverse=True, return_counts=True, axis=axis
    )
    inverse = inverse.reshape(-1)
    if not sorted:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        first, counts, inverse = first[order], counts[order], rank[inverse]
        values = np.take(X if axis is not None else X.ravel(), first, axis=axis or 0)
    as_int = [np.asarray(a, dtype=np.int64) for a in (first, inverse, counts)]
    return values, *as_int


@register("TensorScatter", since=24, accepts={"mode": ("linear", "circular")})
def tensor_scatter(
    past_cache: np.ndarray,
    update: np.ndarray,
    write_indices: np.ndarray | None = None,
    axis: int = -2,
    mode: str = "linear",
) -> np.ndarray:
    """ONNX TensorScatter: write ``update`` into the cache at each batch's write index."""
    axis = axis % past_cache.ndim
    out = past_cache.copy()
    length, capacity = update.shape[axis], past_cache.shape[axis]
    for batch in range(past_cache.shape[0]):
        start = 0 if write_indices is None else int(write_indices[batch])
        positions = start + np.arange(length)
        if mode == "circular":
            positions = positions % capacity
        target = np.moveaxis(out[batch], axis - 1, 0)
        target[positions] = np.moveaxis(update[batch], axis - 1, 0)
    return out
