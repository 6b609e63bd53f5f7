"""Repeated timing with warm-up and an early stop once the median has settled."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import numpy as np

from autopart.profile.store import Measurement


@dataclass(frozen=True)
class TimingSettings:
    """How hard to time one thing.

    After ``warmup`` untimed runs, runs come in batches of ``batch``. Timing stops once at
    least ``min_runs`` were taken and one more batch moved the median by less than
    ``tolerance`` (relative), or after ``max_runs`` runs, or once ``max_seconds`` of wall
    time were spent on this one measurement.

    The profiler spreads each measurement over ``passes`` passes through its whole job list
    (each pass taking a ``passes``-th of the runs and time) and pools the samples, so that
    a burst of host speed-up or slow-down lasting a few seconds skews no single op.
    """

    warmup: int = 2
    min_runs: int = 7
    max_runs: int = 60
    batch: int = 4
    tolerance: float = 0.02
    max_seconds: float = 1.0
    passes: int = 3

    def per_pass(self) -> TimingSettings:
        """The settings of one of ``passes`` passes: a share of the runs and of the time."""
        share = max(self.passes, 1)
        return replace(
            self,
            min_runs=max(-(-self.min_runs // share), 3),
            max_runs=max(-(-self.max_runs // share), 3),
            batch=min(self.batch, max(-(-self.min_runs // share), 3)),
            max_seconds=self.max_seconds / share,
            passes=1,
        )

    def to_dict(self) -> dict[str, float | int]:
        """The settings as a plain dict (stored in profile metadata)."""
        return asdict(self)


def summarise(samples: list[float], timer: str) -> Measurement:
    """Median, quartiles and extremes of ``samples`` (seconds)."""
    values = np.asarray(samples, dtype=np.float64)
    q1, median, q3 = np.percentile(values, [25, 50, 75])
    return Measurement(
        float(median), float(q1), float(q3), float(values.min()), float(values.max()),
        len(samples), timer,
    )  # fmt: skip


def measure(sample: Callable[[], float], settings: TimingSettings, timer: str) -> Measurement:
    """Call ``sample`` (which returns the seconds one run took) until the median is stable."""
    return summarise(collect(sample, settings), timer)


def collect(sample: Callable[[], float], settings: TimingSettings) -> list[float]:
    """The timed samples of :func:`measure`, after its warm-up and with its early stop."""
    started = time.perf_counter()
    for _ in range(settings.warmup):
        sample()
    samples: list[float] = []
    previous = None
    while len(samples) < settings.max_runs:
        samples.extend(sample() for _ in range(settings.batch))
        median = float(np.median(samples))
        settled = (
            previous is not None
            and len(samples) >= settings.min_runs
            and abs(median - previous) <= settings.tolerance * max(previous, 1e-9)
        )
        if settled or time.perf_counter() - started > settings.max_seconds:
            break
        previous = median
    return samples
