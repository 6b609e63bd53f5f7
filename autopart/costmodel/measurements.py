"""What the cost model reads: measurements of repeated timings, in a table keyed by kind.

The cost model depends only on :class:`MeasurementTable`, not on how profiles are stored;
:class:`autopart.profile.store.Profile` is the implementation that measures and saves them.
Row kinds are :class:`RowKind`; the few kinds that were timed against something else in the
same runs carry that second time in their own named column (:data:`REFERENCE_COLUMNS`).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

import numpy as np
import pandas as pd


class RowKind(StrEnum):
    """What a profile row measures; the value is the ``kind`` written in profile files.

    See :mod:`autopart.profile.store` for what ``key`` and the reference column of each
    kind hold. A ``RowKind`` compares and hashes equal to its value, so ``"op"`` finds
    :attr:`OP` rows.
    """

    OP = "op"
    UNSUPPORTED = "unsupported"
    LAYOUT = "layout"
    FUSED = "fused"
    LAUNCH = "launch"
    TRANSFER = "transfer"
    CALIBRATION = "calibration"
    CUT = "cut"
    COLD = "cold"
    ENQUEUE = "enqueue"
    ALONE = "alone"
    PARTITION = "partition"
    SPEED = "speed"


REFERENCE_COLUMNS: Mapping[RowKind, str] = {
    RowKind.LAYOUT: "kernel_s",  # the op's own kernels, in the runs of the conversions
    RowKind.FUSED: "producer_s",  # the producer alone, timed in turn with the pair
    RowKind.CALIBRATION: "predicted_s",  # what the op sum predicted for the window
    RowKind.CUT: "whole_s",  # the window whole, back to back, alternating with the halves
    RowKind.COLD: "warm_s",  # the same window whole back to back (entered warm)
    RowKind.ALONE: "shared_s",  # the window compiled as one partition among several
}
"""The one column of seconds, beside the measurement, that a row kind fills (NaN elsewhere)."""


@dataclass(frozen=True)
class Measurement:
    """Summary of repeated timings in seconds: median, quartiles, extremes, run count.

    ``passes`` counts the passes through the profiler's job list the samples came from
    (:class:`autopart.profile.timing.TimingSettings`); a measurement taken in fewer passes
    than its profiler asked for is incomplete and is measured again.
    """

    median_s: float
    q1_s: float
    q3_s: float
    min_s: float
    max_s: float
    runs: int
    timer: str = "wall"
    passes: int = 1

    @classmethod
    def from_samples(cls, samples: Sequence[float], timer: str = "wall") -> Measurement:
        """Median, quartiles and extremes of ``samples`` (seconds, at least one), one pass.

        The one summary of repeated timings: profile rows are made of it, and so can be
        the latencies of model and plan runs.
        """
        values = np.asarray(samples, dtype=np.float64)
        q1, median, q3 = np.percentile(values, [25, 50, 75])
        return cls(
            float(median), float(q1), float(q3), float(values.min()), float(values.max()),
            len(values), timer,
        )  # fmt: skip

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median (0 when the median is 0)."""
        return (self.q3_s - self.q1_s) / self.median_s if self.median_s > 0 else 0.0


@dataclass(kw_only=True)
class Latencies:
    """Wall-clock latencies of repeated runs in seconds: what every timed run reports.

    Running a model, running a plan and measuring plans side by side all subclass it, so a
    run's median is ``median_s`` everywhere and :meth:`summary` gives the same
    :class:`Measurement` a profile row holds.
    """

    latencies: list[float] = field(default_factory=list)

    @property
    def median_s(self) -> float:
        """Median latency in seconds (StatisticsError before any run)."""
        return statistics.median(self.latencies)

    def summary(self) -> Measurement:
        """Median, quartiles and extremes of the latencies (at least one run)."""
        return Measurement.from_samples(self.latencies)


class MeasurementTable(Protocol):
    """Rows of measurements keyed by (kind, target, key); see :mod:`autopart.profile.store`."""

    meta: dict[str, Any]

    def row(self, kind: RowKind, target: str, key: str = "") -> dict[str, Any] | None:
        """The row stored under (kind, target, key), or ``None``."""
        ...

    def has(self, kind: RowKind, target: str, key: str = "") -> bool:
        """Whether a measurement is stored under (kind, target, key)."""
        ...

    def measurement(self, kind: RowKind, target: str, key: str = "") -> Measurement | None:
        """The stored :class:`Measurement` under (kind, target, key), or ``None``."""
        ...

    def rows(self, kind: RowKind, target: str | None = None) -> pd.DataFrame:
        """Every row of ``kind`` (optionally of one ``target``)."""
        ...
