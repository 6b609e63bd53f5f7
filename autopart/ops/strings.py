"""Reference kernels for string tensors (numpy object arrays of ``str``)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from autopart.ops.registry import register


@register("StringConcat", since=20)
def string_concat(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """ONNX StringConcat, elementwise with broadcasting."""
    return np.asarray(np.char.add(X.astype(str), Y.astype(str)), dtype=object)


@register("RegexFullMatch", since=20)
def regex_full_match(X: np.ndarray, pattern: str = "") -> np.ndarray:
    """ONNX RegexFullMatch: whether each element matches ``pattern`` entirely."""
    compiled = re.compile(pattern)
    match = np.vectorize(lambda s: compiled.fullmatch(str(s)) is not None, otypes=[bool])
    return match(X) if X.size else np.zeros(X.shape, bool)


@register("StringSplit", since=20)
def string_split(
    X: np.ndarray, delimiter: str = "", maxsplit: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """ONNX StringSplit: substrings padded with "" to a common count, and the counts."""
    limit = -1 if maxsplit is None else maxsplit
    parts = [str(s).split(delimiter or None, limit) for s in X.ravel()]
    width = max((len(p) for p in parts), default=0)
    out = np.full((len(parts), width), "", dtype=object)
    for row, pieces in enumerate(parts):
        out[row, : len(pieces)] = pieces
    counts = np.array([len(p) for p in parts], dtype=np.int64).reshape(X.shape)
    return out.reshape(*X.shape, width), counts


@register("StringNormalizer", accepts={"case_change_action": ("NONE", "LOWER", "UPPER")})
def string_normalizer(
    X: np.ndarray,
    case_change_action: str = "NONE",
    is_case_sensitive: int = 0,
    locale: str = "",
    stopwords: Sequence[str] = (),
) -> np.ndarray:
    """ONNX StringNormalizer: drop stop words, then change case, on [C] or [1, C] input."""
    words = [str(s) for s in X.ravel()]
    if is_case_sensitive:
        kept = [w for w in words if w not in set(stopwords)]
    else:
        stop = {s.lower() for s in stopwords}
        kept = [w for w in words if w.lower() not in stop]
    if case_change_action == "LOWER":
        kept = [w.lower() for w in kept]
    elif case_change_action == "UPPER":
        kept = [w.upper() for w in kept]
    out = np.array(kept or [""], dtype=object)
    return out.reshape(1, -1) if X.ndim == 2 else out
