"""Slow runs under a budget: the screen times fewer rounds, and the race gives way to it.

The screen's rounds and the race's least time are properties; a real tune whose budget was spent before it began keeps a plan
measured by the screen, judged and held to the screen's tolerance, and says so; the same
tune with no budget races as before.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from autopart.loader import load_model
from autopart.tuning.blocks import WARMUP_ROUNDS
from autopart.tuning.judge import Judge
from autopart.tuning.options import TuneOptions
from autopart.tuning.screen_verdict import RACE_MIN_TIMED_S, race_least_s
from autopart.tuning.settings import SCREEN, VERIFY
from autopart.tuning.tune_report import TuneReport
from autopart.tuning.whole_timing import screen_rounds
from autopart.tuning.workflow import tune_model
from tests.test_profile import tiny_cnn

NUMPY, ORT = "cpu@numpy", "cpu@onnxruntime"
SKIPPED = "the race did not run"


@given(
    st.lists(st.floats(0.0, 10.0), max_size=8),
    st.integers(0, 20),
    st.floats(0.0, 10.0),
)
def test_the_race_s_least_time_grows_with_each_runner_and_sample(
    run_s: list[float], judged: int, more: float
) -> None:
    least = race_least_s(run_s, judged)
    assert least >= RACE_MIN_TIMED_S
    assert least >= (WARMUP_ROUNDS + 1 + judged + VERIFY.min_paired_rounds) * sum(run_s) - 1e-9
    assert race_least_s([*run_s, more], judged) >= least
    assert race_least_s(run_s, judged + 1) >= least


@given(
    left=st.one_of(st.none(), st.floats(0.0, 1e3)),
    more=st.floats(0.0, 1e3),
    run_s=st.one_of(st.none(), st.floats(1e-6, 100.0)),
    judged=st.integers(0, 6),
)
def test_the_screen_times_fewer_rounds_only_of_slow_runners_the_budget_cannot_cover(
    left: float | None, more: float, run_s: float | None, judged: int
) -> None:
    judge = Judge(load_model(tiny_cnn()), samples=[{}] * judged)
    rounds = screen_rounds(left, run_s, judge)
    assert 1 <= rounds <= SCREEN.rounds
    if left is not None:
        assert screen_rounds(left + more, run_s, judge) >= rounds  # more time, no fewer
    if left is None or run_s is None or SCREEN.rounds * run_s <= SCREEN.min_timed_s:
        assert rounds == SCREEN.rounds  # no budget, nothing timed yet, or rounds stretched
    elif rounds > 1:  # what it runs fits what is left
        assert (1 + judged + rounds) * run_s <= left * (1 + 1e-9)  # warm-up, samples, rounds


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("verdict") / "tiny_cnn.onnx"
    onnx.save(tiny_cnn(), path)
    return path


def _tune(model: Path, tmp: Path, **options: object) -> TuneReport:
    built = TuneOptions.build(
        **{"peers": False, **options}, targets=[NUMPY, ORT], profiles_dir=tmp / "profiles",
        search_dir=tmp / "search", rounds=3,
    )  # fmt: skip
    return tune_model(str(model), built)


def test_a_race_that_cannot_fit_the_budget_left_is_decided_on_the_screens_timings(
    tiny: Path, tmp_path: Path
) -> None:
    """Spent before the tune began: the plan kept is the screen's, measured and judged there."""
    report = _tune(
        tiny, tmp_path, time_budget_s=5.0, started=time.perf_counter() - 100.0, peers=True
    )
    (said,) = [note for note in report.notes if note.startswith(SKIPPED)]
    assert "compared on the screen's whole timings" in said
    (budget,) = [note for note in report.notes if note.startswith("budget 5 s")]
    assert "the race (the screen's whole timings decide)" in budget
    screening = report.screening
    assert screening is not None
    kept = report.plan.measured
    assert kept is not None and kept.max_error <= kept.tolerance
    assert math.isclose(kept.tolerance, screening.tolerance)
    assert "1 seeded random inputs" in (kept.samples or "")
    screened = {result.median_s for result in screening.whole.values() if result.latencies}
    assert kept.median_s in screened  # timed by the screen, not run again
    row = next(row for row in report.rows if row.name == report.chosen)
    assert row.measured_s == kept.median_s
    assert report.peers and set(report.peers) <= set(screening.whole)  # the screen's peers
    assert report.vs_best_peer is not None and report.apart_from_best_peer  # no round shared


def test_a_race_with_no_budget_runs_as_before(tiny: Path, tmp_path: Path) -> None:
    report = _tune(tiny, tmp_path)
    assert not [note for note in report.notes if note.startswith(SKIPPED)]
    kept = report.plan.measured
    assert kept is not None and kept.runs > 0
    assert "seeded random inputs" in (kept.samples or "")
    assert not (kept.samples or "").startswith("1 ")  # the race judges the extra samples
