"""Outputs that agree but for the order of rows whose sort key is tied.

A detector sorts the boxes it keeps by score, and two runtimes that compute the scores a
few ulps apart may order boxes of (near) equal score differently: torchvision's detectors
differed from onnxruntime by 0.2-1.0 on numpy and OpenVINO for this reason alone, while
every box, label and score agreed. Whether such outputs agree is decided here without
loosening any tolerance: rows may move only within a *tie*, a run of consecutive rows
whose key (a sorted 1-D output, the scores) differs by at most ``tolerance`` of its
largest magnitude, and every output with as many rows moves with them.

:func:`tie_reorderings` yields, for each output that could be such a key, the outputs
reordered so that tied rows line up with the expected ones. The caller compares those as it
compares any outputs; a reordering that does not line up simply fails that comparison.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

Outputs = Mapping[str, np.ndarray]


def tie_reorderings(
    got: Outputs, expected: Outputs, tolerance: float
) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
    """For each possible sort key, its name and ``got`` with rows reordered within its ties.

    A key is an output that is 1-D float of at least 2 elements, of the same shape in both,
    sorted (either way) in ``expected`` and in ``got``, with some tie in ``expected``.
    Within each tie, the rows of every output of the key's length are sorted in both
    ``got`` and ``expected`` by their values (each output scaled by its largest expected
    magnitude and rounded to ``tolerance``, the key itself left out), and ``got``'s are put
    where ``expected``'s sorted rows are. Rows never leave their tie, and outputs of
    another length are left as they are. Nothing is yielded when no output can be a key.
    """
    for name, want in expected.items():
        have = got.get(name)
        runs = _tie_runs(have, want, tolerance)
        if runs is None:
            continue
        rows = len(want)
        moved = [
            other for other, values in expected.items()
            if other != name and _rows_of(got.get(other), values, rows)
        ]  # fmt: skip
        if not moved:
            continue
        got_order = _order(runs, [_codes(got[o], expected[o], tolerance) for o in moved])
        want_order = _order(runs, [_codes(expected[o], expected[o], tolerance) for o in moved])
        reordered = dict(got)
        for other in (name, *moved):
            placed = np.empty_like(got[other])
            placed[want_order] = got[other][got_order]
            reordered[other] = placed
        yield name, reordered


def _tie_runs(have: np.ndarray | None, want: np.ndarray, tolerance: float) -> np.ndarray | None:
    """Each row's tie, numbered in order, where ``want`` can be a key (else None)."""
    if have is None or have.shape != want.shape or want.ndim != 1 or len(want) < 2:
        return None
    if want.dtype.kind != "f" or have.dtype.kind != "f":
        return None
    want64, have64 = want.astype(np.float64), have.astype(np.float64)
    if not (np.isfinite(want64).all() and np.isfinite(have64).all()):
        return None
    steps = np.diff(want64)
    direction = 1.0 if steps.sum() >= 0 else -1.0
    if (steps * direction < 0).any() or (np.diff(have64) * direction < 0).any():
        return None  # not sorted both ways alike: not an order the rows were put in
    scale = float(np.abs(want64).max()) or 1.0
    breaks = np.abs(steps) > tolerance * scale
    if breaks.all():
        return None  # no tie: nothing may move
    return np.concatenate([[0], np.cumsum(breaks)])


def _rows_of(have: np.ndarray | None, want: np.ndarray, rows: int) -> bool:
    """Whether both are outputs of ``rows`` rows of one shape (these move with the key)."""
    return have is not None and have.shape == want.shape and want.ndim >= 1 and len(want) == rows


def _codes(values: np.ndarray, expected: np.ndarray, tolerance: float) -> np.ndarray:
    """``values``' rows as integer codes: scaled by ``expected``'s magnitude, rounded."""
    flat = values.reshape(len(values), -1).astype(np.float64)
    if values.dtype.kind not in "fc":
        return flat
    scale = float(np.abs(expected).max(initial=0.0)) or 1.0
    return np.round(np.nan_to_num(flat / scale) / max(tolerance, 1e-12))


def _order(runs: np.ndarray, codes: list[np.ndarray]) -> np.ndarray:
    """The row order that sorts each tie by ``codes``' columns, ties kept in their place."""
    columns = np.concatenate(codes, axis=1)
    keys = [columns[:, index] for index in range(columns.shape[1] - 1, -1, -1)]
    return np.lexsort([*keys, runs])
