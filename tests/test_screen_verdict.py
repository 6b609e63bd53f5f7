"""A race of one plan to keep gives way to the screen when it cannot fit the budget left.

The race's least time is a property, the plans it could keep a unit; a real tune of one
plan whose budget was spent before it began keeps that plan as the screen measured it,
judged and held to the screen's tolerance, and says so (with no budget,
``screen_verdict`` returns None before anything: the tunes of ``test_tune`` race).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path

import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from autopart.tuning import entrants as entrants_module
from autopart.tuning.blocks import WARMUP_ROUNDS
from autopart.tuning.choice import Runner
from autopart.tuning.options import TuneOptions
from autopart.tuning.screen_verdict import plans_to_keep, race_least_s, screen_verdict
from autopart.tuning.settings import VERIFY
from autopart.tuning.tune_report import TuneReport
from autopart.tuning.verify import RACE_MIN_TIMED_S
from autopart.tuning.workflow import _runnable, prepare, tune_model
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


def test_only_a_race_of_one_plan_to_keep_gives_way() -> None:
    """Peers standing for the plan add none; a peer standing for none is no plan; two are."""
    runners = {
        "single:a": Runner(1, "single:a"),
        "ilp": Runner(3, "ilp"),
        "a alone": Runner(1, "single:a", peer=True),
        "b alone": Runner(1, None, peer=True),
    }
    assert plans_to_keep(["single:a"], runners) == {"single:a"}
    assert plans_to_keep([], runners) == {"single:a"}  # the peer's plan, waiting
    assert plans_to_keep(["single:a", "ilp"], runners) == {"single:a", "ilp"}
    runners["c alone"] = Runner(1, "single:c", peer=True)
    assert plans_to_keep(["single:a"], runners) == {"single:a", "single:c"}


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
    assert "stand for one plan" in said and "the screen's whole timings stand" in said
    (budget,) = [note for note in report.notes if note.startswith("budget 5 s")]
    assert "the race (its one plan's screen timings stand)" in budget
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


def test_a_plan_its_peer_runs_is_no_runner_of_its_own_in_the_verdict(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As in the race: onnxruntime's one plan takes its peer's screen timing, and says so.

    Called on a real tune's state, spent, with the candidates cut to that plan's twins;
    at the default threshold the tiny plan keeps its own screen timing.
    """
    options = TuneOptions.build(
        peers=True, targets=[NUMPY, ORT], profiles_dir=tmp_path / "profiles",
        search_dir=tmp_path / "search", rounds=3, time_budget_s=5.0,
        started=time.perf_counter() - 100.0,
    )  # fmt: skip
    prepared = prepare(str(tiny), options)
    everyone, twins = _runnable(prepared.outcome)
    plan = twins[f"single:{ORT}"]
    candidates = {name: c for name, c in everyone.items() if twins[name] == plan}
    own = screen_verdict(prepared, candidates, twins, options)
    assert own is not None and not [n for n in own.notes if n.startswith("timed as the peer")]
    monkeypatch.setattr(entrants_module, "VERIFY", replace(VERIFY, timed_as_peer_s=0.0))
    verdict = screen_verdict(prepared, candidates, twins, options)
    assert verdict is not None
    (said,) = [note for note in verdict.notes if note.startswith("timed as the peer")]
    assert f"{plan} as onnxruntime alone" in said
    peer = verdict.peer_results["onnxruntime alone"]
    for name in candidates:
        assert verdict.measured[name].median_s == peer.median_s
