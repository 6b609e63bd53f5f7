"""Freezing inputs: a user fixes an input to one value, and import folds what follows.

A frozen input becomes a constant of the graph (it is no longer an input), with the dtype
the model declares for it; what depends only on it and on other constants is then folded
(an ``If`` on a sample rate, say). The graph keeps the frozen values in
``graph.meta["frozen"]`` so that a peer running the original model can be fed them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from autopart.errors import ModelError
from autopart.ir.input_shapes import Dim

# What a user gives: input name -> a scalar, a (nested) list or an array.
FreezeValues = Mapping[str, Any]


def frozen_arrays(
    declared: Mapping[str, tuple[list[Dim] | None, np.dtype | None]],
    freeze: FreezeValues,
) -> dict[str, np.ndarray]:
    """Each value of ``freeze`` as an array of its input's declared dtype and rank.

    ``declared`` maps every input of the model to its declared dims and dtype. A scalar or
    a flat list is reshaped to the input's rank when that is unambiguous (a scalar for a
    ``[1]`` input, a list for a ``[2, 2]`` one). Raises :class:`ModelError` for a name that
    is not an input, a value its dtype cannot hold exactly, and one of another size.
    """
    arrays = {}
    for name, value in freeze.items():
        if name not in declared:
            raise ModelError(
                f"cannot freeze {name!r}: it is not an input; inputs: {list(declared)}"
            )
        dims, dtype = declared[name]
        if dtype is None:
            raise ModelError(f"cannot freeze input {name!r}: it is not a typed tensor")
        arrays[name] = _to_rank(_as_dtype(name, value, dtype), dims, name)
    return arrays


def _as_dtype(name: str, value: Any, dtype: np.dtype) -> np.ndarray:
    """``value`` as an array of ``dtype``; refuse one that does not convert exactly."""
    try:
        given = np.asarray(value)
    except ValueError:
        raise ModelError(f"cannot freeze input {name!r} to {value!r}: not an array") from None
    if given.dtype.kind not in "biuf":
        raise ModelError(f"cannot freeze input {name!r} to {value!r}: not numbers")
    with np.errstate(all="ignore"):
        converted = given.astype(dtype)
    exact = converted.dtype.kind == "f" or np.array_equal(converted.astype(given.dtype), given)
    if dtype.kind == "b" and not np.isin(given, (0, 1)).all():
        exact = False
    if not exact:
        raise ModelError(f"cannot freeze input {name!r} to {value!r}: it is not {dtype} exactly")
    return converted


def _to_rank(array: np.ndarray, dims: list[Dim] | None, name: str) -> np.ndarray:
    """``array`` reshaped to the declared rank when that is unambiguous."""
    if dims is None or array.ndim == len(dims):
        return array
    static = all(isinstance(d, int) for d in dims)
    if not dims and array.size == 1:
        return array.reshape(())
    if static and int(np.prod(dims, dtype=np.int64)) == array.size:
        return array.reshape(tuple(d for d in dims if isinstance(d, int)))
    if len(dims) == 1 and array.ndim <= 1:
        return array.reshape(-1)
    shown = [d if d is not None else "?" for d in dims]
    raise ModelError(
        f"cannot freeze input {name!r} of shape {shown} to a value of shape "
        f"{list(array.shape)} ({array.size} elements)"
    )
