"""Reference kernels for reductions, arg-reductions and the softmax family."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from autopart.ops.registry import register


def _axes(data: np.ndarray, axes: np.ndarray | Sequence[int] | None, noop: int) -> tuple | None:
    values = [] if axes is None else [int(a) for a in np.asarray(axes).ravel()]
    if not values:
        return () if noop else None
    return tuple(a % data.ndim for a in values)


def _reducer(op_type: str, fn: Callable[[np.ndarray, tuple | None, bool], np.ndarray]) -> None:
    def kernel(
        data: np.ndarray,
        axes: np.ndarray | Sequence[int] | None = None,
        keepdims: int = 1,
        noop_with_empty_axes: int = 0,
    ) -> np.ndarray:
        axis = _axes(data, axes, noop_with_empty_axes)
        if axis == ():
            return data
        return np.asarray(fn(data, axis, bool(keepdims))).astype(data.dtype, copy=False)

    kernel.__name__ = op_type.lower()
    kernel.__doc__ = f"ONNX {op_type}; ``axes`` is an attribute before opset 18, an input after."
    register(op_type)(kernel)


_reducer("ReduceSum", lambda x, a, k: np.sum(x, axis=a, keepdims=k))
_reducer("ReduceMean", lambda x, a, k: np.mean(x, axis=a, keepdims=k))


def _lowest(dtype: np.dtype) -> object:
    if dtype == np.bool_:
        return False
    return np.iinfo(dtype).min if np.issubdtype(dtype, np.integer) else -np.inf


def _highest(dtype: np.dtype) -> object:
    if dtype == np.bool_:
        return True
    return np.iinfo(dtype).max if np.issubdtype(dtype, np.integer) else np.inf


# Over an empty set, ReduceMax gives the lowest value of the type and ReduceMin the highest.
_reducer("ReduceMax", lambda x, a, k: np.max(x, axis=a, keepdims=k, initial=_lowest(x.dtype)))
_reducer("ReduceMin", lambda x, a, k: np.min(x, axis=a, keepdims=k, initial=_highest(x.dtype)))
_reducer("ReduceProd", lambda x, a, k: np.prod(x, axis=a, keepdims=k))
_reducer("ReduceL1", lambda x, a, k: np.sum(np.abs(x), axis=a, keepdims=k))
_reducer("ReduceL2", lambda x, a, k: np.sqrt(np.sum(np.square(x), axis=a, keepdims=k)))
_reducer("ReduceSumSquare", lambda x, a, k: np.sum(np.square(x), axis=a, keepdims=k))
_reducer("ReduceLogSum", lambda x, a, k: np.log(np.sum(x, axis=a, keepdims=k)))
_reducer(
    "ReduceLogSumExp",
    lambda x, a, k: np.log(np.sum(np.exp(x.astype(np.float64)), axis=a, keepdims=k)),
)


def _arg(op_type: str, fn: Callable[..., np.ndarray]) -> None:
    def kernel(
        data: np.ndarray, axis: int = 0, keepdims: int = 1, select_last_index: int = 0
    ) -> np.ndarray:
        source = np.flip(data, axis) if select_last_index else data
        index = fn(source, axis=axis)
        if select_last_index:
            index = data.shape[axis] - 1 - index
        out = np.expand_dims(index, axis) if keepdims else index
        return out.astype(np.int64)

    kernel.__name__ = op_type.lower()
    kernel.__doc__ = f"ONNX {op_type}."
    register(op_type)(kernel)


_arg("ArgMax", np.argmax)
_arg("ArgMin", np.argmin)


def _softmax_along(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - np.max(x, axis=axis, keepdims=True)
    exp = np.exp(shifted)
    return exp / np.sum(exp, axis=axis, keepdims=True)


def _log_softmax_along(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _hardmax_along(x: np.ndarray, axis: int) -> np.ndarray:
    index = np.expand_dims(np.argmax(x, axis=axis), axis)
    out = np.zeros_like(x)
    np.put_along_axis(out, index, 1, axis=axis)
    return out


def _coerced_2d(fn: Callable[[np.ndarray, int], np.ndarray]) -> Callable[..., np.ndarray]:
    """Before opset 13 the softmax family flattens to 2-D at ``axis`` (default 1)."""

    def kernel(input: np.ndarray, axis: int = 1) -> np.ndarray:
        axis = axis % input.ndim
        outer = int(np.prod(input.shape[:axis], dtype=np.int64))
        flat = input.reshape(outer, int(np.prod(input.shape[axis:], dtype=np.int64)))
        return fn(flat, 1).reshape(input.shape)

    return kernel


def _along_axis(fn: Callable[[np.ndarray, int], np.ndarray]) -> Callable[..., np.ndarray]:
    def kernel(input: np.ndarray, axis: int = -1) -> np.ndarray:
        return fn(input, axis)

    return kernel


for _name, _fn in {
    "Softmax": _softmax_along,
    "LogSoftmax": _log_softmax_along,
    "Hardmax": _hardmax_along,
}.items():
    register(_name, since=1)(_coerced_2d(_fn))
    register(_name, since=13)(_along_axis(_fn))
