"""What the cost model reads: measurements of repeated timings, in a table keyed by kind.

The cost model depends only on :class:`MeasurementTable`, not on how profiles are stored;
:class:`autopart.profile.store.Profile` is the implementation that measures and saves them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import pandas as pd


@dataclass(frozen=True)
class Measurement:
    """Summary of repeated timings in seconds: median, quartiles, extremes, run count."""

    median_s: float
    q1_s: float
    q3_s: float
    min_s: float
    max_s: float
    runs: int
    timer: str = "wall"

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median (0 when the median is 0)."""
        return (self.q3_s - self.q1_s) / self.median_s if self.median_s > 0 else 0.0


class MeasurementTable(Protocol):
    """Rows of measurements keyed by (kind, target, key); see :mod:`autopart.profile.store`."""

    meta: dict[str, Any]

    def row(self, kind: str, target: str, key: str = "") -> dict[str, Any] | None:
        """The row stored under (kind, target, key), or ``None``."""
        ...

    def has(self, kind: str, target: str, key: str = "") -> bool:
        """Whether a measurement is stored under (kind, target, key)."""
        ...

    def measurement(self, kind: str, target: str, key: str = "") -> Measurement | None:
        """The stored :class:`Measurement` under (kind, target, key), or ``None``."""
        ...

    def rows(self, kind: str, target: str | None = None) -> pd.DataFrame:
        """Every row of ``kind`` (optionally of one ``target``)."""
        ...
