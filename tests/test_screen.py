"""The screen before the full profile: whole models first, then only targets that could win.

The bound is checked as a property on generated costs; the choice on costs where the
answer is known; a real tune checks what holds whatever the timings: every target asked is
kept or dropped, no candidate runs on a dropped one, the full profile resumes the screen's
rows instead of measuring them again, and ``--thorough`` searches every target.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import click
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopart.costmodel.costs import Costs
from autopart.costmodel.measurements import Measurement, RowKind
from autopart.costmodel.partitions import partition_key
from autopart.ir.target import VirtualDevice
from autopart.loader import load_model
from autopart.profile.store import Profile
from autopart.search.candidates import CandidateKind, candidate_name
from autopart.targets.resolve import available_targets
from autopart.testing.scale_models import op_chain, synthetic_costs
from autopart.tuning.clock import Clock
from autopart.tuning.options import TuneOptions
from autopart.tuning.screen import (
    Screening,
    by_promise,
    choose_targets,
    could_save,
    scaled_costs,
)
from autopart.tuning.verify import Measured
from autopart.tuning.workflow import tune_model
from tests.test_profile import tiny_cnn
from tests.test_task_metrics import needs_bf16

NUMPY, ORT, UNIT = "cpu@numpy", "cpu@onnxruntime", "cpu/0@onnxruntime"
OFFERED = {str(target) for target in available_targets()}
LOW = next((p for p in ("int8", "bf16") if f"cpu@openvino:{p}" in OFFERED), None)


def chain_costs(nodes: int, seed: int, targets: list[str]) -> Costs:
    """Generated costs of an elementwise chain on ``targets`` (nothing run)."""
    return synthetic_costs(load_model(op_chain(nodes, seed)), targets, seed)


@settings(max_examples=60, deadline=None)
@given(
    nodes=st.integers(1, 30),
    seed=st.integers(0, 1000),
    whole=st.tuples(st.floats(1e-4, 1.0), st.floats(1e-4, 1.0)),
    picks=st.lists(st.booleans(), min_size=30, max_size=30),
)
def test_no_mix_with_the_incumbent_saves_more_than_the_bound(
    nodes: int, seed: int, whole: tuple[float, float], picks: list[bool]
) -> None:
    """Scaled as the screen scales them, any mix of a target with the incumbent (paying one
    launch of the target, as any plan using it does) costs at least the incumbent's time
    less the bound; the best plan, mixed or the incumbent alone, costs exactly that."""
    costs = chain_costs(nodes, seed, [NUMPY, ORT])
    incumbent_target, target = costs.targets
    names = [node.name for node in costs.graph.nodes]
    incumbent, _ = scaled_costs(costs, dict.fromkeys(names, incumbent_target), whole[0])
    own, factor = scaled_costs(costs, dict.fromkeys(names, target), whole[1])
    assert math.isclose(sum(incumbent.values()), whole[0], rel_tol=1e-9)
    assert math.isclose(sum(own.values()), whole[1], rel_tol=1e-9)
    bound = could_save(costs, dict.fromkeys(names, target), incumbent, factor, target)
    picked = picks[: len(names)]
    launch = costs.launch[target]
    mix = sum(own[n] if pick else incumbent[n] for n, pick in zip(names, picked, strict=True))
    assert mix + (launch if any(picked) else 0.0) >= whole[0] - bound - 1e-12
    best = min(whole[0], sum(min(own[n], incumbent[n]) for n in names) + launch)
    assert math.isclose(best, whole[0] - bound, rel_tol=1e-9, abs_tol=1e-15)


def measured(seconds: float) -> Measured:
    """A runner measured at ``seconds`` in every round, within any tolerance."""
    return Measured(latencies=[seconds] * 5, round_medians=[seconds] * 5, tolerance=math.inf)


def test_a_target_slower_on_every_node_is_dropped_and_a_quicker_one_kept() -> None:
    costs = chain_costs(12, 0, [ORT, NUMPY, UNIT])
    ort, numpy_target, unit = costs.targets
    for entry in costs.node_cost.values():
        entry[numpy_target] = entry[ort] * 10  # slower everywhere, also once scaled
    names = [node.name for node in costs.graph.nodes]
    for index, name in enumerate(names):  # the unit: 100x quicker on every other node
        costs.node_cost[name][unit] = costs.node_cost[name][ort] / (100 if index % 2 else 1)
    assignments = {t: dict.fromkeys(names, t) for t in costs.targets}
    ort_s = sum(costs.node_cost[n][ort] for n in names)
    screening = Screening([ORT, NUMPY, UNIT], [ORT, NUMPY, UNIT], incumbent="single:" + ORT)
    screening.whole = {
        candidate_name(CandidateKind.SINGLE, t): measured(sum(costs.node_cost[n][t] for n in names))
        for t in costs.targets
    }
    choose_targets(screening, costs, assignments, ort)
    assert screening.kept == [ORT, UNIT]
    assert screening.dropped == [NUMPY]
    assert screening.could_save[NUMPY] == 0.0
    assert screening.could_save[UNIT] > 0.2 * ort_s


@pytest.mark.parametrize("bf16_correct", [False, True])
def test_a_quick_precision_beyond_the_tolerance_keeps_its_librarys_exact_one(
    bf16_correct: bool,
) -> None:
    """OpenVINO's f32 is slower than onnxruntime on every node, its bf16 quicker but over
    the tolerance whole: f32 is kept beside bf16, to mix with it in one partition; with
    bf16 within the tolerance, f32 is dropped as it could save nothing."""
    f32, bf16 = "cpu@openvino", "cpu@openvino:bf16"
    costs = chain_costs(12, 0, [ORT, f32, bf16])
    ort, exact, reduced = costs.targets
    for entry in costs.node_cost.values():
        entry[exact], entry[reduced] = entry[ort] * 1.5, entry[ort] / 4
    names = [node.name for node in costs.graph.nodes]
    assignments = {t: dict.fromkeys(names, t) for t in costs.targets}
    screening = Screening([ORT, f32, bf16], [ORT, f32, bf16], incumbent="single:" + ORT)
    screening.whole = {
        candidate_name(CandidateKind.SINGLE, t): measured(sum(costs.node_cost[n][t] for n in names))
        for t in costs.targets
    }
    over = screening.whole["single:" + bf16]
    over.max_error, over.tolerance = (0.0 if bf16_correct else 0.2), 0.01
    choose_targets(screening, costs, assignments, ort)
    assert screening.could_save[f32] == 0.0
    assert screening.kept == ([ORT, bf16] if bf16_correct else [ORT, f32, bf16])


def test_an_incumbent_standing_for_no_plan_keeps_every_target() -> None:
    costs = chain_costs(4, 1, [ORT, NUMPY])
    names = [node.name for node in costs.graph.nodes]
    screening = Screening([ORT, NUMPY], [ORT, NUMPY], incumbent="some library alone")
    screening.whole = {"some library alone": measured(1e-3)}
    assignments = {t: dict.fromkeys(names, t) for t in costs.targets}
    choose_targets(screening, costs, assignments, VirtualDevice.parse(ORT))
    assert screening.kept == [ORT, NUMPY] and not screening.dropped


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("screen") / "tiny_cnn.onnx"
    onnx.save(tiny_cnn(), path)
    return path


def whole_partition_row(model: Path, profiles: Path, target: str) -> Measurement | None:
    """The saved profile's timing of ``model`` whole on ``target`` (the partition row).

    The stand-in of the reference run's one timing, unless a settled timing of more passes
    replaced it later in the tune.
    """
    graph = load_model(str(model))
    (path,) = profiles.glob("*.csv")
    key = partition_key(graph, graph.nodes, alone=True)
    return Profile.load(path).measurement(RowKind.PARTITION, target, key)


def tune(model: Path, tmp: Path, **options: object) -> object:
    built = TuneOptions.build(
        targets=[NUMPY, ORT, UNIT], profiles_dir=tmp / "profiles", search_dir=tmp / "search",
        rounds=3, peers=False, **options,
    )  # fmt: skip
    return tune_model(str(model), built)


@pytest.mark.slow
def test_a_tune_screens_then_profiles_only_what_it_kept(tiny: Path, tmp_path: Path) -> None:
    report = tune(tiny, tmp_path)
    screening = report.screening
    assert screening is not None and screening.incumbent is not None
    assert sorted(screening.kept + screening.dropped) == sorted([NUMPY, ORT, UNIT])
    assert report.notes[0].startswith("screen (")
    assert screening.incumbent in report.notes[0]
    used = {str(t) for c in report.outcome.candidates.values() for t in c.assignment.values()}
    assert used <= set(screening.kept)
    assert set(report.profiled.targets) == set(screening.kept)
    assert report.profiled.resumed > 0  # the screen's first passes were not taken again
    measured = report.partitions_measured  # the plans the screen timed whole are their rows
    assert measured is not None and measured.reused >= 1
    timed = {name for name, result in screening.whole.items() if result.latencies}
    assert timed == {f"single:{NUMPY}", f"single:{ORT}"}  # a unit is scaled as its device


@pytest.mark.slow
def test_thorough_searches_every_target(tiny: Path, tmp_path: Path) -> None:
    report = tune(tiny, tmp_path, thorough=True)
    assert report.screening is None
    assert {f"single:{t}" for t in [NUMPY, ORT, UNIT]} <= set(report.outcome.candidates)


@pytest.mark.slow
def test_concurrent_objectives_and_pins_are_not_screened(tiny: Path, tmp_path: Path) -> None:
    assert tune(tiny, tmp_path / "a", objective="makespan").screening is None


def test_a_runner_eliminated_in_the_race_stops_and_the_rounds_end_early() -> None:
    from autopart import api
    from autopart.ir.feeds import random_inputs
    from autopart.tuning.settings import VERIFY
    from autopart.tuning.verify import measure_plans

    plan, graph = api.make_plan(tiny_cnn(), fallback="cpu@numpy")
    other, _ = api.make_plan(tiny_cnn(), fallback="cpu@onnxruntime")
    feeds = random_inputs(graph, 0)
    looked: list[int] = []

    def eliminate(so_far: dict[str, Measured]) -> list[str]:
        looked.append(min(len(m.round_medians) for m in so_far.values()))
        return ["numpy"]

    measured = measure_plans(
        graph, {"numpy": plan, "ort": other}, feeds, rounds=20, min_timed_s=0.0,
        eliminate=eliminate,
    )  # fmt: skip
    assert looked == [VERIFY.min_paired_rounds]  # it looked once every runner had enough
    assert len(measured["numpy"].round_medians) == VERIFY.min_paired_rounds
    assert len(measured["ort"].round_medians) == VERIFY.min_paired_rounds  # one left: done


def test_the_clock_shares_out_what_is_left_and_names_what_it_cut() -> None:
    from autopart.tuning.clock import Clock, race_reserve

    assert Clock(None).until(5.0) is None and not Clock(None).passed and Clock(None).note() == []
    clock = Clock(100.0)
    assert 89.0 < (clock.until(10.0) or 0.0) <= 90.0
    assert clock.until(1000.0) == 0.0 and not clock.passed
    assert clock.note() == []  # nothing cut, nothing said
    clock.cut.append("the race")
    (note,) = clock.note()
    assert note.startswith("budget 100 s (took") and "cut short: the race" in note
    assert Clock(0.0).passed
    assert race_reserve(4.0) == pytest.approx(7.0)  # 2 + 5 rounds over the screen's 1 + 3


def test_the_race_keeps_the_end_of_the_budget_for_what_follows_it() -> None:
    from autopart.tuning.choice import BudgetedRace
    from autopart.tuning.clock import Clock
    from autopart.tuning.settings import VERIFY

    roomy = BudgetedRace({}, Clock(100.0))
    assert roomy.racing() and roomy.admitting(50.0)
    assert not roomy.admitting(100.0 - VERIFY.finish_s)  # the heat would eat the finish
    ending = BudgetedRace({}, Clock(VERIFY.finish_s * 0.5))
    assert not ending.racing() and ending.contested({}) == [] and ending.behind({}) == []
    assert ending.clock.cut == ["the race"]


def test_a_tight_budget_still_returns_a_verified_plan_and_says_what_it_cut(
    tiny: Path, tmp_path: Path
) -> None:
    report = tune(tiny, tmp_path, time_budget_s=0.5)
    assert report.plan_path.is_file() and report.chosen in {row.name for row in report.rows}
    chosen = next(row for row in report.rows if row.name == report.chosen)
    assert chosen.measured_s is not None and chosen.max_error is not None, report.notes
    (note,) = [note for note in report.notes if note.startswith("budget 0.5 s")]
    assert "cut short:" in note


def test_the_budget_counts_from_when_the_command_started(tiny: Path, tmp_path: Path) -> None:
    """The launcher's start (the CLI's imports) counts: a budget spent before the tune began."""
    report = tune(tiny, tmp_path, time_budget_s=30.0, started=time.perf_counter() - 100.0)
    (note,) = [note for note in report.notes if note.startswith("budget 30 s")]
    took = float(note.split("took ")[1].split(" s)")[0])
    assert took >= 100.0 and "cut short:" in note


def test_the_command_line_reads_when_the_launcher_started() -> None:
    from click.testing import CliRunner

    from autopart.cli.common import COMMAND_STARTED, command_started

    seen: list[float | None] = []

    @click.command()
    def probe() -> None:
        seen.append(command_started())

    CliRunner().invoke(probe, [], obj={COMMAND_STARTED: 5.0})
    CliRunner().invoke(probe, [])
    assert seen == [5.0, None]


@pytest.mark.slow
def test_with_no_incumbent_every_target_is_profiled_in_full_whatever_the_budget(
    tiny: Path, tmp_path: Path
) -> None:
    """Nothing within an impossible tolerance: no op pass ran, so the profile is unbounded."""
    built = TuneOptions.build(
        targets=[ORT, UNIT], profiles_dir=tmp_path / "profiles", search_dir=tmp_path / "search",
        rounds=2, peers=False, tolerance=1e-30, time_budget_s=0.5,
    )  # fmt: skip
    report = tune_model(str(tiny), built)
    assert report.screening is not None and report.screening.incumbent is None
    assert not report.screening.priced and sorted(report.screening.kept) == sorted([ORT, UNIT])
    assert report.profiled is not None and report.profiled.missing == 0
    assert report.notes[0].endswith("nothing ran within the tolerance, so every target is profiled")


@needs_bf16
def test_the_tolerance_is_chosen_once_every_error_on_the_timed_inputs_is_in() -> None:
    """A tolerance that follows a runner's error must see its error on the timed feeds: it
    was once chosen from the evaluation samples alone, and a peer ended beyond its own."""
    from autopart import api
    from autopart.ir.feeds import random_inputs
    from autopart.tuning.verify import measure_plans

    plan, graph = api.make_plan(tiny_cnn(), fallback="cpu@openvino:bf16")
    seen: list[dict[str, float]] = []

    def follow(errors: dict[str, float]) -> float:
        seen.append(dict(errors))
        return errors["bf16"]

    measured = measure_plans(
        graph, {"bf16": plan}, random_inputs(graph, 0), rounds=2, min_timed_s=0.0,
        tolerance=follow,
    )  # fmt: skip
    (errors,) = seen
    assert errors["bf16"] > 0.0  # bf16 rounding, seen before the tolerance was chosen
    assert measured["bf16"].correct and measured["bf16"].tolerance == errors["bf16"]


def test_a_tolerance_no_assignment_keeps_does_not_refuse_the_model() -> None:
    """A node only a bf16 target runs, too sensitive for the tolerance: the ILP's accuracy row
    cannot hold, so the search solves without it and says so (the race measures errors)."""
    from autopart.costmodel.accuracy import ErrorModel
    from autopart.search.options import SearchOptions
    from autopart.search.planner import search

    costs = chain_costs(6, 0, [ORT, "cpu@openvino:bf16"])
    ort, bf16 = costs.targets
    names = [node.name for node in costs.graph.nodes]
    del costs.node_cost[names[2]][ort]  # only bf16 runs it
    weights = {(name, "bf16"): 1e-8 for name in names} | {(names[2], "bf16"): 1.0}
    outcome = search(costs, SearchOptions(accuracy=ErrorModel(weights, 1e-3)))
    (note,) = outcome.notes
    assert note.startswith("no assignment keeps the predicted error within the tolerance")
    assert outcome.candidates["ilp"].assignment[names[2]] == bf16


def test_a_node_the_kept_targets_reject_compiled_brings_back_a_dropped_target() -> None:
    import dataclasses

    from autopart.costmodel.measurements import RowKind
    from autopart.ir.signature import op_signature
    from autopart.profile.kinds import UNSUPPORTED
    from autopart.profile.store import Profile
    from autopart.tuning.profiling import _covering

    graph = load_model(tiny_cnn())
    timed = dataclasses.replace(UNSUPPORTED, median_s=1e-5, timer="wall", passes=3)
    profile = Profile({"fingerprint": "test"})
    for node in graph.nodes:
        signature = op_signature(node, graph)
        for target in (NUMPY, ORT):
            profile.record(RowKind.OP, target, signature, timed, node.op_type)
    relu = next(node for node in graph.nodes if node.op_type == "Relu")
    profile.record(RowKind.UNSUPPORTED, ORT, op_signature(relu, graph), UNSUPPORTED, "rejected")
    screening = Screening([NUMPY, ORT, UNIT], [ORT], dropped=[NUMPY, UNIT])
    assert _covering(graph, profile, [ORT], screening) == [NUMPY, ORT]
    assert "cpu@numpy kept after all: it runs relu1 (Relu)" in screening.notes[-1]
    covered = Screening([NUMPY, ORT], [NUMPY, ORT])
    assert _covering(graph, profile, [NUMPY, ORT], covered) == [NUMPY, ORT] and not covered.notes


@pytest.mark.slow
def test_a_plan_saved_unmeasured_says_so(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever stops the race from keeping a round, the saved plan never passes as measured
    by the race: it carries the screen's whole timing of that very plan, and says so, or
    no measurement, and says that."""
    from autopart.tuning import workflow

    monkeypatch.setattr(workflow, "measure_plans", lambda *args, **kwargs: {})
    report = tune(tiny, tmp_path)
    assert report.screening is not None
    screened = {n: m for n, m in report.screening.whole.items() if m.latencies}
    measured = report.plan.measured
    if measured is None:
        assert any(
            note.startswith(f"the plan saved, {report.chosen}, was not measured")
            for note in report.plan.notes
        ), report.notes
    else:
        assert (
            f"{report.chosen} is measured by the screen's whole timing: the race kept no "
            "round of it" in report.plan.notes
        )
        assert measured.median_s in {m.median_s for m in screened.values()}


@pytest.mark.slow
def test_a_spent_budget_times_the_peers_and_their_own_plans_first_and_names_the_rest(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variant_peers_run: None
) -> None:
    """The screen's whole timings keep the budget: past its share, only the runners a
    plan must be weighed against are timed (the peer that sets the tolerance, then the
    libraries as installed with the plans they stand for; a variant such as openvino alone
    f32 is not the bar), and the note names every runner it skipped."""
    pytest.importorskip("openvino")
    from autopart.tuning.accuracy import tolerance_peer
    from autopart.tuning.peers import peer_precision

    peer = tolerance_peer()
    precision = peer_precision(peer) if peer else None
    own = "cpu@openvino" + (f":{precision}" if precision else "")
    targets = sorted({NUMPY, ORT, "cpu@openvino", own})
    built = TuneOptions.build(
        targets=targets, profiles_dir=tmp_path / "profiles", search_dir=tmp_path / "search",
        rounds=2, time_budget_s=0.01,
    )  # fmt: skip
    from autopart.tuning import workflow

    monkeypatch.setattr(workflow, "measure_speed", lambda: None)  # rows priced as measured
    report = tune_model(str(tiny), built)
    assert report.screening is not None
    timed = {peer, f"single:{own}", "onnxruntime alone", f"single:{ORT}"}
    stand_in = report.screening.whole[f"single:{NUMPY}"]  # the reference run's one timing
    assert len(stand_in.latencies) == 1 and stand_in.max_error == 0.0
    assert set(report.screening.whole) == timed | {f"single:{NUMPY}"}
    priced = report.outcome.candidates[f"single:{NUMPY}"].simulation.sequential_s
    row = whole_partition_row(tiny, tmp_path / "profiles", NUMPY)
    assert row is not None and priced == pytest.approx(row.median_s)  # not its op sum
    assert row.passes > 1 or row.median_s == pytest.approx(stand_in.median_s)
    (note,) = [note for note in report.notes if note.startswith("budget 0.01 s")]
    skipped = note.split("the screen's whole timings (")[1].split(" not timed whole)")[0]
    variants_plan = {"single:cpu@openvino"} - {f"single:{own}"}  # openvino alone f32's
    assert set(skipped.split(", ")) == {
        "openvino alone f32", f"single:{NUMPY}", *variants_plan
    }  # fmt: skip
    unpriced, kept = report.screening.unpriced, report.screening.kept
    for target in (ORT, own):  # the plans the racing peers stand for: priced, never dropped
        assert target not in unpriced and target in kept
    raced = [row for row in report.rows if row.measured_s is not None]
    assert raced and all(row.partitions == 1 for row in raced)  # none compiled on a guess
    assert report.chosen in {row.name for row in raced}


def test_the_op_pass_prices_the_quickest_devices_first_and_units_after_their_device() -> None:
    whole = {
        "single:cpu@openvino:int8": measured(0.017),
        "single:cpu@openvino": measured(0.050),
        "single:opencl:0@opencl": measured(0.140),
    }
    targets = [
        "opencl:0/0@opencl", "cpu/0@openvino", "cpu@openvino", "cpu@openvino:int8",
        "cpu/1@openvino:int8", "opencl:0@opencl", "cpu@numpy",
    ]  # fmt: skip
    assert by_promise(targets, whole) == [
        "cpu@openvino:int8", "cpu/1@openvino:int8", "cpu@openvino", "cpu/0@openvino",
        "opencl:0@opencl", "opencl:0/0@opencl", "cpu@numpy",
    ]  # fmt: skip
    # int8 beyond the tolerance whole: OpenVINO's f32, which it must be mixed with, ranks
    # right after it, before the OpenCL device timed quicker than f32 (not f32's unit:
    # its int8 is not asked for)
    whole["single:opencl:0@opencl"] = measured(0.030)
    whole["single:cpu@openvino:int8"].max_error = 1.0
    whole["single:cpu@openvino:int8"].tolerance = 0.01
    assert by_promise(targets, whole) == [
        "cpu@openvino:int8", "cpu/1@openvino:int8", "cpu@openvino", "opencl:0@opencl",
        "opencl:0/0@opencl", "cpu/0@openvino", "cpu@numpy",
    ]  # fmt: skip
    whole["single:cpu@openvino:int8"].max_error = 0.0  # within: f32 by its own time
    assert by_promise(targets, whole)[2:5] == [
        "opencl:0@opencl",
        "opencl:0/0@opencl",
        "cpu@openvino",
    ]


@pytest.mark.parametrize("peer_timed", [True, False])
def test_the_plan_a_racing_peer_stands_for_is_priced_and_kept_however_it_was_timed(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, peer_timed: bool
) -> None:
    """A peer kept means the plan it stands for. onnxruntime's plan, timed whole at 10x the
    incumbent, is priced and kept under a spent budget while its peer races (the budget
    left the peer untimed: the screen's lone timings drift, and the peer may lead the race).
    Only a peer the screen itself timed beyond the race's reach is left out, and its plan
    then waits its turn in the op pass: a spent budget leaves it unpriced."""
    pytest.importorskip("openvino")
    from autopart.tuning import screen
    from autopart.tuning.whole_timing import WholeTimings

    seconds = {
        "single:cpu@openvino": 1e-3, "openvino alone f32": 1e-3,
        "single:cpu@onnxruntime": 1e-2, f"single:{NUMPY}": 5e-2,
    }  # fmt: skip
    if peer_timed:
        seconds["onnxruntime alone"] = 1e-2

    def timed(*_: object, **__: object) -> WholeTimings:
        return WholeTimings(whole={name: measured(s) for name, s in seconds.items()})

    monkeypatch.setattr(screen, "time_whole", timed)
    built = TuneOptions.build(
        targets=[NUMPY, ORT, "cpu@openvino"], profiles_dir=tmp_path / "profiles",
        search_dir=tmp_path / "search", rounds=2, time_budget_s=0.01,
    )  # fmt: skip
    screening = screen.screen_targets(str(tiny), load_model(str(tiny)), built.targets, built,
                                      Clock(0.01))  # fmt: skip
    assert screening.incumbent == "single:cpu@openvino"
    assert "cpu@openvino" in screening.kept and NUMPY in screening.kept
    # nothing timed whole compiled here, but the reference's run compiled numpy's whole plan:
    # a race need not give numpy's partitions a compile deadline
    assert screening.compiled == {"numpy"}
    if peer_timed:
        assert screen.peers_out_of_reach(screening) == {"onnxruntime alone": 1e-2}
        assert screening.unpriced == [ORT] and ORT in screening.dropped
    else:
        assert screening.unpriced == [] and ORT in screening.kept


@pytest.mark.slow
@pytest.mark.parametrize("with_peers", [True, False])
def test_a_codegen_that_misses_its_compile_deadline_is_left_out_with_its_peers(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_peers: bool
) -> None:
    """Under a budget, a large model's first whole compile per codegen has the budget as
    its deadline: OpenVINO stopped there gets no more screen jobs, its targets are dropped
    and its peers not raced, and the tune still returns a measured plan. Without peers the
    first compile is OpenVINO's own plan, whose race-side deadline (none in the screen)
    must not lift the screen's."""
    pytest.importorskip("openvino")
    import dataclasses

    from autopart.targets.openvino.library import clear_compiled
    from autopart.tuning import whole_timing
    from autopart.tuning.settings import SCREEN

    clear_compiled()  # a model an earlier test keeps compiled is shared, in no time at all
    monkeypatch.setattr(whole_timing, "SCREEN", dataclasses.replace(SCREEN, deadline_nodes=1))
    built = TuneOptions.build(
        targets=[ORT, "cpu@openvino"] if with_peers else ["cpu@openvino", ORT],
        profiles_dir=tmp_path / "profiles", search_dir=tmp_path / "search", rounds=2,
        time_budget_s=0.01, peers=with_peers,
    )  # fmt: skip
    report = tune_model(str(tiny), built)
    screening = report.screening
    assert screening is not None and screening.too_slow == {"openvino": 0.01}
    chosen = next(row for row in report.rows if row.name == report.chosen)
    assert chosen.measured_s is not None
    if not with_peers:  # cpu@openvino, first, may be the fallback: kept for what only it runs
        return
    assert screening.kept == [ORT] and "cpu@openvino" in screening.dropped
    assert not any(name.startswith("openvino") for name in screening.whole)
    assert not any(name.startswith("openvino") for name in report.peers)
    assert any("did not compile the whole model within" in note for note in report.notes)


def test_an_accuracy_round_starts_only_if_the_budget_left_covers_another_race(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ILP's plan over its tolerance: searched and raced again only while time allows."""
    from types import SimpleNamespace

    from autopart.tuning import workflow
    from autopart.tuning.clock import Clock

    raced: list[float] = []

    def over_tolerance(_accuracy: object, _candidates: object, measured: dict) -> object:
        return ("ilp", SimpleNamespace(tolerance=5e-3)) if "ilp" in measured else None

    monkeypatch.setattr(workflow, "plan_over_tolerance", over_tolerance)
    monkeypatch.setattr(workflow, "_search_again", lambda prepared, _: prepared)
    monkeypatch.setattr(workflow, "_runnable", lambda _: ({}, {}))
    monkeypatch.setattr(workflow, "_verify", lambda *_: raced.append(1) or ({}, {}, []))
    ilp = SimpleNamespace(assignment={})
    for left_s, verify_s, expected in ((100.0, 10.0, 1), (11.0, 10.0, 0)):
        raced.clear()
        clock = Clock(left_s)
        prepared = SimpleNamespace(
            accuracy=SimpleNamespace(tolerance=1e-2),
            outcome=SimpleNamespace(candidates={"ilp": ilp}),
            clock=clock,
        )
        over = Measured(max_error=0.5, tolerance=1e-2)
        workflow._tighten("m", prepared, None, None, ({"ilp": over}, {}, []), verify_s)  # type: ignore[arg-type]
        assert len(raced) == expected
        assert ("the accuracy rounds" in " ".join(clock.cut)) is (expected == 0)


def test_a_whole_timing_of_one_run_is_recorded_measured_but_not_complete() -> None:
    """The screen's whole timings price their partition; one from a single run (the
    reference run standing in for the reference's plan) counts as one pass, so a later
    profile with the time for it completes the row instead of trusting one cold run."""
    from autopart.costmodel.measurements import RowKind
    from autopart.profile.store import Profile
    from autopart.tuning.partitions import record_screened
    from autopart.tuning.single_plans import SinglePlans, single_name

    graph = load_model(op_chain(6, 3))
    single = SinglePlans(graph, [NUMPY, ORT], "chain")
    for target in single.due_now():
        single.built(target)
    runs = {
        single_name(VirtualDevice.parse(NUMPY)): Measured(latencies=[4e-3]),
        single_name(VirtualDevice.parse(ORT)): Measured(
            latencies=[1e-3] * 9, round_medians=[1e-3, 1.1e-3, 0.9e-3]
        ),
    }
    profile = Profile({"fingerprint": "test"})
    assert record_screened(graph, profile, None, single.plans, runs) == 2
    rows = profile.table[profile.table["kind"] == RowKind.PARTITION.value]
    passes = dict(zip(rows["target"], rows["passes"], strict=True))
    assert passes == {NUMPY: 1, ORT: profile.passes_asked()}
    assert dict(zip(rows["target"], rows["median_s"], strict=True))[NUMPY] == 4e-3
    # a one-run timing never replaces a row of more passes
    record_screened(graph, profile, None, single.plans, {
        single_name(VirtualDevice.parse(ORT)): Measured(latencies=[9e-3]),
    })  # fmt: skip
    rows = profile.table[profile.table["kind"] == RowKind.PARTITION.value]
    assert dict(zip(rows["target"], rows["median_s"], strict=True))[ORT] == pytest.approx(1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("budget_s", [0.3, 1.0, 3.0, 9.0])
def test_a_budget_running_out_anywhere_still_returns_a_verified_plan(
    tiny: Path, tmp_path: Path, budget_s: float
) -> None:
    """Budgets that run out in each stage (screen, op pass, copies, full profile, race),
    over a device with copies: every one returns a measured plan, never a traceback (a
    pair's copies cut at one size once crashed the op pass)."""
    from tests.opencl_here import SECOND_UNIT_TARGET

    built = TuneOptions.build(
        targets=[NUMPY, ORT, SECOND_UNIT_TARGET], profiles_dir=tmp_path / "profiles", search_dir=tmp_path / "search",
        rounds=3, peers=False, time_budget_s=budget_s,
    )  # fmt: skip
    report = tune_model(str(tiny), built)
    chosen = next(row for row in report.rows if row.name == report.chosen)
    assert chosen.measured_s is not None and chosen.max_error is not None, report.notes


def test_the_screen_compiles_openvino_as_installed_and_the_plan_it_stands_for_once(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The peer is held while its own plan, timed next, shares its compile: the screen
    compiles no model twice (each later compile of a key would import the first's)."""
    pytest.importorskip("openvino")
    from autopart.targets.openvino import library

    default = library.default_precision()
    if default == library.PRECISION:
        pytest.skip("OpenVINO computes in f32 here: its plan at f32 turns int8 activations off")
    library.clear_compiled()
    compiled: list[object] = []
    real_compile = library._compile
    monkeypatch.setattr(
        library, "_compile", lambda key, *a: compiled.append(key) or real_compile(key, *a)
    )
    in_screen = _made_in_the_screen(compiled, monkeypatch)
    built = TuneOptions.build(
        targets=[ORT, f"cpu@openvino:{default}"], profiles_dir=tmp_path / "profiles",
        search_dir=tmp_path / "search", rounds=2,
    )  # fmt: skip
    report = tune_model(str(tiny), built)
    assert report.screening is not None
    assert {"openvino alone", f"single:cpu@openvino:{default}"} <= set(report.screening.whole)
    assert in_screen and len(in_screen) == len(set(in_screen)), [str(k)[-160:] for k in in_screen]


def _made_in_the_screen(made: list[object], monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """A list that receives what ``made`` holds once the screen's whole timings end."""
    from autopart.tuning import screen

    real_time_whole = screen.time_whole
    in_screen: list[object] = []

    def time_whole(*args: object, **kwargs: object) -> object:
        found = real_time_whole(*args, **kwargs)  # type: ignore[arg-type]
        in_screen.extend(made)
        return found

    monkeypatch.setattr(screen, "time_whole", time_whole)
    return in_screen


@pytest.mark.slow
def test_the_screen_makes_one_onnxruntime_session_for_the_peer_and_the_plan_it_stands_for(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """onnxruntime alone is timed right before its own plan and held while that plan runs:
    the plan's one partition is the same default session of the same model, made once."""
    from autopart.targets.onnxruntime import peer

    made: list[object] = []
    real_get_or_make = peer._HELD.get_or_make

    def get_or_make(key: object, make: Callable[[], object]) -> object:
        return real_get_or_make(key, lambda: made.append(key) or make())

    monkeypatch.setattr(peer._HELD, "get_or_make", get_or_make)
    in_screen = _made_in_the_screen(made, monkeypatch)
    built = TuneOptions.build(
        targets=[ORT, NUMPY], profiles_dir=tmp_path / "profiles",
        search_dir=tmp_path / "search", rounds=2,
    )  # fmt: skip
    report = tune_model(str(tiny), built)
    assert report.screening is not None
    assert {"onnxruntime alone", f"single:{ORT}"} <= set(report.screening.whole)
    assert in_screen and len(in_screen) == len(set(in_screen)), in_screen


@pytest.mark.skipif(LOW is None, reason="OpenVINO offers no int8 or bf16 on this CPU")
@pytest.mark.parametrize("budget_s", [None, pytest.param(60.0, marks=pytest.mark.slow), 0.01])
def test_the_sensitivities_take_their_share_of_what_the_budget_leaves(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget_s: float | None
) -> None:
    """A spent budget leaves them one group of nodes; no budget, their own 10 s (thorough:
    no screen drops the int8 or bf16 target)."""
    pytest.importorskip("openvino")
    from autopart.profile.sensitivity import SENSITIVITY_BUDGET_S
    from autopart.tuning import accuracy

    given: list[float] = []
    real = accuracy.measure_error_model

    def measure(*args: object, **kwargs: object) -> object:
        given.append(float(kwargs["budget_s"]))  # type: ignore[arg-type]
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(accuracy, "measure_error_model", measure)
    started = time.perf_counter()
    built = TuneOptions.build(
        targets=[ORT, f"cpu@openvino:{LOW}"],
        profiles_dir=tmp_path / "profiles", search_dir=tmp_path / "search", rounds=2,
        time_budget_s=budget_s, peers=False, started=started, thorough=True,
    )  # fmt: skip
    report = tune_model(str(tiny), built)
    assert given, "no sensitivities were measured"
    if budget_s is None:
        assert given == [SENSITIVITY_BUDGET_S] * len(given)
    else:
        assert all(b <= min(SENSITIVITY_BUDGET_S, budget_s) for b in given)
    if budget_s == 0.01:
        assert given == [0.0] * len(given)
    assert next(row for row in report.rows if row.name == report.chosen).measured_s is not None
