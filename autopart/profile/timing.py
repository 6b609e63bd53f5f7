"""Repeated timing with warm-up and an early stop once the median has settled."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from autopart.costmodel.measurements import Measurement
from autopart.settings import TimingSettings


def summarise(samples: list[float], timer: str) -> Measurement:
    """Median, quartiles and extremes of ``samples`` (:meth:`Measurement.from_samples`)."""
    return Measurement.from_samples(samples, timer)


def summarise_passes(passes: Sequence[Sequence[float]], timer: str) -> Measurement:
    """:func:`summarise` of every pass's samples pooled, with :func:`median_of_passes`.

    A pass that ran through a slow (or quick) spell of the host then moves the median no
    further than the other passes' medians allow; the quartiles, extremes and run count
    still pool every sample, and ``passes`` counts the passes.
    """
    pooled = summarise([value for samples in passes for value in samples], timer)
    return replace(pooled, median_s=median_of_passes(passes), passes=len(passes))


def median_of_passes(passes: Sequence[Sequence[float]]) -> float:
    """The median of the medians of the non-empty ``passes``."""
    return float(np.median([np.median(samples) for samples in passes if len(samples)]))


def measure(sample: Callable[[], float], settings: TimingSettings, timer: str) -> Measurement:
    """Call ``sample`` (which returns the seconds one run took) until the median is stable."""
    return summarise(collect(sample, settings), timer)


def collect(sample: Callable[[], float], settings: TimingSettings) -> list[float]:
    """The timed samples of :func:`measure`, after its warm-up and with its early stop.

    Warm-up runs past the second stop once a twelfth of ``max_seconds`` is spent, so that
    slow subgraphs keep most of their time for timed runs.
    """
    started = time.perf_counter()
    for index in range(settings.warmup):
        if index >= 2 and time.perf_counter() - started > settings.max_seconds / 12:
            break
        sample()
    samples: list[float] = []
    previous = None
    while len(samples) < settings.max_runs:
        samples.extend(sample() for _ in range(settings.batch))
        median = float(np.median(samples))
        elapsed = time.perf_counter() - started
        settled = (
            previous is not None
            and len(samples) >= settings.min_runs
            and elapsed >= settings.min_seconds
            and abs(median - previous) <= settings.settled_change * max(previous, 1e-9)
        )
        if settled or elapsed > settings.max_seconds:
            break
        previous = median
    return samples
