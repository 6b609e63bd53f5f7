"""Repeated timing with warm-up and an early stop once the median has settled.

How hard to time one thing is :class:`TimingSettings`, tuned to the machine (its defaults
are :data:`TIMING`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np

from autopart.costmodel.measurements import Measurement
from autopart.settings import tuned


@dataclass(frozen=True)
class TimingSettings:
    """How hard to time one thing.

    After ``warmup`` untimed runs (fewer for slow subgraphs, see :func:`collect`), runs come
    in batches of ``batch``. Timing stops once at least ``min_runs`` were taken, at least
    ``min_seconds`` of wall time were spent, and one more batch moved the median by less than
    ``settled_change`` (relative); or after ``max_runs`` runs; or once ``max_seconds`` of
    wall time were spent on this one measurement.

    The profiler spreads each measurement over ``passes`` passes through its whole job list
    (each pass taking a ``passes``-th of the runs and time) and keeps the median of the
    passes' medians (:func:`summarise_passes`), so that a burst of host speed-up or
    slow-down lasting a few seconds skews no single op.
    """

    warmup: int = tuned(8, "untimed runs first: caches, lazy allocation, JIT warm-up")
    min_runs: int = tuned(7, "fewest timed runs of one thing")
    max_runs: int = tuned(60, "most timed runs of one thing")
    batch: int = tuned(4, "runs between two looks at the median")
    settled_change: float = tuned(0.02, "stop once a batch moves the median by less than this")
    max_seconds: float = tuned(1.0, "most wall time spent timing one thing")
    passes: int = tuned(
        3,
        "passes through the job list, median of their medians: a burst of host speed-up or "
        "slow-down lasting seconds skews no single op (experiments/exp_target_noise.py)",
    )
    min_seconds: float = tuned(0.0, "least wall time spent timing one thing")

    def per_pass(self) -> TimingSettings:
        """The settings of one of ``passes`` passes: a share of the runs and of the time."""
        share = max(self.passes, 1)
        return replace(
            self,
            min_runs=max(-(-self.min_runs // share), 3),
            max_runs=max(-(-self.max_runs // share), 3),
            batch=min(self.batch, max(-(-self.min_runs // share), 3)),
            max_seconds=self.max_seconds / share,
            min_seconds=self.min_seconds / share,
            passes=1,
        )

    def for_short_runs(self) -> TimingSettings:
        """The settings for copies and launch probes: sampled for 30% of ``max_seconds``.

        A small copy or an empty launch takes microseconds, so ``min_runs`` of them span a
        few milliseconds, and on a shared machine such a cost swings by 2x from one such
        moment to the next (the PoCL worker threads and the host share two cores).
        Sampling for a share of the time budget instead averages over those swings.
        """
        return replace(
            self,
            min_seconds=max(self.min_seconds, 0.3 * self.max_seconds),
            max_runs=max(self.max_runs, 3000),
        )

    def to_dict(self) -> dict[str, float | int]:
        """The settings as a plain dict (stored in profile metadata)."""
        return asdict(self)


TIMING = TimingSettings()


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
