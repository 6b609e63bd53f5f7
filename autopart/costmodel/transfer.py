"""Transfer prices: a linear fit, per size regime, of measured copy times between two devices.

The fit is ``latency + nbytes / bandwidth`` per size regime, chosen to minimise *relative*
error (small copies matter as much as big ones) with non-negative coefficients. The copies
themselves are timed by :mod:`autopart.profile.transfer`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from autopart.costmodel.costs import TransferModel

MAX_REGIMES = 3


@dataclass(frozen=True)
class TransferFit:
    """A fitted transfer model and how well it matches its samples."""

    model: TransferModel
    max_relative_error: float
    median_relative_error: float
    samples: int


def pair_name(src: str, dst: str) -> str:
    """How a device pair is written in profiles: ``src->dst``."""
    return f"{src}->{dst}"


def split_pair(name: str) -> tuple[str, str]:
    """Inverse of :func:`pair_name`."""
    src, _, dst = name.partition("->")
    return src, dst


def _fit_affine(sizes: np.ndarray, times: np.ndarray) -> tuple[float, float]:
    """Non-negative (latency, seconds per byte) minimising the relative error."""
    if len(sizes) == 1:
        return 0.0, float(times[0] / sizes[0])
    weights = 1.0 / np.maximum(times, 1e-12)
    design = np.stack([np.ones_like(sizes), sizes], axis=1) * weights[:, None]
    (latency, per_byte), _ = nnls(design, np.ones_like(times))
    return float(latency), float(max(per_byte, 1e-15))


def _model(sizes: np.ndarray, times: np.ndarray, cuts: tuple[int, ...]) -> TransferModel:
    bounds = [0, *cuts, len(sizes)]
    pieces = [_fit_affine(sizes[lo:hi], times[lo:hi]) for lo, hi in itertools.pairwise(bounds)]
    starts = [int(np.sqrt(sizes[cut - 1] * sizes[cut])) for cut in cuts]
    (latency, per_byte), rest = pieces[0], pieces[1:]
    regimes = tuple((start, lat, 1.0 / per) for start, (lat, per) in zip(starts, rest, strict=True))
    return TransferModel(latency, 1.0 / per_byte, regimes)


def fit_transfer(nbytes: np.ndarray, seconds: np.ndarray, good_enough: float = 0.1) -> TransferFit:
    """Fit ``seconds ≈ latency + nbytes / bandwidth`` minimising relative error.

    Copies that fit in the caches and copies that leave them (or fault in fresh pages) run
    at different bandwidths, so up to :data:`MAX_REGIMES` size regimes are fitted, each
    with its own latency and bandwidth; the fewest regimes whose largest relative error on
    the samples is within ``good_enough`` win (else the most accurate fit).
    """
    order = np.argsort(np.asarray(nbytes, dtype=np.float64))
    sizes = np.asarray(nbytes, dtype=np.float64)[order]
    times = np.asarray(seconds, dtype=np.float64)[order]
    if len(sizes) < 2:
        raise ValueError("a transfer fit needs at least two sizes")
    best: tuple[float, TransferModel] | None = None
    for regimes in range(1, MAX_REGIMES + 1):
        for cuts in itertools.combinations(range(2, len(sizes) - 1), regimes - 1):
            model = _model(sizes, times, cuts)
            error = _errors(model, sizes, times).max()
            if best is None or error < best[0] - 1e-9:
                best = (float(error), model)
        if best is not None and best[0] <= good_enough:
            break
    assert best is not None
    relative = _errors(best[1], sizes, times)
    return TransferFit(best[1], float(relative.max()), float(np.median(relative)), len(sizes))


def _errors(model: TransferModel, sizes: np.ndarray, times: np.ndarray) -> np.ndarray:
    predicted = np.array([model.cost(int(size)) for size in sizes])
    return np.abs(predicted - times) / times
