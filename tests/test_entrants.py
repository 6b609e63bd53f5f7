"""Who races: candidates and peers measured beyond reach stay out, and the race holds less."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import onnx
import pytest

from autopart import api
from autopart.ir.target import VirtualDevice
from autopart.search.candidates import CandidateKind
from autopart.targets.registry import declared_peers
from autopart.tuning.choice import final_choice
from autopart.tuning.entrants import (
    Entrants,
    _peers_behind,
    _quickest_first,
    _tools_left_out,
    _variants_untimed,
    entrants,
)
from autopart.tuning.options import TuneOptions
from autopart.tuning.screen import Screening
from autopart.tuning.settings import VERIFY
from autopart.tuning.verify import Measured
from autopart.tuning.workflow import tune_model
from tests.test_profile import tiny_cnn


def timed(seconds: float, error: float = 0.0) -> Measured:
    """A runner timed whole at ``seconds`` for three rounds, ``error`` against a 1e-2 bound."""
    return Measured(
        latencies=[seconds] * 3, round_medians=[seconds] * 3, round_indices=[0, 1, 2],
        max_error=error, tolerance=1e-2,
    )  # fmt: skip


def test_peers_beyond_reach_are_not_built_but_never_the_quickest_or_the_tolerance_peer() -> None:
    whole = {
        "single:cpu@openvino:bf16": timed(0.010),
        "onnxruntime alone": timed(0.019),  # the quickest peer: always races
        "openvino alone f32": timed(0.020),  # beyond 1.5x the incumbent: not built
        "openvino alone": timed(0.030),  # sets the tolerance: always races
        "other alone": timed(0.001, error=1.0),  # beyond the tolerance: not the quickest
    }
    plan, _ = api.make_plan(tiny_cnn(), fallback="cpu@numpy")  # the screen's plans are named
    screening = Screening(
        [], [], whole=whole, incumbent="single:cpu@openvino:bf16",
        plans={"single:cpu@openvino:bf16": plan},
    )  # fmt: skip
    notes: list[str] = []
    skipped = _peers_behind(screening, notes)
    assert skipped == {"openvino alone f32"}
    assert len(notes) == 1 and "openvino alone f32 (20 ms)" in notes[0]
    assert _peers_behind(None, []) == set()
    assert _peers_behind(Screening([], [], whole=whole), []) == set()  # no incumbent


def test_a_variant_peer_races_only_where_the_screen_had_time_to_time_it(
    variant_peers_run: None,
) -> None:
    """The bar is the libraries as installed: a variant (its library set otherwise) the
    screen's budget cut does not race; the libraries as installed always do."""
    pytest.importorskip("openvino")
    cut = Screening([], [], whole={"openvino alone": timed(0.03), "onnxruntime alone": timed(0.02)})
    notes: list[str] = []
    assert _variants_untimed(cut, notes) == {"openvino alone f32"}
    assert len(notes) == 1 and notes[0].endswith("budget: openvino alone f32")
    timed_all = Screening([], [], whole={**cut.whole, "openvino alone f32": timed(0.04)})
    assert _variants_untimed(timed_all, []) == set()
    assert _variants_untimed(None, []) == set()


def test_without_a_screen_the_tool_peers_race_only_on_the_users_samples() -> None:
    """int8 on random inputs says nothing of the task: a tune with no screen (``--profile``,
    another objective, constraints) leaves its quantisers out too, unless given samples."""
    tools = {peer.name for peer in declared_peers(available=True) if peer.tool}
    if not tools:
        pytest.skip("no int8 tool peer is installed")
    notes: list[str] = []
    assert _tools_left_out(None, notes, samples=False) == tools
    assert len(notes) == 1 and notes[0].startswith("int8 peers not run without --inputs")
    assert _tools_left_out(None, [], samples=True) == set()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("entrants") / "tiny_cnn.onnx"
    onnx.save(tiny_cnn(), path)
    return path


@pytest.mark.slow
def test_a_tune_races_neither_plans_measured_far_behind_nor_those_measured_wrong(
    tiny: Path, tmp_path: Path
) -> None:
    options = TuneOptions.build(
        targets=["cpu@numpy", "cpu@onnxruntime", "cpu/0@onnxruntime"], peers=False, rounds=3,
        profiles_dir=tmp_path / "profiles", search_dir=tmp_path / "search",
    )  # fmt: skip
    report = tune_model(str(tiny), options)
    rows = {row.name: row for row in report.rows}
    assert rows[report.chosen].measured_s is not None
    (note,) = [n for n in report.notes if n.startswith("not raced, timed whole")]
    behind = [name for name in rows if name in note]
    assert behind and all(rows[name].measured_s is None for name in behind)
    quickest = min(row.predicted_s for row in rows.values())
    for name in behind:
        assert rows[name].predicted_s > VERIFY.race_within * quickest  # far, as priced
    screening = report.screening
    assert screening is not None
    wrong = {"single:cpu@onnxruntime": timed(0.001, error=1.0)}
    device = report.outcome.candidates["single:cpu@onnxruntime"]
    unit = dataclasses.replace(device, target=VirtualDevice.parse("cpu/0@onnxruntime"))
    candidates = {**report.outcome.candidates, "single:cpu/0@onnxruntime": unit}
    marked = Screening([], [], whole=wrong).wrong_plans(candidates)
    assert marked == {"single:cpu@onnxruntime", "single:cpu/0@onnxruntime"}  # the unit too
    whole = dataclasses.replace(device, kind=CandidateKind.WHOLE)  # the model as shipped
    with_whole = {**candidates, "whole:cpu@onnxruntime": whole}
    assert "whole:cpu@onnxruntime" not in Screening([], [], whole=wrong).wrong_plans(with_whole)
    own = {"whole:cpu@onnxruntime": timed(0.001, error=1.0)}
    assert Screening([], [], whole=own).wrong_plans(with_whole) == {"whole:cpu@onnxruntime"}
    names = list(report.outcome.candidates)
    entry = Entrants(left_out={names[0]}, first=[names[-1], "not a candidate"])
    order = list(entry.plans(report.outcome.candidates, {name: name for name in names}))
    assert order[0] == names[-1] and names[0] not in order and len(order) == len(names) - 1
    predicted = [report.outcome.candidates[name].simulation.sequential_s for name in order[1:]]
    assert predicted == sorted(predicted)  # then by predicted latency


@pytest.mark.slow
def test_a_thorough_tune_races_every_candidate_it_can_compile(tiny: Path, tmp_path: Path) -> None:
    options = TuneOptions.build(
        targets=["cpu@numpy", "cpu@onnxruntime"], peers=False, rounds=3, thorough=True,
        profiles_dir=tmp_path / "profiles", search_dir=tmp_path / "search",
    )  # fmt: skip
    report = tune_model(str(tiny), options)
    assert not [n for n in report.notes if n.startswith("not raced")]
    assert all(row.measured_s is not None for row in report.rows)


@pytest.mark.slow
def test_a_peer_left_out_no_longer_holds_its_own_plan_in_the_race(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its plan is as far behind as the peer: only a racing peer's plan is kept from the cut."""
    from autopart.tuning import entrants as module
    from autopart.tuning import screen

    options = TuneOptions.build(
        targets=["cpu@numpy", "cpu@onnxruntime"], rounds=3,
        profiles_dir=tmp_path / "profiles", search_dir=tmp_path / "search",
    )  # fmt: skip
    report = tune_model(str(tiny), options)
    candidates = report.outcome.candidates
    own = "single:cpu@onnxruntime"
    assert own in candidates
    kept: list[set[str]] = []
    monkeypatch.setattr(module, "far_behind", lambda _o, _c, _q, keep: kept.append(keep) or [])
    monkeypatch.setattr(screen, "tolerance_peer", lambda: "openvino alone")
    plan = candidates["single:cpu@numpy"].plan
    for peer_s, expected in ((0.001, True), (1.0, False)):
        whole = {
            "single:cpu@numpy": timed(0.001),
            "openvino alone f32": timed(0.001),  # the quickest peer: it always races
            "onnxruntime alone": timed(peer_s),
        }
        screening = Screening(
            [], [], whole=whole, incumbent="single:cpu@numpy", plans={"single:cpu@numpy": plan}
        )
        entry = module.entrants(report.outcome, None, candidates, screening)  # type: ignore[arg-type]
        assert (own in kept[-1]) is expected and (own in entry.first) is expected
        assert ("onnxruntime alone" in entry.skipped_peers) is not expected
        # A pick no peer stands for enters first: the peers time their own plans' libraries
        # every round, so a spent budget must not leave the pick the one unmeasured.
        other = dataclasses.replace(report.outcome, chosen=candidates["single:cpu@numpy"])
        entry = module.entrants(other, None, candidates, screening)  # type: ignore[arg-type]
        assert entry.first[0] == "single:cpu@numpy" and (own in entry.first) is expected
        order = list(entry.plans(candidates, {name: name for name in candidates}))
        assert order[0] == "single:cpu@numpy"


@pytest.mark.slow
def test_the_plan_of_the_peer_the_screen_timed_quickest_races_beside_the_pick(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By the screen's timing of the plan or of a peer standing for it, within the
    tolerance; by prediction where the screen timed neither."""
    options = TuneOptions.build(
        targets=["cpu@numpy", "cpu@onnxruntime"], peers=False, rounds=3,
        profiles_dir=tmp_path / "profiles", search_dir=tmp_path / "search",
    )  # fmt: skip
    outcome = tune_model(str(tiny), options).outcome
    candidates = outcome.candidates
    plans = {"single:cpu@numpy", "single:cpu@onnxruntime"}
    standing = {"onnxruntime alone": "single:cpu@onnxruntime"}
    # The screen's incumbent races beside the pick though no peer stands for it (peers
    # off here): a pick made blind must not push it into a heat the budget leaves out.
    from autopart.tuning import entrants as module

    monkeypatch.setattr(module, "far_behind", lambda *_: [])  # no costs: nothing priced
    other = dataclasses.replace(outcome, chosen=candidates["single:cpu@onnxruntime"])
    incumbent = Screening([], [], whole=_numpy(0.002), incumbent="single:cpu@numpy")
    entry = entrants(other, None, candidates, incumbent)  # type: ignore[arg-type]
    assert entry.first[:2] == ["single:cpu@onnxruntime", "single:cpu@numpy"]
    by_peer = Screening([], [], whole={"onnxruntime alone": timed(0.001), **_numpy(0.002)})
    assert _quickest_first(plans, candidates, by_peer, standing)[0] == "single:cpu@onnxruntime"
    slower = Screening([], [], whole={"onnxruntime alone": timed(0.003), **_numpy(0.002)})
    assert _quickest_first(plans, candidates, slower, standing)[0] == "single:cpu@numpy"
    wrong = {"onnxruntime alone": timed(0.001, error=1.0), **_numpy(0.002)}
    assert _quickest_first(plans, candidates, Screening([], [], whole=wrong), standing)[0] == (
        "single:cpu@numpy"
    )  # a timing beyond the tolerance ranks nothing
    predicted = sorted(plans, key=lambda n: candidates[n].simulation.sequential_s)
    assert _quickest_first(plans, candidates, None, standing) == predicted
    # The peer leads a race its plan never entered: the plan is kept, unless the screen
    # measured it over the tolerance.
    twins = {name: name for name in candidates}
    measured = {"single:cpu@numpy": _six(0.002)}
    peer = {"onnxruntime alone": _six(0.001)}
    kept, _ = final_choice("single:cpu@numpy", candidates, twins, measured, peer, [])
    assert kept == "single:cpu@onnxruntime"
    screened = Screening([], [], whole={"single:cpu@onnxruntime": timed(0.001, error=1.0)})
    wrong = screened.wrong_plans(candidates)
    kept, _ = final_choice("single:cpu@numpy", candidates, twins, measured, peer, [], wrong)
    assert kept == "single:cpu@numpy"
    # Only the peer is within the tolerance, its plan over it (a model shipped quantised,
    # whose plan rounds otherwise): the most accurate plan, never the pick for want of one.
    measured = {"single:cpu@numpy": _six(0.002), "single:cpu@onnxruntime": _six(0.001)}
    measured["single:cpu@numpy"].max_error = 0.5
    measured["single:cpu@onnxruntime"].max_error = 1.0
    notes: list[str] = []
    pick = "single:cpu@onnxruntime"
    kept, decision = final_choice(pick, candidates, twins, measured, peer, notes)
    assert kept == "single:cpu@numpy" and decision is None
    assert any("kept the most accurate, single:cpu@numpy" in note for note in notes), notes
    assert any(
        "onnxruntime alone is within the tolerance" in note
        and "its own plan, single:cpu@onnxruntime" in note for note in notes
    ), notes  # fmt: skip
    assert not any("so the plan saved is" in note for note in notes), notes


def _six(seconds: float) -> Measured:
    return Measured(
        latencies=[seconds] * 6, round_medians=[seconds] * 6, round_indices=list(range(6)),
        tolerance=1e-2,
    )  # fmt: skip


def _numpy(seconds: float) -> dict[str, Measured]:
    return {"single:cpu@numpy": timed(seconds)}


def test_the_screen_prices_first_the_quickest_plan_a_tune_could_keep_never_a_tool_peers() -> None:
    """NNCF's int8 stands for no plan: where it is the quickest, the quickest plan after it
    is priced first (a VGG16 classifier's int8 plan, 11.3 ms against OpenVINO as
    installed's 15.5, went unpriced for want of budget and was never raced)."""
    from autopart.tuning.whole_timing import quickest_plan

    int8, numpy = VirtualDevice.parse("cpu@openvino:int8"), VirtualDevice.parse("cpu@numpy")
    tool, quick, slow = timed(0.0077), timed(0.0113), timed(0.0155)
    whole = {"openvino + nncf int8": tool, "single:cpu@openvino:int8": quick,
             "single:cpu@numpy": slow}  # fmt: skip
    assert quickest_plan(whole, [int8, numpy]) == int8
    assert quickest_plan({"openvino + nncf int8": tool, "single:cpu@numpy": slow}, [numpy]) == numpy
    assert quickest_plan({"openvino + nncf int8": tool}, [int8, numpy]) is None
