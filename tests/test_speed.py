"""A profile stamped with the machine's speed prices at the speed the machine has now."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from autopart import api
from autopart.costmodel.measurements import Measurement, RowKind
from autopart.profile import Profile, machine_profile_path
from autopart.profile import speed as speed_module
from autopart.profile.speed import SPEED, Speed, at_speed, measure_speed, speed_targets, stamp
from autopart.profile.store import TIMINGS
from autopart.targets.devices import discover
from autopart.tuning.options import TuneOptions
from autopart.tuning.workflow import prepare
from tests.test_profile import FAST, tiny_path  # noqa: F401 - fixture

START = datetime(2026, 11, 27, 0, 0, tzinfo=UTC)


def _at(minutes: float) -> str:
    return (START + timedelta(minutes=minutes)).isoformat(timespec="seconds")


def _row(profile: Profile, kind: RowKind, target: str, key: str, seconds: float, minutes: float):
    """Record ``seconds`` under (kind, target, key) as if measured ``minutes`` after START."""
    profile.record(kind, target, key, Measurement(seconds, seconds, seconds, seconds, seconds, 3))
    profile.table.loc[profile._lookup()[(kind, target, key)], "measured_at"] = _at(minutes)


def _stamp(profile: Profile, one: float, every: float, minutes: float) -> None:
    targets = speed_targets()
    assert targets is not None
    for target, seconds in zip(targets, (one, every), strict=True):
        _row(profile, RowKind.SPEED, target, _at(minutes), seconds, minutes)


def _profile() -> Profile:
    """Rows on a whole device, on one unit and a copy, timed at 10 ms, at minute 0 and 600."""
    profile = Profile({"fingerprint": "0" * 16})
    for minutes in (0, 600):
        _row(profile, RowKind.OP, "cpu@openvino", f"conv {minutes}", 0.01, minutes)
        _row(profile, RowKind.OP, "cpu/1@onnxruntime", f"conv {minutes}", 0.01, minutes)
        _row(profile, RowKind.TRANSFER, "cpu->opencl:0", f"{minutes}", 0.01, minutes)
    return profile


def _median(profile: Profile, kind: RowKind, target: str, key: str) -> float:
    measurement = profile.measurement(kind, target, key)
    assert measurement is not None
    return measurement.median_s


def test_rows_are_scaled_by_the_stamp_nearest_them_each_by_its_lane() -> None:
    profile = _profile()
    _stamp(profile, one=0.004, every=0.005, minutes=5)  # one core 2x, every core 2.5x slower
    scaled, rescaling = at_speed(profile, Speed(one_core_s=0.002, every_core_s=0.002))
    assert _median(scaled, RowKind.OP, "cpu@openvino", "conv 0") == pytest.approx(0.004)
    assert _median(scaled, RowKind.OP, "cpu/1@onnxruntime", "conv 0") == pytest.approx(0.005)
    assert _median(scaled, RowKind.TRANSFER, "cpu->opencl:0", "0") == pytest.approx(0.005)
    # ten hours later, with no stamp within the window: as measured
    assert _median(scaled, RowKind.OP, "cpu@openvino", "conv 600") == pytest.approx(0.01)
    assert rescaling.rows == 3 and rescaling.every_core == pytest.approx(0.4)
    assert rescaling.one_core == pytest.approx(0.5)
    assert "priced at today's speed: 3 profile rows" in rescaling.note()[0]
    # the profile itself keeps what was measured, and so do its speed rows
    assert _median(profile, RowKind.OP, "cpu@openvino", "conv 0") == 0.01
    assert _median(scaled, RowKind.SPEED, speed_targets()[1], _at(5)) == 0.005  # type: ignore[index]
    # a stamp 10x off says more about the stamp than the machine: at most 3x
    _stamp(profile, one=0.02, every=0.02, minutes=1)  # nearer minute 0 than minute 5
    clipped, _ = at_speed(profile, Speed(0.002, 0.002))
    assert _median(clipped, RowKind.OP, "cpu@openvino", "conv 0") == pytest.approx(0.01 / 3)


def test_the_stamp_nearest_in_time_is_the_one_that_counts() -> None:
    profile = _profile()
    _stamp(profile, one=0.002, every=0.002, minutes=-30)
    _stamp(profile, one=0.004, every=0.004, minutes=590)  # nearer the rows of minute 600
    scaled, _ = at_speed(profile, Speed(0.002, 0.002))
    assert _median(scaled, RowKind.OP, "cpu@openvino", "conv 0") == pytest.approx(0.01)
    assert _median(scaled, RowKind.OP, "cpu@openvino", "conv 600") == pytest.approx(0.005)


def test_a_factor_within_the_probes_repeatability_changes_nothing() -> None:
    profile = _profile()
    near = 1 + SPEED.deadband / 2
    _stamp(profile, one=0.002 * near, every=0.002 * near, minutes=0)
    scaled, rescaling = at_speed(profile, Speed(0.002, 0.002))
    assert scaled is profile and rescaling.rows == 0 and not rescaling.note()


def test_without_a_speed_or_stamps_the_profile_prices_as_measured() -> None:
    profile = _profile()
    assert at_speed(profile, Speed(0.001, 0.001))[0] is profile  # no stamps
    _stamp(profile, 0.002, 0.002, 0)
    assert at_speed(profile, None)[0] is profile  # no probe now


class _Probe:
    """A probe whose timings are given: (one core alone, every core at once) per call."""

    def __init__(self, timings: list[tuple[float, float]]) -> None:
        self._timings = iter(timings)

    def timings(self) -> tuple[float, float]:
        return next(self._timings)


def test_the_speed_is_the_median_of_the_probes_outside_core_sharing_spells(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    quiet, spell = (0.001, 0.0011), (0.001, 0.002)  # a spell: every core at one core's speed
    monkeypatch.setattr(
        speed_module, "process_probe", lambda: _Probe([quiet, spell, (0.003, 0.003)])
    )
    assert measure_speed(samples=3) == Speed(0.002, pytest.approx(0.00205))
    monkeypatch.setattr(speed_module, "process_probe", lambda: _Probe([spell, spell, quiet]))
    assert measure_speed(samples=3) is None  # mostly in a spell: it would misprice
    monkeypatch.setattr(speed_module, "process_probe", lambda: None)
    assert measure_speed() is None  # no probe (one core, no onnxruntime)
    profile = Profile({"fingerprint": "0" * 16})
    assert stamp(profile) is None and profile.rows(RowKind.SPEED).empty


def test_the_real_probe_times_both_lanes_and_a_stamp_survives_the_file(tmp_path: Path) -> None:
    probe = speed_module.process_probe()
    assert probe is not None  # two cores and onnxruntime here
    alone, together = probe.timings()
    assert 0 < alone < 0.1 and 0 < together < 0.1
    profile = Profile({"fingerprint": "0" * 16})
    speed = Speed(alone, together)
    assert stamp(profile, speed) == speed
    path = tmp_path / "profile.csv"
    profile.save(path)
    rows = Profile.load(path).rows(RowKind.SPEED)
    assert sorted(rows["median_s"]) == sorted([alone, together])
    assert set(rows["target"]) == set(speed_targets() or ())


def test_profiling_stamps_and_a_tune_prices_at_the_speed_now(
    tmp_path: Path,
    tiny_path: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A profile taken while the machine ran at half its speed prices at full speed now."""
    monkeypatch.setattr(speed_module, "measure_speed", lambda: Speed(0.004, 0.004))
    profiles = tmp_path / "profiles"
    api.profile(str(tiny_path), ["cpu@onnxruntime"], profiles, settings=FAST)
    path = machine_profile_path(profiles, discover())
    stamps = Profile.load(path).rows(RowKind.SPEED)
    assert len(stamps) == 2  # one run of the profiler: one stamp, two lanes
    options = TuneOptions(targets=["cpu@onnxruntime"], profiles_dir=str(profiles),
                          search_dir=str(tmp_path / "search"), rounds=2, peers=False)  # fmt: skip
    prepare(str(tiny_path), options)  # times the candidates' partitions whole, and stamps
    profile = Profile.load(path)
    stamped = profile.table["kind"] == RowKind.SPEED.value
    profile.table.loc[stamped, TIMINGS] = 0.002  # every row measured at one known speed
    profile.save(path)
    monkeypatch.setattr("autopart.tuning.workflow.measure_speed", lambda: Speed(0.002, 0.002))
    as_measured = prepare(str(tiny_path), options)
    assert as_measured.rescaling.rows == 0
    monkeypatch.setattr("autopart.tuning.workflow.measure_speed", lambda: Speed(0.001, 0.001))
    prepared = prepare(str(tiny_path), options)
    predicted = as_measured.outcome.chosen.value(as_measured.outcome.objective)
    assert prepared.outcome.chosen.value(prepared.outcome.objective) == pytest.approx(
        predicted / 2, rel=0.05
    )
    assert prepared.rescaling.rows > 0 and prepared.rescaling.every_core == pytest.approx(0.5)
    assert np.allclose(  # nothing scaled was written back
        Profile.load(path).rows(RowKind.OP)["median_s"].astype(float),
        prepared.profile.rows(RowKind.OP)["median_s"].astype(float),
    )
