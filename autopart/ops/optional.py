"""Optional values holding a tensor: OptionalHasElement and OptionalGetElement.

An optional is a tensor or nothing; an absent input (``None``) is an empty optional. The
Optional op itself and optionals of sequences are not implemented: values that are not
tensors have no place in the graph IR.
"""

from __future__ import annotations

import numpy as np

from autopart.errors import UnsupportedOpError
from autopart.ops.registry import register


@register("OptionalHasElement", since=15)
def optional_has_element(x: np.ndarray | None = None) -> np.ndarray:
    """Whether the optional ``x`` holds a tensor (an absent input holds none)."""
    return np.array(x is not None)


@register("OptionalGetElement", since=15)
def optional_get_element(x: np.ndarray | None) -> np.ndarray:
    """The tensor the optional ``x`` holds; an empty optional is an error."""
    if x is None:
        raise UnsupportedOpError("OptionalGetElement of an empty optional")
    return x
