"""Transfer costs: a copy microbenchmark per ordered device pair and its linear fit.

Copies are timed exactly as the plan executor makes them (``dst.from_host(src.to_host(x))``
followed by a synchronisation), over sizes from 4 KiB to 64 MiB. The fit is
``latency + nbytes / bandwidth`` per size regime, chosen to minimise *relative* error (small
copies matter as much as big ones) with non-negative coefficients.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from autopart.search.costs import TransferModel
from autopart.targets.devices import Device

# 4 KiB to 1 MiB in 4x steps, then 2x steps up to 64 MiB: copies leave the caches somewhere
# between 4 and 16 MiB here, and a fit with no sample inside that knee put 10 MB copies
# at 1.4-1.5x their measured time
SIZES = tuple(4096 * 4**k for k in range(4)) + tuple(2**20 * 2**k for k in range(7))
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


def copy_sampler(src: Device, dst: Device, nbytes: int) -> Callable[[], float]:
    """A function that copies a ``nbytes`` tensor from ``src`` to ``dst`` and returns seconds."""
    # random float32 straight from the generator: normals, then a cast, took 0.7 s per
    # sweep of the sizes, 4 s of every cold profile
    host = np.random.default_rng(0).random(nbytes // 4, dtype=np.float32)
    tensor = src.from_host(host)
    src.synchronize()

    def sample() -> float:
        start = time.perf_counter()
        dst.from_host(src.to_host(tensor))
        dst.synchronize()
        return time.perf_counter() - start

    return sample


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
