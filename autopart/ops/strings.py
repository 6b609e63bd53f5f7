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


def _pool(pool: Sequence[object], ngram_counts: Sequence[int]) -> dict[tuple[object, ...], int]:
    """Each pooled n-gram and its position in the pool (the index into ngram_indexes)."""
    table: dict[tuple[object, ...], int] = {}
    bounds = [*ngram_counts, len(pool)]
    item = 0
    for n in range(1, len(ngram_counts) + 1):
        start, end = bounds[n - 1], bounds[n]
        for offset in range(start, end, n):
            table[tuple(pool[offset : offset + n])] = item
            item += 1
    return table


@register("TfIdfVectorizer", accepts={"mode": ("TF", "IDF", "TFIDF")})
def tf_idf_vectorizer(
    X: np.ndarray,
    max_gram_length: int,
    max_skip_count: int,
    min_gram_length: int,
    mode: str,
    ngram_counts: Sequence[int],
    ngram_indexes: Sequence[int],
    pool_int64s: Sequence[int] | None = None,
    pool_strings: Sequence[str] | None = None,
    weights: Sequence[float] | None = None,
) -> np.ndarray:
    """ONNX TfIdfVectorizer: counts (TF), presence (IDF) or weighted counts of pooled n-grams.

    N-grams of each length take every ``skip + 1``-th token, for skips up to
    ``max_skip_count`` (unigrams once).
    """
    pool = list(pool_int64s) if pool_int64s is not None else list(pool_strings or [])
    table = _pool(pool, ngram_counts)
    rows = X.reshape(1, -1) if X.ndim == 1 else X
    counts = np.zeros((rows.shape[0], max(ngram_indexes) + 1), dtype=np.float32)
    for r, row in enumerate(rows.tolist()):
        for n in range(max(min_gram_length, 1), max_gram_length + 1):
            for skip in range(max_skip_count + 1 if n > 1 else 1):
                stride = skip + 1
                for start in range(len(row) - (n - 1) * stride):
                    item = table.get(tuple(row[start : start + (n - 1) * stride + 1 : stride]))
                    if item is not None:
                        counts[r, ngram_indexes[item]] += 1
    if mode != "TF":
        scale = np.ones(len(ngram_indexes), np.float32) if not weights else np.asarray(weights)
        column_weight = np.zeros(counts.shape[1], np.float32)
        column_weight[list(ngram_indexes)] = scale
        counts = (np.minimum(counts, 1) if mode == "IDF" else counts) * column_weight
    return counts.reshape(-1) if X.ndim == 1 else counts
