"""A plan a racing peer runs is timed as that peer where one run is long (entrants.as_peer)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import onnx
import pytest

from autopart.tuning import entrants as module
from autopart.tuning.entrants import Entrants, _timed_as_peer
from autopart.tuning.kept_measure import measured_as_peers
from autopart.tuning.options import TuneOptions
from autopart.tuning.screen import Screening
from autopart.tuning.settings import VERIFY
from autopart.tuning.verify import Measured
from autopart.tuning.workflow import tune_model
from tests.test_entrants import timed
from tests.test_profile import tiny_cnn

EQUIVALENTS = {
    "onnxruntime alone": "single:cpu@onnxruntime",
    "openvino alone": "single:cpu@openvino",
}
LONG = VERIFY.timed_as_peer_s


def test_a_plan_is_timed_as_its_peer_only_where_the_screen_timed_one_of_them_long_and_right() -> (
    None
):
    whole = {
        "onnxruntime alone": timed(LONG * 2),
        "single:cpu@onnxruntime": timed(LONG * 1.5),
        "openvino alone": timed(LONG / 2),  # a quick run: the executor's microseconds count
    }
    found = _timed_as_peer(EQUIVALENTS, set(), Screening([], [], whole=whole))
    assert found == {"single:cpu@onnxruntime": "onnxruntime alone"}
    # the quicker of the plan's and its peer's timings decides
    quick_plan = {**whole, "single:cpu@onnxruntime": timed(LONG / 2)}
    assert _timed_as_peer(EQUIVALENTS, set(), Screening([], [], whole=quick_plan)) == {}
    # a peer not raced, a timing beyond the tolerance, or no screen: both race
    assert _timed_as_peer(EQUIVALENTS, {"onnxruntime alone"}, Screening([], [], whole=whole)) == {}
    wrong = {**whole, "onnxruntime alone": timed(LONG * 2, error=1.0)}
    assert _timed_as_peer(EQUIVALENTS, set(), Screening([], [], whole=wrong)) == {}
    assert _timed_as_peer(EQUIVALENTS, set(), None) == {}


def test_only_a_plan_whose_peer_races_leaves_the_plans_raced_under_its_twins_name() -> None:
    entry = Entrants(as_peer={"b": "onnxruntime alone"})
    assert entry.timed_as(["openvino alone"]) == {}
    assert entry.timed_as(["onnxruntime alone"]) == {"b": "onnxruntime alone"}
    twins = {"a": "a", "b": "a", "c": "c"}  # the pick "a" is the same plan as "b"
    assert entry.timed_as(["onnxruntime alone"], twins) == {"a": "onnxruntime alone"}


def test_a_plan_timed_as_its_peer_gets_the_peers_rounds_as_they_paired_and_its_error() -> None:
    peer = Measured(
        latencies=[0.3, 0.31], round_medians=[0.3, 0.31], round_indices=[2, 3],
        max_error=1e-6, tolerance=1e-3,
    )  # fmt: skip
    measured: dict[str, Measured] = {"ilp": timed(0.4)}
    as_peer = {
        "single:cpu@onnxruntime": "onnxruntime alone",
        "single:cpu@openvino": "openvino alone",
    }
    (note,) = measured_as_peers(measured, {"onnxruntime alone": peer}, as_peer)
    assert "single:cpu@onnxruntime as onnxruntime alone" in note and "openvino" not in note
    mine = measured["single:cpu@onnxruntime"]
    assert mine.round_indices == [2, 3] and mine.median_s == peer.median_s and mine.correct
    mine.latencies.append(9.0)  # a copy: the peer's own measurement is untouched
    assert peer.latencies == [0.3, 0.31] and "single:cpu@openvino" not in measured
    assert measured_as_peers({}, {}, {}) == []


@pytest.mark.slow
def test_a_tune_times_a_long_plan_once_a_round_as_its_peer_and_keeps_a_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tmp_path / "tiny_cnn.onnx"
    onnx.save(tiny_cnn(), model)
    monkeypatch.setattr(module, "VERIFY", dataclasses.replace(VERIFY, timed_as_peer_s=0.0))
    options = TuneOptions.build(
        targets=["cpu@onnxruntime", "cpu@numpy"], rounds=5,
        profiles_dir=tmp_path / "profiles", search_dir=tmp_path / "search",
    )  # fmt: skip
    report = tune_model(str(model), options)
    (note,) = [n for n in report.notes if n.startswith("timed as the peer")]
    assert " as onnxruntime alone" in note  # the plan, or the twin that stands for it
    mine, peer = report.measured["single:cpu@onnxruntime"], report.peers["onnxruntime alone"]
    assert mine.latencies == peer.latencies and mine.round_indices == peer.round_indices
    rows = {row.name: row for row in report.rows}
    assert rows["single:cpu@onnxruntime"].measured_s == pytest.approx(peer.median_s)
    assert report.chosen in report.outcome.candidates and report.measured[report.chosen].correct
    thorough = dataclasses.replace(options, thorough=True)
    report = tune_model(str(model), thorough)  # the exhaustive tune times both
    assert not [n for n in report.notes if n.startswith("timed as the peer")]
    assert (
        report.measured["single:cpu@onnxruntime"].latencies
        != report.peers["onnxruntime alone"].latencies
    )
