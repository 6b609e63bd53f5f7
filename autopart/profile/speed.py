"""The machine's speed beside its measurements, so that a saved profile prices at today's.

The shared VMs this project runs on change speed between sessions, not only within one: a
profile measured one evening and reused the next night predicted the race's measurement of
the same one-partition plans 1.1-1.5x too slow on both cores and 1.1-1.2x on one
(``experiments/results/bench_1129a_heldout_first10.csv``); no cost model can know that from
the rows alone.

So every measuring run of the profiler, and every race that records its timings, stamps the
profile with the machine's speed: two ``speed`` rows keyed by the time, holding the probe of
:mod:`autopart.profile.core_sharing` (a fixed, cache-resident chain of matrix products on one
thread) on one core alone (target ``cpu/0@<oracle>``) and on every core at once
(``cpu@<oracle>``, the slowest core's time), each the median of :data:`SAMPLES` probes taken
outside core-sharing spells. A tune measures the speed again before it prices anything
(:func:`at_speed`) and scales each timed row by how much quicker or slower the probe is now
than at the stamp nearest the row's ``measured_at`` (within ``SPEED.window_s``): rows of one
unit (``cpu/1@…``, ``opencl:0/0@…``) and copies by the one-core probe, rows of a whole
device by the every-core probe. A row with no stamp near it keeps its time, and so does one
whose factor is within ``SPEED.deadband`` of 1 (the probe's own repeatability: scaling by
noise would only add noise). Nothing scaled is written back: the file keeps what was
measured.
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass

import numpy as np
import pandas as pd

from autopart.costmodel.measurements import REFERENCE_COLUMNS, Measurement, RowKind
from autopart.errors import AutopartError
from autopart.ir.target import HOST_DEVICE, VirtualDevice
from autopart.profile.core_sharing import CORE_SHARING, process_probe
from autopart.profile.store import TIMINGS, Profile, now
from autopart.settings import tuned
from autopart.targets.codegen import Role
from autopart.targets.registry import codegen_for

SAMPLES = 7  # probes per speed: about 80 ms on a Zen 4 core
_BOUND = 3.0  # a factor beyond 3x (or under 1/3) says the stamp is wrong, not the machine


@dataclass(frozen=True)
class SpeedSettings:
    """When a profile's rows are scaled to the machine's speed now (profile.speed)."""

    window_s: float = tuned(
        3600.0,
        "a row is scaled by the speed stamp nearest its measurement only within this: "
        "every measuring run stamps at its end, and a profile of a large model "
        "takes up to 15 min",
    )
    deadband: float = tuned(
        0.1,
        "factors within this of 1 are left at 1: 60 speeds taken back to back differed "
        "from the one before by 0.4%/0.6% (one core/every core) at the median, 1.8%/5.2% at "
        "p90 and 7.8%/21% at p99 (experiments/exp_speed_drift.py)",
    )


SPEED = SpeedSettings()


@dataclass(frozen=True)
class Speed:
    """Seconds per probe run: on one core alone, and on every core at once (the slowest)."""

    one_core_s: float
    every_core_s: float


@dataclass(frozen=True)
class Rescaling:
    """What :func:`at_speed` did: rows scaled, and the median factor on each kind of lane."""

    rows: int = 0
    one_core: float = 1.0
    every_core: float = 1.0

    def note(self) -> list[str]:
        """One line for a tune's notes when rows were scaled, else none."""
        if not self.rows:
            return []
        return [
            f"priced at today's speed: {self.rows} profile rows were measured while the "
            f"machine ran at {self.one_core:.2f}x (one core) and {self.every_core:.2f}x "
            "(every core) its speed now, by the speed probe, and were scaled to it"
        ]


def measure_speed(samples: int = SAMPLES) -> Speed | None:
    """The machine's speed now: medians of ``samples`` probes outside core-sharing spells.

    None where no probe can run (one core, no oracle codegen) or when most probes fell in
    a spell (a speed taken then would misprice every whole-device row).
    """
    probe = process_probe()
    if probe is None:
        return None
    pairs = [probe.timings() for _ in range(max(samples, 1))]
    limit = CORE_SHARING.core_sharing_limit
    quiet = [(alone, together) for alone, together in pairs if together <= limit * alone]
    if 2 * len(quiet) <= len(pairs):
        return None
    return Speed(
        statistics.median(alone for alone, _ in quiet),
        statistics.median(together for _, together in quiet),
    )


def speed_targets() -> tuple[str, str] | None:
    """The targets the speed rows are filed under (one core, every core), or None."""
    oracle = codegen_for(Role.ORACLE)
    if oracle is None:
        return None
    return f"{HOST_DEVICE}/0@{oracle.name}", f"{HOST_DEVICE}@{oracle.name}"


def stamp(profile: Profile, speed: Speed | None = None) -> Speed | None:
    """Record the machine's speed now (``speed``, else measured) in ``profile``; return it."""
    speed = speed or measure_speed()
    targets = speed_targets()
    if speed is None or targets is None:
        return None
    key = now()
    passes = profile.passes_asked()  # complete: nothing takes a stamp again
    for target, seconds in zip(targets, (speed.one_core_s, speed.every_core_s), strict=True):
        row = Measurement(seconds, seconds, seconds, seconds, seconds, SAMPLES, passes=passes)
        profile.record(RowKind.SPEED, target, key, row, "speed probe")
    return speed


def at_speed(profile: Profile, speed: Speed | None) -> tuple[Profile, Rescaling]:
    """``profile`` with each timed row scaled to the speed ``speed`` (see the module).

    ``profile`` itself is left as it is; without ``speed`` or stamps it is returned.
    """
    targets = speed_targets()
    stamps = profile.rows(RowKind.SPEED)
    if speed is None or targets is None or stamps.empty:
        return profile, Rescaling()
    table = profile.table
    timed = (table["kind"] != RowKind.SPEED.value).to_numpy()
    seconds = _seconds(table["measured_at"])
    one = _factors(stamps, targets[0], speed.one_core_s, seconds)
    every = _factors(stamps, targets[1], speed.every_core_s, seconds)
    pairs = zip(table["kind"], table["target"], strict=True)
    whole = np.array([_whole_device(kind, target) for kind, target in pairs], bool)
    factor = np.where(whole, every, one)
    factor[~timed] = 1.0
    changed = np.abs(factor - 1.0) > SPEED.deadband
    if not changed.any():
        return profile, Rescaling()
    factor = np.where(changed, factor, 1.0)
    scaled = table.copy()
    columns = [*TIMINGS, *REFERENCE_COLUMNS.values()]
    scaled[columns] = scaled[columns].astype(float).mul(factor, axis=0)
    result = Profile(profile.meta, scaled)
    result.dropped = profile.dropped
    return result, Rescaling(
        int(changed.sum()),
        float(np.median(factor[changed & ~whole])) if (changed & ~whole).any() else 1.0,
        float(np.median(factor[changed & whole])) if (changed & whole).any() else 1.0,
    )


def _seconds(times: pd.Series) -> np.ndarray:
    """ISO times as seconds since the epoch (NaN where a time cannot be read)."""
    parsed = pd.to_datetime(times, utc=True, errors="coerce")
    return (parsed - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy(float)


def _factors(stamps: pd.DataFrame, target: str, now_s: float, at: np.ndarray) -> np.ndarray:
    """Per time in ``at``: ``now_s`` over the nearest stamp of ``target`` within the window.

    1 where no stamp is near enough; clipped to [1/3, 3].
    """
    mine = stamps[stamps["target"] == target]
    when = _seconds(mine["measured_at"])
    valid = np.isfinite(when)
    when, probe = when[valid], mine["median_s"].astype(float).to_numpy()[valid]
    if not len(when):
        return np.ones(len(at))
    order = np.argsort(when)
    when, probe = when[order], probe[order]
    right = np.clip(np.searchsorted(when, at), 0, len(when) - 1)
    left = np.clip(right - 1, 0, len(when) - 1)
    nearer = np.where(np.abs(when[left] - at) < np.abs(when[right] - at), left, right)
    distance = np.abs(when[nearer] - at)
    near = np.isfinite(at) & (distance <= SPEED.window_s)
    factor = np.where(near, now_s / np.maximum(probe[nearer], 1e-12), 1.0)
    return np.clip(factor, 1 / _BOUND, _BOUND)


@functools.cache
def _whole_device(kind: str, target: str) -> bool:
    """Whether a row of ``kind`` on ``target`` ran on a whole device (not one unit, no copy)."""
    if kind == RowKind.TRANSFER.value:
        return False
    try:
        return VirtualDevice.parse(target).unit is None
    except AutopartError:
        return False
